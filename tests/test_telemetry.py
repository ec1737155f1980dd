"""Spans (docs/telemetry.md): names, kinds, attributes, status and parentage per outcome and span_mode."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client import CollectorRegistry

from otelguard import ConfigError, Decision, Guard, GuardConfig
from otelguard.core.signatures import bounded_name
from otelguard.telemetry import Telemetry

KEY = "test-signature-key"


@dataclass
class Rig:
    provider: TracerProvider
    exporter: InMemorySpanExporter
    registry: CollectorRegistry
    guard: Guard

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def tool_spans(self) -> list[ReadableSpan]:
        return [s for s in self.spans() if s.name.startswith("execute_tool ")]


@pytest.fixture
def provider() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield tracer_provider, exporter
    tracer_provider.shutdown()


def make_rig(provider: tuple[TracerProvider, InMemorySpanExporter], span_mode: str, **config: Any) -> Rig:
    tracer_provider, exporter = provider
    registry = CollectorRegistry()
    telemetry = {"span_mode": span_mode, **config.pop("telemetry", {})}
    mapping = {"mode": "unattended", "signature_key": KEY, "telemetry": telemetry, **config}
    guard = Guard(GuardConfig.from_mapping(mapping), Telemetry(tracer_provider, registry), agent="tester")
    return Rig(tracer_provider, exporter, registry, guard)


def call(
    guard: Guard,
    tool: str,
    args: Any,
    result: Any = "ok",
    *,
    failed: bool = False,
    refusal: str | None = None,
) -> Decision:
    """One host-style call; returns the last decision the guard gave for it."""
    decision = guard.before_call(tool, args, call_id=f"id-{id(args)}")
    if not decision.allows_execution:
        return decision
    return guard.after_call(tool, args, result, failed=failed, refusal=refusal, call_id=f"id-{id(args)}")


# Scenarios: each ends with the call whose span the test inspects.
def allow(guard: Guard) -> Decision:
    return call(guard, "read_file", {"path": "a"}, "content")


def warn(guard: Guard) -> Decision:
    for _ in range(2):  # the second identical read result warns (no_progress, ok outcome)
        decision = call(guard, "read_file", {"path": "a"}, "same")
    return decision


def block(guard: Guard) -> Decision:
    for _ in range(5):
        call(guard, "terminal", {"command": "make"}, "Error", failed=True)
    for _ in range(7):  # rejected each time (rejects_before_stop, default 7): the turn goes on
        assert call(guard, "terminal", {"command": "make"}).code == "exact_failure_reject"
    return call(guard, "terminal", {"command": "make"})


def halt(guard: Guard) -> Decision:
    for i in range(6):
        decision = call(guard, "write_file", {"path": f"/etc/{i}"}, "denied", refusal="permission_denied")
    return decision


def refused(guard: Guard) -> Decision:
    return call(guard, "write_file", {"path": "/etc/x"}, "denied", refusal="sandbox_denied")


def failed(guard: Guard) -> Decision:
    return call(guard, "web_fetch", {"url": "u"}, "Error: 502", failed=True)


TOOL_CLASSES = {"read_file": "read", "terminal": "shell", "write_file": "write", "web_fetch": "read"}

# case -> (scenario, action, code, outcome, status, error.type, tool)
EXPECTED: dict[str, tuple[Any, ...]] = {
    "allow": (allow, "allow", "allow", "ok", StatusCode.UNSET, None, "read_file"),
    "warn": (warn, "warn", "no_progress_warn", "ok", StatusCode.UNSET, None, "read_file"),
    "block": (
        block,
        "block",
        "exact_failure_block",
        "blocked",
        StatusCode.ERROR,
        "exact_failure_block",
        "terminal",
    ),
    "halt": (halt, "halt", "refusal_halt", "refused", StatusCode.ERROR, "refusal_halt", "write_file"),
    "refused": (refused, "allow", "allow", "refused", StatusCode.ERROR, "sandbox_denied", "write_file"),
    "failed": (failed, "allow", "allow", "failed", StatusCode.ERROR, "tool_error", "web_fetch"),
}


@pytest.mark.parametrize("case", sorted(EXPECTED))
@pytest.mark.parametrize("span_mode", ["own", "auto"])
def test_own_span_per_call_has_the_spec_attributes_and_status(
    provider: Any, span_mode: str, case: str
) -> None:
    """Without a current span, `own` and `auto` open `execute_tool {tool}` INTERNAL spans."""
    scenario, action, code, outcome, status, error_type, tool = EXPECTED[case]
    rig = make_rig(provider, span_mode)
    decision = scenario(rig.guard)
    assert (decision.action, decision.code) == (action, code)
    span = rig.tool_spans()[-1]
    assert span.name == f"execute_tool {tool}"
    assert span.kind is SpanKind.INTERNAL
    attrs = dict(span.attributes or {})
    assert attrs["gen_ai.operation.name"] == "execute_tool"
    assert attrs["gen_ai.tool.name"] == tool
    assert attrs["gen_ai.tool.call.id"].startswith("id-")
    assert len(attrs["otelguard.args_hash"]) == 16
    if decision.signature is not None:
        assert attrs["otelguard.args_hash"] == decision.signature.args_hash
    assert attrs["otelguard.tool.class"] == TOOL_CLASSES[tool]
    assert attrs["otelguard.outcome"] == outcome
    assert attrs["otelguard.decision.action"] == action
    assert attrs["otelguard.decision.code"] == code
    assert isinstance(attrs["otelguard.decision.count"], int)
    assert span.status.status_code is status
    assert attrs.get("error.type") == error_type
    events = [e for e in span.events if e.name == "otelguard.decision"]
    assert len(events) == (0 if action == "allow" else 1)
    if events:
        assert dict(events[0].attributes or {})["otelguard.decision.code"] == code


def test_spans_are_children_of_the_current_span(provider: Any) -> None:
    rig = make_rig(provider, "own")
    tracer = rig.provider.get_tracer("host")
    with tracer.start_as_current_span("agent loop") as parent:
        allow(rig.guard)
    (span,) = rig.tool_spans()
    assert span.parent is not None
    assert span.parent.span_id == parent.get_span_context().span_id
    assert span.context.trace_id == parent.get_span_context().trace_id


@pytest.mark.parametrize("case", sorted(EXPECTED))
@pytest.mark.parametrize("span_mode", ["auto", "event"])
def test_current_recording_span_gets_attributes_and_decision_events(
    provider: Any, span_mode: str, case: str
) -> None:
    """With a recording span current (the host traces its tools), no span of otelguard's own."""
    scenario, action, code, outcome, _, error_type, _ = EXPECTED[case]
    rig = make_rig(provider, span_mode)
    tracer = rig.provider.get_tracer("host")
    with tracer.start_as_current_span("host tool span"):
        scenario(rig.guard)
    assert rig.tool_spans() == []
    (host,) = rig.spans()
    attrs = dict(host.attributes or {})
    assert attrs["otelguard.decision.code"] == code
    assert attrs["otelguard.outcome"] == outcome
    assert attrs["gen_ai.tool.name"]
    events = [dict(e.attributes or {}) for e in host.events if e.name == "otelguard.decision"]
    assert [e["otelguard.decision.code"] for e in events][-1:] == ([] if action == "allow" else [code])
    # the span status rules hold on the host's span too
    if error_type is not None:
        assert host.status.status_code is StatusCode.ERROR
        assert attrs["error.type"] == error_type
    else:
        assert "error.type" not in attrs


