"""Prometheus metrics (the table in docs/telemetry.md): one test per metric and label, read from a private registry."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_text

from otelguard import Decision, Guard, GuardConfig, Signature, TurnSummary
from otelguard._version import __version__
from otelguard.core.observers import CallEvent
from otelguard.core.signatures import bounded_name
from otelguard.telemetry import STAGES, Telemetry
from otelguard.telemetry.prometheus import PrometheusTelemetry

KEY = "test-signature-key"
AGENT = "metrics-agent"


def make(
    registry: CollectorRegistry,
    *,
    provider: Any = None,
    telemetry: dict[str, Any] | None = None,
    **config: Any,
) -> Guard:
    mapping = {"mode": "unattended", "signature_key": KEY, "telemetry": telemetry or {}, **config}
    return Guard(GuardConfig.from_mapping(mapping), Telemetry(provider, registry), agent=AGENT)


def call(guard: Guard, tool: str, args: Any, result: Any = "ok", **kw: Any) -> Decision:
    decision = guard.before_call(tool, args)
    if not decision.allows_execution:
        return decision
    return guard.after_call(tool, args, result, **kw)


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    sample = registry.get_sample_value(name, labels)
    return 0.0 if sample is None else sample


def samples(registry: CollectorRegistry, name: str) -> list[Any]:
    return [s for metric in registry.collect() for s in metric.samples if s.name == name]


def test_tool_calls_total_counts_every_outcome() -> None:
    registry = CollectorRegistry()
    guard = make(registry, caps={"on_hit": "reject", "turn": {"web_search": 1}})
    call(guard, "read_file", {"p": 1}, "x", failed=False)
    call(guard, "web_fetch", {"u": 1}, "Error: 500", failed=True)
    call(guard, "write_file", {"p": 2}, "no", refusal="permission_denied")
    call(guard, "web_search", {"q": 1}, "r")
    call(guard, "web_search", {"q": 2}, "r")  # over the cap: rejected
    for _ in range(13):  # the 6th to 12th are rejected (rejects_before_stop, default 7), the 13th blocked
        call(guard, "terminal", {"c": "make"}, "Error", failed=True)
    name = "otelguard_tool_calls_total"
    assert value(registry, name, agent=AGENT, tool="read_file", outcome="ok") == 1
    assert value(registry, name, agent=AGENT, tool="web_fetch", outcome="failed") == 1
    assert value(registry, name, agent=AGENT, tool="write_file", outcome="refused") == 1
    assert value(registry, name, agent=AGENT, tool="web_search", outcome="ok") == 1
    assert value(registry, name, agent=AGENT, tool="web_search", outcome="rejected") == 1
    assert value(registry, name, agent=AGENT, tool="terminal", outcome="failed") == 5
    assert value(registry, name, agent=AGENT, tool="terminal", outcome="rejected") == 7
    assert value(registry, name, agent=AGENT, tool="terminal", outcome="blocked") == 1
    assert {s.labels["outcome"] for s in samples(registry, name)} == {
        "ok",
        "failed",
        "refused",
        "rejected",
        "blocked",
    }


def test_decisions_total_counts_non_allow_decisions_by_action_and_code() -> None:
    registry = CollectorRegistry()
    guard = make(registry)
    for _ in range(13):  # five failures, seven rejects (rejects_before_stop, default 7), a block
        call(guard, "terminal", {"c": "make"}, "Error", failed=True)
    name = "otelguard_decisions_total"
    assert value(registry, name, agent=AGENT, tool="terminal", action="warn", code="exact_failure_warn") == 4
    assert (
        value(registry, name, agent=AGENT, tool="terminal", action="reject", code="exact_failure_reject") == 7
    )
    assert (
        value(registry, name, agent=AGENT, tool="terminal", action="block", code="exact_failure_block") == 1
    )
    call(guard, "read_file", {"p": 1})
    assert value(registry, name, agent=AGENT, tool="read_file", action="block", code="turn_halted") == 1
    assert all(s.labels["action"] != "allow" for s in samples(registry, name))


def test_turns_total_by_outcome() -> None:
    registry = CollectorRegistry()
    guard = make(registry)
    guard.start_turn()
    call(guard, "read_file", {"p": 1})
    guard.end_turn()
    guard.start_turn()
    for _ in range(13):  # five failures, seven rejects, a block: halted
        call(guard, "terminal", {"c": "make"}, "Error", failed=True)
    guard.end_turn()
    assert value(registry, "otelguard_turns_total", agent=AGENT, outcome="completed") == 1
    assert value(registry, "otelguard_turns_total", agent=AGENT, outcome="halted") == 1


def test_cap_hits_total_by_cap_and_scope() -> None:
    registry = CollectorRegistry()
    guard = make(registry, caps={"on_hit": "reject", "turn": {"web_search": 2}, "session": {"subagents": 1}})
    for i in range(3):
        call(guard, "web_search", {"q": i})
    call(guard, "delegate_task", {"tasks": ["a"]})
    call(guard, "delegate_task", {"tasks": ["b"]})
    name = "otelguard_cap_hits_total"
    assert value(registry, name, agent=AGENT, cap="web_search", scope="turn") == 1
    assert value(registry, name, agent=AGENT, cap="subagents", scope="session") == 1


def test_subagent_spawns_total_counts_batches_of_calls_that_ran() -> None:
    registry = CollectorRegistry()
    guard = make(registry, caps={"turn": {"subagents": 5}})
    call(guard, "delegate_task", {"tasks": ["a", "b", "c"]})
    call(guard, "delegate_task", json.dumps({"tasks": ["d"]}), "Error: crashed", failed=True)
    call(guard, "spawn_agent", {"goal": "x"}, "no", refusal="permission_denied")  # refused: spawned nothing
    call(guard, "delegate_task", {"tasks": ["e", "f", "g"]})  # over the cap: blocked, spawned nothing
    assert value(registry, "otelguard_subagent_spawns_total", agent=AGENT) == 4


def test_turn_tool_calls_histogram_buckets_and_observation() -> None:
    registry = CollectorRegistry()
    guard = make(registry)
    guard.start_turn()
    for i in range(7):
        call(guard, "read_file", {"p": i})
    guard.end_turn()
    buckets = [s for s in samples(registry, "otelguard_turn_tool_calls_bucket")]
    assert [s.labels["le"] for s in buckets] == [
        "1.0", "2.0", "5.0", "10.0", "20.0", "50.0", "100.0", "200.0", "500.0", "1000.0", "+Inf"
    ]  # fmt: skip
    assert {s.labels["agent"] for s in buckets} == {AGENT}
    assert value(registry, "otelguard_turn_tool_calls_bucket", agent=AGENT, le="5.0") == 0
    assert value(registry, "otelguard_turn_tool_calls_bucket", agent=AGENT, le="10.0") == 1
    assert value(registry, "otelguard_turn_tool_calls_sum", agent=AGENT) == 7


def test_turn_cap_usage_ratio_histogram_per_cap() -> None:
    registry = CollectorRegistry()
    guard = make(registry, caps={"turn": {"web_search": 10, "subagents": 4}})
    guard.start_turn()
    for i in range(2):
        call(guard, "web_search", {"q": i})
    call(guard, "delegate_task", {"tasks": ["a", "b", "c"]})
    guard.end_turn()
    name = "otelguard_turn_cap_usage_ratio"
    assert [s.labels["le"] for s in samples(registry, f"{name}_bucket") if s.labels["cap"] == "web_search"] == [
        "0.1", "0.25", "0.5", "0.75", "0.9", "1.0", "+Inf"
    ]  # fmt: skip
    assert value(registry, f"{name}_sum", agent=AGENT, cap="web_search") == pytest.approx(0.2)
    assert value(registry, f"{name}_bucket", agent=AGENT, cap="web_search", le="0.1") == 0
    assert value(registry, f"{name}_bucket", agent=AGENT, cap="web_search", le="0.25") == 1
    assert value(registry, f"{name}_sum", agent=AGENT, cap="subagents") == pytest.approx(0.75)


def test_loop_signature_hits_total_labels_the_args_hash_for_loop_decisions_only() -> None:
    registry = CollectorRegistry()
    guard = make(registry, caps={"turn": {"web_search": 1}})
    decisions = [call(guard, "terminal", {"c": "make"}, "Error", failed=True) for _ in range(3)]
    call(guard, "web_search", {"q": 1})
    call(guard, "web_search", {"q": 2})  # a cap hit is not a loop signature
    signature = decisions[-1].signature
    assert signature is not None
    hits = samples(registry, "otelguard_loop_signature_hits_total")
    assert [(s.labels, s.value) for s in hits] == [
        (
            {
                "agent": AGENT,
                "tool": "terminal",
                "code": "exact_failure_warn",
                "signature": signature.args_hash,
            },
            2.0,
        )
    ]


def test_an_agents_first_call_creates_the_series_alerts_rate_at_zero() -> None:
    """Without priming by hand: after one allowed call of a new agent, its turn outcomes, its cap
    hits per configured cap and scope, its spawn counter and its cap usage exist at 0, so rate()
    sees the first cap hit or halt."""
    registry = CollectorRegistry()
    caps = {
        "turn": {"web_search": 5, "subagents": 3, "off": 0},
        "session": {"web_search": 20, "subagents": 0},
    }
    guard = make(registry, caps=caps)
    guard.start_turn(agent="fresh-agent")
    call(guard, "read_file", {"p": 1})

    def zero(name: str, **labels: str) -> bool:
        return registry.get_sample_value(name, {"agent": "fresh-agent", **labels}) == 0

    for outcome in ("completed", "halted", "errored"):
        assert zero("otelguard_turns_total", outcome=outcome)
    for cap, scope in (("web_search", "turn"), ("subagents", "turn"), ("web_search", "session")):
        assert zero("otelguard_cap_hits_total", cap=cap, scope=scope)
    assert zero("otelguard_subagent_spawns_total")
    assert zero("otelguard_turn_cap_usage_ratio_count", cap="subagents")
    # a cap switched off (0) is never hit: no series for it
    for cap, scope in (("off", "turn"), ("subagents", "session")):
        labels = {"agent": "fresh-agent", "cap": cap, "scope": scope}
        assert registry.get_sample_value("otelguard_cap_hits_total", labels) is None


def test_loop_signature_hits_total_counts_rejects_with_warns_and_blocks() -> None:
    """Every action of a loop detector counts: the warns, the rejects and the block that ends the turn."""
    registry = CollectorRegistry()
    guard = make(registry)
    codes = [call(guard, "terminal", {"c": "make"}, "Error", failed=True).code for _ in range(13)]
    assert codes.count("exact_failure_reject") == 7
    hits = {s.labels["code"]: s.value for s in samples(registry, "otelguard_loop_signature_hits_total")}
    assert hits == {
        code: float(codes.count(code))
        for code in ("exact_failure_warn", "exact_failure_reject", "exact_failure_block")
    }


def test_same_error_decisions_are_loop_signature_hits() -> None:
    """same_error is a loop detector: its warn and halt land in the signature-hits counter."""
    registry = CollectorRegistry()
    guard = make(registry)
    not_read = "File has not been read yet. Read it first before writing to it."
    decisions = [
        call(guard, f"editor_{i}", {"file_path": f"/src/{i}.py"}, not_read, failed=True) for i in range(6)
    ]
    assert [d.code for d in decisions[2:]] == ["same_error_warn"] * 3 + ["same_error_halt"]
    hits = {
        (s.labels["tool"], s.labels["code"]) for s in samples(registry, "otelguard_loop_signature_hits_total")
    }
    assert hits == {(f"editor_{i}", "same_error_warn") for i in (2, 3, 4)} | {("editor_5", "same_error_halt")}
    assert (
        value(
            registry,
            "otelguard_decisions_total",
            agent=AGENT,
            tool="editor_5",
            action="halt",
            code="same_error_halt",
        )
        == 1
    )


def test_internal_errors_total_starts_at_zero_for_every_stage_and_counts() -> None:
    registry = CollectorRegistry()
    telemetry = Telemetry(registry=registry)
    for stage in ("before_call", "after_call", "start_turn", "end_turn", "observer"):
        assert registry.get_sample_value("otelguard_internal_errors_total", {"stage": stage}) == 0
    assert set(STAGES) == {"before_call", "after_call", "start_turn", "end_turn", "observer"}
    telemetry.bind().on_internal_error("after_call")
    assert value(registry, "otelguard_internal_errors_total", stage="after_call") == 1


def test_internal_error_reported_by_the_guard_is_counted_by_stage() -> None:
    class BrokenObserver:
        def on_turn_start(self, turn: Any) -> None: ...
        def on_call_start(self, call: Any) -> object:
            raise RuntimeError("observer bug")

        def on_call_end(self, call: Any, token: object) -> None: ...
        def on_turn_end(self, summary: Any) -> None: ...
        def on_internal_error(self, stage: str) -> None: ...

    registry = CollectorRegistry()
    config = GuardConfig(signature_key=KEY)
    guard = Guard(config, Telemetry(registry=registry), agent=AGENT, observers=[BrokenObserver()])
    assert call(guard, "read_file", {"p": 1}).action == "allow"
    assert value(registry, "otelguard_internal_errors_total", stage="observer") == 1
    assert value(registry, "otelguard_tool_calls_total", agent=AGENT, tool="read_file", outcome="ok") == 1


def test_build_info_is_one_with_the_version() -> None:
    registry = CollectorRegistry()
    Telemetry(registry=registry)
    assert registry.get_sample_value("otelguard_build_info", {"version": __version__}) == 1


def test_two_telemetry_objects_share_one_registry_without_duplicate_registration() -> None:
    registry = CollectorRegistry()
    first, second = Telemetry(registry=registry), Telemetry(registry=registry)
    Guard(GuardConfig(signature_key=KEY), first, agent="a").before_call("read_file", {})
    Guard(GuardConfig(signature_key=KEY), second, agent="b").before_call("read_file", {})
    names = [m.name for m in registry.collect()]
    assert len(names) == len(set(names))


def test_tool_and_agent_labels_are_bounded_with_other() -> None:
    registry = CollectorRegistry()
    telemetry = Telemetry(registry=registry, max_tool_values=3)
    for agent in ("a1", "a2", "a3", "a4", "a5"):
        guard = Guard(GuardConfig(signature_key=KEY), telemetry, agent=agent)
        for tool in ("t1", "t2", "t3", "t4", "t5"):
            call(guard, tool, {"x": 1})
    series = samples(registry, "otelguard_tool_calls_total")
    assert {s.labels["agent"] for s in series} == {"a1", "a2", "a3", "_other"}
    assert {s.labels["tool"] for s in series} == {"t1", "t2", "t3", "_other"}
    assert sum(s.value for s in series) == 25
    assert value(registry, "otelguard_tool_calls_total", agent="_other", tool="_other", outcome="ok") == 4


def test_label_bounds_are_per_telemetry_instance() -> None:
    registry = CollectorRegistry()
    for agent in ("x", "y"):
        telemetry = Telemetry(registry=registry, max_tool_values=1)
        call(Guard(GuardConfig(signature_key=KEY), telemetry, agent=agent), "read_file", {})
    assert {s.labels["agent"] for s in samples(registry, "otelguard_tool_calls_total")} == {"x", "y"}


def test_signature_series_stay_bounded_after_10000_distinct_looping_signatures(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    guard = make(registry, mode="interactive")
    for i in range(10_000):
        if i % 500 == 0:
            guard.start_turn()
        for _ in range(2):  # the second identical failure warns (exact_failure_warn)
            call(guard, "terminal", {"command": f"make target-{i}"}, "Error", failed=True)
    hits = samples(registry, "otelguard_loop_signature_hits_total")
    tools = {s.labels["tool"] for s in samples(registry, "otelguard_tool_calls_total")}
    total_series = sum(len(m.samples) for m in registry.collect())
    assert len(hits) == 200  # telemetry.max_signature_series default
    assert len(tools) == 1
    assert (
        value(registry, "otelguard_tool_calls_total", agent=AGENT, tool="terminal", outcome="failed")
        == 20_000
    )
    # the figure docs/telemetry.md quotes ("Bounds")
    (tmp_path / "series.txt").write_text(str(total_series))
    print(f"series after 10,000 looping signatures: {len(hits)} signature series, {total_series} samples")
    assert total_series < 1000


def test_signature_series_evict_the_least_recently_hit_first() -> None:
    registry = CollectorRegistry()
    view = Telemetry(registry=registry, max_signature_series=3).bind()
    for name in ("a", "b", "c", "a", "d"):  # "a" hit again, so "b" is the least recently hit
        view.on_call_end(_loop_event(name), None)
    hits = {s.labels["signature"] for s in samples(registry, "otelguard_loop_signature_hits_total")}
    assert hits == {"hash-a", "hash-c", "hash-d"}
    assert value(registry, "otelguard_loop_signature_hits_total", signature="hash-a", agent="x", tool="t",
                 code="exact_failure_warn") == 2  # fmt: skip


def _loop_event(name: str) -> CallEvent:
    sig = Signature("t", f"hash-{name}")
    warn = Decision(action="warn", code="exact_failure_warn", tool_name="t", count=2, limit=2, signature=sig)
    allow = Decision(action="allow", code="allow")
    return CallEvent("t", "write", sig, None, "x", None, warn, allow, "failed")


def test_observer_methods_work_without_a_guard() -> None:
    """Telemetry only needs the observer protocol: CallEvent/TurnSummary from any source."""
    registry = CollectorRegistry()
    view = Telemetry(registry=registry).bind()
    view.on_call_end(_loop_event("z"), view.on_call_start(_loop_event("z")))
    view.on_turn_end(TurnSummary(turn_id=None, agent="x", tool_calls=3, halted=False, halt_decision=None))
    assert value(registry, "otelguard_tool_calls_total", agent="x", tool="t", outcome="failed") == 1
    assert value(registry, "otelguard_turns_total", agent="x", outcome="completed") == 1


def _exemplars(registry: CollectorRegistry, name: str) -> list[dict[str, str]]:
    return [s.exemplar.labels for s in samples(registry, name) if s.exemplar is not None]


@pytest.mark.parametrize("span_mode", ["own", "auto", "decisions"])
def test_decision_and_cap_hit_increments_carry_trace_exemplars(span_mode: str) -> None:
    registry = CollectorRegistry()
    guard = make(registry, provider=TracerProvider(), telemetry={"span_mode": span_mode},
                 caps={"turn": {"web_search": 1}})  # fmt: skip
    for _ in range(2):
        call(guard, "terminal", {"c": "make"}, "Error", failed=True)
    guard.start_turn()
    for i in range(2):
        call(guard, "web_search", {"q": i})
    for name in ("otelguard_decisions_total", "otelguard_cap_hits_total"):
        (exemplar, *_) = _exemplars(registry, name)
        assert set(exemplar) == {"trace_id", "span_id"}
        assert len(exemplar["trace_id"]) == 32 and len(exemplar["span_id"]) == 16
        int(exemplar["trace_id"], 16)
    assert b"# {" in openmetrics_text(registry)
    assert _exemplars(registry, "otelguard_tool_calls_total") == []


@pytest.mark.parametrize("span_mode", ["off", "event"])
def test_no_exemplars_without_a_recording_span(span_mode: str) -> None:
    registry = CollectorRegistry()
    guard = make(registry, provider=TracerProvider(), telemetry={"span_mode": span_mode},
                 caps={"turn": {"web_search": 1}})  # fmt: skip
    for i in range(2):
        call(guard, "web_search", {"q": i})
    for _ in range(3):
        call(guard, "terminal", {"c": "make"}, "Error", failed=True)
    assert value(registry, "otelguard_cap_hits_total", agent=AGENT, cap="web_search", scope="turn") == 1
    assert _exemplars(registry, "otelguard_decisions_total") == []
    assert _exemplars(registry, "otelguard_cap_hits_total") == []


def test_prime_creates_zero_series_for_an_agent() -> None:
    registry = CollectorRegistry()
    Telemetry(registry=registry).prime("fresh", tools=("read_file",), caps=("web_search",))
    assert registry.get_sample_value("otelguard_turns_total", {"agent": "fresh", "outcome": "halted"}) == 0
    primed = {"agent": "fresh", "tool": "read_file", "outcome": "ok"}
    assert registry.get_sample_value("otelguard_tool_calls_total", primed) == 0
    # no alert selects on another outcome: those series appear with their first call, not as zeros
    assert [s.labels for s in samples(registry, "otelguard_tool_calls_total")] == [primed]
    assert (
        registry.get_sample_value(
            "otelguard_cap_hits_total", {"agent": "fresh", "cap": "web_search", "scope": "turn"}
        )
        == 0
    )


def test_overlong_tool_and_agent_names_are_bounded_as_the_guard_keeps_them() -> None:
    """A label value is bounded in length, not only in count: a name past 256 characters is its
    prefix and a digest, the one name the guard keeps (and puts on its spans); a shorter one is whole."""
    registry = CollectorRegistry()
    guard = Guard(GuardConfig(signature_key=KEY), Telemetry(None, registry), agent="a" * 300)
    call(guard, "t" * 10_000, {"p": 1}, "x", failed=False)
    call(guard, "r" * 129, {"p": 1}, "x", failed=False)
    labels = [s.labels for s in samples(registry, "otelguard_tool_calls_total")]
    agent = bounded_name("a" * 300)
    assert {"agent": agent, "tool": bounded_name("t" * 10_000), "outcome": "ok"} in labels
    assert {"agent": agent, "tool": "r" * 129, "outcome": "ok"} in labels
    assert all(len(value) <= 256 for entry in labels for value in entry.values())


def test_telemetry_true_shares_one_label_bound_per_process() -> None:
    """Guards made with telemetry=True share Telemetry.default(): the tool-label bound is per process."""
    first, second = (
        Guard(GuardConfig(signature_key=KEY), telemetry=True),
        Guard(GuardConfig(), telemetry=True),
    )
    metrics = [
        next(o for o in guard._observers._observers[0].observers if isinstance(o, PrometheusTelemetry))  # type: ignore[attr-defined]
        for guard in (first, second)
    ]
    assert metrics[0]._space is metrics[1]._space
    assert Telemetry.default() is Telemetry.default()
