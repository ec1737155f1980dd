"""Shell tools and file editors (docs/detectors-same-error.md, "Shells and file editors").

A `shell` tool counts as a `write` for every rule but `write_streak`: its success starts a new epoch
for exact_failure and clears same_error, any shell call ends a read-only streak, identical_call judges
it; it neither extends nor resets write_streak; it never halts on same_tool_failure, while
exact_failure still applies. The coding agents' file editors are writes.
"""

from __future__ import annotations

from typing import Any

import pytest

from otelguard.config import DEFAULT_SHELL_TOOLS
from otelguard.core.classify import catalog_for
from otelguard.testing import codes, run_script
from tests.test_detectors import fail, fresh, last, make_guard, no_stops, ok, reads, writes

SHELLS = (
    "terminal", "execute_code", "Bash", "bash", "execute_bash", "shell", "local_shell",
    "run_shell_command", "execute_command", "run_terminal_cmd", "exec_command",
)  # fmt: skip
EDITORS = (
    "str_replace_editor", "str_replace_based_edit_tool", "text_editor", "edit_file", "apply_patch",
    "replace", "write_file", "edit", "create", "insert",
)  # fmt: skip


def shell_ok(tool: str = "bash", command: str | None = None, output: str | None = None) -> tuple[Any, ...]:
    return ok(tool, {"command": command or f"sed -i 's/{fresh()}/x/' src/app.py"}, output)


def shell_fail(tool: str = "bash", command: str | None = None, output: str | None = None) -> tuple[Any, ...]:
    return fail(tool, {"command": command or f"grep -rn {fresh()} src"}, output)


def test_the_default_shells_are_the_documented_ones() -> None:
    assert DEFAULT_SHELL_TOOLS == SHELLS


# -- exact_failure: a shell's success is progress, the very same failure still a loop ---------------


def test_a_test_run_failing_between_sed_fixes_is_never_warned_or_blocked() -> None:
    """python reproduce_issue.py failing six times with five sed -i fixes in between (all through the
    one bash tool): each fix starts a new epoch, so the repeated run is never "the same failure"."""
    run = ("bash", {"command": "python reproduce_issue.py"}, "Traceback ...\nValueError: bad", True)
    script: list[tuple[Any, ...]] = []
    for _ in range(5):
        script += [run, shell_ok()]
    script.append(run)
    guard = make_guard(mode="unattended", hard_stop=None)
    steps = run_script(guard, script)
    assert codes(steps) == ["allow"] * 11
    assert guard.halt_decision is None


@pytest.mark.parametrize("shell", SHELLS)
def test_a_shell_success_resets_another_tools_exact_failure(shell: str) -> None:
    """A successful call of any default shell is a fix for a test tool's repeated failure."""
    test_run = {"command": "make check"}
    guard = make_guard()
    steps = run_script(
        guard, [fail("run_tests", test_run)] * 4 + [shell_ok(shell)] + [fail("run_tests", test_run)]
    )
    # after the fix it is not the same failure again; before it, the three repeats were
    # exact_failure's loop, which same_tool_failure does not count again: 2 of the tool's failures
    assert last(steps).code == "allow"
    run_script(guard, [fail("run_tests", test_run)] * 2)  # 7 failures in a row without the fix
    assert guard.before_call("run_tests", test_run).allows_execution


def test_a_failed_shell_call_is_not_a_fix() -> None:
    """Only a successful shell call starts a new epoch."""
    x = {"id": 1}
    steps = run_script(make_guard(), [fail("flaky_api", x)] * 2 + [shell_fail()] + [fail("flaky_api", x)])
    assert last(steps).code == "exact_failure_warn" and last(steps).count == 3


@pytest.mark.parametrize("shell", SHELLS)
def test_the_very_same_shell_failure_five_times_is_blocked(shell: str) -> None:
    """exact_failure still applies to shells: the same command failing the same way five times in a row
    warns from 2, rejects the sixth run and the six after it, and stops the turn when it is sent again."""
    same = shell_fail(shell, "pytest tests/test_api.py -x", "1 failed")
    guard = make_guard()
    steps = run_script(guard, [same] * 13)
    assert codes(steps) == ["allow"] + ["exact_failure_warn"] * 4 + ["exact_failure_reject"] * 7 + [
        "exact_failure_block"
    ]
    assert not any(s.ran for s in steps[5:])


# -- same_tool_failure: shells never halt ----------------------------------------------------------


@pytest.mark.parametrize("shell", SHELLS)
def test_shells_warn_but_never_halt_on_same_tool_failure(shell: str) -> None:
    """Twenty different failing commands through one shell: same_tool_failure warns from 4 (one failure
    later than another tool: grep finding nothing and a failing test are exit statuses), never halts."""
    steps = run_script(make_guard(), [shell_fail(shell) for _ in range(20)])
    assert no_stops(steps)
    assert codes(steps) == ["allow"] * 3 + ["same_tool_failure_warn"] * 17
    assert steps[3].decision.count == 4 and steps[3].decision.limit == 4


def test_a_shell_of_ones_own_is_failure_tolerant_too() -> None:
    """tools.shell makes a tool a shell, and a shell failure-tolerant, without listing it twice."""
    guard = make_guard(tools={"shell": ["sandbox_exec"]})
    steps = run_script(guard, [shell_fail("sandbox_exec") for _ in range(12)])
    assert no_stops(steps)
    assert codes(steps)[-1] == "same_tool_failure_warn"


def test_a_shell_moved_to_write_halts_again() -> None:
    """With tools.replace, a former shell listed as a write is no longer tolerant: it halts at 8."""
    guard = make_guard(tools={"replace": True, "write": ["bash"]})
    steps = run_script(guard, [shell_fail("bash", output="grep: src: No such file") for _ in range(8)])
    assert last(steps).code == "same_tool_failure_halt"


