"""Nothing raw leaves the process: canaries in args, results, error texts and refusal texts
never appear in spans, events, attributes, metric samples, labels, exemplars, /metrics or logs."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from otelguard import Decision, Guard, GuardConfig
from otelguard.serving.metrics_server import serve_metrics
from otelguard.telemetry import Telemetry
from tests.e2e import http_get

CANARIES = {
    "arg": "CANARY-ARG-7f3a",
    "nested_arg": "CANARY-NESTED-19cd",
    "json_arg": "CANARY-JSONSTR-55e0",
    "result": "CANARY-RESULT-b2c4",
    "error": "CANARY-ERROR-d9e1",
    "refusal_text": "CANARY-REFUSAL-0a6b",
    "refusal_category": "CANARY-CATEGORY-6c2f",
    "exception": "CANARY-EXCEPTION-44aa",
}


class ExplodingResult:
    """A result whose text raises with a canary in the message (the guard must log the type only)."""

    def __str__(self) -> str:
        raise ValueError(CANARIES["exception"])

    __repr__ = __str__


class ExplodingObserver:
    """An observer bug whose exception message carries a canary: the guard logs the type only."""

    def on_turn_start(self, turn: Any) -> None: ...

    def on_call_start(self, call: Any) -> object:
        raise RuntimeError(CANARIES["exception"])

    def on_call_end(self, call: Any, token: object) -> None: ...

    def on_turn_end(self, summary: Any) -> None: ...

    def on_internal_error(self, stage: str) -> None: ...


def run_leaky_session(guard: Guard, host_tracer: Any) -> list[Decision]:
    """Every path: allow, warns, blocks, halts, refusals (category and free text), caps, cycles,
    repeated errors across tools, cancelled calls."""
    decisions: list[Decision] = []

    def call(tool: str, args: Any, result: Any, **kw: Any) -> None:
        decision = guard.before_call(tool, args)
        decisions.append(decision)
        if decision.allows_execution:
            decisions.append(guard.after_call(tool, args, result, **kw))

    c = CANARIES
    guard.start_turn(turn_id="turn-1")
    for _ in range(13):  # five failures, seven rejects, a block
        call("terminal", {"command": f"pytest {c['arg']}", "env": {"X": c["nested_arg"]}},
             f"Error: {c['error']}", failed=True)  # fmt: skip
    guard.start_turn(turn_id="turn-2")
    for i in range(7):
        call("write_file", {"path": f"/{c['arg']}/{i}"}, f"{c['refusal_text']}: permission denied",
             refusal="permission_denied")  # fmt: skip
    guard.start_turn(turn_id="turn-3")
    call(
        "write_file", {"path": c["arg"]}, c["refusal_text"], refusal=f"denied because {c['refusal_category']}"
    )
    for _ in range(6):
        call("read_file", f'{{"path": "{c["json_arg"]}"}}', f"{c['result']} same content")
    guard.start_turn(turn_id="turn-4")
    for i in range(8):
        call("browser_navigate", {"url": c["arg"]}, {"title": c["result"], "i": i})
        call("browser_click", {"ref": c["nested_arg"]}, {"ok": c["result"], "i": i})
    guard.start_turn(turn_id="turn-5")
    for i in range(60):
        call("web_search", {"query": f"{c['arg']} {i}"}, c["result"])
    guard.start_turn(turn_id="turn-6")
    for i in range(12):
        call("delegate_task", {"tasks": [f"{c['arg']} {i}"] * 5}, f"{c['result']} {i}")
    guard.start_turn(turn_id="turn-7")
    with host_tracer.start_as_current_span("host tool span"):
        for i in range(3):  # the third failure of the tool warns, on the host's span
            call("web_fetch", {"url": f"{c['arg']}{i}"}, f"Error: {c['error']}", failed=True)
        call("web_fetch", {"url": c["arg"]}, ExplodingResult(), failed=None)
    call("read_file", {"path": c["arg"]}, ExplodingResult())
    guard.start_turn(turn_id="turn-8")
    for i in range(6):  # the very same error from different tools: same_error warns, then halts
        call(f"editor_{i}", {"file_path": f"/{c['arg']}/{i}"}, f"Error: {c['error']}", failed=True)
    guard.start_turn(turn_id="turn-9")
    call("Read", {"file_path": c["arg"]}, f"{c['result']} cancelled", failed=True, cancelled=True)
    guard.end_turn()
    return decisions


def span_texts(span: ReadableSpan) -> Iterator[str]:
    yield span.name
    yield str(span.status.description)
    for key, val in (span.attributes or {}).items():
        yield f"{key}={val}"
    for event in span.events:
        yield event.name
        for key, val in (event.attributes or {}).items():
            yield f"{key}={val}"
    for link in span.links:
        yield str(link.attributes)


def metric_texts(registry: CollectorRegistry) -> Iterator[str]:
    for metric in registry.collect():
        yield metric.name
        yield metric.documentation
        for sample in metric.samples:
            yield sample.name
            yield repr(sample.labels)
            yield repr(sample.value)
            if sample.exemplar is not None:
                yield repr(sample.exemplar.labels)


def otel_metric_texts(reader: InMemoryMetricReader) -> Iterator[str]:
    """Every name, attribute and exemplar attribute of the OTel metrics (``otel_metrics: true``)."""
    data = reader.get_metrics_data()
    assert data is not None
    for resource_metrics in data.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                yield metric.name
                yield metric.description
                for point in metric.data.data_points:
                    yield repr(dict(point.attributes or {}))
                    for exemplar in point.exemplars or ():
                        yield repr(dict(exemplar.filtered_attributes or {}))


@pytest.mark.parametrize("span_mode", ["own", "auto", "event", "decisions"])
def test_no_canary_leaves_the_process(span_mode: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    registry = CollectorRegistry()
    config = GuardConfig.from_mapping(
        {
            "mode": "unattended",
            "signature_key": "k",
            "telemetry": {"span_mode": span_mode, "turn_spans": True, "otel_metrics": True},
        }
    )
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    telemetry = Telemetry(provider, registry, meter_provider=meter_provider)
    guard = Guard(config, telemetry, agent="leak-test", observers=[ExplodingObserver()])
    decisions = run_leaky_session(guard, provider.get_tracer("host"))

    spans = exporter.get_finished_spans()
    exported: list[str] = [text for span in spans for text in span_texts(span)]
    exported += list(metric_texts(registry))
    exported += list(otel_metric_texts(reader))
    with serve_metrics(port=0, registry=registry) as server:
        for accept in ("", "application/openmetrics-text; version=1.0.0"):
            exported.append(http_get(server.url, headers={"Accept": accept}).decode())
    exported += [record.getMessage() for record in caplog.records]
    exported += [str(record.args) for record in caplog.records]
    blob = "\n".join(exported)

    # the scan must have covered something real on every channel
    codes = {d.code for d in decisions}
    assert {"exact_failure_block", "refusal_halt", "cycle_warn", "cap_turn", "no_progress_warn"} <= codes
    assert {"same_error_warn", "same_error_halt"} <= codes and 'outcome="cancelled"' in blob
    assert len(spans) >= 1 and "otelguard_decisions_total" in blob and "# {" in blob
    assert "otelguard.decisions" in blob and "gen_ai.execute_tool.duration" in blob
    assert "gen_ai.evaluation.result" in blob and "gen_ai.evaluation.explanation=" in blob
    assert any(r.name == "otelguard" for r in caplog.records)
    assert registry.get_sample_value("otelguard_internal_errors_total", {"stage": "observer"})
    for name, canary in CANARIES.items():
        assert canary not in blob, f"{name} canary leaked"
        assert canary.lower() not in blob.lower()
    for decision in decisions:  # decision messages are for the model only
        if decision.message:
            assert decision.message not in blob
