"""The public surface: a pinned, sorted __all__ and no side effects on import."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import otelguard

CORE_NAMES = {"ConfigError", "Decision", "Guard", "GuardConfig", "GuardHalted", "Signature", "TurnSummary"}
"""Names the docs use as ``otelguard.X`` or ``from otelguard import X``."""

TELEMETRY_NAMES = {"Telemetry", "serve_metrics"}
"""``otelguard.serve_metrics(...)`` and ``Telemetry(...)`` (the ``telemetry=`` argument of ``Guard``)."""


def test_all_is_sorted() -> None:
    """otelguard.__all__ is sorted."""
    assert list(otelguard.__all__) == sorted(otelguard.__all__)


def test_all_has_no_duplicates_and_every_name_resolves() -> None:
    """Every name in __all__ exists, once."""
    assert len(set(otelguard.__all__)) == len(otelguard.__all__)
    for name in otelguard.__all__:
        assert hasattr(otelguard, name), name


def test_all_lists_every_public_attribute() -> None:
    """__all__ is the whole public surface: no public, non-module attribute is left out of it."""
    public = {
        name
        for name, value in vars(otelguard).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public <= set(otelguard.__all__), public - set(otelguard.__all__)


def test_spec_names_are_exported() -> None:
    """Guard, GuardConfig, Decision, ConfigError, Signature and TurnSummary are importable from otelguard."""
    assert set(otelguard.__all__) >= CORE_NAMES


def test_telemetry_names_are_exported() -> None:
    """Telemetry and serve_metrics are importable from otelguard."""
    assert set(otelguard.__all__) >= TELEMETRY_NAMES


def test_exported_objects_are_the_core_ones() -> None:
    """The re-exports are the very objects of the core modules (one class, not copies)."""
    from otelguard.config import GuardConfig
    from otelguard.core.decisions import Decision
    from otelguard.errors import ConfigError

    assert otelguard.GuardConfig is GuardConfig
    assert otelguard.Decision is Decision
    assert otelguard.ConfigError is ConfigError


def test_version_is_a_string() -> None:
    """otelguard.__version__ is a version string."""
    assert isinstance(otelguard.__version__, str)
    assert otelguard.__version__[0].isdigit()


def test_package_is_typed() -> None:
    """The package ships py.typed."""
    assert (Path(otelguard.__file__).parent / "py.typed").is_file()


NO_SIDE_EFFECTS = r"""
import socket, threading
bound = []
for name in ("bind", "listen", "connect"):
    original = getattr(socket.socket, name)
    def spy(self, *args, _name=name, _original=original):
        bound.append(_name)
        return _original(self, *args)
    setattr(socket.socket, name, spy)
threads_before = threading.active_count()

import otelguard
from otelguard import Guard, GuardConfig
guard = Guard(GuardConfig(signature_key="k"))
guard.start_turn()
guard.before_call("read_file", {"path": "x"})
guard.after_call("read_file", {"path": "x"}, "data", failed=False)
guard.end_turn()

from opentelemetry import trace
import prometheus_client
provider = type(trace.get_tracer_provider()).__name__
ours = [n for n in prometheus_client.REGISTRY._names_to_collectors if n.startswith("otelguard")]
print(provider, threading.active_count() - threads_before, len(bound), len(ours))
"""


def test_import_starts_no_server_and_installs_no_provider() -> None:
    """Importing otelguard and using a pure Guard opens no socket, starts no thread, sets no global
    tracer provider and registers no metrics in the default registry."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PROMETHEUS_"))}
    proc = subprocess.run(
        [sys.executable, "-c", NO_SIDE_EFFECTS], env=env, capture_output=True, text=True, check=True
    )
    provider, new_threads, socket_calls, metrics = proc.stdout.split()
    assert provider == "ProxyTracerProvider", "a global tracer provider was installed"
    assert new_threads == "0", "a thread was started"
    assert socket_calls == "0", "a socket was bound, listened on or connected"
    assert metrics == "0", "metrics were registered in prometheus_client's default registry on import"


def test_pure_core_does_not_import_telemetry_backends() -> None:
    """A pure Guard (telemetry=None) needs neither the OpenTelemetry SDK nor an exporter loaded."""
    code = (
        "import sys, otelguard; from otelguard import Guard; g = Guard(); g.start_turn(); "
        "g.before_call('t', {}); print(sorted(m for m in sys.modules if m.startswith('opentelemetry.sdk')))"
    )
    env = {**os.environ, "OTELGUARD_SIGNATURE_KEY": "k"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "[]"


def test_every_error_otelguard_raises_is_an_otelguard_error() -> None:
    """The backtest's and the hook payload's errors belong to the one family, and stay importable
    from where their users find them."""
    from otelguard.backtest.engine import BacktestError as EngineError
    from otelguard.coding_agents.claude_code import HookPayloadError as PayloadError
    from otelguard.errors import BacktestError, HookPayloadError, OtelGuardError

    assert EngineError is BacktestError and PayloadError is HookPayloadError
    assert issubclass(BacktestError, OtelGuardError)
    assert issubclass(HookPayloadError, OtelGuardError) and issubclass(HookPayloadError, ValueError)
    assert str(HookPayloadError("body", "a JSON object")) == "body: expected a JSON object"
