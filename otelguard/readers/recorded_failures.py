"""Failures a harness writes into a tool's result in a fixed form of its own, read as failures.

Some harnesses record no error flag, but write a failed call's result from a template of their own:
SWE-agent's linter refusing an edit, its commands' usage and "not found" answers, a timed-out command;
OpenHands' editor answering ``ERROR:``, its shell appending the command's exit code; tau-bench's
environment answering ``Error: ...`` for a tool that raised. A reader that knows
the harness passes ``failed=`` from these (``True`` on a template, else what the format says), so the
guard does not have to guess. Only the harness's own fixed text counts, matched where the harness puts
it (the start of the result, or its last line); what a command printed is never read as prose: a test
run that prints a traceback and exits 0 did not fail.
"""

from __future__ import annotations

import re
from typing import Any, Final

__all__ = [
    "SWE_AGENT_REJECTIONS",
    "editor_failed",
    "openhands_result_failed",
    "swe_agent_step_failed",
    "tau_bench_result_failed",
]

SWE_AGENT_REJECTIONS: Final = (
    # the linter refused the edit and left the file as it was
    "Your proposed edit has introduced new syntax error(s).",
    # a command called with the wrong arguments
    "Usage: ",
    # open/goto/scroll without a file, or of a file that does not exist
    "No file open. Use the open command first.",
    # the harness killed a command that ran too long
    "EXECUTION TIMED OUT",
)
"""How SWE-agent's own commands (0.x and its 1.x text tools) begin the observation of a call that did
not do what it was asked."""
_SWE_AGENT_NOT_FOUND: Final = re.compile(r"File \S.* not found\s*\Z")
"""``open <path>`` of a path that does not exist: the whole observation is one line."""
_EDITOR_ERRORS: Final = (
    "ERROR:\n",  # OpenHands' editor (its openhands-aci) writes every refusal so
    "No replacement was performed",
    "Invalid `path` parameter",
    "Invalid `view_range` parameter",
    "Invalid `insert_line` parameter",
    "Parameter `old_str` is required",
    "Parameter `new_str` is required",
    "Parameter `file_text` is required",
    "Unrecognized command",
)
"""How the ``str_replace_editor`` tool (SWE-agent 1.x, OpenHands, Anthropic's text editor) begins the
result of a refused edit or view."""
_TAU_BENCH_ERROR: Final = "Error: "
"""tau-bench's environment answers a tool that raised with ``Error: <the exception>``."""
_EXIT_CODE: Final = re.compile(r"\[Command finished with exit code (-?\d+)\]\s*\Z")
"""OpenHands' shell ends a finished command's output with its exit code."""
_NO_EXIT_CODE: Final = -1
_EDITOR: Final = "str_replace_editor"
_SHELL: Final = "bash"
_TIMEOUT: Final = "EXECUTION TIMED OUT"


def editor_failed(text: str) -> bool:
    """A ``str_replace_editor`` result that refused the edit or view."""
    return text.lstrip().startswith(_EDITOR_ERRORS)


def swe_agent_step_failed(tool: str, observation: Any) -> bool | None:
    """``True`` when a SWE-agent step's observation is one of SWE-agent's own failure answers; else
    ``None`` (the format has no flag: the fallback classifier decides)."""
    if not isinstance(observation, str):
        return None
    text = observation.lstrip()
    if tool == _SHELL:  # what a shell command printed is its own; only the harness's timeout counts
        return True if text.startswith(_TIMEOUT) else None
    if text.startswith(SWE_AGENT_REJECTIONS) or (tool == _EDITOR and editor_failed(text)):
        return True
    if tool == "open" and _SWE_AGENT_NOT_FOUND.fullmatch(text):
        return True
    return None


def openhands_result_failed(text: Any) -> bool | None:
    """An OpenHands tool result as its completion log records it: the shell's exit code when the
    output ends with one (non-zero and not -1, which means still running), an editor refusal; else
    ``None``."""
    if not isinstance(text, str):
        return None
    if editor_failed(text):
        return True
    match = _EXIT_CODE.search(text)
    if match is None:
        return None
    code = int(match.group(1))
    return None if code == _NO_EXIT_CODE else code != 0


def tau_bench_result_failed(text: Any) -> bool | None:
    """A tau-bench tool result: ``True`` when the environment answered with its error template."""
    return True if isinstance(text, str) and text.startswith(_TAU_BENCH_ERROR) else None
