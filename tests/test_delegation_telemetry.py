"""Delegation telemetry: ``otelguard_delegations_total`` and ``otelguard_delegation_depth`` per
delegation, the delegated agent's ``invoke_agent`` span under the delegating call's span (one trace
per tree, in process and across a baggage hop), ``otelguard.delegation.depth``, and no tree or
session id anywhere. Real OTel SDK (in-memory exporter) and a real prometheus registry."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry, generate_latest

from otelguard import Guard, GuardConfig, propagation
from otelguard.core import decisions as codes
from otelguard.telemetry import Telemetry
from otelguard.telemetry.core import MAX_DELEGATION_PARENTS, DelegationParents

KEY = "delegation-telemetry-key"


class Setup:
    def __init__(self, span_mode: str = "own") -> None:
        self.spans = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.registry = CollectorRegistry()
        self.telemetry = Telemetry(tracer_provider=self.provider, registry=self.registry, span_mode=span_mode)
        self.session = f"secret-conversation-{uuid.uuid4().hex}"

    def config(self, **more: Any) -> GuardConfig:
        caps = {"on_hit": "reject", "tree": {"subagents": 100}, **more.pop("caps", {})}
        mapping = {
            "signature_key": KEY,
            "mode": "unattended",
            "caps": caps,
            "telemetry": {"turn_spans": True},
        }
        return GuardConfig.from_mapping({**mapping, **more})

    def guard(self, agent: str = "planner", **more: Any) -> Guard:
        return Guard(self.config(**more), self.telemetry, agent=agent, session_id=self.session)

    def value(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(name, labels) or 0.0

    def finished(self) -> dict[str, ReadableSpan]:
        return {span.name: span for span in self.spans.get_finished_spans()}


@pytest.fixture
def setup() -> Iterator[Setup]:
    made = Setup()
    yield made
    made.provider.shutdown()


def delegate(guard: Guard, to: str, call_id: str) -> Guard | None:
    """``guard`` hands work to ``to``; the delegated agent runs one turn inside the call."""
    decision = guard.before_call(f"call_{to}", {"task": "secret task text"}, call_id=call_id, delegate_to=to)
    if not decision.allows_execution:
        return None
    child = guard.subagent_guard(to)
    child.start_turn()
    child.end_turn()
    guard.after_call(
        f"call_{to}", {"task": "secret task text"}, "secret result", failed=False, call_id=call_id
    )
    return child


def test_each_delegation_counts_started_or_refused_and_observes_its_depth(setup: Setup) -> None:
    root = setup.guard(delegation={"max_depth": 2})
    root.start_turn()
    first = delegate(root, "researcher", "d1")
    assert first is not None
    first.start_turn()
    second = delegate(first, "writer", "d2")
    assert second is not None
    second.start_turn()
    assert delegate(second, "editor", "d3") is None  # depth 2 is the limit: refused
    # a spawn tool is a delegation too (its target unnamed)
    root.before_call("delegate_task", {"goal": "g"}, call_id="s1")
    root.after_call("delegate_task", {"goal": "g"}, "done", failed=False, call_id="s1")
    assert setup.value("otelguard_delegations_total", agent="planner", outcome="started") == 2
    assert setup.value("otelguard_delegations_total", agent="researcher", outcome="started") == 1
    assert setup.value("otelguard_delegations_total", agent="writer", outcome="refused") == 1
    assert setup.value("otelguard_delegations_total", agent="writer", outcome="started") == 0
    assert setup.value("otelguard_delegation_depth_count", agent="planner") == 2
    assert setup.value("otelguard_delegation_depth_bucket", agent="planner", le="1.0") == 2
    assert setup.value("otelguard_delegation_depth_bucket", agent="researcher", le="1.0") == 0
    assert setup.value("otelguard_delegation_depth_bucket", agent="researcher", le="2.0") == 1
    assert setup.value("otelguard_delegation_depth_sum", agent="writer") == 3
    assert (
        setup.value(
            "otelguard_decisions_total",
            agent="writer",
            tool="call_editor",
            action="reject",
            code=codes.DELEGATION_DEPTH,
        )
        == 1
    )
    buckets = {
        sample.labels["le"]
        for metric in setup.registry.collect()
        if metric.name == "otelguard_delegation_depth"
        for sample in metric.samples
        if sample.name.endswith("_bucket")
    }
    assert buckets == {f"{n}.0" for n in range(9)} | {"+Inf"}


def test_a_cycle_refusal_is_a_refused_delegation_and_a_cancelled_one_is_not_counted(setup: Setup) -> None:
    a = setup.guard(agent="a")
    a.start_turn()
    b = delegate(a, "b", "1")
    assert b is not None
    b.start_turn()
    a2 = delegate(b, "a", "2")  # warned, started
    assert a2 is not None
    a2.start_turn()
    assert delegate(a2, "b", "3") is None  # refused (cycle)
    a2.before_call("call_c", {}, call_id="4", delegate_to="c")
    a2.after_call("call_c", {}, None, call_id="4", cancelled=True)
    assert setup.value("otelguard_delegations_total", agent="b", outcome="started") == 1
    assert setup.value("otelguard_delegations_total", agent="a", outcome="refused") == 1
    assert setup.value("otelguard_delegations_total", agent="a", outcome="started") == 1  # the root's only
    assert (
        setup.value(
            "otelguard_decisions_total",
            agent="b",
            tool="call_a",
            action="warn",
            code=codes.DELEGATION_CYCLE_WARN,
        )
        == 1
    )


def test_a_guard_in_no_tree_counts_no_delegation(setup: Setup) -> None:
    plain = Guard(GuardConfig(signature_key=KEY), setup.telemetry, agent="solo")
    plain.start_turn()
    plain.before_call("delegate_task", {"goal": "g"}, call_id="s", delegate_to="helper")
    plain.after_call("delegate_task", {"goal": "g"}, "ok", failed=False, call_id="s")
    assert setup.value("otelguard_delegations_total", agent="solo", outcome="started") == 0
    assert setup.value("otelguard_delegation_depth_count", agent="solo") == 0


@pytest.mark.parametrize("span_mode", ["own", "auto"])
def test_the_delegated_agents_turn_span_is_a_child_of_the_delegating_calls_span(span_mode: str) -> None:
    setup = Setup(span_mode)
    root = setup.guard()
    root.start_turn()
    child = delegate(root, "researcher", "d1")
    assert child is not None
    child.start_turn()
    grandchild = delegate(child, "writer", "d2")
    assert grandchild is not None
    child.end_turn()
    root.end_turn()
    spans = setup.finished()
    call = spans["execute_tool call_researcher"]
    researcher = spans["invoke_agent researcher"]
    assert researcher.parent is not None and researcher.parent.span_id == call.context.span_id
    assert researcher.attributes is not None and researcher.attributes["otelguard.delegation.depth"] == 1
    writer = spans["invoke_agent writer"]
    assert (
        writer.parent is not None
        and writer.parent.span_id == spans["execute_tool call_writer"].context.span_id
    )
    assert writer.attributes is not None and writer.attributes["otelguard.delegation.depth"] == 2
    planner = spans["invoke_agent planner"]
    assert planner.attributes is not None and planner.attributes["otelguard.delegation.depth"] == 0
    assert call.parent is not None and call.parent.span_id == planner.context.span_id
    assert len({span.context.trace_id for span in setup.spans.get_finished_spans()}) == 1
    assert call.attributes is not None and call.attributes["otelguard.outcome"] == "ok"
    assert (
        call.start_time is not None and call.end_time is not None and call.start_time <= researcher.start_time
    )
    setup.provider.shutdown()


def test_under_a_framework_span_the_framework_span_is_the_parent() -> None:
    setup = Setup("auto")
    framework = setup.provider.get_tracer("framework")
    root = setup.guard()
    root.start_turn()
    with framework.start_as_current_span("handoff to researcher") as host:
        child = delegate(root, "researcher", "d1")
    assert child is not None
    spans = setup.finished()
    assert "execute_tool call_researcher" not in spans  # annotated the framework's span instead
    assert spans["invoke_agent researcher"].parent.span_id == host.get_span_context().span_id  # type: ignore[union-attr]
    setup.provider.shutdown()


def test_a_spawn_that_names_no_agent_parents_the_next_agent_its_delegator_starts(setup: Setup) -> None:
    root = setup.guard()
    root.start_turn()
    root.before_call("delegate_task", {"goal": "g"}, call_id="s1")
    sub = root.subagent_guard("helper")
    sub.start_turn()
    sub.end_turn()
    root.after_call("delegate_task", {"goal": "g"}, "done", failed=False, call_id="s1")
    spans = setup.finished()
    assert spans["invoke_agent helper"].parent.span_id == spans["execute_tool delegate_task"].context.span_id  # type: ignore[union-attr]


def test_across_a_baggage_hop_the_callee_turn_joins_the_callers_trace(setup: Setup) -> None:
    tracer = setup.provider.get_tracer("caller-http")
    root = setup.guard()
    root.start_turn()
    headers: dict[str, str] = {}
    with tracer.start_as_current_span("POST /research") as request:
        propagation.inject(headers, root)
    assert "traceparent" in headers
    other = Setup()  # the callee's process: its own telemetry, same exporter for the check
    callee_telemetry = Telemetry(tracer_provider=setup.provider, registry=other.registry)
    with propagation.extract(headers):
        callee = Guard(setup.config(), callee_telemetry, agent="researcher", session_id="callee-session")
        callee.start_turn()
    callee.end_turn()
    turn = setup.finished()["invoke_agent researcher"]
    assert turn.context.trace_id == request.get_span_context().trace_id
    assert turn.attributes is not None and turn.attributes["otelguard.delegation.depth"] == 1
    other.provider.shutdown()


def test_no_tree_session_or_agent_digest_in_any_label_or_attribute(setup: Setup) -> None:
    root = setup.guard()
    root.start_turn()
    child = delegate(root, "researcher", "d1")
    assert child is not None
    root.end_turn()
    tree = root.delegation_tree
    assert tree is not None
    exposition = generate_latest(setup.registry).decode()
    exported = [
        str(dict(span.attributes or {})) + str([dict(e.attributes or {}) for e in span.events])
        for span in setup.spans.get_finished_spans()
    ]
    for secret in (tree.root, setup.session, *tree.path, *(child.delegation_tree or tree).path):
        assert secret not in exposition
        assert all(secret not in text for text in exported)
    assert all("secret task text" not in text and "secret result" not in text for text in exported)


def test_the_parents_table_is_bounded() -> None:
    from opentelemetry.trace import SpanContext

    from otelguard.core.tree import DelegationTree

    parents = DelegationParents()
    for n in range(MAX_DELEGATION_PARENTS + 50):
        place = DelegationTree("0" * 32, 1, ("a" * 12, f"{n:012x}"))
        parents.put(place, SpanContext(trace_id=1, span_id=n + 1, is_remote=False))
    assert len(parents._spans) == MAX_DELEGATION_PARENTS
    assert parents.parent(DelegationTree("0" * 32, 1, ("a" * 12, f"{0:012x}"))) is None
    last = MAX_DELEGATION_PARENTS + 49
    found = parents.parent(DelegationTree("0" * 32, 1, ("a" * 12, f"{last:012x}")))
    assert found is not None and found.span_id == last + 1
