"""`otelguard serve`: a guard per session over HTTP, with the metrics, on one port.

Exit codes: 0 after SIGINT/SIGTERM, 2 usage or configuration error (bad config, port in use).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from urllib.parse import urlsplit

from prometheus_client import REGISTRY

from otelguard import ConfigError
from otelguard.cli.config_messages import load_config, option_problem, port_problem
from otelguard.config import StateSettings, mask_url
from otelguard.config.environment import OTELGUARD_STATE_URL, OTELGUARD_TOKEN
from otelguard.core.sessions import DEFAULT_IDLE_SECONDS, DEFAULT_MAX_SESSIONS, DEFAULT_MAX_SIGNATURES
from otelguard.core.signatures import RANDOM_KEY_NOTE, claim_random_key_note, uses_random_key
from otelguard.serving.metrics_server import bind, tls_context
from otelguard.serving.sidecar import Sidecar
from otelguard.state.urls import checked_state
from otelguard.telemetry import Telemetry
from otelguard.telemetry.tracer_setup import (
    OTLP_ENDPOINT_VARIABLES,
    OTLP_METRICS_ENDPOINT_VARIABLES,
    MetricExport,
    SpanExport,
    metric_export,
    span_export_from_env,
)


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument(
        "--port", type=int, default=9464, help="port for /v1/, /metrics and /healthz (default: 9464)"
    )
    parser.add_argument("--addr", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--config", metavar="FILE", help="guard config (YAML); defaults otherwise")
    parser.add_argument(
        "--token", help=f"bearer token required on /v1/ (default: ${OTELGUARD_TOKEN}; none: no auth)"
    )
    parser.add_argument(
        "--max-sessions", type=int, default=DEFAULT_MAX_SESSIONS, metavar="N",
        help=f"sessions held at once; the least recently used is dropped first (default: {DEFAULT_MAX_SESSIONS})",
    )  # fmt: skip
    parser.add_argument(
        "--max-signatures", type=int, default=DEFAULT_MAX_SIGNATURES, metavar="N",
        help="signatures tracked across all sessions; each session tracks at most N / --max-sessions "
        f"(default: {DEFAULT_MAX_SIGNATURES})",
    )  # fmt: skip
    parser.add_argument(
        "--session-idle", type=float, default=DEFAULT_IDLE_SECONDS, metavar="SECONDS",
        help=f"forget a session idle this long (default: {DEFAULT_IDLE_SECONDS:g})",
    )  # fmt: skip
    parser.add_argument(
        "--state", metavar="URL",
        help=f"share session caps with other replicas through Redis: redis://host:6379/0, rediss://..., "
        f"unix:///path (default: ${OTELGUARD_STATE_URL}, then the config's state.url; none: in memory)",
    )  # fmt: skip
    parser.add_argument(
        "--otlp-endpoint", metavar="URL",
        help="also send spans and the OpenTelemetry metrics over OTLP/HTTP to this collector, e.g. "
        "http://127.0.0.1:4318 (the otlp extra; default: the OTEL_EXPORTER_OTLP_* variables; none: "
        "/metrics only)",
    )  # fmt: skip
    parser.add_argument("--certfile", help="PEM certificate: serve HTTPS")
    parser.add_argument("--keyfile", help="PEM key of --certfile")


def _otlp_endpoint_problem(value: str | None) -> str | None:
    """What is wrong with ``--otlp-endpoint`` (an http(s) URL with a host), never repeating the
    value, which may hold credentials; ``None`` when nothing is."""
    if value is None:
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "--otlp-endpoint: expected the collector's http:// or https:// URL with a host"
    if not _otlp_extra_installed():
        return "--otlp-endpoint needs the otlp extra: pip install 'otelguard[otlp]'"
    return None


def _span_export(endpoint: str | None) -> SpanExport | None:
    """Spans over OTLP when ``--otlp-endpoint`` or ``OTEL_EXPORTER_OTLP_*`` says where; otherwise
    metrics only (no span cost)."""
    if endpoint is not None or any(os.environ.get(name) for name in OTLP_ENDPOINT_VARIABLES):
        return span_export_from_env("otelguard-serve", endpoint=endpoint)
    return None


def _metric_export(endpoint: str | None) -> MetricExport | None:
    """The OpenTelemetry metrics over OTLP when ``--otlp-endpoint`` or ``OTEL_EXPORTER_OTLP_*`` says
    where (``telemetry.otel_metrics`` is then on for every guard of this process)."""
    if endpoint is not None or any(os.environ.get(name) for name in OTLP_METRICS_ENDPOINT_VARIABLES):
        return metric_export("otelguard-serve", endpoint)
    return None


def _otlp_extra_installed() -> bool:
    return importlib.util.find_spec("opentelemetry.exporter.otlp.proto.http") is not None


def _check_state(state: StateSettings, telemetry: Telemetry) -> Callable[[], bool]:
    """One command to the shared state at start: its metrics exist from now on, and the log says
    whether session caps are shared right away. Returns what ``/healthz`` asks: whether the state
    answered last (and a ping in the background, unless it is in its back-off after a failure)."""
    from otelguard.state.redis_caps import link_for

    link = link_for(state)
    report = link.ping()
    telemetry.state_reported(report)

    probing = threading.Lock()

    def probe() -> None:
        try:
            telemetry.state_reported(link.ping())
        finally:
            probing.release()

    def state_up() -> bool:
        # The answer is the last one the state gave; a ping for the next /healthz runs beside it,
        # one at a time, so a hung Redis never holds up the event loop that answers /healthz.
        if link.may_send() and probing.acquire(blocking=False):
            threading.Thread(target=probe, name="otelguard-state-probe", daemon=True).start()
        return link.healthy

    how = (
        "answers" if report.error is None else "does not answer yet; session caps are kept here until it does"
    )
    print(f"otelguard serve: shared state at {mask_url(state.url or '')} {how}", file=sys.stderr, flush=True)
    return state_up


def run(args: argparse.Namespace) -> int:
    problem = port_problem("--port", args.port)
    if problem is not None:  # before the config is read or the state asked
        print(f"otelguard serve: {problem}", file=sys.stderr)
        return 2
    config = load_config("otelguard serve", args.config)
    if config is None:
        return 2
    endpoint = args.otlp_endpoint
    problem = _otlp_endpoint_problem(endpoint)
    if problem is not None:
        print(f"otelguard serve: {problem}", file=sys.stderr)
        return 2
    spans = _span_export(endpoint)
    otel_metrics = _metric_export(endpoint)
    if endpoint is not None:
        print(f"otelguard serve: spans and metrics over OTLP to {mask_url(endpoint)}", file=sys.stderr)
    # Before anything listens: a signal sent as soon as /healthz answers must find these handlers, not
    # Python's defaults (an exit status other than 0 for SIGTERM, a traceback for SIGINT).
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    if args.state:
        # every guard of this process reads the URL from here: the flag wins over the variable and
        # the config alike
        os.environ[OTELGUARD_STATE_URL] = args.state
    try:
        state = checked_state(config)
        if uses_random_key(config.signature_key) and claim_random_key_note():
            # sessions are compared by their hashes across restarts and replicas: say it at startup
            print(f"otelguard serve: {RANDOM_KEY_NOTE}", file=sys.stderr)
        telemetry = Telemetry(
            tracer_provider=spans.provider if spans else None,
            registry=REGISTRY,
            meter_provider=otel_metrics.provider if otel_metrics else None,
            otel_metrics=True if otel_metrics else None,
        )
        # before listening: the state metrics exist from the first scrape
        state_up = _check_state(state, telemetry) if state.url is not None else None
        sidecar = Sidecar(
            config,
            telemetry=telemetry,
            registry=REGISTRY,
            token=args.token or os.environ.get(OTELGUARD_TOKEN) or None,
            max_sessions=args.max_sessions,
            idle_seconds=args.session_idle,
            state_up=state_up,
            max_signatures=args.max_signatures,
        )
        server = bind(
            sidecar.handle, args.addr, args.port, tls_context(args.certfile, args.keyfile),
            inline=sidecar.inline, name="otelguard-serve",
        )  # fmt: skip
    except ConfigError as exc:
        print(f"otelguard serve: {option_problem(exc)}", file=sys.stderr)
        _shutdown(spans, otel_metrics)
        return 2
    host = f"[{server.addr}]" if ":" in server.addr else server.addr
    print(
        f"otelguard serve: listening on {server.scheme}://{host}:{server.port} "
        f"(/v1/, /metrics, /healthz; auth {'on' if args.token or os.environ.get(OTELGUARD_TOKEN) else 'off'})",
        file=sys.stderr,
        flush=True,
    )
    while not stop.wait(3600):
        pass
    server.shutdown()
    _shutdown(spans, otel_metrics)
    return 0


def _shutdown(spans: SpanExport | None, otel_metrics: MetricExport | None) -> None:
    """Flush what is queued (spans) and export the metrics a last time, each within a time bound."""
    if spans is not None:
        spans.shutdown()
    if otel_metrics is not None:
        otel_metrics.shutdown()
