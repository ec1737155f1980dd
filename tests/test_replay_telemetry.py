"""`otelguard replay` telemetry: --pushgateway against a real Pushgateway, --serve scraped once.

The metrics must agree with the report: the same decisions by code, one tool-call sample per call
the guard saw (calls after a would-be halt never reach it), one halted turn per halt.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from otelguard.cli import main
from tests.e2e import free_port, get_json, http_get, require_binary, stop_process, wait_until

FIXTURES = Path(__file__).parent / "fixtures" / "replay"
UNATTENDED = str(FIXTURES / "unattended.yaml")
REPLAY = [sys.executable, "-m", "otelguard.cli", "replay"]


@pytest.fixture
def pushgateway(tmp_path: Path) -> Iterator[str]:
    binary = require_binary("prometheus-pushgateway")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with (tmp_path / "pushgateway.log").open("wb") as log:
        process = subprocess.Popen(
            [binary, f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT
        )
    try:
        wait_until(lambda: http_get(f"{url}/-/ready"), 30, what="pushgateway ready")
        yield url
    finally:
        stop_process(process)


def check_metrics_match_report(samples: list[tuple[str, dict[str, str], float]], doc: dict[str, Any]) -> None:
    totals = doc["totals"]
    decisions: Counter[str] = Counter()
    calls = refused = halted = 0.0
    for name, labels, value in samples:
        if name == "otelguard_decisions_total":
            decisions[labels["code"]] += int(value)
            assert labels["agent"] == "replay"
        elif name == "otelguard_tool_calls_total":
            calls += value
            if labels["outcome"] in ("blocked", "rejected"):
                refused += value
        elif name == "otelguard_turns_total" and labels["outcome"] == "halted":
            halted += value
    assert +decisions == Counter(totals["decisions"])
    # a call refused at before_call reached the guard (and its metrics) and is also prevented
    assert refused > 0
    assert calls == totals["tool_calls"] - totals["prevented_calls"] + refused
    assert halted == totals["halts"]


def test_pushgateway_receives_the_replay_metrics(
    pushgateway: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "replay",
            str(FIXTURES),
            "--config",
            UNATTENDED,
            "--pushgateway",
            pushgateway,
            "--job",
            "replay_test",
            "--json",
        ]
    )
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    assert doc["totals"]["halts"] == 15
    body = get_json(f"{pushgateway}/api/v1/metrics")
    assert body["status"] == "success"
    [group] = [g for g in body["data"] if g["labels"].get("job") == "replay_test"]
    samples = [
        (name, metric["labels"], float(metric["value"]))
        for name, family in group.items()
        if isinstance(family, dict) and "metrics" in family
        for metric in family["metrics"]
        if "value" in metric
    ]
    assert any(
        name == "otelguard_cap_hits_total" and labels["cap"] == "web_search" for name, labels, _ in samples
    )
    check_metrics_match_report(samples, doc)


def test_push_to_an_unreachable_gateway_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    code = main(["replay", str(FIXTURES / "openai"), "--pushgateway", url, "--json"])
    captured = capsys.readouterr()
    assert code == 1
    assert json.loads(captured.out)["totals"]["sessions"] == 6  # the report is still printed
    assert f"push to {url} failed" in captured.err


def test_serve_exposes_the_replay_metrics_until_sigterm(tmp_path: Path) -> None:
    port = free_port()
    process = subprocess.Popen(
        [*REPLAY, str(FIXTURES), "--config", UNATTENDED, "--serve", str(port), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        # the server starts before the replay; the report is printed when the replay is done
        wait_until(lambda: b"otelguard_turns_total" in http_get(url), 30, what="/metrics")
        wait_until(lambda: _turns(http_get(url).decode()) == 23, 30, what="every turn on /metrics")
        body = http_get(url).decode()
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err
    doc = json.loads(out)
    samples = [
        (s.name, s.labels, s.value) for family in text_string_to_metric_families(body) for s in family.samples
    ]
    check_metrics_match_report(samples, doc)


def _turns(body: str) -> float:
    return sum(
        s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
        if s.name == "otelguard_turns_total"
    )
