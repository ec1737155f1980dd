"""A collector-only deployment, end to end: a real ``otelguard serve --otlp-endpoint`` process sends
spans, the OpenTelemetry metrics and the evaluation events to an OTLP/HTTP receiver on loopback
(opentelemetry-proto decodes what arrives), and one scripted run gives the same counts over OTLP as
on its ``/metrics``."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e import free_port, http_get
from tests.test_cli_serve import TIMEOUT, Serve, start_serve
from tests.test_telemetry_otlp import Receiver

CANARY = "CANARY-OTLP-3e9b"

# OTel counter -> (its attribute keys, the Prometheus family, its labels), in the same order
PAIRS = {
    "otelguard.tool_calls": (
        ("gen_ai.agent.name", "gen_ai.tool.name", "otelguard.outcome"),
        "otelguard_tool_calls_total",
        ("agent", "tool", "outcome"),
    ),
    "otelguard.decisions": (
        ("gen_ai.agent.name", "gen_ai.tool.name", "otelguard.decision.action", "otelguard.decision.code"),
        "otelguard_decisions_total",
        ("agent", "tool", "action", "code"),
    ),
    "otelguard.turns": (
        ("gen_ai.agent.name", "otelguard.turn.outcome"),
        "otelguard_turns_total",
        ("agent", "outcome"),
    ),
}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def scripted_run(serve: Serve) -> None:
    """Allowed, failed, refused and blocked calls; a turn cap that rejects, a loop that warns and
    blocks; completed, halted and errored turns; two agents."""
    for session, agent in (("s1", "planner"), ("s2", "coder")):
        serve.post("/v1/start_turn", {"session_id": session, "agent": agent})
        for index in range(4):  # the turn cap is 2 searches
            call = {"session_id": session, "tool_name": "web_search", "args": {"q": f"{CANARY} {index}"}}
            if serve.post("/v1/before_call", call)["action"] == "allow":
                serve.post("/v1/after_call", {**call, "result": f"{CANARY} result"})
        serve.post("/v1/end_turn", {"session_id": session})
        serve.post("/v1/start_turn", {"session_id": session, "agent": agent})
        for _ in range(6):  # the same failing command: warns, then blocks
            call = {"session_id": session, "tool_name": "terminal", "args": {"cmd": CANARY}}
            if serve.post("/v1/before_call", call)["action"] == "allow":
                serve.post("/v1/after_call", {**call, "result": f"Error: {CANARY}", "failed": True})
        call = {"session_id": session, "tool_name": "write_file", "args": {"path": CANARY}}
        serve.post("/v1/before_call", call)
        serve.post("/v1/after_call", {**call, "result": CANARY, "refusal": "permission_denied"})
        serve.post("/v1/end_turn", {"session_id": session, "errored": True})
        serve.post("/v1/start_turn", {"session_id": session, "agent": agent})
        call = {"session_id": session, "tool_name": "read_file", "args": {"path": CANARY}}
        serve.post("/v1/before_call", call)
        serve.post("/v1/after_call", {**call, "result": "content"})
        serve.post("/v1/end_turn", {"session_id": session})


def prometheus_counts(serve: Serve) -> dict[str, Counter[tuple[str, ...]]]:
    text = http_get(f"http://127.0.0.1:{serve.port}/metrics").decode()
    counts: dict[str, Counter[tuple[str, ...]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            for _otel, (_keys, name, labels) in PAIRS.items():
                if sample.name == name and sample.value:
                    key = tuple(sample.labels[label] for label in labels)
                    counts.setdefault(name, Counter())[key] += int(sample.value)
    return counts


def last_metrics(requests: list[ExportMetricsServiceRequest]) -> dict[str, Any]:
    """Metric name -> the metric as last exported (cumulative: the last export holds every count)."""
    found: dict[str, Any] = {}
    for request in requests:
        for resource_metrics in request.resource_metrics:
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    found[metric.name] = metric
    return found


def attributes(point: Any) -> dict[str, str]:
    return {a.key: a.value.string_value for a in point.attributes}


def test_otlp_carries_the_same_counts_as_metrics(tmp_path: Path, receiver: Receiver) -> None:
    endpoint = f"http://127.0.0.1:{receiver.server_address[1]}"
    # an export only at shutdown: the receiver sees one cumulative export, after the scrape below
    serve = start_serve(tmp_path, "--otlp-endpoint", endpoint, env={"OTEL_METRIC_EXPORT_INTERVAL": "600000"})
    try:
        scripted_run(serve)
        expected = prometheus_counts(serve)
        serve.process.send_signal(signal.SIGTERM)
        assert serve.process.wait(TIMEOUT) == 0  # shutdown exports the metrics and flushes the spans
    finally:
        if serve.process.poll() is None:
            serve.process.kill()
    stderr = serve.process.stderr.read().decode() if serve.process.stderr else ""
    assert f"spans and metrics over OTLP to {endpoint}" in stderr

    assert set(receiver.paths) == {"/v1/traces", "/v1/metrics"}
    exported = last_metrics(receiver.metric_requests)
    for otel_name, (keys, family, _labels) in PAIRS.items():
        metric = exported[otel_name]
        assert metric.sum.is_monotonic
        counted: Counter[tuple[str, ...]] = Counter()
        for point in metric.sum.data_points:
            values = attributes(point)
            counted[tuple(values[key] for key in keys)] += point.as_int
        assert counted == expected[family], otel_name
    actions = {key[2] for key in expected["otelguard_decisions_total"]}
    assert {"warn", "reject", "block"} <= actions
    outcomes = {key[2] for key in expected["otelguard_tool_calls_total"]}
    assert {"ok", "failed", "refused", "blocked"} <= outcomes

    ran = sum(n for key, n in expected["otelguard_tool_calls_total"].items() if key[2] in ("ok", "failed"))
    durations = exported["gen_ai.execute_tool.duration"]
    assert durations.unit == "s"
    assert sum(p.count for p in durations.histogram.data_points) == ran
    per_turn = exported["gen_ai.invoke_agent.tool_calls"]
    assert per_turn.unit == "{tool_call}"
    assert sum(p.count for p in per_turn.histogram.data_points) == sum(
        expected["otelguard_turns_total"].values()
    )

    # spans with the evaluation events: one per non-allow decision, as /metrics counts them
    spans = [span for _, span in receiver.spans()]
    evaluations = [e for span in spans for e in span.events if e.name == "gen_ai.evaluation.result"]
    assert len(evaluations) == sum(expected["otelguard_decisions_total"].values())
    for event in evaluations:
        values = attributes(event)
        assert values["gen_ai.evaluation.name"] == "otelguard"
        assert values["gen_ai.evaluation.score.label"] in actions
    everything = b"".join(r.SerializeToString() for r in [*receiver.requests, *receiver.metric_requests])
    assert CANARY.encode() not in everything


@pytest.mark.parametrize("url", ["127.0.0.1:4318", "ftp://collector", "http://"])
def test_a_bad_otlp_endpoint_is_exit_2_naming_the_flag(tmp_path: Path, url: str) -> None:
    (tmp_path / "c.yaml").write_text("mode: unattended\n")
    done = subprocess.run(
        [sys.executable, "-m", "otelguard", "serve", "--port", "0", "--config", str(tmp_path / "c.yaml"),
         "--otlp-endpoint", f"{url}/secret-token"],
        capture_output=True, timeout=TIMEOUT, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.decode().startswith("otelguard serve: --otlp-endpoint: expected")
    assert b"secret-token" not in done.stderr


def test_an_unreachable_collector_is_said_once_and_shutdown_is_quiet(tmp_path: Path) -> None:
    """A closed loopback port as the collector: spans and metrics fail to export again and again, and
    SIGTERM shuts the exporters down. stderr gets one line about it, naming the collector and nothing
    it was sent, none of the SDK's lines about each attempt and retry, and no second shutdown."""
    endpoint = f"http://127.0.0.1:{free_port()}"
    frequent = {"OTEL_METRIC_EXPORT_INTERVAL": "200", "OTEL_BSP_SCHEDULE_DELAY": "100"}
    serve = start_serve(tmp_path, "--otlp-endpoint", f"{endpoint}/path-token", env=frequent)
    lines: list[str] = []
    told = threading.Event()

    def read(stream: IO[bytes]) -> None:
        for raw in stream:
            lines.append(raw.decode(errors="replace").rstrip("\n"))
            if "did not take" in lines[-1]:
                told.set()

    assert serve.process.stderr is not None
    reader = threading.Thread(target=read, args=(serve.process.stderr,), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 120
        while not told.is_set() and time.monotonic() < deadline:  # an export fails after its retries
            scripted_run(serve)
            told.wait(1)
        assert told.is_set(), lines
        scripted_run(serve)  # spans for the exports after the line, and for the shutdown's flush
        serve.process.send_signal(signal.SIGTERM)
        assert serve.process.wait(TIMEOUT) == 0
    finally:
        if serve.process.poll() is None:
            serve.process.kill()
    reader.join(TIMEOUT)
    [said] = [line for line in lines if "did not take" in line]
    assert said.startswith(f"otelguard: the OTLP collector at {endpoint} did not take the exported ")
    assert "path-token" not in said and CANARY not in "\n".join(lines)
    assert not [line for line in lines if not line.startswith("otelguard")], lines  # no SDK line
    assert len(lines) == 3, lines  # where OTLP goes, where it listens, and the collector's line
