"""One bounded HTTP/1.1 server for ``/metrics`` and the sidecar.

An event loop in one thread reads requests from every connection (so an idle keep-alive client or a
slow sender costs a socket, never a thread); a complete request goes to a fixed pool of worker
threads, or runs on the loop itself when the caller says it is cheap. Bounded everywhere: worker
threads, open connections (the longest-idle connection makes room for a new one), header and body
bytes, the time a connection may sit idle, the time a started request may take to arrive and the
time a client may take to read its answer. A real listen backlog absorbs bursts of scrapers. The
loop serves connections in turns, a few requests each, so a client pipelining thousands of requests
delays no one else.
Loopback by default; TLS when given a context (its handshake has a deadline too).

Open files bound connections too: the server raises its soft open-file limit toward the hard one as
far as its connection bound needs, keeps the bound under the limit it has (with room for the
process's other files), and when accepting still runs out of descriptors it closes the longest-idle
connections, lowers its bound to what fits, pauses accepting for a moment, and says so once.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import re
import socket
import ssl
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from queue import SimpleQueue
from types import MappingProxyType
from typing import Final

import h11

__all__ = ["HttpServer", "Request", "Response", "ServerLimits"]

logger = logging.getLogger("otelguard")

_FILE_HEADROOM: Final = 64
"""Descriptors kept free beyond the connections: the listening socket, Redis, files, worker pipes."""
_OUT_OF_FILES: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_EVICT_BATCH: Final = 16
"""Idle connections closed at once when accepting runs out of descriptors."""
_ACCEPT_PAUSE_SECONDS: Final = 0.1
_SHORTAGE_LOG_SECONDS: Final = 60.0
"""A shortage of descriptors is logged at most once this often (with how many times it recurred)."""

_MAX_DISCARD_BYTES: Final = 64 << 20
_CONTINUE: Final = b"HTTP/1.1 100 Continue\r\n\r\n"
_FEED_BYTES: Final = 16 * 1024
_MIN_TICK_SECONDS: Final = 0.05
_MAX_TICK_SECONDS: Final = 1.0
_HEAD_END: Final = re.compile(b"\n\r?\n")
"""Where h11 ends a head: the first blank line, CRLF or bare LF (its own ``blank_line_regex``)."""
_MAX_KNOWN_HEAD_BYTES: Final = 2048
_LENGTH_VALUE: Final = re.compile(rb"\ncontent-length:[ \t]*([0-9]{1,15})[ \t]*\r?\n", re.IGNORECASE)
_ANY_LENGTH: Final = b"\x01"
"""Keys of heads known whatever their one ``Content-Length`` value; other keys start with ``_EXACT``."""
_EXACT: Final = b"\x00"
_MAX_KNOWN_HEADS: Final = 256
_TURN_REQUESTS: Final = 16
"""Requests a connection answers (or hands to the workers) before the loop's other work has its turn."""


