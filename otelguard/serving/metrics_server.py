"""Serving ``/metrics``: a pure rendering function and the shared bounded server around it (docs/telemetry.md).

``render`` picks the exposition format from the scraper's ``Accept`` header (OpenMetrics, which
carries exemplars, when asked; Prometheus text otherwise). ``serve_metrics`` runs on the shared
bounded server (``otelguard.serving.http_server``): a fixed worker pool, a real backlog, read and idle
timeouts. It binds to loopback unless told otherwise, speaks TLS when given a certificate, and aggregates worker files when
``PROMETHEUS_MULTIPROC_DIR`` is set (multi-process mode has no exemplars: prometheus_client does not
store them in its shared files).
"""

from __future__ import annotations

import errno
import gzip
import os
import ssl
from collections.abc import Callable

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.multiprocess import MultiProcessCollector

from otelguard.environment_variables import PROMETHEUS_MULTIPROC_DIR
from otelguard.errors import ConfigError
from otelguard.serving.http_server import HttpServer, Request, Response, ServerLimits

__all__ = ["MetricsServer", "bind", "metrics_response", "render", "serve_metrics", "tls_context"]

_INDEX = b'<html><body><a href="/metrics">/metrics</a></body></html>\n'


def render(registry: CollectorRegistry, accept: str = "") -> tuple[bytes, str]:
    """The exposition body and its content type for a scraper's ``Accept`` header."""
    encoder, content_type = choose_encoder(accept)
    return encoder(registry), content_type


def multiprocess_registry(path: str) -> CollectorRegistry:
    """A registry that sums the files every worker process writes into ``path``."""
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=path)  # type: ignore[no-untyped-call]
    return registry


def metrics_response(registry: CollectorRegistry, request: Request) -> Response:
    """``/metrics`` for one request: the format its ``Accept`` asks for, gzip when accepted."""
    body, content_type = render(registry, request.headers.get("accept", ""))
    if "gzip" in request.headers.get("accept-encoding", ""):
        return Response(200, gzip.compress(body), content_type, (("Content-Encoding", "gzip"),))
    return Response(200, body, content_type)


def _metrics_routes(registry: CollectorRegistry) -> Callable[[Request], Response]:
    def answer(request: Request) -> Response:
        if request.method not in ("GET", "HEAD"):
            return Response(405, b"only GET is served here\n", headers=(("Allow", "GET, HEAD"),))
        if request.path == "/metrics":
            return metrics_response(registry, request)
        if request.path == "/":
            return Response(200, _INDEX, "text/html; charset=utf-8")
        return Response(404, b"not found; metrics are at /metrics\n")

    return answer


class MetricsServer:
    """A running ``/metrics`` server. ``shutdown()`` (or leaving a ``with`` block) stops it."""

    def __init__(self, server: HttpServer) -> None:
        self._server = server
        self.addr: str = server.addr
        self.port: int = server.port
        self.scheme = server.scheme

    @property
    def url(self) -> str:
        host = f"[{self.addr}]" if ":" in self.addr else self.addr
        return f"{self.scheme}://{host}:{self.port}/metrics"

    def shutdown(self) -> None:
        self._server.shutdown()

    close = shutdown

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def serve_metrics(
    port: int = 9464,
    addr: str = "127.0.0.1",
    registry: CollectorRegistry | None = None,
    certfile: str | None = None,
    keyfile: str | None = None,
) -> MetricsServer:
    """Serve ``/metrics`` in a background thread; returns the running server.

    ``registry`` defaults to prometheus_client's default registry, or, when
    ``PROMETHEUS_MULTIPROC_DIR`` is set, to the sum of every worker's files. ``port=0`` picks a
    free port (read it from ``server.port``). Raises ``ConfigError`` naming the port, address or
    certificate that cannot be used.
    """
    if registry is None:
        multiproc_dir = os.environ.get(PROMETHEUS_MULTIPROC_DIR)
        if multiproc_dir and not os.path.isdir(multiproc_dir):
            raise ConfigError(PROMETHEUS_MULTIPROC_DIR, multiproc_dir, "must be an existing directory")
        registry = multiprocess_registry(multiproc_dir) if multiproc_dir else REGISTRY
    tls = tls_context(certfile, keyfile)
    return MetricsServer(bind(_metrics_routes(registry), addr, port, tls, name="otelguard-metrics"))


def bind(
    handler: Callable[[Request], Response],
    addr: str,
    port: int,
    tls: ssl.SSLContext | None,
    *,
    limits: ServerLimits | None = None,
    inline: Callable[[Request], bool] | None = None,
    name: str,
) -> HttpServer:
    """Start the shared bounded server; ``ConfigError`` names the port or address that cannot be used."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ConfigError("port", port, "expected an integer from 0 to 65535")
    try:
        return HttpServer(handler, addr=addr, port=port, tls=tls, limits=limits, inline=inline, name=name)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError("port", port, f"{addr}:{port} is already in use; choose another port") from exc
        raise ConfigError("addr", addr, f"cannot listen on {addr}:{port} ({exc.strerror or exc})") from exc


def tls_context(certfile: str | None, keyfile: str | None) -> ssl.SSLContext | None:
    if certfile is None:
        if keyfile is not None:
            raise ConfigError("keyfile", keyfile, "a key needs its certificate: pass certfile too")
        return None
    for name, path in (("certfile", certfile), ("keyfile", keyfile)):
        if path is not None and not os.access(path, os.R_OK):
            raise ConfigError(name, path, "must be a readable PEM file")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(certfile, keyfile)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            "certfile", certfile, f"must be a PEM certificate matching its key ({exc})"
        ) from exc
    return context
