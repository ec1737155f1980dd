"""`otelguard demo`: served /metrics, what it produces, clean exits, and a real Prometheus."""

from __future__ import annotations

import io
import os
import pty
import re
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.e2e import demo_command, free_port, require_binary, run_demo, run_prometheus, wait_until
from tests.test_telemetry_otlp import Receiver

FAMILIES = (
    "otelguard_tool_calls_total",
    "otelguard_decisions_total",
    "otelguard_turns_total",
    "otelguard_cap_hits_total",
    "otelguard_subagent_spawns_total",
    "otelguard_turn_tool_calls_bucket",
    "otelguard_turn_cap_usage_ratio_bucket",
    "otelguard_loop_signature_hits_total",
    "otelguard_internal_errors_total",
    "otelguard_build_info",
)


def series(body: str, name: str) -> list[str]:
    return [line for line in body.splitlines() if line.startswith(f"{name}{{")]


def test_demo_serves_every_family_from_the_first_scrape_and_ends_by_itself(tmp_path: Path) -> None:
    with run_demo(tmp_path, duration=4) as demo:
        body = demo.metrics()
        for family in FAMILIES:
            assert series(body, family), f"{family} has no series on the first scrape"
        for stage in ("before_call", "after_call", "start_turn", "end_turn", "observer"):
            assert f'otelguard_internal_errors_total{{stage="{stage}"}} 0.0' in body
        agents = {m.group(1) for m in re.finditer(r'otelguard_tool_calls_total\{agent="([^"]+)"', body)}
        assert len(agents) >= 3
        assert demo.process.wait(30) == 0
    lines = demo.stdout().splitlines()
    assert len(lines) <= 2, lines  # not a terminal: a start line and a summary line
    assert lines[0].startswith(f"otelguard demo: serving http://127.0.0.1:{demo.port}/metrics")
    assert "halted" in lines[-1]
    assert demo.stderr() == ""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_demo_exits_zero_on_sigint_and_sigterm(tmp_path: Path, signum: int) -> None:
    with run_demo(tmp_path, duration=120) as demo:
        demo.process.send_signal(signum)
        assert demo.process.wait(20) == 0
    assert "Traceback" not in demo.stderr()