def _files_in_use() -> int:
    """Descriptors this process has open now (0 where the system does not say)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def open_file_room(wanted: int) -> int:
    """Raise the soft open-file limit toward the hard one, as far as ``wanted`` more descriptors need
    (never lowering it); returns how many connections fit under the limit then in force."""
    try:
        import resource
    except ImportError:  # no rlimits here (Windows): the connection bound alone applies
        return wanted
    in_use = _files_in_use()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = in_use + wanted + _FILE_HEADROOM
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        if target > soft:
            with contextlib.suppress(ValueError, OSError):  # not allowed here: keep the soft limit
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
                soft = target
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(1, min(wanted, soft - in_use - _FILE_HEADROOM))


def _parser(limits: ServerLimits) -> h11.Connection:
    """The parser of one request: h11 bounds a head still arriving to the header limit."""
    return h11.Connection(h11.SERVER, max_incomplete_event_size=limits.max_header_bytes)


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
        self.handler = handler
        self.inline = inline
        self._tls = tls
        family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        self._socket = socket.create_server((addr, port), family=family, backlog=self.limits.backlog)
        host, bound_port = self._socket.getsockname()[:2]
        self.addr: str = str(host)
        self.port: int = int(bound_port)
        self.scheme = "https" if tls is not None else "http"
        limits = self.limits
        shortest = min(limits.idle_timeout_seconds, limits.read_timeout_seconds, limits.write_timeout_seconds)
        self.tick = min(_MAX_TICK_SECONDS, max(_MIN_TICK_SECONDS, shortest / 4))
        """How often the time limits are checked: a quarter of the shortest, within 0.05 to 1 s."""
        self.loop = asyncio.new_event_loop()
        self.workers = _Workers(handler, self.loop, self.limits.workers, f"{name}-worker")
        self.heads: dict[bytes, _KnownHead] = {}
        """Heads h11 has read and this server accepted, by their exact bytes (see ``_Connection``)."""
        self.connections: dict[_Connection, None] = {}
        self.max_connections = open_file_room(self.limits.max_connections)
        """The connection bound in force: the configured one, or less when open files allow less."""
        self.starting: set[asyncio.Task[None]] = set()  # accepted, their transport (or handshake) not ready
        self.unready = 0
        """Accepted connections not yet in ``connections``: a starting task's connection joins
        ``connections`` a loop turn before the task is done, and must not be counted twice (the
        bound would close an idle connection to make room it already had)."""
        self.stopping = False
        self.accepting = False
        self._shortage_logged_at: float | None = None
        self._shortages = 0  # shortages since the last log line
        self._waiting: list[socket.socket] = []  # at most one: accepted, waiting for a starting one
        self._paused = False  # out of descriptors: accepting resumes after a pause
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"{name}-loop", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._startup_error is not None:
            self.workers.shutdown()
            raise self._startup_error

    @property
    def open_connections(self) -> int:
        return len(self.connections)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            # accepted here, not by asyncio's server: its retry after running out of descriptors
            # logs a traceback per attempt and multiplies its own retries
            self._socket.setblocking(False)
            self._accept_again()
        except BaseException as exc:  # reported to the constructor's caller
            self._startup_error = exc
            self._ready.set()
            self.loop.close()
            return
        self._ready.set()
        self.loop.call_later(self.tick, self._sweep)
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    def shutdown(self) -> None:
        if self.loop.is_closed() or not self._thread.is_alive():
            return
        future = asyncio.run_coroutine_threadsafe(self._close(), self.loop)
        with contextlib.suppress(Exception):
            future.result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.workers.shutdown()

    close = shutdown

    def __enter__(self) -> HttpServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    async def _close(self) -> None:
        self.stopping = True
        # Stop accepting first, and let connections already accepted reach connection_made (where
        # they see ``stopping`` and abort): closing the asyncio server before that would leak them.
        self._stop_accepting()
        for _ in range(5):
            await asyncio.sleep(0)
        for task in list(self.starting):
            task.cancel()
        for sock in self._waiting:
            sock.close()
        self._socket.close()
        for connection in list(self.connections):
            connection.abort()
        await asyncio.sleep(0)

    def _sweep(self) -> None:
        """Close every connection past one of its time limits; runs every ``tick`` seconds (a
        limit is kept to within one tick, and a request costs no timer of its own)."""
        now = self.loop.time()
        for connection in [c for c in self.connections if c.overdue(now)]:
            connection.abort()
        if not self.stopping:
            self.loop.call_later(self.tick, self._sweep)

    def remember(self, head: bytes, known: _KnownHead) -> None:
        """A head h11 read and the limits accepted; the oldest is forgotten past the bound."""
        heads = self.heads
        if len(heads) >= _MAX_KNOWN_HEADS:
            del heads[next(iter(heads))]
        heads[head] = known

    def make_room(self) -> bool:
        """At the connection limit, close the connection idle the longest; False when none is idle."""
        if len(self.connections) + self.unready < self.max_connections:
            return True
        return self._close_idle(1) > 0

    def _close_idle(self, count: int) -> int:
        """Close up to ``count`` connections, the longest idle first; how many were closed."""
        idle = sorted(
            (c for c in self.connections if c.idle_since is not None), key=lambda c: c.idle_since or 0.0
        )
        for connection in idle[:count]:
            connection.abort()
        return min(count, len(idle))

    # accepting -----------------------------------------------------------------------------------

    def _resume(self) -> None:
        self._paused = False
        self._accept_again()

    def _accept_again(self) -> None:
        if not self.stopping and not self.accepting and not self._waiting:
            self.loop.add_reader(self._socket.fileno(), self._accept)
            self.accepting = True

    def _stop_accepting(self) -> None:
        if self.accepting:
            self.accepting = False
            with contextlib.suppress(Exception):
                self.loop.remove_reader(self._socket.fileno())

    def _accept(self) -> None:
        """Every connection waiting, up to a backlog's worth per wake-up."""
        for _ in range(self.limits.backlog):
            try:
                sock, _ = self._socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in _OUT_OF_FILES:
                    self._out_of_files()
                    return
                continue  # one connection that failed (reset before it was accepted): the next
            full = len(self.connections) + self.unready >= self.max_connections
            room = not self.stopping and (not full or self.make_room())
            if not room and not self.stopping and self.unready:
                # the bound is held by connections still starting, not yet idle or busy: this one
                # waits (accepted already) until one of them is ready
                self._waiting.append(sock)
                self._stop_accepting()
                return
            if not room:
                sock.close()  # shutting down, or every connection is busy: refused
                continue
            self._begin_start(sock)
            if full:
                return  # the idle connection closed frees its descriptor on the next loop turn: the
                # rest are accepted then, so descriptors in use never overshoot the bound by a batch

    def _begin_start(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self.unready += 1
        task = self.loop.create_task(self._start(sock))
        self.starting.add(task)
        task.add_done_callback(self._started)

    def _started(self, task: asyncio.Task[None]) -> None:
        """A connection is ready (or failed to start): one waiting for room is looked at again."""
        self.starting.discard(task)
        if self._waiting and not self.stopping:
            sock = self._waiting.pop()
            if len(self.connections) + self.unready < self.max_connections or self.make_room():
                self._begin_start(sock)
            else:
                sock.close()  # every connection is busy: refused
            if not self._paused:
                self._accept_again()

    async def _start(self, sock: socket.socket) -> None:
        """One accepted socket's transport (after its TLS handshake, within its deadline)."""
        made: list[_Connection] = []

        def connection() -> _Connection:
            made.append(_Connection(self))
            return made[0]

        try:
            await self.loop.connect_accepted_socket(
                connection,
                sock,
                ssl=self._tls,
                ssl_handshake_timeout=self.limits.handshake_timeout_seconds if self._tls else None,
            )
        except (OSError, asyncio.TimeoutError, ssl.SSLError, asyncio.CancelledError):
            sock.close()  # a failed or timed-out handshake, a client gone, or shutting down
        finally:
            if not (made and made[0].made):  # never joined ``connections``: no longer unready
                self.unready -= 1

    def _out_of_files(self) -> None:
        """Accepting ran out of descriptors: make room by closing the longest-idle connections, hold
        the bound under what fits, and accept again after a pause (not in a busy loop)."""
        self._stop_accepting()
        open_now = len(self.connections) + self.unready
        closed = self._close_idle(_EVICT_BATCH)
        self.max_connections = max(1, min(self.max_connections, open_now - _EVICT_BATCH))
        self._shortages += 1
        now = self.loop.time()
        if self._shortage_logged_at is None or now - self._shortage_logged_at >= _SHORTAGE_LOG_SECONDS:
            again = (
                f" ({self._shortages - 1} more times since)" if self._shortage_logged_at is not None else ""
            )
            logger.warning(
                "otelguard: out of open files with %d connections open%s; closed %d idle ones, "
                "now holding at most %d (raise the open-file limit to hold more)",
                open_now, again, closed, self.max_connections,
            )  # fmt: skip
            self._shortage_logged_at = now
            self._shortages = 0
        self._paused = True
        self.loop.call_later(_ACCEPT_PAUSE_SECONDS, self._resume)


@dataclass(frozen=True, slots=True)
class _KnownHead:
    """What h11 read from one head, as ``_begin`` took it: the request without its body, whether the
    connection stays open after it, and the body's length."""

    request: Request
    keep_alive: bool
    length: int
    size: int
    """The head's size as the header limit measures it."""
    digits: int
    """How many digits its ``Content-Length`` value had (0 without one)."""


def _head_key(head: bytes) -> tuple[bytes, bytes | None]:
    """The key a head is known by, and its ``Content-Length`` digits when the key leaves them out.

    A head with exactly one ``Content-Length`` line whose value is plain ASCII digits is known by its
    bytes without those digits: h11 reads such heads alike but for the length (it checks the value
    is digits, and it is the one line naming the length). Any other head is known by its exact bytes.
    """
    match = _LENGTH_VALUE.search(head)
    if match is None or head.lower().count(b"content-length") != 1:
        return _EXACT + head, None
    return _ANY_LENGTH + head[: match.start(1)] + head[match.end(1) :], match.group(1)


class _Connection(asyncio.Protocol):
    """One client connection: ``h11`` parses the requests, this answers them in order and enforces
    the limits.

    h11 reads every head from a fresh parser, so what it makes of a head depends on the head's bytes
    alone: a head the same as one it read before (and the limits accepted), byte for byte or but for
    the digits of its one ``Content-Length`` line (``_head_key``), is taken as it took that one, with
    the body the next ``Content-Length`` bytes and the limits checked again. Clients send the same few
    heads over and over, only the length differing; a head never seen, one that arrived in pieces, or
    a body still arriving goes through h11.

    Time limits (checked by the server's sweep, so to within one tick, and no timer per request):
    idle (no request started), the request deadline (a started request, head and body, must
    have arrived within the read timeout of its first byte: a client that dribbles a byte at a time
    is cut off all the same), write (a client that stops reading its answer). While a request is on
    the worker pool, later requests wait in the parser's buffer (answers keep their order); past the
    size limits, reading pauses.
    """

    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.limits = server.limits
        self.loop = server.loop
        self.transport: asyncio.Transport | None = None
        self.made = False  # connection_made has run: it is counted in the server's connections
        self.parser = _parser(self.limits)
        self.request: Request | None = None  # the head of the request being read
        self.keep_alive = True
        self.body = bytearray()
        self.unread = bytearray()  # received, not yet given to the parser
        self.eof = False
        self.eof_fed = False
        self.empty = True  # the parser holds no byte: fed before it is asked, or known to need data
        self.head: bytes | None = None  # the key of the head the fresh parser is reading, to remember
        self.head_digits = 0
        self.busy = False
        self.paused_writing = False
        self.yielded = False  # its turn is over: what it still holds is read on the loop's next turn
        self.served = 0  # requests answered or handed to the workers since its turn began
        self.closing = False
        self.idle_since: float | None = None
        self.discarded = -1  # >= 0: answered and closing; the rest of an over-long body is read and dropped
        # when the server's sweep closes this connection (loop time; None: no limit running)
        self._timer: float | None = None  # idle, write, or the rest of a refused body
        self._deadline: float | None = None  # the request being read

    # asyncio.Protocol --------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.made = True
        self.server.unready -= 1
        if self.server.stopping:  # room was made when it was accepted
            transport.abort()
            return
        self.server.connections[self] = None
        self._wait_for_request()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self._cancel_timers()
        self.server.connections.pop(self, None)

    def data_received(self, data: bytes) -> None:
        if self.discarded >= 0:
            self.discarded += len(data)
            if self.discarded > _MAX_DISCARD_BYTES:
                self.abort()
            return
        if self.closing:
            return
        self.unread += data
        if self.busy or self.paused_writing or self.yielded:
            if (
                len(self.unread) > self.limits.max_header_bytes + self.limits.max_body_bytes
                and self.transport
            ):
                self.transport.pause_reading()  # a client sending far ahead of its answers
            return
        self._start_deadline()  # a request read behind one on the workers starts it when its turn comes
        self._process()

    def eof_received(self) -> bool | None:
        if self.discarded >= 0 or (not self.busy and self._deadline is None and not self.unread):
            return None  # close now: nothing in flight, no request begun
        self.eof = True
        if not self.busy and not self.paused_writing and not self.yielded:
            self._process()
        return True  # answer what is in flight, then close

    def pause_writing(self) -> None:
        self.paused_writing = True
        self._set_timer(self.limits.write_timeout_seconds)

    def resume_writing(self) -> None:
        self.paused_writing = False
        self._cancel_timer()
        if not self.busy and not self.yielded:
            self._process()

    def abort(self) -> None:
        self.closing = True
        self._cancel_timers()
        self.server.connections.pop(self, None)  # now: its connection_lost comes on a later loop turn
        if self.transport is not None:
            self.transport.abort()

    # requests ---------------------------------------------------------------------------------

    def _process(self) -> None:
        """Answer every complete request the parser holds, in order, until one goes to the workers,
        or until this connection's turn is over (``_TURN_REQUESTS``): the rest waits for the loop's
        next turn, so one client pipelining thousands of requests holds up nobody else."""
        self.served = 0
        while not self.busy and not self.closing and not self.paused_writing:
            if self.served >= _TURN_REQUESTS:
                self._next_turn()
                return
            if self.empty:  # what h11 would answer is known: NEED_DATA (an h11 call saved per request)
                if self.unread:
                    if self._known_request():
                        continue
                    self.empty = False
                    self.parser.receive_data(bytes(self.unread[:_FEED_BYTES]))
                    del self.unread[:_FEED_BYTES]
                elif not self.eof:
                    if self._deadline is None:
                        self._wait_for_request()
                    break
            try:
                event = self.parser.next_event()
            except h11.RemoteProtocolError as exc:
                self._fail(*_protocol_error(exc))
                return
            if event is h11.NEED_DATA:
                if self.unread:  # the parser is fed a slice at a time: what it holds stays small
                    self.parser.receive_data(bytes(self.unread[:_FEED_BYTES]))
                    del self.unread[:_FEED_BYTES]
                    continue
                if self.eof and not self.eof_fed:
                    self.eof_fed = True
                    self.parser.receive_data(b"")
                    continue
                if self._deadline is None:
                    self._wait_for_request()
                break
            if isinstance(event, h11.Request):
                try:
                    self._begin(event)
                except _BadRequest as exc:
                    if exc.status == 413:
                        self._refuse_body(exc.reason)
                    else:
                        self._fail(exc.status, exc.reason)
                    return
            elif isinstance(event, h11.Data):
                self.body += event.data
            elif isinstance(event, h11.EndOfMessage):
                self._end_deadline()
                request, self.request = self.request, None
                if request is None:  # pragma: no cover - h11 gives a Request before its end
                    return
                body, self.body = bytes(self.body), bytearray()
                if body:
                    request = Request(request.method, request.path, request.query, request.headers, body)
                self._dispatch(request)
            else:  # ConnectionClosed, or PAUSED after an answer that closes the connection
                self._close_after_answers()
                return
        if self.transport is not None and not self.busy and not self.closing:
            self.transport.resume_reading()

    def _next_turn(self) -> None:
        """Go on at the loop's next turn (``call_soon``): every other callback due now runs first,
        and every socket ready by then is read in that same turn. Meanwhile what the client sends
        waits in ``unread``, and reading pauses past the size limits, as behind a request on the
        workers."""
        self.yielded = True
        self.loop.call_soon(self._turn)

    def _turn(self) -> None:
        self.yielded = False
        if not self.busy and not self.closing and not self.paused_writing:
            self._process()

    def _known_request(self) -> bool:
        """A whole request at the start of ``unread`` whose head h11 has read before: answered (or
        given to the workers) without h11. Otherwise False, and the head (when complete) is kept to
        be remembered once h11 has read it and ``_begin`` accepted it."""
        unread = self.unread
        match = _HEAD_END.search(unread, 0, _MAX_KNOWN_HEAD_BYTES)
        if match is None:
            return False
        end = match.end()
        key, digits = _head_key(bytes(unread[:end]))
        known = self.server.heads.get(key)
        if known is None:
            self.head = key
            self.head_digits = 0 if digits is None else len(digits)
            return False
        request = known.request
        headers = request.headers
        length = known.length
        if digits is not None:
            length = int(digits)
            limits = self.limits
            if (
                length > limits.max_body_bytes
                or known.size + len(digits) - known.digits > limits.max_header_bytes
            ):
                self.head = None
                return False  # h11 reads it, and the limits refuse it as they refuse any head
            headers = MappingProxyType({**headers, "content-length": digits.decode("ascii")})
        stop = end + length
        if len(unread) < stop:
            self.head = None
            return False  # the body is still arriving: h11 reads it all
        body = bytes(unread[end:stop])
        del unread[:stop]
        self._end_deadline()
        self.idle_since = None
        self.keep_alive = known.keep_alive
        self._dispatch(Request(request.method, request.path, request.query, headers, body))
        return True

    def _begin(self, event: h11.Request) -> None:
        """The head of a request: checked against the limits; an ``Expect: 100-continue`` answered."""
        self.idle_since = None
        # h11 bounds a head still arriving; one that arrived whole in a single read is measured here
        size = len(event.method) + len(event.target)
        headers: dict[str, str] = {}
        for name, value in event.headers.raw_items():  # a list: cheaper than h11's Sequence view
            size += len(name) + len(value) + 4
            key = name.decode("ascii").lower()
            text = value.decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        if size > self.limits.max_header_bytes:
            raise _BadRequest(431, "request headers too large")
        if "transfer-encoding" in headers:
            raise _BadRequest(
                501, "Transfer-Encoding: chunked request bodies are not supported; send Content-Length"
            )
        length = int(headers.get("content-length", "0"))  # h11 has checked it is digits, and given once
        if length > self.limits.max_body_bytes:
            raise _BadRequest(413, f"request body over {self.limits.max_body_bytes} bytes")
        target = event.target.decode("latin-1")
        path, _, query = target.partition("?")
        connection = {token.strip().lower() for token in headers.get("connection", "").split(",")}
        self.keep_alive = event.http_version == b"1.1" and "close" not in connection
        self.request = Request(event.method.decode("ascii"), path, query, MappingProxyType(headers))
        self.body = bytearray()
        head, self.head = self.head, None
        if head is not None and "expect" not in headers:  # 100-continue depends on what came after
            known = _KnownHead(self.request, self.keep_alive, length, size, self.head_digits)
            self.server.remember(head, known)
        if self.parser.they_are_waiting_for_100_continue:
            self._write(_CONTINUE)

    def _fail(self, status: int, reason: str) -> None:
        """A request that cannot be read: answer it, and close (the stream cannot be trusted past it)."""
        self._end_deadline()
        self._write(_head(_error(status, reason), keep_alive=False) + f"{reason}\n".encode())
        self.closing = True
        if self.transport is not None:
            self.transport.close()

    def _refuse_body(self, reason: str) -> None:
        """Answer 413, then read and drop what the client still sends for a while before closing: a
        client that writes its whole body before reading (most do) then sees the answer instead of a
        broken pipe. Bounded in bytes and time."""
        self._end_deadline()
        self.discarded = 0
        self._write(_head(_error(413, reason), keep_alive=False) + f"{reason}\n".encode())
        if self.transport is not None and self.transport.can_write_eof():
            self.transport.write_eof()
        self._set_timer(self.limits.read_timeout_seconds)

    def _dispatch(self, request: Request) -> None:
        self.served += 1
        head_only = request.method == "HEAD"
        server = self.server
        if server.inline is not None and server.inline(request):
            self._send(_answer(server.handler, request), head_only)
            return
        self.busy = True
        server.workers.submit(self, request, head_only)

    def answered(self, response: Response, head_only: bool) -> None:
        """A worker's answer to this connection's request (called on the loop)."""
        self.busy = False
        if self.closing:
            return
        self._send(response, head_only)
        if not self.closing:
            self._process()

    def _send(self, response: Response, head_only: bool = False) -> None:
        """The answer, written as is (the handlers' own headers are code constants); then a fresh
        parser for the next request, fed what the client already sent of it. h11 reads every
        request; answering through it too would double its cost per request for nothing."""
        keep_alive = self.keep_alive and not response.close
        head = _head(response, keep_alive)
        self._write(head if head_only else head + response.body)
        if not keep_alive:
            self._close_after_answers()
            return
        if not self.empty:
            ahead = self.parser.trailing_data[0]  # at most a slice of what the client sent next
            self.parser = _parser(self.limits)
            self.empty = True
            if ahead:
                self.unread[:0] = ahead  # read from its start, as every request is
        self.eof_fed = False
        self.head = None

    def _close_after_answers(self) -> None:
        self.closing = True
        self._cancel_timers()
        if self.transport is not None:
            self.transport.close()  # after the answer is flushed

    def _write(self, data: bytes | None) -> None:
        if data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    # timers -----------------------------------------------------------------------------------

    def _wait_for_request(self) -> None:
        self.idle_since = self.loop.time()
        self._set_timer(self.limits.idle_timeout_seconds)

    def _start_deadline(self) -> None:
        """A request has begun: it must be complete within the read timeout. Never moved later."""
        if self._deadline is None:
            self._timer = None  # no longer idle
            self.idle_since = None
            self._deadline = self.loop.time() + self.limits.read_timeout_seconds

    def _end_deadline(self) -> None:
        self._deadline = None

    def _set_timer(self, seconds: float) -> None:
        self._timer = self.loop.time() + seconds

    def _cancel_timer(self) -> None:
        self._timer = None

    def overdue(self, now: float) -> bool:
        timer, deadline = self._timer, self._deadline
        return (timer is not None and timer <= now) or (deadline is not None and deadline <= now)

    def _cancel_timers(self) -> None:
        self._cancel_timer()
        self._end_deadline()


class _Workers:
    """The worker threads (started at the first request for them), fed through one queue. Answers
    go back to the loop together: a worker wakes the loop only when no wake-up is pending, and the
    loop then sends every answer that is ready (under load, one wake-up carries several).
    """

    def __init__(self, handler: Handler, loop: asyncio.AbstractEventLoop, count: int, name: str) -> None:
        self.handler = handler
        self.loop = loop
        self.count = count
        self.name = name
        self.jobs: SimpleQueue[tuple[_Connection, Request, bool] | None] = SimpleQueue()
        self.done: deque[tuple[_Connection, Response, bool]] = deque()
        self.threads: list[threading.Thread] = []
        self._lock = threading.Lock()  # for wake_pending
        self.wake_pending = False
        self.stopped = False

    def submit(self, connection: _Connection, request: Request, head_only: bool) -> None:
        """On the loop: one request for the workers."""
        if not self.threads:
            for n in range(self.count):
                thread = threading.Thread(target=self._work, name=f"{self.name}_{n}", daemon=True)
                self.threads.append(thread)
                thread.start()
        self.jobs.put((connection, request, head_only))

    def _work(self) -> None:
        jobs, done, lock, handler = self.jobs, self.done, self._lock, self.handler
        while True:
            job = jobs.get()
            if job is None or self.stopped:
                return
            connection, request, head_only = job
            done.append((connection, _answer(handler, request), head_only))
            with lock:
                if self.wake_pending:
                    continue
                self.wake_pending = True
            try:
                self.loop.call_soon_threadsafe(self._deliver)
            except RuntimeError:  # the loop is closed: the server has shut down
                return

    def _deliver(self) -> None:
        """On the loop: every answer ready, each to its connection, in the order they came."""
        with self._lock:
            self.wake_pending = False
        done = self.done
        while done:
            connection, response, head_only = done.popleft()
            connection.answered(response, head_only)

    def shutdown(self) -> None:
        """Requests not yet started are dropped (their connections are closed); a handler running
        finishes on its thread, and nothing is sent."""
        self.stopped = True
        for _ in self.threads:
            self.jobs.put(None)


_HEADS: dict[tuple[int, str, bool, tuple[tuple[str, str], ...]], tuple[bytes, bytes]] = {}
_MAX_HEADS: Final = 256


def _head(response: Response, keep_alive: bool) -> bytes:
    """The answer's head: built once per kind of answer (status, type, extra headers: code
    constants), with only the length filled in per answer."""
    key = (response.status, response.content_type, keep_alive, response.headers)
    parts = _HEADS.get(key)
    if parts is None:
        before = f"HTTP/1.1 {response.status} {_reason(response.status)}\r\n"
        before += f"Content-Type: {response.content_type}\r\nContent-Length: "
        after = "\r\nConnection: keep-alive" if keep_alive else "\r\nConnection: close"
        after += "".join(f"\r\n{name}: {value}" for name, value in response.headers) + "\r\n\r\n"
        parts = (before.encode("latin-1"), after.encode("latin-1"))
        if len(_HEADS) < _MAX_HEADS:
            _HEADS[key] = parts
    return b"%s%d%s" % (parts[0], len(response.body), parts[1])


def _answer(handler: Handler, request: Request) -> Response:
    try:
        return handler(request)
    except Exception:  # a handler bug answers 500 and never names what failed
        return _error(500, "internal error")


def _protocol_error(exc: h11.RemoteProtocolError) -> tuple[int, str]:
    """The status and the one line that answer a request ``h11`` could not read. h11's own message
    may quote the request's bytes, so only its known kinds are named, in fixed words."""
    message = str(exc)
    if exc.error_status_hint == 431:
        return 431, "request headers too large"
    for start, status, reason in _PROTOCOL_ERRORS:
        if message.startswith(start):
            return status, reason
    return 400, "malformed request line or header"


_PROTOCOL_ERRORS: Final = (
    ("bad Content-Length", 400, "Content-Length: must be a whole number"),
    ("conflicting Content-Length", 400, "Content-Length: given more than once with different values"),
    ("Missing mandatory Host", 400, "Host: missing (HTTP/1.1 requires it)"),
    ("Found multiple Host", 400, "Host: given more than once"),
    ("multiple Transfer-Encoding", 501, "Transfer-Encoding: not supported; send Content-Length"),
    ("Only Transfer-Encoding", 501, "Transfer-Encoding: not supported; send Content-Length"),
)


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Status"


def _error(status: int, reason: str) -> Response:
    return Response(status, f"{reason}\n".encode(), close=True)
