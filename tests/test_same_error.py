"""The same_error detector: the very same error from two tools or more, since the turn's last
successful write or shell call.

Counts failures (not refusals, not cancellations) by error fingerprint, whatever the arguments, and
fires only once that error has come from at least two different tools (the count includes the
failures from before the second tool); warns at 3, halts at 6 from after_call with hard_stop;
failure_tolerant does not exempt; reset by a successful write or shell call and by start_turn; state
bounded like every other detector. One tool repeating one error stays with exact_failure and
same_tool_failure, at hermes-agent's thresholds.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from otelguard import Guard, GuardConfig
from otelguard.core.detectors import TurnDetectors
from otelguard.core.detectors.failures import count_error
from otelguard.demo.simulation import DemoStats, SimulatedAgent
from otelguard.testing import ScriptedCall, codes, run_script
from tests.test_detectors import fail, fresh, make_guard, ok, refuse

NOT_READ = "File has not been read yet. Read it first before writing to it."
EDITORS = ("Edit", "MultiEdit", "Write")


def not_read(i: int) -> tuple[Any, ...]:
    """Claude Code's editing tools, in turn, on files never read: the very same error every time."""
    return fail(EDITORS[i % 3], {"file_path": f"/src/module_{i}.py", "content": fresh()}, NOT_READ)


# -- counting --------------------------------------------------------------------------------------


def test_warns_at_the_third_same_error_from_different_tools_and_arguments() -> None:
    """Three failures with one error text, each a different tool and different arguments, warn."""
    steps = run_script(make_guard(hard_stop=False), [not_read(i) for i in range(3)])
    assert codes(steps) == ["allow", "allow", "same_error_warn"]
    decision = steps[-1].decision
    assert (decision.action, decision.count, decision.limit, decision.tool_name) == ("warn", 3, 3, "Write")


def test_every_failure_of_the_streak_warns_with_the_running_count() -> None:
    """From 3 on, every failure with that error warns (hard_stop off: it never halts)."""
    script = [fail(f"editor_{i}", {"file_path": fresh()}, NOT_READ) for i in range(13)]
    steps = run_script(make_guard(hard_stop=False), script)
    assert codes(steps) == ["allow", "allow"] + ["same_error_warn"] * 11
    assert [s.decision.count for s in steps[2:]] == list(range(3, 14))
    assert all(s.decision.action != "halt" for s in steps)


def test_halts_at_six_from_after_call_with_hard_stop() -> None:
    """With hard_stop the 6th same error halts the turn from after_call (the call had run)."""
    guard = make_guard()
    steps = run_script(guard, [not_read(i) for i in range(6)])
    assert codes(steps) == ["allow", "allow"] + ["same_error_warn"] * 3 + ["same_error_halt"]
    assert all(s.ran for s in steps)
    assert steps[-1].decision.action == "halt" and steps[-1].decision.count == 6
    assert guard.halt_decision is not None and guard.halt_decision.code == "same_error_halt"
    assert guard.before_call("Read", {"file_path": "/src/x.py"}).code == "turn_halted"


def test_thresholds_come_from_the_config() -> None:
    """warn_after.same_error and hard_stop_after.same_error set the thresholds."""
    guard = make_guard(warn_after={"same_error": 2}, hard_stop_after={"same_error": 4})
    steps = run_script(guard, [not_read(i) for i in range(4)])
    assert codes(steps) == ["allow", "same_error_warn", "same_error_warn", "same_error_halt"]


def test_failure_tolerant_tools_are_not_exempt() -> None:
    """Two failure-tolerant tools taking turns, failing six times with the very same error, halt on
    same_error (neither could ever halt on same_tool_failure)."""
    gone = "Error: Path /tmp/work does not exist"
    tools = ("terminal", "execute_code")
    script = [fail(tools[i % 2], {"command": f"ls {i}"}, gone) for i in range(6)]
    steps = run_script(make_guard(), script)
    # terminal's 3rd failure (the 5th call) is below a shell's same_tool_failure warning (4)
    assert codes(steps) == ["allow", "allow"] + ["same_error_warn"] * 3 + ["same_error_halt"]


# -- one tool repeating one error: exact_failure's and same_tool_failure's, as in hermes-agent -----


