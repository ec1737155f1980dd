"""stagnation: a shell command returning what it already returned, in other words or not.

The two shapes no exact rule stopped in unattended mode (a shell listing the same directory sixty
times; a check failing the same way after each of sixty edits), the threshold, the reset, the
escalation (warn, reject, stop), the normalisation, the near-duplicate sketch and the bounds."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from otelguard import ConfigError, GuardConfig
from otelguard.core.decisions import LOOP_CODES, Signature
from otelguard.core.detectors import stagnation
from otelguard.core.detectors.stagnation import StagnationMemory, normalised, sketch
from otelguard.testing import ScriptStep, codes, run_script
from tests.test_detectors import make_guard

LISTING = (
    "total 8\ndrwxr-xr-x 2 root root 4096 Dec  5 10:00 .\n-rw-r--r-- 1 root root  120 Dec  5 10:00 a.py\n"
)


def _traceback(i: int) -> str:
    """The same failure in other words: line numbers, an address, a timestamp and a temp path vary."""
    return (
        f"[{2026}-12-05T10:{i % 60:02d}:{(7 * i) % 60:02d}Z] running reproduce.py (pid {4000 + i})\n"
        "Traceback (most recent call last):\n"
        f'  File "/repo/reproduce.py", line {10 + i}, in <module>\n'
        "    main()\n"
        f'  File "/tmp/tmp{i:x}abcd/lib.py", line {200 + i}, in main\n'
        f"    raise ValueError(obj)\nValueError: <Widget object at 0x7f{i:08x}> has no attribute 'size'\n"
        f"\x1b[31m1 failed\x1b[0m in {0.25 + i / 100:.2f}s\n"
    )


def _first_stop(steps: list[ScriptStep]) -> int:
    """The 1-based index of the first call that stopped the turn."""
    for index, step in enumerate(steps, 1):
        if step.decision.should_halt or step.before.action == "block":
            return index
    raise AssertionError(f"never stopped: {codes(steps)}")


def test_a_shell_listing_the_same_directory_is_stopped_by_its_40th_call() -> None:
    """`ls -la` with the same output sixty times, unattended: stopped by its 40th identical call."""
    guard = make_guard(mode="unattended", hard_stop=None)
    steps = run_script(guard, [("bash", {"command": "ls -la"}, LISTING, False)] * 60)
    assert _first_stop(steps) <= 40
    assert "stagnation_reject" in codes(steps)  # its warnings are identical_call's, which come first
    assert guard.halt_decision is not None and guard.halt_decision.code == "stagnation_block"


def test_a_check_failing_the_same_way_after_each_edit_is_stopped() -> None:
    """`python reproduce.py` -> the same traceback in other words, an edit, and again, sixty times:
    warned from the 11th repeat, at the 12th (the stop) that the next such result stops the turn,
    and each run coming right after an edit (never refused before it runs), the 13th halts."""
    guard = make_guard(mode="unattended", hard_stop=None)
    script: list[tuple[Any, ...]] = []
    for i in range(60):
        script.append(("execute_bash", {"command": "python reproduce.py"}, _traceback(i), True))
        script.append(
            ("str_replace_editor", {"path": "/repo/lib.py", "new_str": f"fix {i}"}, "edited", False)
        )
    steps = run_script(guard, script)
    stop = _first_stop(steps)
    assert stop == 29  # the 15th run: its 13th repeat
    checks = steps[:stop:2]
    assert [s.decision.code for s in checks[-3:]] == ["stagnation_warn", "stagnation_warn", "stagnation_halt"]
    assert "turn stops" in checks[-2].decision.message and "turn stops" not in checks[-3].decision.message
    assert "stagnation_reject" not in codes(steps) and all(s.ran for s in steps[:stop])
    assert guard.halt_decision is not None and guard.halt_decision.code == "stagnation_halt"


def _fix_attempts(results: list[str], failed: bool = True) -> list[tuple[Any, ...]]:
    """The check run once per result (failing, unless told otherwise), an edit after each run."""
    script: list[tuple[Any, ...]] = []
    for i, result in enumerate(results):
        script.append(("bash", {"command": "python t.py"}, result, failed))
        script.append(("edit", {"path": "t.py", "text": f"attempt {i}"}, "ok", False))
    return script


def _fix_attempts_passing(results: list[str]) -> list[tuple[Any, ...]]:
    return _fix_attempts(results, failed=False)


def test_warns_from_the_eleventh_repeat_and_only_warns_without_hard_stop() -> None:
    """The count is the runs returning a result already returned: the 13th run of the same failure in
    other words is the 11th repeat counted (the first run's result is not sketched), and warns; with
    hard_stop off it never refuses or stops."""
    guard = make_guard(hard_stop=False)
    steps = run_script(guard, _fix_attempts([_traceback(i) for i in range(40)]))
    checks = steps[::2]
    assert "stagnation_warn" not in codes(checks[:12])
    assert checks[12].decision.code == "stagnation_warn" and checks[12].decision.count == 11
    assert all(s.before.allows_execution and not s.decision.should_halt for s in steps)


def test_a_new_result_resets_the_count() -> None:
    """A check whose result changes before the warning count is never warned: a new result is progress."""
    results = [
        f"NameError: name 'helper_{chr(97 + block)}' is not defined" for block in range(8) for _ in range(11)
    ]
    steps = run_script(make_guard(mode="unattended", hard_stop=None), _fix_attempts(results))
    assert "stagnation_warn" not in codes(steps)
    assert all(s.before.allows_execution for s in steps)
    longer = results[:11] + results[:1]  # a 12th run of the same failure: the count was not reset
    assert "stagnation_warn" in codes(run_script(make_guard(hard_stop=False), _fix_attempts(longer)))


def test_other_commands_between_do_not_reset_a_check() -> None:
    """Counting is per command: different commands between two runs of the check change nothing."""
    guard = make_guard(hard_stop=False)
    script: list[tuple[Any, ...]] = []
    for i in range(13):
        script.append(("bash", {"command": "python reproduce.py"}, _traceback(i), True))
        script.append(("bash", {"command": f"cat lib_{i}.py"}, f"def f_{i}(): pass", False))
    got = codes(run_script(guard, script))
    assert got[-2] == "stagnation_warn"
    assert got[-1] == "allow"


def test_only_shell_tools_count() -> None:
    """A read tool returning the same thing is no_progress's job, not stagnation's."""
    guard = make_guard(hard_stop=False)
    got = codes(run_script(guard, [("search", {"q": f"x{i}"}, LISTING, False) for i in range(30)]))
    assert "stagnation_warn" not in got


def test_normalisation_drops_volatile_parts_and_keeps_names() -> None:
    """Timestamps, durations, addresses, ids, temp paths, pids, line numbers and ANSI codes go; a
    name's own number (test_3 against test_4, py3) stays."""
    assert normalised(_traceback(1)) == normalised(_traceback(37))
    assert normalised("FAILED test_3") != normalised("FAILED test_4")
    assert normalised("commit 3f9a2b1c at 2026-12-05T10:07:14Z, py3") == normalised(
        "commit 7e0d11aa at 2026-12-06T11:17:04Z, py3"
    )
    assert "\x1b" not in normalised(_traceback(2))
    assert "0x" not in normalised(_traceback(2)) and "/tmp" not in normalised(_traceback(2))
    assert normalised("  a \n\n b\t") == "a b"


SIG = Signature("bash", "h")


def test_the_same_failure_with_a_word_more_is_a_near_duplicate() -> None:
    """The sketch takes a long traceback with one line more as the same; a different error as new."""
    memory = StagnationMemory()
    names = [chr(97 + n % 26) + chr(97 + n // 26) for n in range(30)]
    body = "\n".join(f"  File lib/module_{n}.py, in function_{n}\n    call_{n}(argument)" for n in names)
    assert memory.record(SIG, None, 1, body + "\nKeyError: 'size'", False, False) == 0
    assert (
        memory.record(SIG, None, 2, "warning: deprecated\n" + body + "\nKeyError: 'size'", False, False) == 1
    )
    other = "\n".join(f"collected item_{chr(97 + n % 26)} passed" for n in range(30))
    assert memory.record(SIG, None, 3, other, False, False) == 0


def test_the_same_output_counts_from_the_second_run_without_being_sketched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The quiet path: a command's first run leaves only the raw digest the guard already made, and a
    run returning the very same output is counted by that digest; no result is normalised or
    sketched until one comes back that the command has not returned before."""
    sketched: list[Any] = []
    real = stagnation.sketch

    def counting(result: Any) -> stagnation.ResultSketch:
        sketched.append(result)
        return real(result)

    monkeypatch.setattr(stagnation, "sketch", counting)
    guard = make_guard(hard_stop=False)
    got = codes(run_script(guard, _fix_attempts([LISTING] * 13))[::2])
    assert sketched == []
    assert got.index("stagnation_warn") == 11  # the 2nd run is the 1st repeat: the 12th warns at 11
    assert got.count("stagnation_warn") == 2
    run_script(guard, _fix_attempts([LISTING + "x.py\n"]))
    assert len(sketched) == 1  # new for the command: sketched, and kept to compare


def test_what_counts_by_outcome_and_by_what_came_between() -> None:
    """A failure: the very same output counts, back to back or not, and so does the same failure in
    other words with another call between; back to back, the same failure in other words (a build
    waiting, its timestamps and counters moving) neither counts nor resets. A success: only the very
    same output back to back counts (an identical loop); the same output after an edit, or in other
    words, neither counts nor resets (a check passing is not a failure repeated)."""
    waiting = [f"[{10 + i}:00] waiting for the server, {i} attempts" for i in range(20)]
    memory = StagnationMemory()  # failures, back to back, in other words
    assert [memory.record(SIG, None, i, text, True, False) for i, text in enumerate(waiting)] == [0] * 20
    assert memory.record(SIG, None, 19, waiting[19], True, False) == 1  # the very same output again
    between = StagnationMemory()  # failures, another call between each
    assert [between.record(SIG, None, i, t, False, False) for i, t in enumerate(waiting[:5])] == [
        0,
        1,
        2,
        3,
        4,
    ]
    assert between.record(SIG, None, 4, waiting[4], False, False) == 5
    passing = StagnationMemory()  # successes
    assert passing.record(SIG, 5, 6, "3 passed", False, True) == 0  # new: sketched
    assert passing.record(SIG, 5, 6, "3 passed", False, True) == 0  # after an edit: not counted
    assert passing.record(SIG, 5, 6, "3 passed", True, True) == 1  # back to back: an identical loop
    assert passing.record(SIG, 5, 8, "4 passed", False, True) == 1  # in other words: not counted
    assert passing.record(SIG, 5, 9, "collected nothing at all today", False, True) == 0  # new: reset
    guard = make_guard(hard_stop=False)
    script = [("bash", {"command": "make wait"}, text, True) for text in waiting]
    assert "stagnation_warn" not in codes(run_script(guard, script))
    # the same passing output after each of 30 edits: not this count's (it is unchanged_check's, whose
    # own thresholds warn from the 5th), so no warning before that
    edited = make_guard(hard_stop=False)
    got = [s.decision for s in run_script(edited, _fix_attempts_passing([LISTING] * 30))[::2]]
    assert all(d.code == "allow" for d in got[:5])
    assert got[5].code == "stagnation_warn" and got[5].count == 5 and got[5].limit == 5


def test_no_work_for_other_tools_or_a_first_run() -> None:
    """Only a shell's second and later runs reach the memory: a read, a write or a shell command run
    once leaves it empty."""
    guard = make_guard(hard_stop=False)
    script: list[tuple[Any, ...]] = [("search", {"q": "x"}, LISTING, False)] * 5
    script += [("edit", {"path": "a.py"}, "ok", False)] * 3
    script += [("bash", {"command": f"cat f{i}.py"}, LISTING, False) for i in range(20)]
    run_script(guard, script)
    assert len(guard._current_turn().detectors.stagnation.checks) == 0


def test_memory_is_bounded_in_commands_and_results() -> None:
    """At most _CHECKS commands per turn (fewer for a guard tracking fewer signatures), each with its
    last _KEPT results as digests (no text)."""
    memory = StagnationMemory()
    for n in range(stagnation._CHECKS + 50):
        memory.record(Signature("bash", f"c{n}"), n, n + 1, f"out {n}", False, False)
    assert len(memory.checks) == stagnation._CHECKS
    small = StagnationMemory(16)
    for n in range(50):
        small.record(Signature("bash", f"c{n}"), n, n + 1, f"out {n}", False, False)
    assert len(small.checks) == 16
    assert make_guard(max_tracked_signatures=16)._current_turn().detectors.stagnation.checks.max_size == 16
    for n in range(3 * stagnation._KEPT):
        memory.record(SIG, None, n, f"result number_{chr(97 + n % 26)}{chr(97 + n // 26)}", False, False)
    check = memory.stale(SIG)
    assert check is not None and len(check.sketches) == len(check.keys) == stagnation._KEPT
    assert all(isinstance(h, int) for digest, small_ in check.sketches for h in (digest, *small_))
    assert all(len(small_) <= stagnation._SKETCH for _, small_ in check.sketches)


def test_the_message_carries_no_result_text() -> None:
    """The warning says what repeats and how often, never what the result was."""
    guard = make_guard(hard_stop=False)
    steps = run_script(guard, _fix_attempts(["SECRET-TOKEN-42 failed"] * 13))
    warned = [s.decision for s in steps if s.decision.code == "stagnation_warn"]
    assert warned and all("SECRET" not in d.message and "python t.py" not in d.message for d in warned)
    assert "12 more times" in warned[-1].message


def test_codes_are_loop_codes() -> None:
    assert {"stagnation_warn", "stagnation_reject", "stagnation_block", "stagnation_halt"} <= LOOP_CODES


def test_thresholds_are_validated() -> None:
    """warn_after.stagnation must not come after hard_stop_after.stagnation; both >= 1."""
    with pytest.raises(ConfigError, match=r"warn_after\.stagnation"):
        GuardConfig.from_mapping({"warn_after": {"stagnation": 20}})
    with pytest.raises(ConfigError, match=r"hard_stop_after\.stagnation"):
        GuardConfig.from_mapping({"hard_stop_after": {"stagnation": 0}})
    config = GuardConfig.from_mapping({"warn_after": {"stagnation": 2}, "hard_stop_after": {"stagnation": 3}})
    assert (config.warn_after["stagnation"], config.hard_stop_after["stagnation"]) == (2, 3)


@given(
    st.one_of(
        st.text(),
        st.binary(),
        st.recursive(
            st.none() | st.integers() | st.text(), lambda c: st.lists(c) | st.dictionaries(st.text(), c)
        ),
    )
)
def test_sketch_never_raises(result: Any) -> None:
    """Any result a shell could report is sketched: a digest and at most _SKETCH shingle hashes."""
    digest, small = sketch(result)
    assert isinstance(digest, int) and 1 <= len(small) <= stagnation._SKETCH


# -- unchanged_check: a check passing with what it already printed, after each edit -----------------


def test_a_check_the_edits_do_not_change_is_warned_once_then_stopped() -> None:
    """A reproduction script that prints its error and exits 0, rerun after each edit, its output the
    same in other words: the first run is not sketched, so runs 2 to 6 are the 5 counted. The 7th
    run (count 5, its stop) is warned that the next result like it stops the turn; the 8th comes
    right after an edit, so it is not refused before it runs: it runs, unchanged again, and halts."""
    guard = make_guard(mode="unattended", hard_stop=None)
    steps = run_script(guard, _fix_attempts_passing([_traceback(i) for i in range(20)]))
    checks = steps[::2]
    assert all(s.before.allows_execution for s in checks[:8])
    assert all(s.decision.action == "allow" for s in checks[:6])
    assert checks[6].decision.code == "stagnation_warn" and checks[6].decision.count == 5
    assert "turn stops" in checks[6].decision.message
    assert checks[7].ran and checks[7].decision.code == "stagnation_halt" and checks[7].decision.should_halt
    assert _first_stop(steps) == 15
    assert guard.halt_decision is not None and guard.halt_decision.code == "stagnation_halt"


def test_a_check_sent_again_without_an_edit_is_still_refused_before_it_runs() -> None:
    """What the edits do not change is refused as before when the check is sent again with no edit
    just before it: another command between, or the check right after itself."""
    guard = make_guard(mode="unattended", hard_stop=None)
    run_script(guard, _fix_attempts_passing([_traceback(i) for i in range(7)]))  # count 5: its stop
    other = run_script(guard, [("bash", {"command": "git diff"}, "diff --git a/t.py", False)])
    assert other[0].decision.action == "allow"
    again = run_script(guard, [("bash", {"command": "python t.py"}, _traceback(30), False)] * 2)
    assert again[0].before.code == "stagnation_reject" and again[1].before.code == "stagnation_block"


def test_a_check_the_edits_do_not_change_only_warns_without_hard_stop() -> None:
    """With hard_stop off, the count warns from warn_after.unchanged_check (5) and never refuses."""
    steps = run_script(make_guard(hard_stop=False), _fix_attempts_passing([_traceback(i) for i in range(12)]))
    checks = steps[::2]
    assert [s.decision.code for s in checks[5:8]] == ["allow", "stagnation_warn", "stagnation_warn"]
    assert checks[6].decision.count == 5
    assert all(s.before.allows_execution for s in steps)


def test_a_passing_check_counts_only_with_an_edit_between() -> None:
    """Other shell commands between two runs are not a fix attempt: a passing check rerun among them
    is looked at, not stuck, and never refused."""
    script: list[tuple[Any, ...]] = []
    for i in range(20):
        script.append(("bash", {"command": "python reproduce.py"}, _traceback(i), False))
        script.append(("bash", {"command": f"cat lib_{i}.py"}, f"def f_{i}(): pass", False))
    steps = run_script(make_guard(mode="unattended", hard_stop=None), script)
    assert all(s.before.allows_execution for s in steps)
    assert "stagnation_warn" not in codes(steps)


def test_a_new_result_ends_the_unchanged_count_and_its_reject() -> None:
    """A result new for the check resets the count (and the reject it was given); a failure of the
    check in between neither counts nor resets it. One new result between two runs of the old one is
    a blip: the old result back takes its count back; the new result returned again ends it."""
    memory = StagnationMemory()
    sig = Signature("bash", "c")
    counts = []
    for edits in range(1, 5):  # one edit before each run
        memory.record(sig, None, None, _traceback(edits), False, True, 0, edits)
        counts.append(memory.unchanged)
    assert counts == [0, 1, 2, 3]  # the first result is new (nothing sketched yet)
    memory.record(sig, None, None, _traceback(9), False, False, 0, 5)  # the same, failing: not counted
    assert memory.unchanged == 3
    check = memory.stale(sig)
    assert check is not None
    check.unchanged_rejects = 1
    passed = "collected 3 items, all passed, nothing left to fix"
    memory.record(sig, None, None, passed, False, True, 0, 6)
    assert memory.unchanged == 0 and check.unchanged_rejects == 0
    memory.record(sig, None, None, _traceback(2), False, True, 0, 7)  # the old result back: a blip
    assert memory.unchanged == 4 and check.unchanged_rejects == 1
    other = "ImportError: cannot import name 'helper' from 'lib', a different failure altogether"
    memory.record(sig, None, None, other, False, True, 0, 8)  # new: reset
    assert memory.unchanged == 0
    memory.record(sig, None, None, other + " ", False, True, 0, 9)  # the new one returned: kept
    assert memory.unchanged == 1
    memory.record(sig, None, None, _traceback(3), False, True, 0, 10)  # counts as ever, not resumed
    assert memory.unchanged == 2
    memory.record(sig, None, None, _traceback(4), False, True, 0, 10)  # no edit since: not counted
    assert memory.unchanged == 2


def test_an_edit_before_the_second_run_counts_from_the_first() -> None:
    """The edit count at a command's first run is kept with its first digest: the very same output
    after an edit is counted from the second run on, and without one it is not."""
    memory = StagnationMemory()
    sig = Signature("bash", "c")
    memory.record(sig, 7, 7, "same output", False, True, 0, 1)  # first run at edit count 0, then an edit
    assert memory.unchanged == 1
    other = StagnationMemory()
    other.record(sig, 7, 7, "same output", False, True, 1, 1)  # first run after the same edit
    assert other.unchanged == 0


def test_unchanged_check_stops_at_once_without_rejects() -> None:
    """rejects_before_stop 0: the run after the count reached its stop, unchanged again, halts (it
    comes right after an edit, so it runs first); no reject."""
    guard = make_guard(mode="unattended", hard_stop=None, rejects_before_stop=0)
    steps = run_script(guard, _fix_attempts_passing([_traceback(i) for i in range(20)]))
    assert steps[14].ran and steps[14].decision.code == "stagnation_halt"
    assert "stagnation_reject" not in codes(steps)


def test_unchanged_check_thresholds_are_validated() -> None:
    with pytest.raises(ConfigError, match=r"warn_after\.unchanged_check"):
        GuardConfig.from_mapping({"warn_after": {"unchanged_check": 6}})
    config = GuardConfig.from_mapping(
        {"warn_after": {"unchanged_check": 2}, "hard_stop_after": {"unchanged_check": 3}}
    )
    assert (config.warn_after["unchanged_check"], config.hard_stop_after["unchanged_check"]) == (2, 3)


def test_a_new_turn_starts_the_unchanged_count_again() -> None:
    """The count and the turn's edits are per turn: six runs (four counted) in one turn and six in the
    next are never refused; in that next turn the fifth counted run is warned that the next result
    like it stops the turn, and the run after it (an edit before it: it runs) halts."""
    guard = make_guard(mode="unattended", hard_stop=None)
    results = [_traceback(i) for i in range(6)]
    assert all(s.before.allows_execution for s in run_script(guard, _fix_attempts_passing(results)))
    guard.start_turn()
    assert all(s.before.allows_execution for s in run_script(guard, _fix_attempts_passing(results)))
    after = run_script(guard, _fix_attempts_passing([_traceback(9), _traceback(10)]))
    assert after[0].decision.code == "stagnation_warn" and "turn stops" in after[0].decision.message
    assert after[2].before.allows_execution and after[2].decision.code == "stagnation_halt"
