"""A call a detector refuses never holds a session-cap charge, not even for a moment: a subagent
searching in parallel with the main agent's rejected call is never refused ``cap_session`` at 9 of 10,
and the cap stays exact. In process and with a real redis-server."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator

import pytest
from hypothesis import example, given, note, settings
from hypothesis import strategies as st

from otelguard import Guard, GuardConfig
from otelguard.core import decisions as codes
from otelguard.core.caps import LocalSessionCaps, SessionCapStore
from otelguard.core.decisions import Decision, Signature, ToolClass
from otelguard.hosting import session_cap_store
from tests.redis_e2e import RedisServer

KEY = "refused-never-charged-key"
SESSION = "refused-never-charged"
SEARCHES = 1500  # the subagent's searches per run
FAILING = {"q": "same"}


def config(url: str | None = None, on_hit: str = "block") -> GuardConfig:
    mapping: dict[str, object] = {
        "signature_key": KEY,
        "mode": "unattended",  # the hard-stop detectors on
        "rejects_before_stop": 1_000_000,  # the main agent's call stays a reject, never a stop
        "caps": {"on_hit": on_hit, "turn": {"web_search": 0}, "session": {"web_search": 10}},
    }
    if url is not None:
        mapping["state"] = {"url": url, "timeout_ms": 2000}
    return GuardConfig.from_mapping(mapping)


@pytest.fixture
def quick_switches() -> Iterator[None]:
    """Threads switch every 10 µs, so the two guards interleave inside each other's calls."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(before)


def nine_used(main: Guard) -> None:
    """The main agent's search fails in 7 turns, so from then on ``cross_turn_failure`` rejects it in
    every turn; two other searches bring the session to 9."""
    for turn in range(7):
        main.start_turn()
        assert main.before_call("web_search", FAILING, call_id=f"f{turn}").allows_execution
        main.after_call("web_search", FAILING, "Error: backend down", failed=True, call_id=f"f{turn}")
    main.start_turn()
    assert main.before_call("web_search", FAILING, call_id="f").code == codes.CROSS_TURN_FAILURE_REJECT
    for m in range(2):
        assert main.before_call("web_search", {"q": f"ok{m}"}, call_id=f"ok{m}").allows_execution
        main.after_call("web_search", {"q": f"ok{m}"}, "results", failed=False, call_id=f"ok{m}")
    assert main.session_caps.usage() == {"web_search": 9}


def false_refusals(main: Guard) -> tuple[int, int]:
    """The main agent resends its rejected search while a subagent searches (each search then
    cancelled by its host, so the session stays at 9): the subagent's ``cap_session`` refusals (all
    false: only it may take the 10th search) and the highest usage seen meanwhile."""
    store: SessionCapStore = main.session_caps
    stop = threading.Event()
    wrong: list[str] = []
    highest = [0]

    def resend() -> None:
        n = 0
        while not stop.is_set():
            decision = main.before_call("web_search", FAILING, call_id=f"r{n}")
            if decision.code == codes.CAP_SESSION:  # right: the subagent held the 10th just then
                main.start_turn()  # on_hit block stopped the turn; the call stays rejected in the next
            elif decision.code != codes.CROSS_TURN_FAILURE_REJECT:
                wrong.append(decision.code)
            highest[0] = max(highest[0], store.usage().get("web_search", 0))
            n += 1

    sub = main.subagent_guard("researcher")
    sub.start_turn()
    refused = 0
    thread = threading.Thread(target=resend)
    thread.start()
    try:
        for n in range(SEARCHES):
            args = {"q": f"sub{n}"}
            decision = sub.before_call("web_search", args, call_id=f"s{n}")
            if decision.allows_execution:
                sub.after_call("web_search", args, None, call_id=f"s{n}", cancelled=True)
            elif decision.code == codes.CAP_SESSION:
                refused += 1
                sub.start_turn()  # on_hit block stopped the subagent's turn
            else:
                wrong.append(decision.code)
    finally:
        stop.set()
        thread.join(30)
    assert not wrong, wrong[:5]
    return refused, highest[0]


def run(store: SessionCapStore, url: str | None) -> None:
    main = Guard(config(url), session_id=SESSION, session_caps=store)
    nine_used(main)
    refused, highest = false_refusals(main)
    print(f"false cap_session refusals: {refused} of {SEARCHES}; highest usage {highest}")
    assert refused == 0
    assert highest <= 10  # never overshoots
    assert store.usage() == {"web_search": 9}
    # still exact: the 10th search is allowed, the 11th is not
    assert main.subagent_guard("other").before_call("web_search", {"q": "tenth"}).allows_execution
    eleventh = main.subagent_guard("third").before_call("web_search", {"q": "eleventh"})
    assert (eleventh.code, eleventh.count, eleventh.limit) == (codes.CAP_SESSION, 10, 10)