def test_one_tool_repeating_one_error_is_never_same_error() -> None:
    """web_fetch answering `Error: 404` for twelve different URLs: same_tool_failure warns from 3 and
    halts at 8 (hermes-agent's thresholds); same_error never fires, not at 6 either."""
    script = [fail("web_fetch", {"url": f"https://example.com/{i}"}, "Error: 404") for i in range(12)]
    guard = make_guard()
    steps = run_script(guard, script)
    assert codes(steps)[:8] == ["allow", "allow"] + ["same_tool_failure_warn"] * 5 + [
        "same_tool_failure_halt"
    ]
    assert (steps[7].decision.count, steps[7].decision.limit) == (8, 8)
    assert guard.halt_decision is not None and guard.halt_decision.code == "same_tool_failure_halt"
    warned = run_script(make_guard(hard_stop=False), script)
    assert codes(warned) == ["allow", "allow"] + ["same_tool_failure_warn"] * 10


def test_a_shell_printing_the_same_output_for_different_commands_is_not_stopped() -> None:
    """Twelve different greps in the failure-tolerant terminal that all print the same `1 failed`:
    warned by same_tool_failure, never halted, never same_error."""
    script = [fail("terminal", {"command": f"grep -rn pattern_{i} tests"}, "1 failed") for i in range(12)]
    steps = run_script(make_guard(mode="unattended", hard_stop=None), script)
    assert codes(steps) == ["allow"] * 3 + ["same_tool_failure_warn"] * 9  # a shell warns from 4


def test_the_count_includes_failures_from_before_the_second_tool() -> None:
    """Four 404s from web_fetch are not same_error; the fifth, from another tool, is, with count 5; the
    sixth halts."""
    script = [fail("web_fetch", {"url": fresh()}, "Error: 404") for _ in range(4)]
    script += [
        fail("web_extract", {"url": fresh()}, "Error: 404"),
        fail("web_fetch", {"url": fresh()}, "Error: 404"),
    ]
    steps = run_script(make_guard(), script)
    assert codes(steps) == ["allow", "allow"] + ["same_tool_failure_warn"] * 2 + [
        "same_error_warn",
        "same_error_halt",
    ]
    assert [s.decision.count for s in steps[4:]] == [5, 6]


def test_another_error_from_a_second_tool_does_not_count() -> None:
    """The second tool must give the same error: a different error from it leaves the first one
    counted for one tool only."""
    script = [fail("web_fetch", {"url": fresh()}, "Error: 404") for _ in range(5)]
    script.insert(2, fail("web_extract", {"url": fresh()}, "Error: 500"))
    steps = run_script(make_guard(hard_stop=False), script)
    assert "same_error_warn" not in codes(steps)


def test_the_tools_behind_an_error_are_bounded() -> None:
    """However many tools give one error, its record is a count and at most one tool name: only
    "one tool or two" matters."""
    config = GuardConfig.from_mapping({"signature_key": "k", "hard_stop": False})
    detectors = TurnDetectors(config)
    for i in range(500):
        count_error(detectors, 7, f"tool_{i}")
    assert detectors.errors[7] == (500, None)
    single = TurnDetectors(config)
    for _ in range(3):
        assert count_error(single, 7, "bash") == 0
    assert single.errors[7] == (3, "bash")


def test_different_errors_count_apart() -> None:
    """Two errors alternating count separately: each reaches 3 only at its own third occurrence."""
    script = [fail(f"shell_{i}", {"command": fresh()}, f"Error: {'AB'[i % 2]}") for i in range(6)]
    assert codes(run_script(make_guard(), script)) == ["allow"] * 4 + ["same_error_warn"] * 2


def test_json_errors_compare_by_content() -> None:
    """JSON error results compare by content: key order, whitespace and volatile keys do not matter."""
    results = [
        json.dumps({"error": "quota exceeded", "code": 429, "elapsed": 0.1}),
        json.dumps({"code": 429, "error": "quota exceeded", "elapsed": 7.5}, indent=2),
        {"error": "quota exceeded", "code": 429, "timestamp": "now"},
    ]
    script = [fail(f"api_{i}", {"q": fresh()}, result) for i, result in enumerate(results)]
    assert codes(run_script(make_guard(), script))[-1] == "same_error_warn"


@pytest.mark.parametrize("empty", [None, "", "   \n", b""])
def test_failures_without_an_error_text_are_not_counted(empty: Any) -> None:
    """A failure with no result (an exception in a wrapped tool) says nothing about which error."""
    script = [fail(f"tool_{i}", {"q": fresh()}, empty) for i in range(6)]
    script = [(tool, args, empty, True) for tool, args, _, _ in script]
    assert codes(run_script(make_guard(), script)) == ["allow"] * 6


