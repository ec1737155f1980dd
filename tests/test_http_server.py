"""The shared HTTP server: bounded threads, a real backlog, timeouts, keep-alive, limits, TLS, shutdown.

The load cases reproduce what broke the old thread-per-connection server (50 parallel scrapers,
1,000 connections, 200 idle connections holding threads): threads stay bounded and a normal scrape
is answered while idle or slow clients hold connections. The only timing is a generous socket
timeout on the client.
"""

from __future__ import annotations

import contextlib
import http.client
import re
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from prometheus_client import CollectorRegistry, Counter

from otelguard.serving.http_server import HttpServer, Request, Response, ServerLimits, _head_key
from otelguard.serving.metrics_server import serve_metrics
from tests.e2e import wait_until

GENEROUS_TIMEOUT = 30.0


def server_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("otelguard-")]


def echo(request: Request) -> Response:
    return Response(200, f"{request.method} {request.path} {len(request.body)}".encode())


@pytest.fixture
def registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    Counter("load_total", "a counter", ["n"], registry=registry).labels("1").inc()
    return registry


@pytest.fixture
def echo_server() -> Iterator[HttpServer]:
    with HttpServer(echo, limits=ServerLimits(workers=2, max_body_bytes=1000)) as server:
        yield server


def scrape(port: int) -> bytes:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=GENEROUS_TIMEOUT)
    try:
        connection.request("GET", "/metrics")
        response = connection.getresponse()
        assert response.status == 200
        return response.read()
    finally:
        connection.close()


def raw(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=GENEROUS_TIMEOUT) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def test_fifty_parallel_scrapers_all_answered_by_a_bounded_pool(registry: CollectorRegistry) -> None:
    with serve_metrics(port=0, registry=registry) as server:
        with ThreadPoolExecutor(50) as clients:
            bodies = list(clients.map(lambda _: scrape(server.port), range(500)))
        assert all(b"load_total" in body for body in bodies)
        assert len(server_threads()) <= 1 + 8  # the event loop and the worker pool, whatever the load


def test_a_thousand_connections_do_not_make_a_thousand_threads(registry: CollectorRegistry) -> None:
    with serve_metrics(port=0, registry=registry) as server:
        before = threading.active_count()
        sockets = [
            socket.create_connection(("127.0.0.1", server.port), timeout=GENEROUS_TIMEOUT)
            for _ in range(1000)
        ]
        try:
            assert b"load_total" in scrape(server.port)
            assert threading.active_count() <= before + 8
            assert len(server_threads()) <= 1 + 8
        finally:
            for sock in sockets:
                sock.close()


def test_a_scrape_is_answered_while_idle_and_slow_clients_hold_connections(
    registry: CollectorRegistry,
) -> None:
    with serve_metrics(port=0, registry=registry) as server:
        idle = [
            socket.create_connection(("127.0.0.1", server.port), timeout=GENEROUS_TIMEOUT) for _ in range(200)
        ]
        slow = [
            socket.create_connection(("127.0.0.1", server.port), timeout=GENEROUS_TIMEOUT) for _ in range(50)
        ]
        try:
            for sock in slow:  # a request that never finishes its headers
                sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            assert b"load_total" in scrape(server.port)
            assert len(server_threads()) <= 1 + 8
        finally:
            for sock in idle + slow:
                sock.close()


def test_keep_alive_serves_many_requests_on_one_connection(echo_server: HttpServer) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", echo_server.port, timeout=GENEROUS_TIMEOUT)
    for index in range(20):
        connection.request("POST", f"/p{index}", body=b"x" * index)
        response = connection.getresponse()
        assert response.read() == f"POST /p{index} {index}".encode()
        assert response.getheader("Connection") == "keep-alive"
    connection.close()