def test_event_mode_without_a_current_span_records_nothing(provider: Any) -> None:
    rig = make_rig(provider, "event")
    block(rig.guard)
    assert rig.spans() == []


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_decisions_mode_opens_spans_only_for_non_allow_decisions(provider: Any, case: str) -> None:
    scenario, action, code, outcome, status, _, _ = EXPECTED[case]
    rig = make_rig(provider, "decisions")
    scenario(rig.guard)
    spans = rig.tool_spans()
    if action == "allow":
        assert all(dict(s.attributes or {})["otelguard.decision.action"] != "allow" for s in spans)
        if case in ("allow", "refused", "failed"):
            assert spans == []
        return
    span = spans[-1]
    assert span.name.startswith("execute_tool ")
    assert dict(span.attributes or {})["otelguard.decision.code"] == code
    assert dict(span.attributes or {})["otelguard.outcome"] == outcome
    assert span.status.status_code is status
    assert span.start_time is not None and span.end_time is not None and span.start_time <= span.end_time


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_off_mode_records_no_spans_and_touches_no_host_span(provider: Any, case: str) -> None:
    rig = make_rig(provider, "off", telemetry={"turn_spans": True})
    tracer = rig.provider.get_tracer("host")
    rig.guard.start_turn()
    with tracer.start_as_current_span("host"):
        EXPECTED[case][0](rig.guard)
    rig.guard.end_turn()
    (host,) = rig.spans()
    assert not any(key.startswith(("otelguard.", "gen_ai.")) for key in host.attributes or {})
    assert host.events == ()


