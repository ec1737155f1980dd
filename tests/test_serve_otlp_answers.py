"""What a collector answers is read in bounded memory: a real ``otelguard serve --otlp-endpoint``
exporting to a loopback collector whose every answer is a 160 MB body keeps its resident memory far
below that body, and a collector's ordinary answers still export, on kept-alive connections. The
requests session behind the exporters is driven here too, against real listeners."""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from otelguard.telemetry.otlp_session import MAX_ANSWER_BYTES, bounded_session, exporter_session
from tests.e2e import stop_process
from tests.test_cli_serve import TIMEOUT, Serve, start_serve

HUGE_ANSWER = 160 * 1000 * 1000
MEMORY_BOUND_KIB = 150 * 1000  # far below the answer, far above the sidecar's own 40 to 60 MB
_ZEROS = bytes(1 << 20)


class Collector(ThreadingHTTPServer):
    """An OTLP/HTTP collector on loopback that answers every export 200 with ``answer_bytes`` of
    zeros, streamed (it never holds them), and counts what arrived per path and which client ports
    sent it."""

    daemon_threads = True

    def __init__(self, answer_bytes: int) -> None:
        super().__init__(("127.0.0.1", 0), _CollectorHandler)
        self.answer_bytes = answer_bytes
        self.received: Counter[str] = Counter()
        self.client_ports: dict[str, list[int]] = {}
        self.condition = threading.Condition()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def wait_for(self, path: str, count: int) -> None:
        with self.condition:
            arrived = self.condition.wait_for(lambda: self.received[path] >= count, TIMEOUT)
        assert arrived, f"{count} exports to {path} within {TIMEOUT}s (got {self.received[path]})"


class _CollectorHandler(BaseHTTPRequestHandler):
    server: Collector
    protocol_version = "HTTP/1.1"  # keep-alive, as a real collector

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        with self.server.condition:
            self.server.received[self.path] += 1
            self.server.client_ports.setdefault(self.path, []).append(self.client_address[1])
            self.server.condition.notify_all()
        left = self.server.answer_bytes
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(left))
        self.end_headers()
        try:
            while left > 0:  # bounded: the one answer, then the handler ends
                chunk = _ZEROS[: min(left, len(_ZEROS))]
                self.wfile.write(chunk)
                left -= len(chunk)
        except OSError:  # the exporter stopped reading and closed: what the bound is for
            self.close_connection = True

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def _running(collector: Collector) -> Iterator[Collector]:
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    try:
        yield collector
    finally:
        collector.shutdown()
        collector.server_close()


@pytest.fixture
def huge_collector() -> Iterator[Collector]:
    with _running(Collector(HUGE_ANSWER)) as collector:
        yield collector


@pytest.fixture
def small_collector() -> Iterator[Collector]:
    with _running(Collector(100)) as collector:
        yield collector


def _calls(serve: Serve, session: str, count: int) -> None:
    for index in range(count):
        call = {"session_id": session, "tool_name": "read_file", "args": {"path": f"f{index}"}}
        serve.post("/v1/before_call", call)
        serve.post("/v1/after_call", {**call, "result": "content"})