# -- read_only_streak and write_streak -------------------------------------------------------------


@pytest.mark.parametrize("call", [shell_ok(), shell_fail()], ids=["ok", "failed"])
def test_a_shell_call_ends_a_read_only_streak(call: tuple[Any, ...]) -> None:
    """Any shell call resets read_only_streak, like a write call."""
    steps = run_script(make_guard(), [*reads(39), call, *reads(39)])
    assert "read_only_streak_warn" not in codes(steps)
    steps = run_script(make_guard(), [*reads(39), call, *reads(40)])
    assert last(steps).code == "read_only_streak_warn" and last(steps).count == 40


def test_shell_calls_do_not_extend_the_write_streak() -> None:
    """A shell-only agent is never warned for writing blindly: shell calls are not writes there."""
    steps = run_script(make_guard(), [shell_ok(command=f"echo {i}") for i in range(100)])
    assert "write_streak_warn" not in codes(steps)


def test_a_successful_shell_call_ends_the_write_streak_a_failed_one_does_not() -> None:
    """29 writes, a successful shell call (the tests run, a file printed: the changes read back), 29
    more writes: no warning. A failed shell call reads nothing back: the streak goes on at 30."""
    steps = run_script(make_guard(), [*writes(29), shell_ok(), *writes(29)])
    assert "write_streak_warn" not in codes(steps)
    steps = run_script(make_guard(), [*writes(29), *(shell_fail() for _ in range(3)), *writes(1)])
    assert last(steps).code == "write_streak_warn" and last(steps).count == 30


def test_a_shells_failures_count_again_from_each_successful_edit() -> None:
    """same_tool_failure on a shell: the tests failing between two edits are how a fix is made, so a
    successful write or shell call starts the shell's count over; failures in a row still warn."""
    edit = (
        "str_replace_editor",
        {"command": "str_replace", "path": "a.py", "old": "1", "new": "2"},
        "ok",
        False,
    )
    steps = run_script(make_guard(), [step for _ in range(6) for step in (shell_fail(), edit)])
    assert "same_tool_failure_warn" not in codes(steps)
    steps = run_script(make_guard(), [shell_fail() for _ in range(4)])
    assert codes(steps) == ["allow"] * 3 + ["same_tool_failure_warn"]
    # another tool's success is still nothing for a tool that is not a shell
    steps = run_script(make_guard(), [step for _ in range(3) for step in (fail("web_fetch"), edit)])
    assert codes(steps)[-2] == "same_tool_failure_warn"


@pytest.mark.parametrize("command", ["search_file", "search_dir", "find_file", "filemap"])
def test_swe_agent_searches_are_reads_and_end_a_write_streak(command: str) -> None:
    """SWE-agent's searches are reads: an agent that searches and edits is reading back."""
    guard = make_guard()
    steps = run_script(guard, [*writes(29), (command, {"k": 1}, "found", False), *writes(29)])
    assert "write_streak_warn" not in codes(steps)
    assert catalog_for(guard.config).tool_class(command) == "read"


@pytest.mark.parametrize("command", ["open", "goto", "scroll_up", "scroll_down"])
def test_swe_agent_file_viewer_moves_are_polls_and_never_a_loop(command: str) -> None:
    """SWE-agent's file viewer moving through a file shows the same window again and again: normal,
    never no_progress, identical_call or a cycle (its failures still count)."""
    guard = make_guard()
    same = (command, {"line": 100}, "[File: A.java (300 lines total)]\n100: x", False)
    steps = run_script(guard, [step for _ in range(6) for step in (same, ok("edit"))] + [same] * 8)
    assert codes(steps) == ["allow"] * 20
    assert catalog_for(guard.config).tool_class(command) == "poll"


# -- identical_call --------------------------------------------------------------------------------


def test_the_same_shell_command_with_the_same_output_is_an_identical_call() -> None:
    """The same command answering the same output back to back warns at 3 (once: the 4th is not
    warned again); the run that would be the 5th is rejected once; sent again it runs, and warns: a
    shell is never halted for it (a check re-run is often how an agent moves on)."""
    same = shell_ok("bash", "git status", "nothing to commit, working tree clean")
    guard = make_guard()
    steps = run_script(guard, [same] * 8)
    assert (
        codes(steps)
        == ["allow", "allow", "identical_call_warn", "allow", "identical_call_reject"]
        + ["identical_call_warn"] * 3
    )
    assert [s.ran for s in steps] == [True] * 4 + [False] + [True] * 3
    assert "same output" in steps[4].before.message
    assert guard.halt_decision is None


# -- editors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("editor", EDITORS)
def test_an_editor_success_is_a_fix(editor: str) -> None:
    """A successful edit through any default editor starts a new exact_failure epoch (a write)."""
    test_run = {"command": "pytest -x"}
    guard = make_guard()
    script = [fail("run_tests", test_run)] * 4 + [ok(editor, {"path": "src/a.py"})]
    steps = run_script(guard, script + [fail("run_tests", test_run)] * 3)  # 7 failures without the edit
    assert "exact_failure_warn" not in codes(steps)[4:6]
    assert guard.before_call("run_tests", test_run).allows_execution


@pytest.mark.parametrize("editor", EDITORS)
def test_editors_count_for_the_write_streak(editor: str) -> None:
    """Editors are writes, shells are not: thirty edits in a row warn."""
    steps = run_script(make_guard(), [ok(editor, {"path": fresh()}) for _ in range(30)])
    assert last(steps).code == "write_streak_warn"