def test_demo_with_a_bad_config_exits_2_naming_the_key(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("warn_after:\n  exact_falure: 2\n")
    with run_demo(tmp_path, duration=5, extra_args=("--config", str(config)), wait_for_metrics=False) as demo:
        assert demo.process.wait(30) == 2
    assert "warn_after.exact_falure" in demo.stderr()
    assert len(demo.stderr().strip().splitlines()) == 1


def test_demo_on_a_port_in_use_exits_2_naming_the_port(tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with run_demo(tmp_path, port=port, duration=5, wait_for_metrics=False) as demo:
            assert demo.process.wait(30) == 2
    assert f"otelguard demo: --port {port}: 127.0.0.1:{port} is already in use" in demo.stderr()


def test_demo_honours_config_file(tmp_path: Path) -> None:
    """--config replaces the demo's defaults: with caps off, no cap hits at all."""
    config = tmp_path / "guard.yaml"
    config.write_text(
        "mode: interactive\ncaps:\n  turn: {web_search: 0, subagents: 0}\n  session: {web_search: 0, subagents: 0}\n"
    )
    with run_demo(tmp_path, duration=3, extra_args=("--config", str(config), "--rate", "200")) as demo:
        assert demo.process.wait(30) == 0
    assert "cap_turn" not in demo.stdout() and "cap_session" not in demo.stdout()
    assert "_block" not in demo.stdout()  # interactive: loop detectors only warn


def test_demo_live_table_on_a_terminal(tmp_path: Path) -> None:
    master, slave = pty.openpty()
    port = free_port()
    process = subprocess.Popen(
        [*demo_command(), "--duration", "3", "--port", str(port)], stdout=slave, stderr=slave, stdin=slave
    )
    os.close(slave)
    output = b""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
        elif process.poll() is not None:
            break
    os.close(master)
    assert process.wait(30) == 0
    text = output.decode(errors="replace")
    assert "latest decisions" in text and "decisions by code" in text


def test_demo_exports_spans_over_otlp_when_the_variables_are_set(tmp_path: Path) -> None:
    receiver = Receiver()
    thread = threading.Thread(target=receiver.serve_forever, daemon=True)
    thread.start()
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.server_address[1]}"}
    try:
        with run_demo(tmp_path, duration=2, env=env) as demo:
            assert demo.process.wait(30) == 0
        spans = receiver.spans()
        assert spans, "no spans reached the OTLP receiver"
        assert {resource["service.name"] for resource, _ in spans} == {"otelguard-demo"}
        names = {span.name for _, span in spans}
        assert any(name.startswith("execute_tool ") for name in names)
        assert any(name.startswith("invoke_agent ") for name in names)
    finally:
        receiver.shutdown()
        receiver.server_close()


@pytest.mark.e2e
def test_real_prometheus_scrapes_the_demo_with_exemplars(tmp_path: Path) -> None:
    """Within 30 s the demo has hit both turn caps, halted a turn and made >= 6 codes."""
    promtool = require_binary("promtool")
    with run_demo(tmp_path, duration=120) as demo, run_prometheus(tmp_path, [demo.target]) as prom:
        started = time.time()

        def has_data(expr: str) -> bool:
            return any(float(r["value"][1]) > 0 for r in prom.query(expr))

        for expr in (
            "otelguard_tool_calls_total",
            "otelguard_decisions_total",
            'otelguard_cap_hits_total{cap="web_search"}',
            'otelguard_cap_hits_total{cap="subagents"}',
            'otelguard_turns_total{outcome="halted"}',
            "count(count by (code) (otelguard_decisions_total > 0)) >= 6",
        ):
            wait_until(lambda expr=expr: has_data(expr), 35, what=f"data for {expr}")

        def exemplars() -> list[dict[str, str]]:
            body = prom.api(
                "/api/v1/query_exemplars",
                query="otelguard_decisions_total",
                start=str(started - 60),
                end=str(time.time() + 5),
            )
            return [e["labels"] for series in body["data"] for e in series["exemplars"]]

        found = wait_until(exemplars, 20, what="exemplars from /api/v1/query_exemplars")
        assert all(len(e["trace_id"]) == 32 and len(e["span_id"]) == 16 for e in found)

        check = subprocess.run(
            [promtool, "check", "metrics"], input=demo.metrics().encode(), capture_output=True, timeout=30
        )
        assert check.returncode == 0, check.stdout + check.stderr
        demo.process.send_signal(signal.SIGTERM)
        assert demo.process.wait(20) == 0


def test_demo_metrics_have_no_created_samples_and_few_zero_series(tmp_path: Path) -> None:
    with run_demo(tmp_path, duration=6, extra_args=("--seed", "1")) as demo:
        body = demo.metrics()
    samples = [line for line in body.splitlines() if line and not line.startswith("#")]
    assert not [line for line in samples if "_created" in line]
    tool_calls = series(body, "otelguard_tool_calls_total")
    zeros = [line for line in tool_calls if line.endswith(" 0.0")]
    # only each tool's `ok` series is primed: a refused, failed or cancelled series is a real count
    assert all('outcome="ok"' in line for line in zeros), zeros
    assert len(zeros) <= len(tool_calls) // 2 + 24, (len(zeros), len(tool_calls))
    # what the alerts read from the first scrape: every turn outcome and each cap's hits, at 0 or more
    agents = {m.group(1) for m in re.finditer(r'otelguard_turns_total\{agent="([^"]+)"', body)}
    for agent in agents:
        for outcome in ("completed", "halted", "errored"):
            assert f'otelguard_turns_total{{agent="{agent}",outcome="{outcome}"}}' in body
        for cap in ("web_search", "subagents"):
            assert f'otelguard_cap_hits_total{{agent="{agent}",cap="{cap}",scope="turn"}}' in body
    assert len(samples) < 600, len(samples)


def test_importing_otelguard_leaves_created_samples_to_the_user() -> None:
    probe = (
        "import prometheus_client.metrics as m, otelguard, otelguard.telemetry;"
        "from otelguard import Guard; Guard(telemetry=True); print(m._use_created)"
    )
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert run.stdout.strip() == "True", run.stderr


def test_the_latest_decisions_show_a_count_past_its_threshold_as_such() -> None:
    """A warning keeps counting after the threshold it fired at: the live table shows the count and
    the threshold in columns of their own, never as a fraction over 1 such as 3/2."""
    from rich.console import Console

    from otelguard import Guard, GuardConfig
    from otelguard.cli.demo import _render
    from otelguard.demo.simulation import DemoStats

    guard = Guard(GuardConfig(mode="unattended", signature_key="demo"))
    guard.start_turn()
    for number in range(3):
        guard.before_call("read_file", {"path": "a"}, call_id=f"c{number}")
        decision = guard.after_call("read_file", {"path": "a"}, "same", failed=False, call_id=f"c{number}")
    assert (decision.code, decision.count, decision.limit) == ("no_progress_warn", 3, 2)
    stats = DemoStats()
    stats.record_decision("researcher-1", "rereading_file", decision)
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(_render("http://127.0.0.1:9464/metrics", "recorded", stats))
    text = console.export_text()
    assert "3/2" not in text
    [header] = [line for line in text.splitlines() if "scenario" in line]
    assert [cell.strip() for cell in header.split("┃")[-3:-1]] == ["count", "threshold"]
    [row] = [line for line in text.splitlines() if "no_progress_warn" in line and "researcher-1" in line]
    assert [cell.strip() for cell in row.split("│")[-3:-1]] == ["3", "2"]
