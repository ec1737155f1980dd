"""Delegation cycles: delegating to an agent already on the delegation path (a handoff ping-pong
A<->B, an agent calling itself as a tool) is warned, then refused once, then stopped, from the path
alone, so across processes too; a refused cycle holds no charge."""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from otelguard import Guard, GuardConfig, propagation
from otelguard.core import decisions as codes
from otelguard.core.tree import CYCLE_REFUSED_AT, local_tree_caps, reentries

KEY = "cycles-signature-key"


def config(**more: Any) -> GuardConfig:
    caps = {"on_hit": "reject", "tree": {"transfer_to_*": 100}, **more.pop("caps", {})}
    return GuardConfig.from_mapping({"signature_key": KEY, "mode": "unattended", "caps": caps, **more})


def root(cfg: GuardConfig, agent: str = "a") -> Guard:
    guard = Guard(cfg, session_id=f"cycles-{uuid.uuid4().hex}", agent=agent)
    guard.start_turn()
    return guard


def hand(guard: Guard, to: str, n: int = 0) -> tuple[str, Guard | None]:
    """``guard``'s agent hands the work to ``to``: the decision's code (the after_call verdict for a
    handoff that ran) and the guard of the agent it started (``None``: refused)."""
    call_id = f"h{n}-{uuid.uuid4().hex[:6]}"
    decision = guard.before_call(f"transfer_to_{to}", {}, call_id=call_id, delegate_to=to)
    if not decision.allows_execution:
        return decision.code, None
    code = guard.after_call(f"transfer_to_{to}", {}, "handed", failed=False, call_id=call_id).code
    child = guard.subagent_guard(to)
    child.start_turn()
    return code, child


def test_reentries_counts_the_returns_to_an_agent_already_on_the_path() -> None:
    assert reentries(("a",), "b") == 0
    assert reentries(("a", "b"), "a") == 1
    assert reentries(("a",), "a") == 1  # an agent calling itself
    assert reentries(("a", "b", "a"), "b") == 2
    assert reentries(("a", "b", "a", "b"), "a") == 3
    assert reentries(("a", "b", "c"), "d") == 0


@given(st.lists(st.sampled_from("abcd"), min_size=1, max_size=12), st.sampled_from("abcde"))
def test_reentries_is_the_path_length_less_its_distinct_agents(path: list[str], agent: str) -> None:
    assert reentries(path, agent) == len(path) + 1 - len({*path, agent})


def test_a_handoff_ping_pong_is_warned_then_refused_once_then_stopped() -> None:
    a = root(config())
    code, b = hand(a, "b")
    assert code == "allow" and b is not None and b.delegation_tree is not None
    assert b.delegation_tree.depth == 1
    code, a2 = hand(b, "a")  # back to a: the first re-entry
    assert code == codes.DELEGATION_CYCLE_WARN and a2 is not None
    first = a2.before_call("transfer_to_b", {}, call_id="x1", delegate_to="b")  # the second: refused
    assert (first.action, first.code, first.count, first.limit) == (
        "reject",
        codes.DELEGATION_CYCLE_REJECT,
        2,
        CYCLE_REFUSED_AT,
    )
    assert first.message and "already on this delegation path" in first.message
    assert a2.halt_decision is None  # a reject: the turn goes on
    assert a2.before_call("search", {"q": "x"}, call_id="s").allows_execution  # other work goes on
    second = a2.before_call("transfer_to_b", {}, call_id="x2", delegate_to="b")
    assert (second.action, second.code) == ("block", codes.DELEGATION_CYCLE_BLOCK)
    assert a2.halt_decision is not None and a2.halt_decision.code == codes.DELEGATION_CYCLE_BLOCK
    summary = a2.end_turn()
    assert summary.decisions[codes.DELEGATION_CYCLE_REJECT] == 1
    assert summary.decisions[codes.DELEGATION_CYCLE_BLOCK] == 1


def test_the_warning_is_the_after_call_verdict_and_annotates_the_result() -> None:
    a = root(config())
    _code, b = hand(a, "b")
    assert b is not None
    before = b.before_call("transfer_to_a", {}, call_id="w", delegate_to="a")
    assert before.allows_execution and before.code == codes.DELEGATION_CYCLE_WARN
    after = b.after_call("transfer_to_a", {}, "handed", failed=False, call_id="w")
    assert after.code == codes.DELEGATION_CYCLE_WARN and after.action == "warn"
    assert "already on this delegation path" in after.annotate("handed")
    assert b.end_turn().decisions[codes.DELEGATION_CYCLE_WARN] == 1  # counted once


def test_an_agent_calling_itself_as_a_tool_recursively_is_stopped() -> None:
    a = root(config())
    code, a1 = hand(a, "a")
    assert code == codes.DELEGATION_CYCLE_WARN and a1 is not None
    assert hand(a1, "a")[0] == codes.DELEGATION_CYCLE_REJECT
    assert hand(a1, "a")[0] == codes.DELEGATION_CYCLE_BLOCK


def test_without_hard_stop_a_cycle_is_only_warned() -> None:
    guard = root(config(mode="interactive"))
    seen = []
    for n in range(4):
        code, child = hand(guard, "b" if n % 2 == 0 else "a", n)
        assert child is not None
        seen.append(code)
        guard = child
    assert seen == ["allow"] + [codes.DELEGATION_CYCLE_WARN] * 3


