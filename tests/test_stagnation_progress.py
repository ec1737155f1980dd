"""Progress, not repetition: a result that shrinks is progress, and a check rerun right after an
edit is judged by its result, never refused before it runs.

* An agent fixing one type error per edit (``mypy src``: 30, 29, 28 … errors, a different one gone
  each time) is never refused or stopped; one whose count stays the same still is.
* A check that directly follows an edit runs (the edit may be the fix); after it ran, an unchanged
  result is warned or halts where a refusal was due, and a changed one ends the count.
"""

from __future__ import annotations

from typing import Any

import pytest

from otelguard.core.detectors.stagnation import measure, shrank
from otelguard.testing import ScriptStep, codes, run_script
from tests.test_detectors import make_guard

MESSAGES = (
    'Incompatible types in assignment (expression has type "int", variable has type "str")  [assignment]',
    'Argument 1 to "load" has incompatible type "Path"; expected "str"  [arg-type]',
    'Item "None" of "Optional[Config]" has no attribute "name"  [union-attr]',
    "Missing return statement  [return]",
    'Name "helper" is not defined  [name-defined]',
)


def mypy(errors: int, moved: int = 0) -> str:
    """mypy's output with ``errors`` errors left (the first ones fixed: a different one gone each
    time); ``moved`` shifts the line numbers, as edits do."""
    lines = [
        f"src/pkg/module_{k % 7}.py:{12 + 3 * k + moved}: error: {MESSAGES[k % len(MESSAGES)]}"
        for k in range(30 - errors, 30)
    ]
    files = len({k % 7 for k in range(30 - errors, 30)})
    return "\n".join([*lines, f"Found {errors} errors in {files} files (checked 41 source files)"])


def _fixing(outputs: list[str], between: bool = False) -> list[tuple[Any, ...]]:
    """``mypy src`` failing with each output, an edit after each run (and a look at another file after the
    edit when ``between``: the check then does not follow the edit directly)."""
    script: list[tuple[Any, ...]] = []
    for i, output in enumerate(outputs):
        script.append(("execute_bash", {"command": "mypy src"}, output, True))
        script.append(
            ("str_replace_editor", {"path": "src/pkg/m.py", "new_str": f"fix {i}"}, "edited", False)
        )
        if between:
            script.append(
                ("execute_bash", {"command": f"cat src/pkg/module_{i}.py"}, f"def f_{i}(): ...", False)
            )
    return script


def _refused_or_stopped(steps: list[ScriptStep]) -> bool:
    return any(not s.before.allows_execution or s.decision.should_halt for s in steps)


def test_what_a_result_says_is_wrong_is_counted() -> None:
    assert measure("Found 30 errors in 5 files (checked 12 source files)")[0] == 30
    assert measure("==== 3 failed, 10 passed in 2.13s ====")[0] == 3
    assert measure("FAILED (failures=2, errors=1)")[0] == 3
    assert measure("2 tests failed")[0] == 2
    assert measure("all good, 12 passed")[0] == -1
    assert measure("Traceback (most recent call last):\nKeyError: 'size'")[0] == -1
    assert shrank(29, 100, 30, 100) and not shrank(30, 100, 30, 100) and not shrank(31, 100, 30, 100)
    assert shrank(-1, 700, -1, 1000) and not shrank(-1, 990, -1, 1000)  # an eighth shorter, or not


@pytest.mark.parametrize("between", [False, True], ids=["edit-then-check", "edit-look-check"])
def test_one_type_error_fixed_per_edit_is_never_refused_or_stopped(between: bool) -> None:
    """mypy 30, 29, … 1 errors: each run has one error fewer, so each is progress."""
    guard = make_guard(mode="unattended", hard_stop=None)
    steps = run_script(guard, _fixing([mypy(n, moved=30 - n) for n in range(30, 0, -1)], between))
    assert not _refused_or_stopped(steps), codes(steps)
    assert not any(code.startswith("stagnation") for code in codes(steps))
    assert guard.halt_decision is None


@pytest.mark.parametrize("between", [False, True], ids=["edit-then-check", "edit-look-check"])
def test_a_count_that_stays_the_same_is_still_stopped(between: bool) -> None:
    """The same 30 errors after every edit, their line numbers moving: stopped as before."""
    guard = make_guard(mode="unattended", hard_stop=None)
    steps = run_script(guard, _fixing([mypy(30, moved=i) for i in range(40)], between))
    assert _refused_or_stopped(steps)
    assert guard.halt_decision is not None and guard.halt_decision.code.startswith("stagnation")