def test_pipelined_requests_are_answered_in_order(echo_server: HttpServer) -> None:
    answer = raw(
        echo_server.port,
        b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    assert answer.index(b"GET /a 0") < answer.index(b"GET /b 0")


def test_a_long_pipelined_run_is_answered_whole_and_in_order_a_turn_at_a_time() -> None:
    """Far more requests in a row than a connection is answered per turn of the loop, some with a
    body, some on the workers, and the client's end of the stream right behind them: every one is
    answered, in order, and then the connection closes."""
    count = 5000

    def request(index: int) -> bytes:
        if index % 7 == 0:
            return b"POST /r%d HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc" % index
        return b"GET /r%d HTTP/1.1\r\nHost: x\r\n\r\n" % index

    def on_the_loop(request: Request) -> bool:
        return not request.path.endswith("3")

    def send(sock: socket.socket) -> None:
        sock.sendall(b"".join(request(index) for index in range(count)))
        sock.shutdown(socket.SHUT_WR)

    with (
        # a backlog past the size limits: reading pauses until the connection has caught up
        HttpServer(echo, inline=on_the_loop, limits=ServerLimits(workers=2, max_body_bytes=1000)) as server,
        socket.create_connection(("127.0.0.1", server.port), timeout=GENEROUS_TIMEOUT) as sock,
    ):
        sender = threading.Thread(target=send, args=(sock,))
        sender.start()
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
        sender.join(GENEROUS_TIMEOUT)
    answers = re.findall(rb"(GET|POST) /r([0-9]+) ([0-9]+)", b"".join(chunks))
    assert [int(index) for _, index, _ in answers] == list(range(count))
    assert all(length == (b"3" if method == b"POST" else b"0") for method, _, length in answers)


def test_answers_finished_by_the_workers_at_once_all_reach_their_connections() -> None:
    """Workers hand answers back to the loop together: 32 keep-alive clients, each sending its
    requests one after another, all on the workers; every answer reaches its own connection, in
    order, none is lost, and the workers stay bounded."""

    def slow_echo(request: Request) -> Response:
        time.sleep(0.001)  # answers finish close together on the four workers
        return echo(request)

    def client(number: int) -> list[bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=GENEROUS_TIMEOUT)
        answers = []
        for index in range(25):
            connection.request("POST", f"/c{number}/{index}", body=b"x" * number)
            answers.append(connection.getresponse().read())
        connection.close()
        return answers

    with HttpServer(slow_echo, limits=ServerLimits(workers=4), name="otelguard-w") as server:
        with ThreadPoolExecutor(32) as clients:
            answers = list(clients.map(client, range(32)))
        workers = [t for t in server_threads() if t.name.startswith("otelguard-w-worker")]
    assert answers == [[f"POST /c{n}/{i} {n}".encode() for i in range(25)] for n in range(32)]
    assert 1 <= len(workers) <= 4


def test_http_1_0_closes_unless_asked_to_keep_alive(echo_server: HttpServer) -> None:
    answer = raw(echo_server.port, b"GET /x HTTP/1.0\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200 OK") and b"Connection: close" in answer


def test_a_body_over_the_limit_is_refused_with_413_without_reading_it(echo_server: HttpServer) -> None:
    answer = raw(echo_server.port, b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 1001\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert b"Connection: close" in answer


def test_oversized_headers_get_431(echo_server: HttpServer) -> None:
    answer = raw(echo_server.port, b"GET /x HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20_000 + b"\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 431 ")


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GARBAGE\r\n\r\n", b"400"),
        (b"GET /x HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n", b"400"),
        (b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: ten\r\n\r\n", b"400"),
        (b"POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", b"501"),
    ],
)
def test_malformed_requests_get_a_clear_status(
    echo_server: HttpServer, request_bytes: bytes, status: bytes
) -> None:
    assert raw(echo_server.port, request_bytes).startswith(b"HTTP/1.1 " + status + b" ")


def test_expect_100_continue_is_honoured(echo_server: HttpServer) -> None:
    with socket.create_connection(("127.0.0.1", echo_server.port), timeout=GENEROUS_TIMEOUT) as sock:
        sock.sendall(
            b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n"
        )
        assert sock.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(b"abc")
        answer = b"".join(iter(lambda: sock.recv(65536), b""))
    assert answer.startswith(b"HTTP/1.1 200 OK") and answer.endswith(b"POST /x 3")


def test_a_handler_error_is_a_500_that_names_nothing() -> None:
    def broken(request: Request) -> Response:
        raise RuntimeError("secret detail")

    with HttpServer(broken) as server:
        answer = raw(server.port, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 500 ") and b"secret" not in answer


def test_idle_connections_past_the_limit_make_room_for_new_ones() -> None:
    with HttpServer(echo, limits=ServerLimits(max_connections=10)) as server:
        idle = [
            socket.create_connection(("127.0.0.1", server.port), timeout=GENEROUS_TIMEOUT) for _ in range(30)
        ]
        try:
            answer = raw(server.port, b"GET /fresh HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert answer.endswith(b"GET /fresh 0")
            assert server.open_connections <= 10
        finally:
            for sock in idle:
                sock.close()


def test_a_new_connection_at_the_limit_closes_exactly_one_idle_connection() -> None:
    """One idle connection makes room for one new one: the server stays full, never below."""
    with HttpServer(echo, limits=ServerLimits(max_connections=5)) as server:
        idle = [
            socket.create_connection(("127.0.0.1", server.port), timeout=GENEROUS_TIMEOUT) for _ in range(5)
        ]
        try:
            wait_until(lambda: server.open_connections == 5, GENEROUS_TIMEOUT, 0.01, "5 connections")
            for n in range(5):
                idle.append(socket.create_connection(("127.0.0.1", server.port), timeout=GENEROUS_TIMEOUT))
                assert idle[n].recv(1) == b""  # the longest idle is closed for it
                wait_until(lambda: server.open_connections == 5, GENEROUS_TIMEOUT, 0.01, "a full server")
            assert server.open_connections == 5
        finally:
            for sock in idle:
                sock.close()


def test_connections_filling_the_bound_close_no_idle_connection() -> None:
    """Up to the bound there is room for every connection: none is closed to make room. A connection
    joins the open ones a loop turn before its start is done, and was counted twice in that turn: an
    accept falling in it saw a full server and closed an idle connection (about one fill in 20 under
    load). Filled 40 times."""
    for _ in range(40):
        with HttpServer(echo, limits=ServerLimits(max_connections=5)) as server:
            clients = [
                socket.create_connection(("127.0.0.1", server.port), timeout=GENEROUS_TIMEOUT)
                for _ in range(5)
            ]
            try:
                wait_until(lambda: server.open_connections == 5, GENEROUS_TIMEOUT, 0.01, "5 connections")
                for client in clients:
                    client.setblocking(False)
                    with pytest.raises(BlockingIOError):  # still open: nothing to read, no end of file
                        client.recv(1)
            finally:
                for client in clients:
                    client.close()


def test_an_idle_connection_is_closed_after_the_idle_timeout() -> None:
    server = HttpServer(echo, limits=ServerLimits(idle_timeout_seconds=0.2))
    with server, socket.create_connection(("127.0.0.1", server.port), timeout=GENEROUS_TIMEOUT) as sock:
        assert sock.recv(1) == b""  # closed by the server, not by the generous client timeout


def test_a_body_that_never_arrives_is_dropped_after_the_read_timeout() -> None:
    server = HttpServer(echo, limits=ServerLimits(read_timeout_seconds=0.2))
    with server, socket.create_connection(("127.0.0.1", server.port), timeout=GENEROUS_TIMEOUT) as sock:
        sock.sendall(b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
        assert sock.recv(1) == b""


def test_inline_requests_run_on_the_loop_and_others_on_the_workers() -> None:
    seen: dict[str, str] = {}

    def where(request: Request) -> Response:
        seen[request.path] = threading.current_thread().name
        return Response(200)

    with HttpServer(where, inline=lambda r: r.path == "/fast", name="otelguard-t") as server:
        raw(server.port, b"GET /fast HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        raw(server.port, b"GET /slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert seen == {"/fast": "otelguard-t-loop", "/slow": seen["/slow"]}
    assert seen["/slow"].startswith("otelguard-t-worker")


def test_head_gets_headers_only(echo_server: HttpServer) -> None:
    answer = raw(echo_server.port, b"HEAD /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert answer.endswith(b"\r\n\r\n") and b"Content-Length: 9" in answer  # "HEAD /x 0"


def test_shutdown_closes_open_connections_and_frees_the_port(echo_server: HttpServer) -> None:
    sock = socket.create_connection(("127.0.0.1", echo_server.port), timeout=GENEROUS_TIMEOUT)
    echo_server.shutdown()
    assert sock.recv(1) == b""
    sock.close()
    assert not [t for t in server_threads() if t.name.endswith("-loop") and t.is_alive()]
    with socket.socket() as again:
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as any server would
        again.bind(("127.0.0.1", echo_server.port))
        again.listen()  # the port is free again


def test_binds_loopback_by_default_with_a_real_backlog(echo_server: HttpServer) -> None:
    assert echo_server.addr == "127.0.0.1"
    assert echo_server.limits.backlog == 128


def test_a_request_dribbled_a_byte_at_a_time_is_cut_off_at_the_read_timeout() -> None:
    """The read timeout bounds the whole request from its first byte: a byte every 0.1 s against a
    0.5 s timeout is cut off, although no gap between two bytes comes near the timeout."""
    server = HttpServer(echo, limits=ServerLimits(read_timeout_seconds=0.5, idle_timeout_seconds=60))
    request = b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" + b"a" * 100
    sent = 0
    with server, socket.create_connection(("127.0.0.1", server.port), timeout=GENEROUS_TIMEOUT) as sock:
        try:
            for byte in request:
                sock.sendall(bytes([byte]))
                sent += 1
                time.sleep(0.1)
        except OSError:  # the server closed the connection: the send after it fails
            pass
        with contextlib.suppress(OSError):
            assert sock.recv(100) == b""
    assert sent < len(request), "the whole dribbled request was read"


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        (b"Content-Length: \xb2", b"Content-Length: must be a whole number"),  # str.isdigit() says yes
        (b"Content-Length: 1\xb9", b"Content-Length: must be a whole number"),
        (b"Content-Length: 3\r\nContent-Length: 40", b"Content-Length: given more than once"),
        (b"Content-Length: 3, 40", b"Content-Length: given more than once"),
    ],
    ids=["superscript-two", "superscript-one", "two-headers", "two-values"],
)
def test_a_content_length_that_is_not_one_whole_number_is_400(
    echo_server: HttpServer, headers: bytes, reason: bytes
) -> None:
    """No traceback and no dropped connection; and no second request smuggled in the first's body."""
    smuggled = b"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
    answer = raw(echo_server.port, b"POST /x HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n\r\nabc" + smuggled)
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert reason in answer and b"Connection: close" in answer
    assert b"smuggled" not in answer


def test_every_answer_of_a_server_with_a_handler_survives_hostile_heads(echo_server: HttpServer) -> None:
    """A stream of malformed heads, each on its own connection, then a good request: all answered."""
    for head in (b"GET / HTTP/1.1\r\n\xff\xfe: x\r\n\r\n", b"GET / HTTP/1.1\r\n\r\n", b"\r\n\r\n\r\n"):
        answer = raw(echo_server.port, head)
        assert answer == b"" or answer.startswith(b"HTTP/1.1 4")
    assert raw(echo_server.port, b"GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").endswith(
        b"GET /ok 0"
    )


def _exchange(port: int, chunks: list[bytes], answers: int) -> list[bytes]:
    """Send ``chunks`` on one connection, one write each, and read ``answers`` echo answers."""
    with socket.create_connection(("127.0.0.1", port), timeout=GENEROUS_TIMEOUT) as sock:
        for chunk in chunks:
            sock.sendall(chunk)
            time.sleep(0.01)  # separate reads on the server (not a timing assert)
        reader = sock.makefile("rb")
        bodies = []
        for _ in range(answers):
            assert reader.readline().startswith(b"HTTP/1.1 ")
            length = 0
            while (line := reader.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line[15:])
            bodies.append(reader.read(length))
        return bodies


def post(path: str, body: bytes, extra: bytes = b"") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\n".encode()
        + extra
        + b"Content-Length: %d\r\n\r\n" % len(body)
        + body
    )


def test_a_head_read_before_is_answered_the_same_with_its_own_body(echo_server: HttpServer) -> None:
    """Heads byte for byte the same as ones h11 read are taken as it took them, each with the
    body that follows it: pipelined, behind a new head, with a body still arriving, on new
    connections; one entry per distinct head."""
    first = _exchange(echo_server.port, [post("/a", b"abc"), post("/b", b"xyz")], 2)
    assert first == [b"POST /a 3", b"POST /b 3"]
    assert len(echo_server.heads) == 2
    again = post("/a", b"def") + post("/b", b"uvw") + post("/c", b"12345") + post("/a", b"ghi")
    split = post("/a", b"jkl")
    answers = _exchange(echo_server.port, [again, split[:-2], split[-2:]], 5)
    assert answers == [b"POST /a 3", b"POST /b 3", b"POST /c 5", b"POST /a 3", b"POST /a 3"]
    assert len(echo_server.heads) == 3


def test_a_known_head_does_not_let_a_malformed_one_through(echo_server: HttpServer) -> None:
    """A head that differs from a known one only in its Content-Length value is read by h11 again:
    ``Content-Length: ²`` and two lengths stay 400, after the good request is answered; a refused
    head is never remembered, so it is refused every time."""
    good = b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nab"
    assert _exchange(echo_server.port, [good], 1) == [b"POST /x 2"]
    for bad in (
        b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: \xb2\r\n\r\nab",
        b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc",
    ):
        for _ in range(2):
            answer = raw(echo_server.port, good + bad + b"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n")
            assert answer.startswith(b"HTTP/1.1 200 OK") and answer.count(b"HTTP/1.1 ") == 2
            assert b"HTTP/1.1 400 " in answer and b"smuggled" not in answer
    assert list(echo_server.heads) == [_head_key(good[:-2])[0]]


def test_a_known_head_keeps_its_connection_semantics_and_100_continue(echo_server: HttpServer) -> None:
    """HTTP/1.0 and ``Connection: close`` heads close every time; an ``Expect: 100-continue`` head
    is never remembered (whether to send 100 depends on what came after it)."""
    for _ in range(3):
        answer = raw(echo_server.port, b"GET /x HTTP/1.0\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 200 OK") and b"Connection: close" in answer
        closing = raw(echo_server.port, post("/y", b"ab", b"Connection: close\r\n") + post("/z", b""))
        assert closing.count(b"HTTP/1.1 ") == 1 and closing.endswith(b"POST /y 2")
    expect = b"POST /e HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n"
    for _ in range(2):
        with socket.create_connection(("127.0.0.1", echo_server.port), timeout=GENEROUS_TIMEOUT) as sock:
            sock.sendall(expect)
            assert sock.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
    assert _head_key(expect)[0] not in echo_server.heads


def test_the_known_heads_are_bounded(echo_server: HttpServer) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", echo_server.port, timeout=GENEROUS_TIMEOUT)
    for index in range(300):
        connection.request("GET", f"/p{index}")
        assert connection.getresponse().read() == f"GET /p{index} 0".encode()
    connection.close()
    assert len(echo_server.heads) == 256
    assert all(b"/p0 " not in head for head in echo_server.heads)  # the oldest went first


def test_a_known_head_with_another_length_is_known_and_read_with_its_own_length(
    echo_server: HttpServer,
) -> None:
    """Heads that differ only in their one Content-Length value share an entry, and each request
    gets the body its own length says, with that length among its headers."""
    bodies = [b"a", b"bcd", b"x" * 120, b""]
    answers = _exchange(echo_server.port, [b"".join(post("/v", body) for body in bodies)], len(bodies))
    assert answers == [f"POST /v {len(body)}".encode() for body in bodies]
    assert len(echo_server.heads) == 1
    seen: list[str] = []
    with HttpServer(
        lambda request: (seen.append(request.headers["content-length"]), echo(request))[1]
    ) as server:
        _exchange(server.port, [post("/v", b"ab") + post("/v", b"abcdef")], 2)
    assert seen == ["2", "6"]


def test_a_known_head_leaves_the_limits_and_two_lengths_to_h11(echo_server: HttpServer) -> None:
    """Past the body limit a known head is refused (413) as any head; a head naming its length
    twice is never known by its length, so it reaches h11 (400) whatever came before."""
    assert _exchange(echo_server.port, [post("/v", b"ab")], 1) == [b"POST /v 2"]
    over = raw(echo_server.port, post("/v", b"ab") + post("/v", b"y" * 1001))
    assert over.startswith(b"HTTP/1.1 200 OK") and b"HTTP/1.1 413 " in over
    twice = b"POST /v HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\ncontent-length: 2\r\n\r\nab"
    assert _head_key(twice[:-2])[1] is None
    stream = post("/v", b"ab") + twice + b"GET /next HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    with HttpServer(echo, limits=ServerLimits(workers=2, max_body_bytes=1000)) as fresh:
        expected = raw(fresh.port, stream)
    assert b"HTTP/1.1 200 OK" in expected
    for _ in range(2):
        assert raw(echo_server.port, stream) == expected
