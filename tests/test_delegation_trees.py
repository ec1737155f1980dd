"""Delegation trees in one process: the config, the tree's identity and its baggage, tree caps charged
across every guard of a tree, and the depth limit."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otelguard import Guard, GuardConfig, propagation
from otelguard.core import decisions as codes
from otelguard.core.tree import DelegationTree, agent_digest, parse_tree, root_tree, tree_digest
from otelguard.errors import ConfigError

KEY = "test-signature-key"
SESSION = "conversation-0451-secret"


def session() -> str:
    """A new conversation: a tree's counters live as long as the process remembers the tree."""
    return f"{SESSION}-{uuid.uuid4().hex}"


def config(tree: dict[str, int] | None = None, **more: Any) -> GuardConfig:
    caps = {
        "on_hit": "reject",  # a refusal leaves the turn going, so that one turn can show several
        "turn": {"subagents": 0, "web_search": 0},
        "session": {"subagents": 0, "web_search": 0},
        "tree": tree if tree is not None else {"web_search": 5},
        **more.pop("caps", {}),
    }
    return GuardConfig.from_mapping({"signature_key": KEY, "caps": caps, **more})


# -- config ------------------------------------------------------------------------------------


def test_the_defaults_are_no_tree_caps_depth_four_and_cycles_on() -> None:
    defaults = GuardConfig()
    assert dict(defaults.caps.tree) == {}
    assert (defaults.delegation.max_depth, defaults.delegation.cycles) == (4, True)
    shown = GuardConfig(caps={"tree": {"subagents": 500}}).to_mapping()
    assert shown["caps"]["tree"] == {"subagents": 500}
    assert shown["delegation"] == {"max_depth": 4, "cycles": True}
    assert GuardConfig.from_mapping({"caps": shown["caps"]}).caps.tree == {"subagents": 500}  # reads back


