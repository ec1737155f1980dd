"""Serving ``/metrics``: a pure rendering function and a small server around it (docs/telemetry.md).

``render`` picks the exposition format from the scraper's ``Accept`` header (OpenMetrics, which
carries exemplars, when asked; Prometheus text otherwise). ``serve_metrics`` binds to loopback unless
told otherwise, speaks TLS when given a certificate, and aggregates worker files when
``PROMETHEUS_MULTIPROC_DIR`` is set (multi-process mode has no exemplars: prometheus_client does not
store them in its shared files).
"""

from __future__ import annotations

import errno
import gzip
import os
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.multiprocess import MultiProcessCollector

from otelguard.environment_variables import PROMETHEUS_MULTIPROC_DIR
from otelguard.errors import ConfigError

__all__ = ["MetricsServer", "render", "serve_metrics"]

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


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            body, content_type = render(self.server.registry, self.headers.get("Accept", ""))
            if "gzip" in self.headers.get("Accept-Encoding", ""):
                body = gzip.compress(body)
                self._reply(200, body, content_type, {"Content-Encoding": "gzip"})
            else:
                self._reply(200, body, content_type)
        elif path == "/":
            self._reply(200, _INDEX, "text/html; charset=utf-8")
        else:
            self._reply(404, b"not found; metrics are at /metrics\n", "text/plain; charset=utf-8")

    def _reply(
        self, status: int, body: bytes, content_type: str, extra: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: scrapes every few seconds would flood the host's logs."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    registry: CollectorRegistry
    tls: ssl.SSLContext | None = None

    def finish_request(self, request: Any, client_address: Any) -> None:
        # The TLS handshake runs here, in the request's own thread, so a slow or plain-HTTP client
        # cannot stall the accept loop.
        if self.tls is not None:
            request.settimeout(10)
            request = self.tls.wrap_socket(request, server_side=True)
        super().finish_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Failed handshakes and dropped connections are the client's problem, not log noise."""


class _Server6(_Server):
    address_family = socket.AF_INET6


class MetricsServer:
    """A running ``/metrics`` server. ``shutdown()`` (or leaving a ``with`` block) stops it."""

    def __init__(self, server: _Server, scheme: str) -> None:
        self._server = server
        host, port = server.server_address[:2]
        self.addr: str = str(host)
        self.port: int = int(port)
        self.scheme = scheme
        self._thread = threading.Thread(target=server.serve_forever, name="otelguard-metrics", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host = f"[{self.addr}]" if ":" in self.addr else self.addr
        return f"{self.scheme}://{host}:{self.port}/metrics"

    def shutdown(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

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
    tls = _tls_context(certfile, keyfile)
    server = _bind(addr, port)
    server.registry = registry
    server.tls = tls
    return MetricsServer(server, "https" if tls is not None else "http")


def _bind(addr: str, port: int) -> _Server:
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ConfigError("port", port, "expected an integer from 0 to 65535")
    server_class = _Server6 if ":" in addr else _Server
    try:
        return server_class((addr, port), _Handler)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError("port", port, f"{addr}:{port} is already in use; choose another port") from exc
        raise ConfigError("addr", addr, f"cannot listen on {addr}:{port} ({exc.strerror or exc})") from exc


def _tls_context(certfile: str | None, keyfile: str | None) -> ssl.SSLContext | None:
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