def _peak_kib(serve: Serve) -> int:
    for line in Path(f"/proc/{serve.process.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


# spans every 0.2 s, metrics every 0.3 s: a few exports of each within a second or two
_QUICK_EXPORTS = {"OTEL_BSP_SCHEDULE_DELAY": "200", "OTEL_METRIC_EXPORT_INTERVAL": "300"}


def test_a_collector_answering_160_mb_bodies_leaves_the_sidecar_small(
    tmp_path: Path, huge_collector: Collector
) -> None:
    serve = start_serve(tmp_path, "--otlp-endpoint", huge_collector.endpoint, env=_QUICK_EXPORTS)
    try:
        for round_ in range(3):
            _calls(serve, f"s{round_}", 3)
            # an exporter sends its next batch only once it is done with the answer to the last one
            huge_collector.wait_for("/v1/traces", round_ + 1)
        huge_collector.wait_for("/v1/metrics", 3)
        peak = _peak_kib(serve)
        assert serve.request("GET", "/healthz")[0] == 200
    finally:
        stop_process(serve.process)
    assert peak < MEMORY_BOUND_KIB, f"peak resident {peak} KiB with {HUGE_ANSWER} byte answers"


def test_a_collector_answering_as_usual_gets_every_span_on_kept_connections(
    tmp_path: Path, small_collector: Collector
) -> None:
    serve = start_serve(tmp_path, "--otlp-endpoint", small_collector.endpoint, env=_QUICK_EXPORTS)
    try:
        for round_ in range(3):
            _calls(serve, f"s{round_}", 2)
            small_collector.wait_for("/v1/traces", round_ + 1)
        small_collector.wait_for("/v1/metrics", 3)
    finally:
        stop_process(serve.process)
    stderr = serve.process.stderr.read().decode() if serve.process.stderr else ""
    assert "export failed" not in stderr
    assert "Failed to export" not in stderr
    # an answer read whole leaves its connection open for the next export
    assert len(set(small_collector.client_ports["/v1/traces"])) == 1
    assert len(set(small_collector.client_ports["/v1/metrics"])) == 1


@pytest.mark.parametrize(
    ("size", "kept"),
    [(0, True), (100, True), (MAX_ANSWER_BYTES, True), (MAX_ANSWER_BYTES + 1, None), (1 << 20, False)],
)
def test_an_answer_is_read_up_to_the_bound_and_a_longer_one_drops_its_connection(
    size: int, kept: bool | None
) -> None:
    with _running(Collector(size)) as collector, bounded_session() as session:
        for _ in range(2):
            response = session.post(f"{collector.endpoint}/v1/traces", data=b"spans", timeout=TIMEOUT)
            assert response.status_code == 200
            assert response.content == bytes(min(size, MAX_ANSWER_BYTES))
    ports = collector.client_ports["/v1/traces"]
    assert len(ports) == 2
    if kept is not None:  # just past the bound, the rest may have come in the same read
        assert (ports[0] == ports[1]) is kept


def test_a_collector_dribbling_its_answer_holds_an_export_no_longer_than_its_timeout() -> None:
    """A byte every 20 ms of a 160 MB answer would take days; the session stops reading at the
    request's timeout (1 s here) and the export goes on with what it read."""
    stop = threading.Event()
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def dribble() -> None:
            connection, _ = listener.accept()
            with connection:
                connection.recv(65536)
                connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % HUGE_ANSWER)
                deadline = time.monotonic() + TIMEOUT  # bounded even if the session never stops
                with_error = False
                while not stop.is_set() and time.monotonic() < deadline and not with_error:
                    try:
                        connection.sendall(b"\0")
                    except OSError:
                        with_error = True
                    time.sleep(0.02)

        thread = threading.Thread(target=dribble, daemon=True)
        thread.start()
        answered: list[int] = []

        def export() -> None:
            with bounded_session() as session:
                answered.append(
                    session.post(f"http://127.0.0.1:{port}/v1/traces", data=b"x", timeout=1).status_code
                )

        exporter = threading.Thread(target=export, daemon=True)
        exporter.start()
        exporter.join(TIMEOUT)
        stopped_by_itself = not exporter.is_alive()
        stop.set()
        thread.join(TIMEOUT)
    assert stopped_by_itself
    assert answered == [200]


def test_a_credential_providers_session_is_left_to_it(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "OTEL_PYTHON_EXPORTER_OTLP_HTTP_CREDENTIAL_PROVIDER",
        "OTEL_PYTHON_EXPORTER_OTLP_HTTP_TRACES_CREDENTIAL_PROVIDER",
    ):
        monkeypatch.delenv(name, raising=False)
    session = exporter_session("TRACES")
    assert session is not None
    with _running(Collector(1 << 20)) as collector, session:
        response = session.post(f"{collector.endpoint}/v1/traces", data=b"spans", timeout=TIMEOUT)
        assert len(response.content) == MAX_ANSWER_BYTES
    monkeypatch.setenv("OTEL_PYTHON_EXPORTER_OTLP_HTTP_TRACES_CREDENTIAL_PROVIDER", "a-provider")
    assert exporter_session("TRACES") is None
    assert exporter_session("METRICS") is not None