@pytest.mark.parametrize("status", ["Exit code 1", "Error: Exit code 1", "exit status 2", "returncode: 1\n"])
def test_a_bare_exit_status_is_not_an_error_text(status: str) -> None:
    """Six different searches through a shell that each exit 1 with no output are not one error
    repeated: a bare exit status says nothing about what failed."""
    script = [fail(f"shell_{i}", {"command": f"grep -r pattern_{i} src"}, status) for i in range(6)]
    assert codes(run_script(make_guard(hard_stop=True), script)) == ["allow"] * 6


def test_an_exit_status_with_output_is_an_error_text() -> None:
    """The same output after the exit status (a working directory that is gone) is the same error."""
    gone = "Exit code 1\nPath /work/app does not exist"
    script = [fail(f"shell_{i}", {"command": f"ls dir_{i}"}, gone) for i in range(3)]
    assert codes(run_script(make_guard(), script))[-1] == "same_error_warn"


def test_refusals_are_not_counted() -> None:
    """Refusals with the same text belong to the refusal detector, never to same_error."""
    script = [refuse(f"tool_{i}", {"q": fresh()}) for i in range(6)]
    script = [(tool, args, NOT_READ, None, category) for tool, args, _, _, category in script]
    assert "same_error_warn" not in codes(run_script(make_guard(), script))


def test_cancelled_calls_are_not_counted() -> None:
    """A cancelled call with the error text as its result neither counts nor resets."""
    cancelled = [ScriptedCall(f"tool_{i}", {"q": fresh()}, NOT_READ, True, cancelled=True) for i in range(5)]
    steps = run_script(make_guard(), [not_read(0), not_read(1), *cancelled, not_read(2)])
    assert codes(steps) == ["allow"] * 7 + ["same_error_warn"]
    assert steps[-1].decision.count == 3


# -- resets ----------------------------------------------------------------------------------------


def test_a_successful_shell_call_resets_every_error_count() -> None:
    """A successful shell call may be an edit (`sed -i`): the counts start again after it."""
    script = [
        not_read(0),
        not_read(1),
        ok("bash", {"command": "sed -i s/a/b/ x.py"}),
        not_read(2),
        not_read(3),
    ]
    assert codes(run_script(make_guard(), script)) == ["allow"] * 5
    after = run_script(make_guard(), [*script, not_read(4)])
    assert codes(after)[-1] == "same_error_warn"


def test_a_successful_write_resets_every_error_count() -> None:
    """A successful write call is progress: the counts start again after it."""
    script = [not_read(0), not_read(1), ok("Write", {"file_path": "/src/a.py"}), not_read(2), not_read(3)]
    assert codes(run_script(make_guard(), script)) == ["allow"] * 5
    after = run_script(make_guard(), [*script, not_read(4)])
    assert codes(after)[-1] == "same_error_warn"


@pytest.mark.parametrize(
    "between",
    [
        ok("Read", {"file_path": "/src/a.py"}),  # a successful read
        ok("custom_lookup"),  # a successful unknown-class call
        fail("Write", {"file_path": "/src/a.py"}, "Error: disk full"),  # a failed write
        fail("bash", {"command": "sed -i s/a/b/ x.py"}, "sed: no such file"),  # a failed shell call
        ok("process", {"id": "1"}),  # a successful poll
        ScriptedCall("Write", {"file_path": "/src/a.py"}, "ok", False, cancelled=True),  # a cancelled write
    ],
)
def test_only_a_successful_write_resets(between: Any) -> None:
    """A read, an unknown tool, a poll, a failed or cancelled write, a failed shell call in between
    does not reset the count."""
    steps = run_script(make_guard(), [not_read(0), not_read(1), between, not_read(2)])
    assert codes(steps)[-1] == "same_error_warn"


def test_start_turn_resets() -> None:
    """All same_error state is per turn."""
    guard = make_guard()
    run_script(guard, [not_read(i) for i in range(5)])
    guard.start_turn()
    steps = run_script(guard, [not_read(i) for i in range(5)])
    assert codes(steps) == ["allow", "allow", "same_error_warn", "same_error_warn", "same_error_warn"]


