"""Session caps shared by a session's guards: the store, subagent guards, atomic charges under threads."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from otelguard import Guard, GuardConfig
from otelguard.core import decisions as codes
from otelguard.core.caps import CapRefusal, LocalSessionCaps
from otelguard.hosting import session_cap_store
from otelguard.testing import RecordingObserver

KEY = "test-signature-key"


def config(session: dict[str, int], **more: Any) -> GuardConfig:
    caps = {"turn": dict.fromkeys(session, 0), "session": session}
    return GuardConfig.from_mapping({"signature_key": KEY, "caps": caps, **more})


# -- the in-process store ------------------------------------------------------------------------


def test_a_charge_is_all_or_nothing_and_names_the_first_key_over() -> None:
    """A charge that would overshoot any key charges none and names the first such key, in order."""
    store = LocalSessionCaps()
    assert store.charge([("a", 5), ("b", 2)], 2).refusal is None
    assert store.charge([("a", 5), ("b", 2)], 1).refusal == CapRefusal("b", 2, 2)
    assert store.charge([("b", 2), ("a", 3)], 2).refusal == CapRefusal("b", 2, 2)
    assert store.charge([("a", 3), ("b", 9)], 2).refusal == CapRefusal("a", 2, 3)
    assert store.usage() == {"a": 2, "b": 2}


def test_a_charge_up_to_the_limit_is_allowed() -> None:
    """used + amount == limit is allowed; one more is refused."""
    store = LocalSessionCaps()
    assert store.charge([("a", 3)], 3).refusal is None
    assert store.charge([("a", 3)], 1).refusal == CapRefusal("a", 3, 3)


def test_a_refund_is_floored_at_zero() -> None:
    """Refunds give back what was charged, never below zero, and only for the keys named."""
    store = LocalSessionCaps()
    store.charge([("a", 9), ("b", 9)], 3)
    store.refund(["a"], 2)
    assert store.usage() == {"a": 1, "b": 3}
    store.refund(["a", "b"], 5)
    assert store.usage() == {"a": 0, "b": 0}


def test_usage_is_a_copy() -> None:
    """What ``usage`` returns does not change with later charges."""
    store = LocalSessionCaps()
    before = store.usage()
    store.charge([("a", 9)], 1)
    assert before == {} and store.usage() == {"a": 1}


def test_without_shared_state_every_session_gets_its_own_store() -> None:
    """The factory gives each guard a new in-process store, with or without a session id."""
    cfg = config({"web_search": 3})
    first, second = session_cap_store(cfg, "s1"), session_cap_store(cfg, "s1")
    assert isinstance(first, LocalSessionCaps) and first is not second
    assert isinstance(session_cap_store(cfg, None), LocalSessionCaps)


# -- subagent guards -----------------------------------------------------------------------------


def test_a_subagent_guard_shares_the_session_caps() -> None:
    """Calls of the main guard and of its subagents' guards count against one session cap."""
    main = Guard(config({"web_search": 3}), session_id="s1")
    sub = main.subagent_guard("researcher")
    other = sub.subagent_guard()
    for guard in (main, sub, other):
        assert guard.before_call("web_search", {"q": guard.agent}).allows_execution
    refused = main.before_call("web_search", {"q": "4th"})
    assert (refused.code, refused.count, refused.limit) == (codes.CAP_SESSION, 3, 3)
    assert sub.end_turn().session_cap_usage == {"web_search": 3}


def test_a_subagent_guard_has_its_own_turns_and_detectors() -> None:
    """A subagent's guard is a turn stream of its own: the main guard's failures do not count there."""
    main = Guard(GuardConfig(signature_key=KEY, mode="unattended"))
    sub = main.subagent_guard("worker")
    main.start_turn("1")
    for _ in range(13):  # 5 failures, 7 rejects, and the 13th send is blocked: the main turn halts
        if main.before_call("make", {"t": 1}).allows_execution:
            main.after_call("make", {"t": 1}, "boom", failed=True)
    assert main.halt_decision is not None
    assert sub.turn_id is None and sub.halt_decision is None
    assert sub.before_call("make", {"t": 1}).allows_execution


