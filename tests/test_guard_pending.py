"""Calls between before_call and after_call: bounded, found again, forgotten with their turn."""

from __future__ import annotations

import tracemalloc

from otelguard import Guard, GuardConfig

KEY = "pending-test-key"


def test_calls_that_never_finish_stay_bounded_under_one_key() -> None:
    """200,000 before_calls with args=None (one pending key) keep at most max_tracked_signatures."""
    guard = Guard(GuardConfig(signature_key=KEY, max_tracked_signatures=256))
    guard.start_turn()
    for _ in range(200_000):
        guard.before_call("list_directory")
    assert guard._pending._count <= 256
    assert sum(len(queue) for queue in guard._pending._queues.values()) == guard._pending._count


def test_an_unfinished_call_does_not_pin_its_turn() -> None:
    """One dangling call per turn must not keep every earlier turn's detector state alive."""
    guard = Guard(GuardConfig(signature_key=KEY))
    tracemalloc.start()
    try:
        for turn in range(60):
            guard.start_turn()
            for i in range(500):
                args = {"path": f"/t{turn}/f{i}"}
                guard.before_call("read_file", args)
                guard.after_call("read_file", args, "text", failed=False)
            guard.before_call("web_fetch", {"url": turn}, call_id=f"dangling-{turn}")
            if turn == 10:
                baseline, _ = tracemalloc.get_traced_memory()
        current, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert current - baseline < 2_000_000, current - baseline


def test_a_late_after_call_of_an_earlier_turn_is_still_recorded() -> None:
    """after_call for a call begun before start_turn is counted (its pending entry is gone)."""
    guard = Guard(GuardConfig(signature_key=KEY, mode="unattended"))
    guard.start_turn()
    args = {"command": "make test"}
    guard.before_call("terminal", args, call_id="c1")
    guard.start_turn()
    assert guard.after_call("terminal", args, "boom", failed=True, call_id="c1").action == "allow"
    assert guard.after_call("terminal", args, "boom", failed=True).code == "exact_failure_warn"


def test_halt_decision_stays_after_end_turn_until_the_next_turn() -> None:
    """The first block/halt of a turn stays until the next turn (end_turn does not clear it)."""
    guard = Guard(GuardConfig(signature_key=KEY, mode="unattended"))
    guard.start_turn()
    for _ in range(13):  # five failures, seven rejects, then the block
        if guard.before_call("terminal", {"c": 1}).allows_execution:
            guard.after_call("terminal", {"c": 1}, "Error", failed=True)
    summary = guard.end_turn()
    assert summary.halt_decision is not None
    assert guard.halt_decision == summary.halt_decision
    guard.start_turn()
    assert guard.halt_decision is None
