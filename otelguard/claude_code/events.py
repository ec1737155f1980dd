"""Claude Code's hook events otelguard answers, in one place for the hook command and the mapping.

Standard library only and importing nothing of otelguard: the hook command (``otelguard hook
claude-code``) reads it on every tool call.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: importing typing would cost the hook command a third of its startup
if TYPE_CHECKING:
    from typing import Final

__all__ = ["DEFAULT_TIMEOUT_SECONDS", "HOOK_EVENTS", "TOOL_EVENTS"]

HOOK_EVENTS: Final = (
    "UserPromptSubmit",
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "Stop",
    "StopFailure",
    "SubagentStop",
    "SessionEnd",
    "PermissionDenied",
    "PostToolBatch",
)
"""``PostToolBatch`` (Claude Code 2.1.197 on) follows each batch of tool calls, denied ones included: where
a stop is honoured, since ``continue: false`` on ``PreToolUse`` is ignored in ``-p`` mode."""
TOOL_EVENTS: Final = ("PreToolUse", "PostToolUse", "PostToolUseFailure", "PermissionDenied")
"""The events about one tool call: their settings entry takes a tool ``matcher``."""
DEFAULT_TIMEOUT_SECONDS: Final = 2.0
"""How long the hook waits for the sidecar before the call goes ahead (``--timeout``)."""
