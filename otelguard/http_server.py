"""One bounded HTTP/1.1 server for ``/metrics`` and the sidecar.

An event loop in one thread reads requests from every connection (so an idle keep-alive client or a
slow sender costs a socket, never a thread); a complete request goes to a fixed pool of worker
threads, or runs on the loop itself when the caller says it is cheap. Bounded everywhere: worker
threads, open connections (the longest-idle connection makes room for a new one), header and body
bytes, the time a connection may sit idle, the time a started request may take to arrive and the
time a client may take to read its answer. A real listen backlog absorbs bursts of scrapers.
Loopback by default; TLS when given a context (its handshake has a deadline too).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http import HTTPStatus
from types import MappingProxyType
from typing import Final

__all__ = ["HttpServer", "Request", "Response", "ServerLimits"]

_HEAD_END: Final = b"\r\n\r\n"
_CONTINUE: Final = b"HTTP/1.1 100 Continue\r\n\r\n"


@dataclass(frozen=True, slots=True)
class Request:
    """One parsed request. Header names are lower case; ``body`` is at most the body limit."""

    method: str
    path: str
    query: str
    headers: Mapping[str, str]
    body: bytes = b""


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = ()
    close: bool = False


Handler = Callable[[Request], Response]


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerLimits:
    """What one server may hold. Times are seconds."""

    workers: int = 8
    backlog: int = 128
    max_connections: int = 1024
    idle_timeout_seconds: float = 60.0
    read_timeout_seconds: float = 10.0
    write_timeout_seconds: float = 10.0
    handshake_timeout_seconds: float = 10.0
    max_header_bytes: int = 16 * 1024
    max_body_bytes: int = 1 << 20


class _BadRequest(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(slots=True)
class _Connection:
    writer: asyncio.StreamWriter
    idle_since: float | None = None
    handled: int = field(default=0)


class HttpServer:
    """A running server; ``shutdown()`` (or leaving a ``with`` block) stops it and closes every connection.

    ``inline(request)`` says whether a request is cheap enough to answer on the event loop itself
    (no thread hop); everything else runs on the worker pool. Binding happens in the constructor,
    so an address in use raises ``OSError`` there.
    """

    def __init__(
        self,
        handler: Handler,
        *,
        addr: str = "127.0.0.1",
        port: int = 0,
        tls: ssl.SSLContext | None = None,
        limits: ServerLimits | None = None,
        inline: Callable[[Request], bool] | None = None,
        name: str = "otelguard-http",
    ) -> None:
        self.limits = limits or ServerLimits()
        self._handler = handler
        self._inline = inline
        self._tls = tls
        self._name = name
        family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        self._socket = socket.create_server((addr, port), family=family, backlog=self.limits.backlog)
        host, bound_port = self._socket.getsockname()[:2]
        self.addr: str = str(host)
        self.port: int = int(bound_port)
        self.scheme = "https" if tls is not None else "http"
        self._executor = ThreadPoolExecutor(self.limits.workers, thread_name_prefix=f"{name}-worker")
        self._loop = asyncio.new_event_loop()
        self._connections: dict[asyncio.StreamWriter, _Connection] = {}
        self._server: asyncio.base_events.Server | None = None
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"{name}-loop", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._startup_error is not None:
            self._executor.shutdown(wait=False)
            raise self._startup_error

    @property
    def open_connections(self) -> int:
        return len(self._connections)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._server = self._loop.run_until_complete(
                asyncio.start_server(
                    self._serve_connection,
                    sock=self._socket,
                    ssl=self._tls,
                    ssl_handshake_timeout=self.limits.handshake_timeout_seconds if self._tls else None,
                    backlog=self.limits.backlog,
                    limit=self.limits.max_header_bytes,
                )
            )
        except BaseException as exc:  # reported to the constructor's caller
            self._startup_error = exc
            self._ready.set()
            self._loop.close()
            return
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()

    def shutdown(self) -> None:
        if self._loop.is_closed() or not self._thread.is_alive():
            return
        future = asyncio.run_coroutine_threadsafe(self._close(), self._loop)
        with contextlib.suppress(Exception):
            future.result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._executor.shutdown(wait=False, cancel_futures=True)

    close = shutdown

    def __enter__(self) -> HttpServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._connections):
            writer.close()
        tasks = [t for t in asyncio.all_tasks(self._loop) if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # connections ------------------------------------------------------------------------------

    def _make_room(self) -> bool:
        """At the connection limit, close the connection idle the longest; False when none is idle."""
        if len(self._connections) < self.limits.max_connections:
            return True
        idle = [c for c in self._connections.values() if c.idle_since is not None]
        if not idle:
            return False
        oldest = min(idle, key=lambda c: c.idle_since or 0.0)
        oldest.writer.close()
        del self._connections[oldest.writer]
        return True

    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self._make_room():
            writer.close()
            return
        connection = _Connection(writer)
        self._connections[writer] = connection
        try:
            await self._requests(reader, connection)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.TimeoutError, ssl.SSLError, OSError):
            pass  # the client went away or was too slow: nothing to answer
        finally:
            self._connections.pop(writer, None)
            writer.close()

    async def _requests(self, reader: asyncio.StreamReader, connection: _Connection) -> None:
        limits = self.limits
        loop = self._loop
        writer = connection.writer
        while True:
            connection.idle_since = loop.time()
            try:
                head = await asyncio.wait_for(reader.readuntil(_HEAD_END), limits.idle_timeout_seconds)
            except asyncio.IncompleteReadError:
                return  # closed between requests
            except asyncio.LimitOverrunError:
                await self._send(writer, _error(431, "request headers too large"), keep_alive=False)
                return
            connection.idle_since = None
            try:
                request, keep_alive = _parse_head(head, limits.max_body_bytes)
                length = int(request.headers.get("content-length", "0"))
                if length:
                    if request.headers.get("expect", "").lower() == "100-continue":
                        writer.write(_CONTINUE)
                    body = await asyncio.wait_for(reader.readexactly(length), limits.read_timeout_seconds)
                    request = Request(request.method, request.path, request.query, request.headers, body)
            except _BadRequest as exc:
                await self._send(writer, _error(exc.status, exc.reason), keep_alive=False)
                return
            response = await self._answer(request)
            keep_alive = keep_alive and not response.close
            await self._send(writer, response, keep_alive, head_only=request.method == "HEAD")
            connection.handled += 1
            if not keep_alive:
                return

    async def _answer(self, request: Request) -> Response:
        try:
            if self._inline is not None and self._inline(request):
                return self._handler(request)
            return await self._loop.run_in_executor(self._executor, self._handler, request)
        except Exception:  # a handler bug answers 500 and never names what failed
            return _error(500, "internal error")

    async def _send(
        self, writer: asyncio.StreamWriter, response: Response, keep_alive: bool, head_only: bool = False
    ) -> None:
        reason = _reason(response.status)
        lines = [
            f"HTTP/1.1 {response.status} {reason}",
            f"Content-Type: {response.content_type}",
            f"Content-Length: {len(response.body)}",
            "Connection: keep-alive" if keep_alive else "Connection: close",
        ]
        lines.extend(f"{name}: {value}" for name, value in response.headers)
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        writer.write(head if head_only else head + response.body)
        await asyncio.wait_for(writer.drain(), self.limits.write_timeout_seconds)


def _parse_head(head: bytes, max_body_bytes: int) -> tuple[Request, bool]:
    """The request line and headers; whether the client keeps the connection open."""
    lines = head[: -len(_HEAD_END)].decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise _BadRequest(400, "malformed request line")
    method, target, version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise _BadRequest(400, "malformed header line")
        headers[name.lower()] = value.strip()
    if "transfer-encoding" in headers:
        raise _BadRequest(501, "chunked request bodies are not supported; send Content-Length")
    length_text = headers.get("content-length", "0")
    if not length_text.isdigit() or len(length_text) > 12:
        raise _BadRequest(400, "Content-Length must be a whole number")
    if int(length_text) > max_body_bytes:
        raise _BadRequest(413, f"request body over {max_body_bytes} bytes")
    path, _, query = target.partition("?")
    connection = headers.get("connection", "").lower()
    keep_alive = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
    return Request(method, path, query, MappingProxyType(headers)), keep_alive


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Status"


def _error(status: int, reason: str) -> Response:
    return Response(status, f"{reason}\n".encode(), close=True)