def test_a_subagent_guard_keeps_config_session_observers_and_agent() -> None:
    """Same config, session id and observers; the agent label is the one given, else the main's."""
    recorder = RecordingObserver()
    cfg = config({"web_search": 3})
    main = Guard(cfg, agent="lead", observers=[recorder], session_id="s9")
    named, unnamed = main.subagent_guard("explorer"), main.subagent_guard()
    assert (named.agent, unnamed.agent) == ("explorer", "lead")
    assert named.config is cfg and named.session_id == unnamed.session_id == "s9"
    named.start_turn("t")
    named.before_call("read_file", {"p": 1})
    assert [t.agent for t in recorder.turns_started] == ["explorer"]


def test_a_call_refused_by_a_detector_gives_its_session_charge_back() -> None:
    """A call that passes the caps but is refused by a hard-stop detector is not charged."""
    guard = Guard(config({"web_search": 10}, mode="unattended"))
    guard.start_turn()
    allowed, refused = 0, []
    for _ in range(6):
        decision = guard.before_call("web_search", {"q": "same"})
        if decision.allows_execution:
            allowed += 1
            guard.after_call("web_search", {"q": "same"}, "rate limited", failed=True)
        else:
            refused.append(decision.code)
    assert refused and refused[0] == codes.EXACT_FAILURE_REJECT
    assert guard.end_turn().session_cap_usage["web_search"] == allowed


def test_turn_cap_then_session_cap_then_detectors() -> None:
    """A call over both a turn cap and a session cap is a turn-cap refusal, and charges nothing."""
    cfg = GuardConfig.from_mapping(
        {"signature_key": KEY, "caps": {"turn": {"web_search": 1}, "session": {"web_search": 5}}}
    )
    guard = Guard(cfg)
    guard.start_turn()
    assert guard.before_call("web_search", {"q": 1}).allows_execution
    assert guard.before_call("web_search", {"q": 2}).code == codes.CAP_TURN
    assert guard.end_turn().session_cap_usage == {"web_search": 1}


# -- atomic under threads ------------------------------------------------------------------------


def race(guards: list[Guard], calls: int) -> int:
    """Each guard makes ``calls`` capped calls from a thread of its own, all released at once; the
    number of calls allowed."""
    allowed = [0] * len(guards)
    barrier = threading.Barrier(len(guards))

    def run(i: int) -> None:
        barrier.wait()
        for n in range(calls):
            if guards[i].before_call("web_search", {"q": f"{i}-{n}"}, call_id=f"{i}-{n}").allows_execution:
                allowed[i] += 1

    workers = [threading.Thread(target=run, args=(i,)) for i in range(len(guards))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return sum(allowed)


@pytest.mark.usefixtures("fast_switching")
def test_a_main_agent_and_its_subagents_in_threads_never_overshoot_a_session_cap() -> None:
    """Eight guards of one session (main + seven subagents) race for a cap of 10 from eight threads,
    50 times over: exactly 10 calls are allowed every time. (With one lock per guard over a shared
    dict, about one round in four allowed more: up to 19.)"""
    cfg = config({"web_search": 10})
    for _ in range(50):
        main = Guard(cfg, session_id="s")
        guards = [main, *(main.subagent_guard(f"sub{i}") for i in range(7))]
        assert race(guards, calls=40) == 10
        assert main.end_turn().session_cap_usage == {"web_search": 10}


def test_restore_sets_the_counts_a_checkpoint_holds() -> None:
    """``restore`` sets the named keys' counts as given (a framework's checkpoint), leaving the
    others, and a later charge counts from them."""
    store = LocalSessionCaps()
    store.charge([("a", 9), ("b", 9)], 1)
    store.restore({"a": 4})
    assert store.usage() == {"a": 4, "b": 1}
    assert store.charge([("a", 5)], 2).refusal == CapRefusal("a", 4, 5)