@pytest.mark.parametrize(
    ("mapping", "key", "allowed"),
    [
        ({"caps": {"tree": {"subagents": -1}}}, "caps.tree.subagents", "integer >= 0"),
        ({"caps": {"tree": ["subagents"]}}, "caps.tree", "mapping"),
        ({"delegation": {"max_depth": 33}}, "delegation.max_depth", "from 0 to 32"),
        ({"delegation": {"max_depth": True}}, "delegation.max_depth", "from 0 to 32"),
        ({"delegation": {"cycles": "yes"}}, "delegation.cycles", "true or false"),
        ({"delegation": {"max_dept": 3}}, "delegation.max_dept", "max_depth"),
        ({"delegation": 4}, "delegation", "mapping"),
    ],
)
def test_a_bad_value_is_a_config_error_naming_key_value_and_what_is_allowed(
    mapping: dict[str, Any], key: str, allowed: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        GuardConfig.from_mapping(mapping)
    text = str(raised.value)
    assert text.startswith(f"{key}:") and allowed in text


# -- identity and baggage ------------------------------------------------------------------------


def test_digests_are_keyed_stable_and_never_the_raw_ids() -> None:
    key = KEY.encode()
    assert tree_digest(SESSION, key) == tree_digest(SESSION, key)
    assert tree_digest(SESSION, key) != tree_digest(SESSION, b"another key")
    assert len(tree_digest(SESSION, key)) == 32 and len(agent_digest("planner", key)) == 12
    guard = Guard(config(), session_id=SESSION, agent="planner")
    headers: dict[str, str] = {}
    propagation.inject(headers, guard)
    assert SESSION not in headers["baggage"] and "planner" not in headers["baggage"]
    assert guard.delegation_tree == root_tree(SESSION, "planner", key)


def test_inject_then_extract_puts_the_callee_one_level_down_in_the_same_tree() -> None:
    caller = Guard(config(), session_id=SESSION, agent="planner")
    headers: dict[str, str] = {}
    propagation.inject(headers, caller)
    with propagation.extract(headers) as sent:
        assert sent == caller.delegation_tree
        callee = Guard(config(), session_id="the callee's own session", agent="researcher")
    tree = callee.delegation_tree
    assert tree is not None and caller.delegation_tree is not None
    assert tree.root == caller.delegation_tree.root and tree.depth == 1
    assert tree.path == (*caller.delegation_tree.path, agent_digest("researcher", KEY.encode()))
    assert propagation.current_tree() is None  # the block restored the context
    assert Guard(config(), session_id="later").delegation_tree != tree


def test_a_guard_without_tree_caps_and_no_current_tree_is_in_no_tree() -> None:
    assert Guard(GuardConfig(signature_key=KEY), session_id=SESSION).delegation_tree is None
    headers: dict[str, str] = {}
    propagation.inject(headers, Guard(GuardConfig(signature_key=KEY)))
    assert "otelguard" not in headers.get("baggage", "")


@pytest.mark.parametrize(
    "baggage",
    [
        "otelguard.tree=xyz,otelguard.depth=0,otelguard.path=0123456789ab",  # root not a digest
        f"otelguard.tree={'a' * 32},otelguard.depth=0",  # no path
        f"otelguard.tree={'a' * 32},otelguard.depth=0,otelguard.path={'0' * 12}%2C{'1' * 12}",  # forged depth
        f"otelguard.tree={'a' * 32},otelguard.depth=-1,otelguard.path=0123456789ab",
        f"otelguard.tree={'a' * 32},otelguard.depth=100,otelguard.path=0123456789ab",
        f"otelguard.tree={'a' * 32},otelguard.depth=0,otelguard.path=planner",  # a raw name
        "otelguard.tree=" + "a" * 10_000,  # a member over 4096 bytes
        f"otelguard.tree={'a' * 32},otelguard.depth=0,otelguard.path=0123456789ab,pad={'x' * 40_000}",  # oversized
    ],
)
def test_bad_baggage_is_ignored_counted_and_never_refuses_a_call(baggage: str) -> None:
    before = propagation.ignored_baggage()
    with propagation.extract({"baggage": baggage}) as tree:
        guard = Guard(config(delegation={"max_depth": 1}), session_id=SESSION)
    assert tree is None
    assert propagation.ignored_baggage() == before + 1
    assert guard.delegation_tree is not None and guard.delegation_tree.depth == 0  # its own root
    assert guard.before_call("Task", {"prompt": "go"}).action == "allow"


def test_baggage_of_others_without_a_tree_is_not_counted_as_bad() -> None:
    before = propagation.ignored_baggage()
    assert propagation.read_tree({"baggage": "userId=alice,isProduction=false"}) is None
    assert propagation.ignored_baggage() == before


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300), st.text(max_size=40), st.text(max_size=80))
def test_reading_any_baggage_never_raises(raw: str, depth: str, path: str) -> None:
    propagation.read_tree({"baggage": raw})
    propagation.read_tree(
        {"baggage": f"otelguard.tree={'b' * 32},otelguard.depth={depth},otelguard.path={path}"}
    )
    assert parse_tree("b" * 32, depth, path) is None or parse_tree("b" * 32, depth, path) is not None


def test_parse_tree_accepts_exactly_a_consistent_tree() -> None:
    root, one, two = "c" * 32, "0" * 12, "1" * 12
    assert parse_tree(root, "1", f"{one},{two}") == DelegationTree(root, 1, (one, two))
    assert parse_tree(root, "0", f"{one},{two}") is None  # a depth lower than its path: forged
    assert parse_tree(root, "01", f"{one},{two}") == DelegationTree(root, 1, (one, two))
    assert parse_tree(root.upper(), "0", one) is None


# -- tree caps -----------------------------------------------------------------------------------


