"""Claude Code's own fixed tool results: what the host wrote instead of running the tool.

A transcript cannot say where a ``tool_result`` came from, but Claude Code writes a handful of fixed
texts when a call never ran (a cancelled parallel sibling, a user interrupt) or was refused (the user
declined it, a permission rule or mode denied it, a PreToolUse hook blocked it). Those texts are
provenance, not tool output: replaying them as failures would count calls that never ran against the
tool. Only a result whose *whole* text (after the ``<tool_use_error>`` wrapper is stripped) is one of
the templates below is mapped; a tool's own output that merely mentions one stays what it is. Every
template and where it was seen is listed in ``docs/claude-code-results.md``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from otelguard.readers.feed import SessionFeed

__all__ = ["HostResult", "add_tool_result", "host_result"]

USER_REJECTED: Final = "user_rejected"
PERMISSION_DENIED: Final = "permission_denied"
HOOK_DENIED: Final = "hook_denied"

_WRAPPER_OPEN: Final = "<tool_use_error>"
_WRAPPER_CLOSE: Final = "</tool_use_error>"
_STOP_AND_WAIT: Final = "STOP what you are doing and wait for the user to tell you how to proceed."
_NOT_WRITTEN: Final = (
    "The tool use was rejected (eg. if it was a file edit, the new_string was NOT written to the file)."
)
_DENIAL_GUIDANCE: Final = (
    "IMPORTANT: You *may* attempt to accomplish this action using other tools that might naturally be "
    "used to accomplish this goal, e.g. using head instead of cat. But you *should not* attempt to work "
    "around this denial in malicious ways, e.g. do not use your ability to run tests to execute non-test "
    "actions. You should only try to work around this restriction in reasonable ways that do not attempt "
    "to bypass the intent behind this denial. If you believe this capability is essential to complete "
    "your request, STOP and explain to the user what you were trying to do and why you need this "
    "permission. Let the user decide how to proceed."
)

_CANCELLED_TEXTS: Final = frozenset(
    {
        "Sibling tool call errored",
        "[Request interrupted by user for tool use]",
        f"The user doesn't want to take this action right now. {_STOP_AND_WAIT}",
        "Streaming fallback - tool execution discarded",
    }
)
_REFUSAL_TEXTS: Final = {
    f"The user doesn't want to proceed with this tool use. {_NOT_WRITTEN} {_STOP_AND_WAIT}": USER_REJECTED,
    (
        f"Permission for this tool use was denied. {_NOT_WRITTEN} Try a different approach or report the "
        "limitation to complete your task."
    ): USER_REJECTED,
}
_TOOL: Final = r"[A-Za-z0-9_.:-]+"
_CANCELLED_PATTERNS: Final = (
    # newer versions name the sibling that failed: "Cancelled: parallel tool call Bash(<its summary>) errored"
    re.compile(rf"Cancelled: parallel tool call(?: {_TOOL}\(.*\))? errored", re.DOTALL),
)
_REFUSAL_PATTERNS: Final = (
    (
        re.compile(
            rf"Permission to use {_TOOL} has been denied because Claude Code is running in don't ask "
            rf"mode\.(?: {re.escape(_DENIAL_GUIDANCE)})?"
        ),
        PERMISSION_DENIED,
    ),
    (
        re.compile(rf"Permission to use {_TOOL} has been denied\. {re.escape(_DENIAL_GUIDANCE)}"),
        PERMISSION_DENIED,
    ),
    (re.compile(rf"Hook PreToolUse:{_TOOL} denied this tool"), HOOK_DENIED),
)
_LONGEST_TEMPLATE: Final = 2048
"""No template is longer: a longer result is tool output, and is not scanned at all."""


@dataclass(frozen=True, slots=True)
class HostResult:
    """What a host-made result means: the call was cancelled, or refused with ``refusal``."""

    cancelled: bool = False
    refusal: str | None = None


def host_result(content: Any) -> HostResult | None:
    """The meaning of a tool result when its whole text is one of Claude Code's templates, else None."""
    if not isinstance(content, str) or len(content) > _LONGEST_TEMPLATE:
        return None
    text = content.strip()
    if text.startswith(_WRAPPER_OPEN) and text.endswith(_WRAPPER_CLOSE):
        text = text[len(_WRAPPER_OPEN) : -len(_WRAPPER_CLOSE)].strip()
    if text in _CANCELLED_TEXTS or any(p.fullmatch(text) for p in _CANCELLED_PATTERNS):
        return HostResult(cancelled=True)
    refusal = _REFUSAL_TEXTS.get(text)
    if refusal is None:
        for pattern, category in _REFUSAL_PATTERNS:
            if pattern.fullmatch(text):
                refusal = category
                break
    return HostResult(refusal=refusal) if refusal is not None else None


def add_tool_result(
    feed: SessionFeed, call_id: str, text: Any, failed: bool, line: int, time: float | None = None
) -> None:
    """Attach an Anthropic ``tool_result`` to its call, as cancelled or refused when Claude Code made it."""
    made_by_host = host_result(text)
    if made_by_host is None:
        feed.add_result(call_id, text, failed, line, time=time)
    else:
        feed.add_result(
            call_id,
            text,
            failed,
            line,
            cancelled=made_by_host.cancelled,
            refusal=made_by_host.refusal,
            time=time,
        )