def test_state_is_bounded_by_max_tracked_signatures() -> None:
    """Error counts live in an LRU of max_tracked_signatures entries: the oldest error is forgotten."""
    guard = make_guard(max_tracked_signatures=2)
    names = ("A", "A", "B", "C", "A")
    script = [fail(f"shell_{i}", {"command": fresh()}, f"Error: {name}") for i, name in enumerate(names)]
    assert codes(run_script(guard, script)) == ["allow"] * 5
    unbounded = run_script(make_guard(), script)
    assert codes(unbounded)[-1] == "same_error_warn"


# -- order among the after_call decisions ----------------------------------------------------------


def edits_after_a_write(n: int) -> list[tuple[Any, ...]]:
    """Write fails once with NOT_READ, then Edit fails n times with it: a second tool from the start."""
    return [fail("Write", {"file_path": fresh()}, NOT_READ)] + [
        fail("Edit", {"file_path": fresh()}, NOT_READ) for _ in range(n)
    ]


def test_same_tool_failure_halt_before_same_error_halt() -> None:
    """When both first halt on one call (Edit's 5th failure, the error's 6th), same_tool_failure_halt
    comes first."""
    guard = make_guard(warn_after={"same_tool_failure": 3}, hard_stop_after={"same_tool_failure": 5})
    steps = run_script(guard, edits_after_a_write(5))
    assert codes(steps)[-1] == "same_tool_failure_halt"
    assert codes(steps)[:-1].count("same_error_halt") == 0


def test_same_error_halt_before_every_warning() -> None:
    """A halt outranks the same call's warnings (same_tool_failure_warn here)."""
    steps = run_script(make_guard(), edits_after_a_write(5))
    assert codes(steps) == ["allow", "allow", "same_error_warn"] + ["same_tool_failure_warn"] * 2 + [
        "same_error_halt"
    ]


def test_exact_failure_and_same_tool_failure_warnings_come_first() -> None:
    """Warn order: exact_failure_warn, then same_tool_failure_warn, then same_error_warn (the error has
    come from two tools in both scripts)."""
    first = fail("Write", {"file_path": fresh()}, NOT_READ)
    same_call = run_script(
        make_guard(hard_stop=False), [first] + [fail("Edit", {"file_path": "/a"}, NOT_READ)] * 3
    )
    assert codes(same_call)[-1] == "exact_failure_warn"
    same_tool = run_script(make_guard(), edits_after_a_write(3))
    assert codes(same_tool)[-1] == "same_tool_failure_warn"


def test_same_error_warn_before_later_warnings() -> None:
    """same_error_warn comes before the streak warnings of the same call."""
    guard = make_guard(warn_after={"write_streak": 3})
    steps = run_script(guard, [not_read(i) for i in range(3)])
    assert codes(steps)[-1] == "same_error_warn"


def test_config_rejects_warn_above_hard_stop() -> None:
    """warn_after.same_error must not exceed hard_stop_after.same_error."""
    with pytest.raises(ValueError, match=r"warn_after\.same_error"):
        GuardConfig.from_mapping({"warn_after": {"same_error": 7}})


def test_the_demo_scenario_warns_then_halts_on_the_same_error() -> None:
    """`otelguard demo`'s unread_edits scenario (unattended): same_error warns at 3 and halts at 6."""
    stats = DemoStats()
    config = GuardConfig.from_mapping({"mode": "unattended", "signature_key": "k"})
    agent = SimulatedAgent("coder", 0, config, None, stats, threading.Event(), seed=1, interval=0.0)
    guard = Guard(config)
    agent.run_turn(guard, "unread_edits")
    assert stats.snapshot()["codes"] == {"same_error_warn": 3, "same_error_halt": 1}
    assert stats.halted_turns == 1


def test_json_errors_still_compare_by_content_after_many_distinct_errors() -> None:
    """Past hundreds of distinct JSON errors, equal content in different bytes is still one error."""
    noise = [fail(f"api_{i}", {"q": fresh()}, json.dumps({"error": f"e{i}"})) for i in range(300)]
    same = [
        fail(f"api_x{i}", {"q": fresh()}, json.dumps({"error": "quota", "elapsed": i}, indent=i))
        for i in range(3)
    ]
    assert codes(run_script(make_guard(), noise + same))[-1] == "same_error_warn"


def test_warnings_false_silences_the_warning_but_not_the_halt() -> None:
    """warnings: false silences same_error_warn only; with hard_stop the halt still comes at 6."""
    steps = run_script(make_guard(warnings=False), [not_read(i) for i in range(6)])
    assert codes(steps) == ["allow"] * 5 + ["same_error_halt"]