def test_a_tree_cap_holds_across_the_main_agent_its_subagents_and_a_callee() -> None:
    main = Guard(config({"web_search": 5}), session_id=session(), agent="planner")
    sub = main.subagent_guard("researcher")
    headers: dict[str, str] = {}
    propagation.inject(headers, sub)
    with propagation.extract(headers):
        callee = Guard(config({"web_search": 5}), session_id="elsewhere", agent="reader")
    guards = [main, sub, callee, main, sub]
    assert [g.before_call("web_search", {"q": i}).action for i, g in enumerate(guards)] == ["allow"] * 5
    for guard in (main, sub, callee):
        refused = guard.before_call("web_search", {"q": "one more"})
        assert (refused.code, refused.cap, refused.count, refused.limit) == (
            codes.CAP_TREE,
            "web_search",
            5,
            5,
        )
        assert "already used 5 of its 5" in refused.message


def test_a_batch_is_charged_whole_or_not_at_all_and_a_refused_call_is_not_charged() -> None:
    guard = Guard(config({"subagents": 4}), session_id=session())
    other = guard.subagent_guard("worker")
    assert guard.before_call("delegate_task", {"tasks": [1, 2, 3]}).action == "allow"
    refused = other.before_call("delegate_task", {"tasks": [1, 2]})
    assert refused.code == codes.CAP_TREE and refused.count == 3
    assert other.before_call("delegate_task", {"tasks": [1]}).action == "allow"  # nothing was taken


def test_a_call_refused_by_a_session_cap_takes_nothing_from_the_tree() -> None:
    cfg = config({"web_search": 2}, caps={"session": {"web_search": 1, "subagents": 0}})
    first, second = Guard(cfg, session_id="a"), None
    assert first.before_call("web_search", {"q": 1}).action == "allow"
    assert first.before_call("web_search", {"q": 2}).code == codes.CAP_SESSION
    headers: dict[str, str] = {}
    propagation.inject(headers, first)
    with propagation.extract(headers):
        second = Guard(cfg, session_id="b")
    assert second.before_call("web_search", {"q": 3}).code == "allow"  # the tree's second, not its third


def test_a_refused_call_gets_its_tree_charge_back() -> None:
    guard = Guard(config({"web_search": 1}), session_id=session())
    assert guard.before_call("web_search", {"q": 1}, call_id="c1").action == "allow"
    guard.after_call("web_search", {"q": 1}, None, refusal="denied by the user", call_id="c1")
    assert guard.before_call("web_search", {"q": 2}).action == "allow"
    assert guard.before_call("web_search", {"q": 3}).code == codes.CAP_TREE