def test_cycles_false_leaves_a_ping_pong_to_the_depth_limit() -> None:
    guard = root(config(delegation={"cycles": False, "max_depth": 3}))
    seen = []
    for n in range(4):
        code, child = hand(guard, "b" if n % 2 == 0 else "a", n)
        seen.append(code)
        guard = child if child is not None else guard
    assert seen == ["allow", "allow", "allow", codes.DELEGATION_DEPTH]


def test_rejects_before_stop_zero_stops_the_refused_cycle_at_once() -> None:
    a = root(config(rejects_before_stop=0))
    _code, b = hand(a, "b")
    assert b is not None
    _code, a2 = hand(b, "a")
    assert a2 is not None
    assert hand(a2, "b")[0] == codes.DELEGATION_CYCLE_BLOCK


def test_a_new_turn_refuses_a_cycle_once_again_before_it_stops() -> None:
    a = root(config())
    _code, b = hand(a, "b")
    assert b is not None
    _code, a2 = hand(b, "a")
    assert a2 is not None
    assert hand(a2, "b")[0] == codes.DELEGATION_CYCLE_REJECT
    a2.start_turn()
    assert hand(a2, "b")[0] == codes.DELEGATION_CYCLE_REJECT
    assert hand(a2, "b")[0] == codes.DELEGATION_CYCLE_BLOCK


def test_a_delegation_that_breaks_the_pattern_ends_the_reject() -> None:
    a = root(config())
    _code, b = hand(a, "b")
    assert b is not None
    _code, a2 = hand(b, "a")
    assert a2 is not None
    assert hand(a2, "b")[0] == codes.DELEGATION_CYCLE_REJECT
    assert hand(a2, "c")[0] == "allow"  # a new agent: no cycle, the pattern broke
    assert hand(a2, "b")[0] == codes.DELEGATION_CYCLE_REJECT


def test_a_refused_cycle_holds_no_tree_charge() -> None:
    a = root(config())
    _code, b = hand(a, "b")
    assert b is not None
    _code, a2 = hand(b, "a")
    assert a2 is not None and a2.delegation_tree is not None
    store = local_tree_caps(a2.delegation_tree.root)
    assert store.usage() == {"transfer_to_*": 2}
    assert hand(a2, "b")[0] == codes.DELEGATION_CYCLE_REJECT
    assert hand(a2, "b")[0] == codes.DELEGATION_CYCLE_BLOCK
    assert store.usage() == {"transfer_to_*": 2}


def test_a_cycle_is_seen_across_processes_from_the_baggage_path() -> None:
    """The planner hands to a researcher on another service, which hands back to a planner on a
    third: the path in the baggage shows the planner twice, so that delegation is a cycle."""
    cfg = config()
    planner = root(cfg, "planner")
    headers: dict[str, str] = {}
    propagation.inject(headers, planner)
    with propagation.extract(headers):
        researcher = Guard(cfg, session_id="service-2", agent="researcher")
    researcher.start_turn()
    decision = researcher.before_call("transfer_to_planner", {}, call_id="p", delegate_to="planner")
    assert decision.code == codes.DELEGATION_CYCLE_WARN
    researcher.after_call("transfer_to_planner", {}, "ok", failed=False, call_id="p")
    back: dict[str, str] = {}
    propagation.inject(back, researcher.subagent_guard("planner"))
    assert "planner" not in back["baggage"] and "researcher" not in back["baggage"]
    with propagation.extract(back):
        planner2 = Guard(cfg, session_id="service-3", agent="planner")
    planner2.start_turn()
    refused = planner2.before_call("transfer_to_researcher", {}, call_id="r", delegate_to="researcher")
    assert refused.code == codes.DELEGATION_CYCLE_REJECT


def test_a_guard_in_no_tree_and_a_call_without_a_target_see_no_cycle() -> None:
    plain = Guard(GuardConfig(signature_key=KEY, mode="unattended"), agent="a")
    plain.start_turn()
    assert plain.delegation_tree is None
    for n in range(5):
        assert plain.before_call("transfer_to_a", {"n": n}, call_id=f"t{n}", delegate_to="a").code == "allow"
        plain.after_call("transfer_to_a", {"n": n}, "ok", failed=False, call_id=f"t{n}")
    a = root(config())
    assert a.before_call("transfer_to_a", {}, call_id="x").code == "allow"  # no target named


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(st.text(max_size=300), st.integers(), st.none(), st.binary(max_size=20), st.floats()),
        max_size=12,
    ),
    st.booleans(),
)
def test_any_delegate_to_never_raises_and_never_fails_open(targets: list[Any], unattended: bool) -> None:
    """Whatever a host passes as ``delegate_to`` (text of any kind, a number, bytes, ``None``), the
    guard decides: never an exception, never ``internal_error``."""
    guard = root(config(mode="unattended" if unattended else "interactive"))
    for n, target in enumerate(targets):
        decision = guard.before_call("transfer", {"n": n}, call_id=f"c{n}", delegate_to=target)
        assert decision.code != codes.INTERNAL_ERROR
        if decision.allows_execution:
            after = guard.after_call("transfer", {"n": n}, "ok", failed=False, call_id=f"c{n}")
            assert after.code != codes.INTERNAL_ERROR
        if decision.should_halt:
            guard.start_turn()
