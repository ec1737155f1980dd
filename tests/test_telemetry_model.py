"""Model calls in the telemetry: ``otelguard_model_calls_total`` by outcome, ``otelguard_model_tokens_total``
by kind, model decisions under tool ``model`` (token cap hits under ``cap="tokens"``), the current GenAI
``chat`` span annotated, the OTel metrics alike, all within the label bounds; fed the model events the
guard hands its observers."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer
from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics

from otelguard import Guard, GuardConfig
from otelguard.config.telemetry import TelemetrySettings
from otelguard.core.decisions import Decision
from otelguard.core.observers import GuardObserver, ModelEvent
from otelguard.serving.metrics_server import serve_metrics
from otelguard.telemetry import Telemetry
from tests.e2e import http_get
from tests.test_telemetry_leak import metric_texts, otel_metric_texts, span_texts
from tests.test_telemetry_otel_metrics import metric_points, otel_sums, prom_sums

ALLOW = Decision("allow", "allow", tool_name="model")


class Rig:
    """A ``Telemetry`` on its own providers and registry, bound as a guard binds it."""

    def __init__(self, span_mode: str = "auto", **settings: Any) -> None:
        self.exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer: Tracer = provider.get_tracer("host")
        self.registry = CollectorRegistry()
        self.reader = InMemoryMetricReader()
        self.telemetry = Telemetry(
            provider, self.registry, meter_provider=MeterProvider(metric_readers=[self.reader])
        )
        self.observer: GuardObserver = self.telemetry.bind(
            TelemetrySettings(span_mode=span_mode, otel_metrics=True, **settings)
        )

    def value(self, name: str, **labels: str) -> float | None:
        return self.registry.get_sample_value(name, labels)

    def spans(self) -> dict[str, ReadableSpan]:
        return {span.name: span for span in self.exporter.get_finished_spans()}


def after(agent: str = "coder", decision: Decision = ALLOW, **fields: Any) -> ModelEvent:
    fields.setdefault("outcome", "no_tool_call")
    return ModelEvent(agent=agent, turn_id="t1", decision=decision, **fields)


def before(agent: str = "coder", decision: Decision = ALLOW) -> ModelEvent:
    return ModelEvent(agent=agent, turn_id="t1", decision=decision)


NO_ACTION_WARN = Decision("warn", "no_action_warn", "Call a tool.", tool_name="model", count=3, limit=3)
REPEATED_HALT = Decision("halt", "repeated_reply_halt", "Stop.", tool_name="model", count=4, limit=4)


def token_cap(code: str, action: str = "block") -> Decision:
    return Decision(action, code, "spent", tool_name="model", count=1000, limit=1000, cap="tokens")  # type: ignore[arg-type]


def test_model_calls_are_counted_by_outcome_at_the_reply_only() -> None:
    rig = Rig()
    rig.observer.on_model_call(before())  # the request: not a model call counted yet
    assert rig.value("otelguard_model_calls_total", agent="coder", outcome="no_tool_call") == 0
    rig.observer.on_model_call(after(outcome="tool_calls", tool_calls=2))
    rig.observer.on_model_call(before())
    rig.observer.on_model_call(after(outcome="invalid_tool_call", invalid_tool_calls=1))
    rig.observer.on_model_call(after(outcome="no_tool_call"))
    rig.observer.on_model_call(after(outcome="no_tool_call"))
    for outcome, count in (("tool_calls", 1), ("invalid_tool_call", 1), ("no_tool_call", 2)):
        assert rig.value("otelguard_model_calls_total", agent="coder", outcome=outcome) == count
    # nothing counted as a tool call or a decision: every event here was allowed
    assert (
        rig.value(
            "otelguard_decisions_total", agent="coder", tool="model", action="warn", code="no_action_warn"
        )
        is None
    )


def test_tokens_are_counted_by_kind_and_unreported_usage_charges_nothing() -> None:
    rig = Rig()
    rig.observer.on_model_call(after(input_tokens=1200, output_tokens=80))
    rig.observer.on_model_call(after(input_tokens=1500, output_tokens=None))
    rig.observer.on_model_call(after(input_tokens=None, output_tokens=None))
    assert rig.value("otelguard_model_tokens_total", agent="coder", kind="input") == 2700
    assert rig.value("otelguard_model_tokens_total", agent="coder", kind="output") == 80
    assert rig.value("otelguard_model_calls_total", agent="coder", outcome="no_tool_call") == 3


def test_model_decisions_count_under_tool_model_and_token_caps_as_cap_hits() -> None:
    rig = Rig()
    rig.observer.on_model_call(after(decision=NO_ACTION_WARN))
    rig.observer.on_model_call(after(decision=REPEATED_HALT))
    for code in ("cap_turn", "cap_session", "cap_tree"):
        rig.observer.on_model_call(before(decision=token_cap(code)))
    rig.observer.on_model_call(after(decision=token_cap("cap_turn", "halt")))
    decisions = prom_sums(rig.registry, "otelguard_decisions", ("tool", "action", "code"))
    assert decisions == {
        ("model", "warn", "no_action_warn"): 1,
        ("model", "halt", "repeated_reply_halt"): 1,
        ("model", "block", "cap_turn"): 1,
        ("model", "block", "cap_session"): 1,
        ("model", "block", "cap_tree"): 1,
        ("model", "halt", "cap_turn"): 1,
    }
    hits = prom_sums(rig.registry, "otelguard_cap_hits", ("cap", "scope"))
    assert hits == {("tokens", "turn"): 2, ("tokens", "session"): 1, ("tokens", "tree"): 1}
    # a reply is identified by a fingerprint of its text: never a looping signature's label
    assert prom_sums(rig.registry, "otelguard_loop_signature_hits", ("tool",)) == {}


def test_the_current_chat_span_gets_the_reply_its_tokens_and_the_decision() -> None:
    rig = Rig()
    with rig.tracer.start_as_current_span("chat gpt-4o", attributes={"gen_ai.operation.name": "chat"}):
        rig.observer.on_model_call(before())
        rig.observer.on_model_call(
            after(
                decision=NO_ACTION_WARN,
                outcome="invalid_tool_call",
                invalid_tool_calls=2,
                input_tokens=900,
                output_tokens=40,
            )
        )
    with rig.tracer.start_as_current_span("chat gpt-4o", attributes={"gen_ai.operation.name": "chat"}):
        rig.observer.on_model_call(after(outcome="tool_calls", tool_calls=1, input_tokens=None))
    first, second = rig.exporter.get_finished_spans()
    assert len(rig.exporter.get_finished_spans()) == 2, "otelguard opens no span of its own for a model call"
    attributes = dict(first.attributes or {})
    assert attributes["gen_ai.usage.input_tokens"] == 900
    assert attributes["gen_ai.usage.output_tokens"] == 40
    assert attributes["otelguard.outcome"] == "invalid_tool_call"
    assert attributes["otelguard.model.tool_calls"] == 0
    assert attributes["otelguard.model.invalid_tool_calls"] == 2
    assert attributes["otelguard.decision.action"] == "warn"
    assert attributes["otelguard.decision.code"] == "no_action_warn"
    events = {event.name: dict(event.attributes or {}) for event in first.events}
    assert events["otelguard.decision"]["otelguard.decision.code"] == "no_action_warn"
    assert events["gen_ai.evaluation.result"] == {
        "gen_ai.evaluation.name": "otelguard",
        "gen_ai.evaluation.score.label": "warn",
        "gen_ai.evaluation.explanation": "no_action_warn",
    }
    attributes = dict(second.attributes or {})
    assert "gen_ai.usage.input_tokens" not in attributes  # unreported: left to the instrumentation
    assert attributes["otelguard.outcome"] == "tool_calls" and not second.events


@pytest.mark.parametrize("span_mode", ["auto", "own", "event", "decisions"])
def test_only_a_model_calls_span_is_annotated(span_mode: str) -> None:
    rig = Rig(span_mode)
    with rig.tracer.start_as_current_span(
        "invoke_agent coder", attributes={"gen_ai.operation.name": "invoke_agent"}
    ):
        rig.observer.on_model_call(after(decision=REPEATED_HALT, input_tokens=5))
    rig.observer.on_model_call(after(decision=REPEATED_HALT, input_tokens=5))  # no span at all
    with rig.tracer.start_as_current_span("chat claude"):  # no operation attribute: its name says it
        rig.observer.on_model_call(after(decision=REPEATED_HALT, input_tokens=5))
    spans = rig.spans()
    assert set(spans) == {"invoke_agent coder", "chat claude"}
    assert not spans["invoke_agent coder"].events
    assert set(dict(spans["invoke_agent coder"].attributes or {})) == {"gen_ai.operation.name"}
    assert dict(spans["chat claude"].attributes or {})["otelguard.decision.code"] == "repeated_reply_halt"


def test_a_model_decision_carries_its_chat_span_as_exemplar() -> None:
    rig = Rig()
    with rig.tracer.start_as_current_span("chat m", attributes={"gen_ai.operation.name": "chat"}) as span:
        rig.observer.on_model_call(before(decision=token_cap("cap_session")))
    trace_id = format(span.get_span_context().trace_id, "032x")
    text = openmetrics(rig.registry).decode()
    decision = next(line for line in text.splitlines() if line.startswith("otelguard_decisions_total{"))
    hit = next(line for line in text.splitlines() if line.startswith("otelguard_cap_hits_total{"))
    assert 'tool="model"' in decision and f'trace_id="{trace_id}"' in decision
    assert 'cap="tokens"' in hit and f'trace_id="{trace_id}"' in hit


def test_agents_past_the_bound_are_other_and_hostile_counts_never_break_the_loop() -> None:
    rig = Rig(max_tool_values=2)
    for agent in ("a", "b", "c", "d"):
        rig.observer.on_model_call(after(agent=agent, input_tokens=10, decision=NO_ACTION_WARN))
    rig.observer.on_model_call(after(agent=object(), input_tokens=-5, output_tokens=True))  # type: ignore[arg-type]
    rig.observer.on_model_call(after(input_tokens=10**400, tool_calls=-1))
    calls = prom_sums(rig.registry, "otelguard_model_calls", ("agent",))
    assert calls == {("a",): 1, ("b",): 1, ("_other",): 4}
    tokens = prom_sums(rig.registry, "otelguard_model_tokens", ("agent", "kind"))
    assert tokens[("a", "input")] == 10 and ("_other", "output") not in tokens


def test_otel_metrics_count_model_calls_tokens_and_decisions_as_prometheus_does() -> None:
    rig = Rig()
    events = [
        before(),
        after(outcome="tool_calls", tool_calls=1, input_tokens=100, output_tokens=7),
        after(outcome="no_tool_call", input_tokens=120, output_tokens=9, decision=NO_ACTION_WARN),
        after(outcome="no_tool_call", input_tokens=130, decision=REPEATED_HALT),
        before(decision=token_cap("cap_turn")),
    ]
    for event in events:
        rig.observer.on_model_call(event)
    points = metric_points(rig.reader)
    calls = otel_sums(points["otelguard.model_calls"], ("gen_ai.agent.name", "otelguard.outcome"))
    assert calls == prom_sums(rig.registry, "otelguard_model_calls", ("agent", "outcome"))
    tokens = otel_sums(points["otelguard.model_tokens"], ("gen_ai.agent.name", "gen_ai.token.type"))
    assert tokens == prom_sums(rig.registry, "otelguard_model_tokens", ("agent", "kind"))
    assert tokens == {("coder", "input"): 350, ("coder", "output"): 16}
    decisions = otel_sums(
        points["otelguard.decisions"],
        ("gen_ai.agent.name", "gen_ai.tool.name", "otelguard.decision.action", "otelguard.decision.code"),
    )
    assert decisions == prom_sums(rig.registry, "otelguard_decisions", ("agent", "tool", "action", "code"))
    assert ("coder", "model", "block", "cap_turn") in decisions


def test_a_guard_without_model_events_exports_no_model_series() -> None:
    rig = Rig()
    names: Iterator[str] = (sample.name for m in rig.registry.collect() for sample in m.samples)
    assert not any(name.startswith("otelguard_model_") for name in names)
    rig.observer.on_model_call(before())  # the first model event creates the agent's series at 0
    assert rig.value("otelguard_model_calls_total", agent="coder", outcome="tool_calls") == 0
    assert rig.value("otelguard_model_tokens_total", agent="coder", kind="output") == 0


# -- through a real guard ----------------------------------------------------------------------------

CANARY = "CANARY-reply-9b1e-never-exported"


def _stuck_session(guard: Guard, tracer: Tracer) -> list[Decision]:
    """Replies carrying the canary that warn, halt and spend a token cap, each inside a chat span."""
    decisions: list[Decision] = []

    def model(text: str | None, **fields: Any) -> None:
        with tracer.start_as_current_span("chat m", attributes={"gen_ai.operation.name": "chat"}):
            decisions.append(guard.before_model())
            if decisions[-1].allows_execution:
                decisions.append(guard.after_model(text, **fields))

    guard.start_turn(turn_id="stuck")
    for i in range(8):  # replies that call nothing, each answered by the harness
        words = " ".join(f"idea{i}x{j}" for j in range(40))
        model(f"{CANARY} {words}", input_tokens=10, output_tokens=5)
    guard.start_turn(turn_id="chant")
    model((f"{CANARY} again. " * 400).strip(), input_tokens=10, output_tokens=5)
    guard.start_turn(turn_id="invalid")
    for _ in range(8):
        model(f"<tool>{CANARY}</tool>", invalid_tool_calls=1, input_tokens=10, output_tokens=5)
    guard.start_turn(turn_id="tokens")
    for _ in range(4):
        model(f"Reading {CANARY}.", tool_calls=1, input_tokens=400, output_tokens=200)
    guard.end_turn()
    return decisions


@pytest.mark.parametrize("span_mode", ["auto", "own", "event", "decisions"])
def test_no_reply_text_leaves_the_process(span_mode: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    rig = Rig(span_mode, turn_spans=True)
    config = GuardConfig.from_mapping(
        {
            "mode": "unattended",
            "signature_key": "k",
            "caps": {"turn": {"tokens": 1000}},
            "telemetry": {"span_mode": span_mode, "turn_spans": True, "otel_metrics": True},
        }
    )
    guard = Guard(config, rig.telemetry, agent="canary-agent")
    decisions = _stuck_session(guard, rig.tracer)

    spans = rig.exporter.get_finished_spans()
    exported = [text for span in spans for text in span_texts(span)]
    exported += list(metric_texts(rig.registry)) + list(otel_metric_texts(rig.reader))
    with serve_metrics(port=0, registry=rig.registry) as server:
        for accept in ("", "application/openmetrics-text; version=1.0.0"):
            exported.append(http_get(server.url, headers={"Accept": accept}).decode())
    exported += [record.getMessage() for record in caplog.records]
    exported += [str(record.args) for record in caplog.records]
    blob = "\n".join(exported)

    # the scan covered something real on every channel
    codes = {d.code for d in decisions}
    assert {"no_action_warn", "cap_turn"} <= codes, codes
    assert any(d.code.startswith("repeated_reply") for d in decisions), codes
    assert 'otelguard_model_calls_total{agent="canary-agent",outcome="invalid_tool_call"}' in blob
    assert 'tool="model"' in blob and 'cap="tokens"' in blob and "otelguard.model_tokens" in blob
    assert "gen_ai.usage.input_tokens=10" in blob and "gen_ai.evaluation.explanation=no_action_warn" in blob
    assert CANARY not in blob and CANARY.lower() not in blob.lower()
    for decision in decisions:  # decision messages are for the model only
        if decision.message:
            assert decision.message not in blob


def test_a_real_guard_counts_what_its_model_events_said() -> None:
    rig = Rig()
    config = GuardConfig.from_mapping(
        {"signature_key": "k", "caps": {"turn": {"tokens": 1000}}, "telemetry": {"otel_metrics": True}}
    )
    guard = Guard(config, rig.telemetry, agent="writer")
    decisions = _stuck_session(guard, rig.tracer)
    model_decisions = Counter((d.action, d.code) for d in decisions if d.action != "allow")
    assert prom_sums(rig.registry, "otelguard_decisions", ("action", "code")) == model_decisions
    calls = prom_sums(rig.registry, "otelguard_model_calls", ("outcome",))
    assert calls[("invalid_tool_call",)] == 8 and calls[("tool_calls",)] >= 2
    assert prom_sums(rig.registry, "otelguard_cap_hits", ("cap", "scope")) == {("tokens", "turn"): 1}
    input_tokens = rig.value("otelguard_model_tokens_total", agent="writer", kind="input")
    assert (
        input_tokens is not None and input_tokens >= 800
    )  # the cap was spent by the last turn's two replies
