"""A live shell's result that records a non-zero exit status is a failure (with ``failed=None``)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from otelguard import Guard, GuardConfig
from otelguard.core.classify import looks_failed

OPENHANDS_FAILED = (
    'Traceback (most recent call last):\n  File "t.py", line 1\nZeroDivisionError: division by zero\n'
    "[Current working directory: /workspace/repo]\n[Python interpreter: /usr/bin/python]\n"
    "[Command finished with exit code 1]"
)
OPENHANDS_OLD_FAILED = (
    "FAILED tests/test_x.py::test_y\n[The command completed with exit code 2.]\n"
    "[Current working directory: /workspace/repo]"
)
CODEX_SHELL_FAILED = "Exit code: 1\nWall time: 0.4 seconds\nOutput:\nfatal: not a git repository\n"
CODEX_EXEC_FAILED = (
    "Chunk ID: 4f1a\nWall time: 0.2 seconds\nProcess exited with code 127\nOriginal token count: 9\n"
    "Output:\nbash: pytets: command not found\n"
)

FAILED: list[Any] = [
    json.dumps({"output": "boom", "exit_code": 2, "error": None}),  # hermes-agent terminal
    {"output": "", "exit_code": 1},
    {"stdout": "", "stderr": "No such file", "is_error": True},  # Claude Code Bash result
    json.dumps({"stdout": "", "stderr": "No such file", "is_error": True}),
    json.dumps({"output": "1 failed", "metadata": {"exit_code": 1, "duration_seconds": 0.3}}),  # Codex
    OPENHANDS_FAILED,
    OPENHANDS_OLD_FAILED,
    CODEX_SHELL_FAILED,
    CODEX_EXEC_FAILED,
]
OK: list[Any] = [
    OPENHANDS_FAILED.replace("exit code 1]", "exit code 0]"),
    OPENHANDS_FAILED.replace("exit code 1]", "exit code -1]"),  # still running: not an exit status
    CODEX_SHELL_FAILED.replace("Exit code: 1", "Exit code: 0"),
    CODEX_EXEC_FAILED.replace("code 127", "code 0"),
    json.dumps({"output": "fine", "metadata": {"exit_code": 0}}),
    {"stdout": "x", "is_error": False},
    # prose is never read: a test that prints about an exit code, a log quoting one mid-line
    "the script said: Exit code: 1 is what we expect here",
    "Output:\nwe check that [Command finished with exit code 1] is parsed\nok",
    "Process exited with code 1 was logged at 10:02",
    "3 passed",
]


@pytest.mark.parametrize("result", FAILED)
def test_a_recorded_non_zero_exit_status_is_a_shell_failure(result: Any) -> None:
    assert looks_failed(result, shell=True)


@pytest.mark.parametrize("result", OK)
def test_zero_running_or_prose_is_not(result: Any) -> None:
    assert not looks_failed(result, shell=True)


@pytest.mark.parametrize("result", [OPENHANDS_FAILED, CODEX_SHELL_FAILED, CODEX_EXEC_FAILED, FAILED[2]])
def test_the_text_and_is_error_forms_are_only_read_for_shells(result: Any) -> None:
    """A read or write tool that prints an exit status line is not judged by it."""
    assert not looks_failed(result)


@pytest.mark.parametrize("shell", ["execute_bash", "exec_command", "shell", "Bash", "terminal"])
def test_the_guard_counts_it_as_a_failure_and_the_host_flag_wins(shell: str) -> None:
    guard = Guard(GuardConfig(mode="unattended", signature_key="k"))
    guard.start_turn()
    args = {"command": "python t.py"}
    decisions = []
    for _ in range(2):
        guard.before_call(shell, args)
        decisions.append(guard.after_call(shell, args, OPENHANDS_FAILED).code)
    assert decisions == ["allow", "exact_failure_warn"]
    guard.start_turn()
    for _ in range(3):
        guard.before_call(shell, args)
        decision = guard.after_call(shell, args, OPENHANDS_FAILED, failed=False)
    assert decision.code == "identical_call_warn"  # the host said ok: ok, three times the same


@given(st.text(max_size=300) | st.binary(max_size=300))
def test_never_raises(text: Any) -> None:
    looks_failed(text, shell=True)
    looks_failed(
        text + "\n[Command finished with exit code 3]" if isinstance(text, str) else text, shell=True
    )