def test_a_rejected_call_never_makes_a_parallel_search_hit_the_session_cap(quick_switches: None) -> None:
    run(LocalSessionCaps(), None)


def test_with_redis_a_rejected_call_never_makes_a_parallel_search_hit_the_session_cap(
    redis_server: RedisServer, quick_switches: None
) -> None:
    cfg = config(redis_server.url)
    store = session_cap_store(cfg, SESSION)
    run(store, redis_server.url)
    key = getattr(store, "key")  # noqa: B009 - the Redis store's hash
    assert redis_server.client.hget(key, "web_search") == b"10"


def test_a_call_both_a_cap_and_a_detector_refuse_is_reported_as_the_cap() -> None:
    """The decision order stays: with the session full, the rejected call is refused ``cap_session``
    (and counts no reject: it is a reject again once the session has room)."""
    store = LocalSessionCaps()
    main = Guard(config(on_hit="reject"), session_id=SESSION, session_caps=store)
    nine_used(main)
    assert store.charge([("web_search", 10)], 1).refusal is None  # another guard took the 10th
    decision = main.before_call("web_search", FAILING, call_id="capped")
    assert (decision.code, decision.count, decision.limit) == (codes.CAP_SESSION, 10, 10)
    store.refund(["web_search"], 1)
    assert main.before_call("web_search", FAILING, call_id="again").code == codes.CROSS_TURN_FAILURE_REJECT
    assert store.usage() == {"web_search": 9}


_STEP = st.tuples(
    st.sampled_from(["web_search", "read_file", "write_file", "Bash", "get_status"]),
    st.integers(0, 1),  # the argument
    st.sampled_from(["same", "same", "other", "failed-a", "failed-a", "failed-b", "turn"]),
)
_LOW = {"exact_failure": 2, "cross_turn_failure": 2, "no_progress": 2, "identical_call": 3, "cycle": 2}
_LOW |= {"stagnation": 2, "unchanged_check": 2}
_LOWER = {"exact_failure": 1, "cross_turn_failure": 1, "no_progress": 1, "identical_call": 2, "cycle": 2}
_LOWER |= {"stagnation": 1, "unchanged_check": 1}


@settings(max_examples=300, deadline=None)
@given(st.lists(_STEP, max_size=120))
@example([("Bash", 0, "failed-a"), ("Bash", 0, "turn")] * 3)  # cross_turn_failure
@example([("write_file", 0, "same")] * 6)  # identical_call
@example([("read_file", 0, "same")] * 6)  # no_progress
@example([("write_file", 0, "same"), ("write_file", 1, "same")] * 4)  # cycle, then its reject resent:
@example([("Bash", n, f"failed-{n}") for n in range(6)])  # same_tool_failure
@example(
    [s for n in range(8) for s in [("Bash", 0, "failed-a"), ("write_file", n + 2, "other")]]
)  # stagnation
@example([("write_file", 0, "same"), ("write_file", 1, "same")] * 2 + [("write_file", 0, "same")] * 2)
def test_the_detectors_side_effect_free_answer_is_the_refusal_they_give(
    steps: list[tuple[str, int, str]],
) -> None:
    """``would_refuse`` (asked before a session cap is charged) says exactly whether ``refuse_before``
    refuses the call, whatever the calls before it: cycles, repeats, failures across turns."""
    guard = Guard(
        GuardConfig.from_mapping(
            {
                "signature_key": KEY,
                "mode": "unattended",
                "rejects_before_stop": 2,
                "hard_stop_after": {**_LOW, "same_tool_failure": 3},
                "warn_after": {**_LOWER, "same_tool_failure": 2},
                "caps": {"on_hit": "reject"},
            }
        )
    )
    mismatches: list[tuple[bool, bool]] = []
    seen: list[bool] = []

    def watch() -> None:
        detectors = guard._current_turn().detectors  # the turn's own detectors
        refuse = detectors.refuse_before

        def checked(sig: Signature, tool_class: ToolClass) -> Decision | None:
            predicted = detectors.would_refuse(sig, tool_class)
            refused = refuse(sig, tool_class)
            seen.append(refused is not None)
            if predicted != (refused is not None):
                mismatches.append((predicted, refused is not None))
            return refused

        detectors.refuse_before = checked  # type: ignore[method-assign]

    guard.start_turn()
    watch()
    for n, (tool, arg, outcome) in enumerate(steps):
        if outcome == "turn":
            guard.start_turn()
            watch()
            continue
        args = {"a": arg}
        decision = guard.before_call(tool, args, call_id=f"c{n}")
        if decision.should_halt or decision.action == "block":
            guard.start_turn()
            watch()
        elif decision.allows_execution:
            failed = outcome.startswith("failed")
            result = f"Error: {outcome}" if failed else ("same" if outcome == "same" else f"r{n}")
            guard.after_call(tool, args, result, failed=failed, call_id=f"c{n}")
    assert mismatches == []
    note(f"{sum(seen)} refusals")
