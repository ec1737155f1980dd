"""cross_turn_failure: the same call failing the same way turn after turn, remembered per session."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otelguard import ConfigError, Guard, GuardConfig

KEY = "test-signature-key"
SEARCH = {"query": "flights to Boston on the 12th"}
REJECTED = "Error: reservation cannot be modified: basic economy"


def make_guard(**config: Any) -> Guard:
    return Guard(GuardConfig.from_mapping({"signature_key": KEY, "mode": "unattended", **config}))


def turn(guard: Guard, *calls: tuple[str, Any, str, bool]) -> list[tuple[str, str]]:
    """One turn; each call's (before code, after code), after code "" for a call that did not run."""
    guard.start_turn()
    codes = []
    for tool, args, result, failed in calls:
        before = guard.before_call(tool, args)
        if not before.allows_execution:
            codes.append((before.code, ""))
            continue
        codes.append((before.code, guard.after_call(tool, args, result, failed=failed).code))
    guard.end_turn()
    return codes


def failing() -> tuple[str, Any, str, bool]:
    return ("update_reservation_flights", SEARCH, REJECTED, True)


def test_warned_by_the_fourth_turn_and_rejected_by_the_eighth() -> None:
    """Once per turn the same rejected update: turns 1-3 allowed, 4-7 warned, the 8th refused (reject,
    the turn goes on, and again each time it is sent, seven times); sent once more in that turn, the
    turn stops."""
    guard = make_guard()
    seen = [turn(guard, failing()) for _ in range(7)]
    assert [s[0][1] for s in seen] == ["allow"] * 3 + ["cross_turn_failure_warn"] * 4
    eighth = turn(guard, *[failing()] * 8)
    assert eighth == [("cross_turn_failure_reject", "")] * 7 + [("cross_turn_failure_block", "")]
    assert guard.halt_decision is not None and guard.halt_decision.code == "cross_turn_failure_block"


def test_reject_names_the_tool_and_the_turns_not_the_arguments() -> None:
    guard = make_guard()
    for _ in range(7):
        turn(guard, failing())
    guard.start_turn()
    decision = guard.before_call(*failing()[:2])
    assert (decision.action, decision.count, decision.limit) == ("reject", 7, 7)
    assert "update_reservation_flights" in decision.message and "7 turns" in decision.message
    assert "Boston" not in decision.message and "basic economy" not in decision.message


def test_several_failures_in_one_turn_count_as_one_turn() -> None:
    """Three failures in one turn are one turn; exact_failure judges them within the turn."""
    guard = make_guard()
    for _ in range(3):
        turn(guard, failing(), failing())
    assert turn(guard, failing())[0][1] == "cross_turn_failure_warn"
    # the 4th turn, not the 7th: below the refusal
    guard.start_turn()
    assert guard.before_call(*failing()[:2]).action == "allow"


@pytest.mark.parametrize(
    "breaker",
    [
        ("update_reservation_flights", SEARCH, '{"status": "updated"}', False),  # a success of that call
        ("update_reservation_flights", SEARCH, "Error: payment declined", True),  # a different error
    ],
)
def test_a_success_or_a_different_error_ends_the_loop(breaker: tuple[str, Any, str, bool]) -> None:
    guard = make_guard()
    for _ in range(3):
        turn(guard, failing())
    turn(guard, breaker)
    assert [turn(guard, failing())[0][1] for _ in range(3)] == ["allow"] * 3
    assert turn(guard, failing())[0][1] == "cross_turn_failure_warn"


def test_a_different_call_is_not_that_loop() -> None:
    """Another call failing the same way, and the same tool with other arguments, count on their own."""
    guard = make_guard()
    for i in range(6):
        turn(guard, ("update_reservation_flights", {"query": f"attempt {i}"}, REJECTED, True))
    assert turn(guard, failing())[0][1] == "allow"