def test_threads_of_many_guards_never_overshoot_a_tree_cap() -> None:
    root = Guard(config({"web_search": 50}), session_id=session())
    guards = [root.subagent_guard(f"worker-{i}") for i in range(8)]
    allowed: list[int] = []
    lock = threading.Lock()

    def work(guard: Guard, n: int) -> None:
        count = sum(guard.before_call("web_search", {"q": f"{n}-{i}"}).action == "allow" for i in range(20))
        with lock:
            allowed.append(count)

    threads = [threading.Thread(target=work, args=(g, n)) for n, g in enumerate(guards)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(allowed) == 50


# -- depth ---------------------------------------------------------------------------------------


def test_an_agent_at_max_depth_may_not_delegate_but_goes_on() -> None:
    cfg = config(delegation={"max_depth": 2})
    root = Guard(cfg, session_id=session(), agent="a")
    child = root.subagent_guard("b")
    grandchild = child.subagent_guard("c")
    assert grandchild.delegation_tree is not None and grandchild.delegation_tree.depth == 2
    assert child.before_call("Task", {"prompt": "go"}).action == "allow"
    refused = grandchild.before_call("Task", {"prompt": "go"})
    assert (refused.action, refused.code, refused.count, refused.limit) == (
        "reject",
        codes.DELEGATION_DEPTH,
        2,
        2,
    )
    assert grandchild.halt_decision is None  # only the spawn is refused
    assert grandchild.before_call("web_search", {"q": "x"}).action == "allow"


def test_depth_zero_allows_no_delegation_at_all() -> None:
    guard = Guard(GuardConfig(signature_key=KEY, delegation={"max_depth": 0}))
    assert guard.before_call("spawn_agent", {}).code == codes.DELEGATION_DEPTH


def test_the_process_keeps_the_counters_of_at_most_max_trees_trees_no_guard_holds() -> None:
    import gc

    from otelguard.core import tree as trees

    held = trees.local_tree_caps("e" * 32)  # a guard of this tree lives on
    held.charge([("web_search", 9)], 1)
    trees.local_tree_caps("f" * 32).charge([("web_search", 9)], 1)  # nobody holds this one
    for n in range(trees.MAX_TREES):
        trees.local_tree_caps(f"{n:032x}")
    gc.collect()
    assert len(trees._trees) == trees.MAX_TREES
    assert trees.local_tree_caps("f" * 32).usage() == {}  # the oldest tree no one held was forgotten
    assert trees.local_tree_caps("e" * 32) is held  # a held tree keeps its one set of counters
    assert held.usage() == {"web_search": 1}


def test_a_tree_cap_hit_counts_with_scope_tree_and_no_tree_id_in_any_label() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from otelguard import Telemetry

    registry = CollectorRegistry()
    conversation = session()
    guard = Guard(
        config({"web_search": 1}), Telemetry(registry=registry, span_mode="off"), session_id=conversation
    )
    guard.before_call("web_search", {"q": 1})
    assert guard.before_call("web_search", {"q": 2}).code == codes.CAP_TREE
    assert (
        registry.get_sample_value(
            "otelguard_cap_hits_total", {"agent": "default", "cap": "web_search", "scope": "tree"}
        )
        == 1
    )
    exposition = generate_latest(registry).decode()
    tree = guard.delegation_tree
    assert tree is not None and tree.root not in exposition and conversation not in exposition


def test_a_call_a_detector_refuses_leaves_the_tree_uncharged() -> None:
    """A repeated failing search is refused by its detector (hard stop on): the refused calls give
    back their tree charge, so the tree counts only the calls that ran."""
    guard = Guard(config({"web_search": 100}, mode="unattended"), session_id=session())
    ran = 0
    for _ in range(12):
        decision = guard.before_call("web_search", {"q": "the same"})
        if decision.action in ("allow", "warn"):
            ran += 1
            guard.after_call("web_search", {"q": "the same"}, "error: backend down", failed=True)
        else:
            assert decision.code.startswith("exact_failure")
    tree = guard.delegation_tree
    assert tree is not None and 0 < ran < 12
    from otelguard.core.tree import local_tree_caps

    assert local_tree_caps(tree.root).usage() == {"web_search": ran}


def test_claude_code_subagents_are_one_level_down_in_the_session_tree() -> None:
    """Claude Code hook payloads with an ``agent_id`` (a subagent) charge the session's tree and sit
    at depth 1: with ``max_depth: 1`` the subagent's own Task spawn is denied, the main agent's is not."""
    from otelguard.coding_agents.claude_code import ClaudeCodeHooks

    hooks = ClaudeCodeHooks(config({"web_search": 2}, delegation={"max_depth": 1}))
    conversation = session()

    def pre(tool: str, args: dict[str, Any], call_id: str, **extra: Any) -> Any:
        body = {"session_id": conversation, "hook_event_name": "PreToolUse", "tool_name": tool}
        return hooks.handle({**body, "tool_input": args, "tool_use_id": call_id, **extra})

    sub = {"agent_id": "a1", "agent_type": "researcher"}
    assert pre("WebSearch", {"query": "a"}, "t1") is None
    assert pre("WebSearch", {"query": "b"}, "t2", **sub) is None
    denied = pre("WebSearch", {"query": "c"}, "t3", **sub)
    assert denied["hookSpecificOutput"]["permissionDecision"] == "deny"  # the tree's third search
    assert pre("Task", {"prompt": "dig deeper"}, "t4") is None  # depth 0 may delegate
    denied = pre("Task", {"prompt": "dig deeper"}, "t5", **sub)
    assert denied["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert "delegation depth 1" in denied["hookSpecificOutput"]["permissionDecisionReason"]


def _nine_searched_then_rejected(guard: Guard) -> None:
    """The guard's search fails until ``exact_failure`` rejects it; searches that ran bring the tree to 9."""
    failing = {"q": "down"}
    for n in range(5):
        assert guard.before_call("web_search", failing, call_id=f"f{n}").allows_execution
        guard.after_call("web_search", failing, "Error: backend down", failed=True, call_id=f"f{n}")
    assert guard.before_call("web_search", failing, call_id="f").code == codes.EXACT_FAILURE_REJECT
    for n in range(4):
        assert guard.before_call("web_search", {"q": f"ok{n}"}, call_id=f"ok{n}").allows_execution
        guard.after_call("web_search", {"q": f"ok{n}"}, "results", failed=False, call_id=f"ok{n}")


def test_a_call_a_detector_refuses_never_holds_a_tree_charge_even_for_a_moment() -> None:
    """The main agent resends its rejected search while a subagent of the tree searches in parallel
    (each search then cancelled by its host): the subagent, the only one that may take the tree's
    10th search, is never refused ``cap_tree``, and the tree never shows more than 9 + 1."""
    import sys

    from otelguard.core.tree import local_tree_caps

    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # the two guards interleave inside each other's calls
    try:
        main = Guard(
            config({"web_search": 10}, mode="unattended", rejects_before_stop=1_000_000),
            session_id=session(),
        )
        main.start_turn()
        _nine_searched_then_rejected(main)
        tree = main.delegation_tree
        assert tree is not None
        store = local_tree_caps(tree.root)
        assert store.usage() == {"web_search": 9}
        stop = threading.Event()
        wrong: list[str] = []
        highest = [0]

        def resend() -> None:
            n = 0
            while not stop.is_set():
                code = main.before_call("web_search", {"q": "down"}, call_id=f"r{n}").code
                if code not in (
                    codes.EXACT_FAILURE_REJECT,
                    codes.CAP_TREE,
                ):  # cap_tree: the sub held the 10th
                    wrong.append(code)
                highest[0] = max(highest[0], store.usage().get("web_search", 0))
                n += 1

        sub = main.subagent_guard("researcher")
        sub.start_turn()
        refused = 0
        thread = threading.Thread(target=resend)
        thread.start()
        try:
            for n in range(1500):
                decision = sub.before_call("web_search", {"q": f"sub{n}"}, call_id=f"s{n}")
                if decision.allows_execution:
                    sub.after_call("web_search", {"q": f"sub{n}"}, None, call_id=f"s{n}", cancelled=True)
                elif decision.code == codes.CAP_TREE:
                    refused += 1
                else:
                    wrong.append(decision.code)
        finally:
            stop.set()
            thread.join(30)
    finally:
        sys.setswitchinterval(before)
    assert not wrong, wrong[:5]
    assert refused == 0
    assert highest[0] <= 10
    assert store.usage() == {"web_search": 9}


def test_a_call_a_tree_cap_and_a_detector_both_refuse_is_reported_as_the_tree_cap() -> None:
    """The decision order stays (session caps, the tree, the detectors), read without a charge: with
    the tree full the rejected search is ``cap_tree``; with room again it is the detector's reject."""
    from otelguard.core.tree import local_tree_caps

    main = Guard(config({"web_search": 10}, mode="unattended"), session_id=session())
    main.start_turn()
    _nine_searched_then_rejected(main)
    tree = main.delegation_tree
    assert tree is not None
    store = local_tree_caps(tree.root)
    assert store.charge([("web_search", 10)], 1).refusal is None  # another agent of the tree took the 10th
    decision = main.before_call("web_search", {"q": "down"}, call_id="capped")
    assert (decision.code, decision.count, decision.limit) == (codes.CAP_TREE, 10, 10)
    store.refund(["web_search"], 1)
    assert main.before_call("web_search", {"q": "down"}, call_id="again").code == codes.EXACT_FAILURE_REJECT
    assert store.usage() == {"web_search": 9}