def test_turn_span_wraps_the_tool_spans(provider: Any) -> None:
    rig = make_rig(provider, "own", telemetry={"turn_spans": True})
    rig.guard.start_turn(turn_id="t-1", agent="planner")
    allow(rig.guard)
    block(rig.guard)
    summary = rig.guard.end_turn()
    turn = next(s for s in rig.spans() if s.name == "invoke_agent planner")
    assert turn.kind is SpanKind.INTERNAL
    attrs = dict(turn.attributes or {})
    assert attrs["gen_ai.agent.name"] == "planner"
    # one allowed read, then five failures, seven rejects and the block
    assert attrs["otelguard.turn.tool_calls"] == summary.tool_calls == 14
    assert attrs["otelguard.turn.halted"] is True
    assert attrs["otelguard.turn.halt_code"] == "exact_failure_block"
    for span in rig.tool_spans():
        assert span.parent is not None and span.parent.span_id == turn.context.span_id


def test_turn_spans_are_off_by_default(provider: Any) -> None:
    rig = make_rig(provider, "own")
    rig.guard.start_turn()
    allow(rig.guard)
    rig.guard.end_turn()
    assert [s.name for s in rig.spans()] == ["execute_tool read_file"]


def test_refusal_category_that_is_free_text_is_not_exported(provider: Any) -> None:
    rig = make_rig(provider, "own")
    call(rig.guard, "write_file", {"path": "x"}, "no", refusal="Denied: /home/alice/secret.txt is protected")
    (span,) = rig.tool_spans()
    assert dict(span.attributes or {})["error.type"] == "refused"


def test_unknown_span_mode_is_a_config_error_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"telemetry\.span_mode") as info:
        Telemetry(registry=CollectorRegistry(), span_mode="verbose")
    assert info.value.key == "telemetry.span_mode"
    with pytest.raises(ConfigError, match=r"telemetry\.span_mode"):
        GuardConfig.from_mapping({"telemetry": {"span_mode": "verbose"}})


def test_keyword_settings_override_the_config_section(provider: Any) -> None:
    tracer_provider, exporter = provider
    telemetry = Telemetry(tracer_provider, CollectorRegistry(), span_mode="off")
    config = GuardConfig.from_mapping(
        {"signature_key": KEY, "telemetry": {"span_mode": "own", "turn_spans": True}}
    )
    assert telemetry.settings(config.telemetry).span_mode == "off"
    assert telemetry.settings(config.telemetry).turn_spans is True
    guard = Guard(config, telemetry)
    guard.start_turn()
    allow(guard)
    guard.end_turn()
    assert exporter.get_finished_spans() == ()


def test_guard_with_telemetry_true_uses_the_global_provider_and_default_registry() -> None:
    from prometheus_client import REGISTRY

    guard = Guard(GuardConfig(signature_key=KEY), telemetry=True, agent="telemetry-true-test")
    allow(guard)
    assert (
        REGISTRY.get_sample_value(
            "otelguard_tool_calls_total",
            {"agent": "telemetry-true-test", "tool": "read_file", "outcome": "ok"},
        )
        == 1.0
    )


