"""`serve_metrics`: loopback by default, OpenMetrics on request, TLS, multi-process, bad input."""

from __future__ import annotations

import gzip
import os
import socket
import ssl
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry

from otelguard import ConfigError, Guard, GuardConfig
from otelguard.serving.http_server import HttpServer, Response, ServerLimits
from otelguard.serving.metrics_server import render, serve_metrics
from otelguard.telemetry import Telemetry
from tests.e2e import free_port, http_get, self_signed_certificate

OPENMETRICS = "application/openmetrics-text; version=1.0.0"


def registry_with_a_decision() -> CollectorRegistry:
    registry = CollectorRegistry()
    guard = Guard(
        GuardConfig(signature_key="k"), Telemetry(TracerProvider(), registry, span_mode="own"), agent="x"
    )
    for _ in range(2):
        args = {"c": "make"}
        guard.before_call("terminal", args)
        guard.after_call("terminal", args, "Error", failed=True)
    return registry


def test_render_chooses_openmetrics_only_when_asked() -> None:
    registry = registry_with_a_decision()
    text, text_type = render(registry, "")
    assert text_type.startswith("text/plain")
    assert b"otelguard_decisions_total" in text and b"# {" not in text
    body, content_type = render(registry, OPENMETRICS)
    assert content_type.startswith("application/openmetrics-text")
    assert body.endswith(b"# EOF\n")
    assert b'# {span_id="' in body  # exemplars need OpenMetrics


def test_serves_metrics_on_loopback_by_default() -> None:
    registry = registry_with_a_decision()
    with serve_metrics(port=0, registry=registry) as server:
        assert server.addr == "127.0.0.1"
        assert server.url == f"http://127.0.0.1:{server.port}/metrics"
        assert b"otelguard_build_info" in http_get(server.url)
        assert b"# EOF" in http_get(server.url, headers={"Accept": OPENMETRICS})
        assert gzip.decompress(http_get(server.url, headers={"Accept-Encoding": "gzip"})).startswith(
            b"# HELP"
        )
        with pytest.raises(urllib.error.HTTPError) as info:
            http_get(server.url.replace("/metrics", "/nope"))
        assert info.value.code == 404


def test_shutdown_stops_serving() -> None:
    server = serve_metrics(port=0, registry=CollectorRegistry())
    url = server.url
    server.shutdown()
    with pytest.raises(OSError):
        http_get(url, timeout=2)


def test_port_in_use_is_a_clear_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(ConfigError, match=rf"port: {port}.*already in use") as info:
            serve_metrics(port=port, registry=CollectorRegistry())
        assert info.value.key == "port"


def test_bad_port_and_address_are_clear_errors() -> None:
    with pytest.raises(ConfigError, match="port"):
        serve_metrics(port=70000, registry=CollectorRegistry())
    with pytest.raises(ConfigError, match=r"addr: '203\.0\.113\.7'"):
        serve_metrics(port=0, addr="203.0.113.7", registry=CollectorRegistry())


def test_unreadable_or_invalid_certificate_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "missing.pem"
    with pytest.raises(ConfigError, match=r"certfile: .*missing\.pem.*readable") as info:
        serve_metrics(port=0, registry=CollectorRegistry(), certfile=str(missing))
    assert info.value.key == "certfile"
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate")
    with pytest.raises(ConfigError, match=r"certfile: .*garbage\.pem.*PEM certificate"):
        serve_metrics(port=0, registry=CollectorRegistry(), certfile=str(garbage))
    with pytest.raises(ConfigError, match="keyfile"):
        serve_metrics(port=0, registry=CollectorRegistry(), keyfile=str(garbage))


@pytest.fixture
def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    return self_signed_certificate(tmp_path)


def test_tls_serves_https_and_refuses_plain_http(self_signed: tuple[Path, Path]) -> None:
    cert, key = self_signed
    with serve_metrics(
        port=0, registry=registry_with_a_decision(), certfile=str(cert), keyfile=str(key)
    ) as server:
        assert server.url.startswith("https://127.0.0.1:")
        context = ssl.create_default_context(cafile=str(cert))
        with urllib.request.urlopen(server.url, context=context, timeout=5) as response:
            assert b"otelguard_decisions_total" in response.read()
        with pytest.raises(OSError):  # a plain-HTTP scrape gets no metrics
            http_get(server.url.replace("https://", "http://"), timeout=5)
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):  # untrusted: refused
            urllib.request.urlopen(server.url, context=ssl.create_default_context(), timeout=5)


def test_a_tls_client_that_never_speaks_is_cut_off_at_the_handshake_deadline(
    self_signed: tuple[Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    """The handshake of an accepted connection has its deadline, and a client cut off there frees its
    place and logs nothing; a client that speaks is served all the while."""
    cert, key = self_signed
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    limits = ServerLimits(handshake_timeout_seconds=0.3, max_connections=4)
    with HttpServer(lambda request: Response(200, b"ok"), tls=context, limits=limits) as server:
        silent = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(4)]
        for sock in silent:
            assert sock.recv(1) == b""  # closed by the server at its deadline, before the 10 s timeout
            sock.close()
        client = ssl.create_default_context(cafile=str(cert))
        with urllib.request.urlopen(
            f"https://127.0.0.1:{server.port}/", context=client, timeout=10
        ) as answer:
            assert answer.read() == b"ok"
        assert not server.starting
    assert not [record for record in caplog.records if record.levelno >= 30]


WORKER = textwrap.dedent(
    """
    import sys
    from otelguard import Guard, GuardConfig
    from otelguard.telemetry import Telemetry

    guard = Guard(GuardConfig(mode="unattended", signature_key="k"), Telemetry(), agent="worker")
    for i in range(int(sys.argv[1])):
        args = {"path": f"file-{i}"}
        guard.before_call("read_file", args)
        guard.after_call("read_file", args, "content")
    for _ in range(13):  # 5 failures, 7 rejects, the block
        args = {"command": "make"}
        if guard.before_call("terminal", args).allows_execution:
            guard.after_call("terminal", args, "Error", failed=True)
    guard.end_turn()
    """
)


def test_multiprocess_workers_are_summed_by_one_metrics_endpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    multiproc_dir = tmp_path / "multiproc"
    multiproc_dir.mkdir()
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(multiproc_dir)}
    workers = [subprocess.Popen([sys.executable, "-c", WORKER, str(n)], env=env) for n in (3, 5, 7)]
    assert [w.wait(60) for w in workers] == [0, 0, 0]
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(multiproc_dir))
    with serve_metrics(port=free_port()) as server:
        body = http_get(server.url).decode()
    lines = set(body.splitlines())
    assert 'otelguard_tool_calls_total{agent="worker",outcome="ok",tool="read_file"} 15.0' in lines
    assert 'otelguard_tool_calls_total{agent="worker",outcome="blocked",tool="terminal"} 3.0' in lines
    assert 'otelguard_tool_calls_total{agent="worker",outcome="rejected",tool="terminal"} 21.0' in lines
    assert 'otelguard_turns_total{agent="worker",outcome="halted"} 3.0' in lines
    assert 'otelguard_internal_errors_total{stage="observer"} 0.0' in lines
    assert any(line.startswith('otelguard_build_info{version="') and line.endswith(" 1.0") for line in lines)
    assert "pid=" not in body


def test_a_missing_multiprocess_directory_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path / "missing"))
    with pytest.raises(ConfigError) as exc:
        serve_metrics(port=0)
    assert exc.value.key == "PROMETHEUS_MULTIPROC_DIR"