def test_a_count_going_down_and_back_up_is_not_progress_twice() -> None:
    """Only a count below the least since the last new result is progress: 3, 2, 3, 2, … failing
    tests shrinks once, then is a loop."""
    guard = make_guard(mode="unattended", hard_stop=None)
    outputs = [
        f"FAILED tests/test_io.py::test_read\n{3 - i % 2} failed, 40 passed in {i}.5s" for i in range(60)
    ]
    steps = run_script(guard, _fixing(outputs, between=True))
    assert _refused_or_stopped(steps)


def test_a_shorter_traceback_is_progress() -> None:
    """The traceback losing a frame per edit (the failure moving up the stack as it is fixed), each
    run near the one before it: shorter by an eighth every few edits."""
    frames = [
        f'  File "/repo/src/layer_{k}.py", line {10 + k}, in call_{k}\n    return call_{k + 1}(x)\n'
        for k in range(40)
    ]
    outputs = [
        "Traceback (most recent call last):\n" + "".join(frames[: 40 - i]) + "ValueError: bad size\n"
        for i in range(36)
    ]
    steps = run_script(make_guard(mode="unattended", hard_stop=None), _fixing(outputs, between=True))
    assert not _refused_or_stopped(steps), codes(steps)


# -- a check right after an edit -------------------------------------------------------------------

REPRO = "Testing size...\nsize mismatch: expected 3, got 2\n"
FIXED = "Testing size...\nAll checks passed: size is 3\n"


def _edit_then_check(outputs: list[str], failed: bool) -> list[tuple[Any, ...]]:
    script: list[tuple[Any, ...]] = []
    for i, output in enumerate(outputs):
        script.append(("str_replace_editor", {"path": "lib.py", "new_str": f"fix {i}"}, "edited", False))
        script.append(("execute_bash", {"command": "python reproduce.py"}, output, failed))
    return script


@pytest.mark.parametrize("failed", [False, True], ids=["unchanged_check", "stagnation"])
def test_the_rerun_after_an_edit_that_shows_the_fix_runs(failed: bool) -> None:
    """The same result after each edit up to the stop, then the run that first shows the fix, right
    after an edit: it is never refused, whenever it comes, and its new result ends the count."""
    stop = 7 if not failed else 14  # the run at which the count has reached its stop
    for fix_at in range(stop, stop + 9):
        guard = make_guard(mode="unattended", hard_stop=None)
        outputs = [REPRO + f"(took {i}.{i}s)" for i in range(fix_at)]
        steps = run_script(guard, _edit_then_check([*outputs, FIXED], failed))
        if any(s.decision.should_halt for s in steps[:-1]):
            continue  # an unchanged rerun after the stop halted before the fix: judged after it ran
        last = steps[-1]
        assert last.ran and last.before.allows_execution, (fix_at, codes(steps))
        assert last.decision.action == "allow"
        assert all(s.ran for s in steps)


@pytest.mark.parametrize("failed", [False, True], ids=["unchanged_check", "stagnation"])
def test_a_check_after_an_edit_is_judged_after_it_ran(failed: bool) -> None:
    """No check that directly follows an edit is refused before it runs; the loop still stops, by a
    halt after an unchanged result."""
    guard = make_guard(mode="unattended", hard_stop=None)
    steps = run_script(guard, _edit_then_check([REPRO + f"(took {i}.{i}s)" for i in range(60)], failed))
    stop = next(i for i, s in enumerate(steps) if s.decision.should_halt)
    assert all(s.before.allows_execution for s in steps[: stop + 1])
    assert steps[stop].ran and steps[stop].decision.code == "stagnation_halt"
    assert steps[stop].call.tool_name == "execute_bash"


def test_a_check_not_following_an_edit_is_still_refused_before_it_runs() -> None:
    """Another call between the edit and the check: the check is refused at its stop, as before."""
    guard = make_guard(mode="unattended", hard_stop=None)
    script: list[tuple[Any, ...]] = []
    for i in range(20):
        script.append(("str_replace_editor", {"path": "lib.py", "new_str": f"fix {i}"}, "edited", False))
        script.append(("str_replace_editor", {"command": "view", "path": "notes.md"}, "notes", False))
        script.append(("execute_bash", {"command": f"cat lib_{i}.py"}, f"def f_{i}(): return {i}", False))
        script.append(("execute_bash", {"command": "python reproduce.py"}, REPRO + f"(took {i}.{i}s)", False))
    steps = run_script(guard, script)
    refused = [s for s in steps if not s.before.allows_execution]
    assert refused and refused[0].before.code == "stagnation_reject"
    assert guard.halt_decision is not None and guard.halt_decision.code == "stagnation_block"
