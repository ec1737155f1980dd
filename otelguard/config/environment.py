"""Environment variables otelguard reads. Each is named here once, with what it does."""

from __future__ import annotations

OTELGUARD_SIGNATURE_KEY = "OTELGUARD_SIGNATURE_KEY"
"""Key for the keyed hash of tool arguments (``args_hash``). Share one value across a fleet so the
same loop has the same hash everywhere. ``signature_key`` in the config takes precedence."""

OTELGUARD_STATE_URL = "OTELGUARD_STATE_URL"
"""Where session caps are shared (a URL of the shared store, of a kind ``otelguard.state.urls``
accepts): wins over ``state.url`` in the config; ``otelguard serve --state URL`` wins over it. Needs
a signature key (``OTELGUARD_SIGNATURE_KEY`` or ``signature_key``)."""

OTELGUARD_STATE_PASSWORD = "OTELGUARD_STATE_PASSWORD"
"""The shared state's Redis password, apart from the URL (which ``--state URL`` would show in the
process list): wins over ``state.password_file`` and over a password in the URL."""

OTELGUARD_REQUIRE_E2E = "OTELGUARD_REQUIRE_E2E"
"""Test-suite switch: when ``1``, end-to-end tests whose binaries are missing fail instead of skipping."""

OTELGUARD_CORPUS = "OTELGUARD_CORPUS"
"""Test-suite and benchmark input: the folder of the regression corpus (public runs of coding agents,
kept outside the repository). Unset: a ``shared/corpus`` folder beside the checkout or a parent of it."""

PROMETHEUS_MULTIPROC_DIR = "PROMETHEUS_MULTIPROC_DIR"
"""prometheus_client's multi-process directory; when set, ``serve_metrics`` aggregates worker files."""

OTELGUARD_CONFIG = "OTELGUARD_CONFIG"
"""Path of a config file (YAML) for plugins that cannot take arguments, such as the hermes-agent
plugin. Unset: the default configuration."""

OTELGUARD_METRICS_PORT = "OTELGUARD_METRICS_PORT"
"""When set, the hermes-agent plugin serves ``/metrics`` on this port (loopback) in its process."""

OTELGUARD_AGENT = "OTELGUARD_AGENT"
"""The ``agent`` label the hermes-agent plugin uses (default ``hermes``)."""

OTELGUARD_TOKEN = "OTELGUARD_TOKEN"
"""Bearer token for ``otelguard serve``'s ``/v1/`` endpoints (``--token`` takes precedence); the hook
command sends it too. ``/metrics`` and ``/healthz`` stay open."""

OTELGUARD_URL = "OTELGUARD_URL"
"""Where ``otelguard hook claude-code`` finds the sidecar (``--url`` takes precedence); default
``http://127.0.0.1:9464``."""