def test_turns_without_the_call_do_not_reset_it() -> None:
    """Turns in between that never make the call neither count nor reset it."""
    guard = make_guard()
    for _ in range(3):
        turn(guard, failing())
        turn(guard, ("read_file", {"path": "notes.md"}, "notes", False))
    assert turn(guard, failing())[0][1] == "cross_turn_failure_warn"


def test_rereading_a_file_or_polling_a_job_every_turn_is_normal() -> None:
    """Successful reads never count, and neither do polls, failing or not."""
    guard = make_guard()
    for _ in range(12):
        codes = turn(
            guard,
            ("read_file", {"path": "a.txt"}, "same text", False),
            ("process", {"action": "poll", "id": "job-1"}, "Error: still running", True),
        )
        assert codes == [("allow", "allow"), ("allow", "allow")]


def test_interactive_mode_warns_but_never_refuses() -> None:
    guard = make_guard(mode="interactive")
    seen = [turn(guard, failing()) for _ in range(12)]
    assert [s[0] for s in seen[7:]] == [("allow", "cross_turn_failure_warn")] * 5


def test_the_memory_is_per_guard_and_a_subagent_guard_has_its_own() -> None:
    guard = make_guard()
    for _ in range(7):
        turn(guard, failing())
    assert turn(make_guard(), failing())[0] == ("allow", "allow")
    assert turn(guard.subagent_guard("helper"), failing())[0] == ("allow", "allow")
    assert turn(guard, failing())[0][0] == "cross_turn_failure_reject"


def test_the_memory_is_bounded_by_max_tracked_signatures() -> None:
    """Past max_tracked_signatures calls, the least recently failing one is forgotten."""
    guard = make_guard(max_tracked_signatures=2)
    for _ in range(3):
        turn(guard, failing(), ("a", {}, "Error: a", True))
    turn(guard, ("b", {}, "Error: b", True))  # the third call: the oldest, failing(), goes
    assert turn(guard, ("a", {}, "Error: a", True))[0][1] == "cross_turn_failure_warn"
    assert turn(guard, failing())[0][1] == "allow"


def test_thresholds_are_configurable_and_validated() -> None:
    guard = make_guard(warn_after={"cross_turn_failure": 2}, hard_stop_after={"cross_turn_failure": 3})
    seen = [turn(guard, failing()) for _ in range(3)]
    assert [s[0][1] for s in seen] == ["allow", "cross_turn_failure_warn", "cross_turn_failure_warn"]
    assert turn(guard, failing())[0][0] == "cross_turn_failure_reject"
    with pytest.raises(ConfigError, match=r"warn_after\.cross_turn_failure"):
        GuardConfig.from_mapping({"warn_after": {"cross_turn_failure": 9}})
    with pytest.raises(ConfigError, match=r"hard_stop_after\.cross_turn_failure"):
        GuardConfig.from_mapping({"hard_stop_after": {"cross_turn_failure": 0}})


def test_rejects_before_stop_zero_stops_at_once() -> None:
    guard = make_guard(rejects_before_stop=0)
    for _ in range(7):
        turn(guard, failing())
    assert turn(guard, failing()) == [("cross_turn_failure_block", "")]
    with pytest.raises(ConfigError, match="rejects_before_stop"):
        GuardConfig.from_mapping({"rejects_before_stop": -1})


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.lists(
            st.tuples(
                st.sampled_from(["api", "read_file", "bash", "process"]), st.integers(0, 2), st.booleans()
            ),
            max_size=5,
        ),
        max_size=12,
    )
)
def test_never_raises_and_counts_at_most_one_per_turn(script: list[list[tuple[str, int, bool]]]) -> None:
    guard = make_guard(max_tracked_signatures=3)
    for n, calls in enumerate(script, start=1):
        seen = turn(guard, *[(tool, {"a": a}, f"Error: {a}" if bad else "ok", bad) for tool, a, bad in calls])
        counts = [guard._memory.turns_failed(sig) for sig in list(guard._memory.failures)]
        assert all(0 < c <= n for c in counts)
        assert len(counts) <= 3
        assert all(code != "internal_error" for pair in seen for code in pair)