def test_span_names_and_host_chosen_attributes_are_clipped(provider: Any) -> None:
    """Tool names and call ids on spans are bounded as the guard keeps them: past 256 characters, a
    prefix and a digest of the whole."""
    rig = make_rig(provider, "own")
    rig.guard.before_call("t" * 5_000, {"p": 1}, call_id="c" * 5_000)
    decision = rig.guard.after_call("t" * 5_000, {"p": 1}, "ok", failed=False, call_id="c" * 5_000)
    (span,) = rig.spans()
    assert span.name == f"execute_tool {decision.tool_name}"
    assert span.attributes["gen_ai.tool.name"] == decision.tool_name == bounded_name("t" * 5_000)
    assert span.attributes["gen_ai.tool.call.id"] == bounded_name("c" * 5_000)
    assert len(decision.tool_name) <= 256


@pytest.mark.parametrize("length", [200, 256, 257, 10_000])
def test_a_long_tool_name_is_one_same_name_on_span_metric_and_decision(provider: Any, length: int) -> None:
    """A tool name is bounded once, where the call enters the guard: the span, the metric label and
    the decision all carry that one name (it used to be whole on the span and `_other` on the metric)."""
    rig = make_rig(provider, "own")
    name = "n" * (length - 1) + "x"
    decision = call(rig.guard, name, {"p": 1}, "ok")
    (span,) = rig.tool_spans()
    labels = [
        s.labels["tool"]
        for metric in rig.registry.collect()
        if metric.name == "otelguard_tool_calls"
        for s in metric.samples
        if s.name == "otelguard_tool_calls_total"
    ]
    assert labels == [decision.tool_name] == [span.attributes["gen_ai.tool.name"]]
    assert span.name == f"execute_tool {decision.tool_name}"
    assert decision.tool_name == (name if length <= 256 else bounded_name(name))


def test_auto_mode_decides_at_before_call(provider: Any) -> None:
    """The span current when before_call runs gets the attributes, even if after_call runs
    outside it; a span that becomes current only later is not touched."""
    rig = make_rig(provider, "auto")
    tracer = rig.provider.get_tracer("host")
    with tracer.start_as_current_span("host span"):
        rig.guard.before_call("read_file", {"p": 1})
        rig.guard.after_call("read_file", {"p": 1}, "text", failed=False)
    assert rig.tool_spans() == []
    (host,) = rig.spans()
    assert dict(host.attributes or {})["otelguard.decision.code"] == "allow"

    # the host ended its span before after_call: it has the call's identity, and the outcome goes
    # to a span of otelguard's own under it
    rig.exporter.clear()
    with tracer.start_as_current_span("short host span") as short:
        rig.guard.before_call("read_file", {"p": 3})
    rig.guard.after_call("read_file", {"p": 3}, "text", failed=False)
    (short_span,) = [s for s in rig.spans() if s.name == "short host span"]
    assert dict(short_span.attributes or {})["gen_ai.tool.name"] == "read_file"
    (own,) = rig.tool_spans()
    assert own.parent is not None and own.parent.span_id == short.get_span_context().span_id
    assert dict(own.attributes or {})["otelguard.outcome"] == "ok"

    rig.exporter.clear()
    rig.guard.before_call("read_file", {"p": 2})
    with tracer.start_as_current_span("later span"):
        rig.guard.after_call("read_file", {"p": 2}, "text", failed=False)
    (later,) = [s for s in rig.spans() if s.name == "later span"]
    assert "otelguard.decision.code" not in dict(later.attributes or {})
    assert len(rig.tool_spans()) == 1


def test_own_span_parent_is_the_span_current_at_before_call(provider: Any) -> None:
    rig = make_rig(provider, "own")
    tracer = rig.provider.get_tracer("host")
    with tracer.start_as_current_span("parent") as parent:
        rig.guard.before_call("read_file", {"p": 1})
    with tracer.start_as_current_span("unrelated"):
        rig.guard.after_call("read_file", {"p": 1}, "text", failed=False)
    (span,) = rig.tool_spans()
    assert span.parent is not None and span.parent.span_id == parent.get_span_context().span_id
