"""Gemini CLI: its hook events → guard calls → the hook output Gemini CLI reads, and its settings.

Gemini CLI reads hooks from the ``"hooks"`` key of its ``settings.json`` (``~/.gemini/settings.json``,
or the project's ``.gemini/settings.json``) in Claude Code's layout, with timeouts in milliseconds.
Used by ``otelguard serve`` (``POST /v1/hooks/gemini-cli``, which ``otelguard hook gemini-cli`` posts
to).

Events: ``BeforeAgent`` (a prompt) starts a turn; ``BeforeTool`` asks ``before_call``; ``AfterTool``
reports through ``after_call``; ``AfterAgent`` ends the turn; ``SessionEnd`` ends the session. The
tool events carry no call id: a call's two events are paired by its arguments, in order. ``AfterTool``
has no failure flag: a tool that failed (a file not found, ...) carries an ``error`` object beside its
text, and a shell command's failure is read from the ``Exit Code: N`` line Gemini CLI writes into the
text it hands the model (``tool_response.llmContent``); that text, without its process-group line (a
new number on every run), is the result the guard compares. A call Gemini CLI rejects before running
it (arguments that fail its checks, a path outside the workspace) fires no hook at all.

What Gemini CLI honours (0.61.0): ``{"decision": "deny", "reason": R}`` refuses the call, and the
model reads ``Tool execution blocked: R``; ``{"continue": false, "stopReason": S}`` on ``BeforeTool``
does not run the call and ends the run at once (the user reads ``Agent execution stopped by hook:
S``). So a refusal is a deny with the guard's message, and a ``block``/``halt`` is that stop. A
warning after a call reaches the model as ``additionalContext`` (appended to the call's output as
``<hook_context>``), and a ``systemMessage`` is shown to the user (``Hook system message: ...``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Final

from otelguard.coding_agents.hook import DEFAULT_TIMEOUT_SECONDS
from otelguard.coding_agents.mapping import AgentHooks, required_text, stop_reason
from otelguard.coding_agents.settings import hook_command, hooks_block
from otelguard.core.decisions import Decision

__all__ = [
    "DEFAULT_AGENT",
    "HOOK_EVENTS",
    "TOOL_EVENTS",
    "GeminiCliHooks",
    "context",
    "exit_code",
    "refusal",
    "settings_block",
    "shell_result",
]

DEFAULT_AGENT: Final = "gemini-cli"
HOOK_EVENTS: Final = ("BeforeAgent", "BeforeTool", "AfterTool", "AfterAgent", "SessionEnd")
TOOL_EVENTS: Final = ("BeforeTool", "AfterTool")
"""The events about one tool call: their settings entry takes a tool ``matcher``."""
_EXIT_CODE: Final = re.compile(r"^Exit Code: (-?\d+)\s*$", re.MULTILINE)
_PROCESS_GROUP: Final = re.compile(r"^Process Group PGID: \d+\s*$\n?", re.MULTILINE)
_SCANNED_CHARS: Final = 2000
"""The exit status line comes right after the output: read from the text's end."""


class GeminiCliHooks(AgentHooks):
    """Answers Gemini CLI hook payloads from the sessions of a ``SessionHost`` (one per
    ``session_id``), labelled ``gemini-cli``. ``GeminiCliHooks(config=None, *, telemetry=None,
    agent=None, max_sessions=10_000, host=None)``; ``handle(payload)`` as ``AgentHooks``."""

    default_agent = DEFAULT_AGENT
    cli = "gemini-cli"

    events = HOOK_EVENTS

    def answer(self, event: str, session_id: str, payload: Mapping[str, Any]) -> dict[str, Any] | None:
        session = self.session(session_id)
        if event == "BeforeAgent":
            session.start_turn(agent=self.agent)
            return None
        if event == "AfterAgent":
            session.end_turn()
            return None
        guard = session.main
        tool_name = required_text(payload, "tool_name", limit=None)
        args = payload.get("tool_input")
        if event == "BeforeTool":
            return refusal(guard.before_call(tool_name, args), guard.halt_decision)
        response = payload.get("tool_response")
        text = response.get("llmContent") if isinstance(response, Mapping) else None
        if not isinstance(text, str):
            return context(guard.after_call(tool_name, args, response))
        result, failed = shell_result(text)
        if isinstance(response, Mapping) and isinstance(response.get("error"), Mapping):
            failed = True  # the tool's own error (a file not found, ...): Gemini CLI's failure mark
        return context(guard.after_call(tool_name, args, result, failed=failed))

    def may_wait_on_state(self, body: Mapping[str, Any], charges: Callable[[Any], bool]) -> bool:
        event = body.get("hook_event_name")
        if event == "BeforeTool":
            return charges(body.get("tool_name"))
        return event not in ("AfterTool", "BeforeAgent", "AfterAgent")  # nothing refunded there


def shell_result(text: str) -> tuple[str, bool | None]:
    """A call's text for the model as the guard reads it: without its process-group line, failed
    when its ``Exit Code: N`` line is not 0 (``None``: no such line, the guard judges the text).
    ``otelguard replay`` reads Gemini CLI's chats through this too."""
    code = exit_code(text)
    return _PROCESS_GROUP.sub("", text), None if code is None else code != 0


def exit_code(text: str) -> int | None:
    """The exit status in the ``Exit Code: N`` line of a shell call's text, ``None`` without one."""
    found = _EXIT_CODE.search(text[-_SCANNED_CHARS:])
    return None if found is None else int(found.group(1))


def refusal(decision: Decision, halt: Decision | None = None) -> dict[str, Any] | None:
    """The answer to ``BeforeTool``: nothing for an allowed call, a deny for a refusal, the stop for
    a block (``halt``: the decision that halted the turn, whose message a later call's stop repeats)."""
    if decision.allows_execution:
        return None
    if decision.should_halt:
        return {"continue": False, "stopReason": stop_reason(halt or decision)}
    return {"decision": "deny", "reason": decision.message}


def context(decision: Decision) -> dict[str, Any] | None:
    """The answer to ``AfterTool``: the guard's warning (or a stop's message) for the model, which
    Gemini CLI appends to the call's output as ``<hook_context>``."""
    if decision.action == "allow" or not decision.message:
        return None
    message = stop_reason(decision) if decision.should_halt else decision.message
    return {"hookSpecificOutput": {"hookEventName": "AfterTool", "additionalContext": message}}


def settings_block(url: str | None, timeout: float | None = None, program: str | None = None) -> str:
    """The ``"hooks"`` to put in Gemini CLI's ``settings.json``: every event the guard needs, one
    command. ``url``/``timeout``: written into the command when given."""
    command = hook_command("gemini-cli", url, timeout, program)
    deadline = DEFAULT_TIMEOUT_SECONDS if timeout is None else timeout
    # Gemini CLI's own timeout (milliseconds) sits above ours, so ours decides: fail open.
    handler = {"type": "command", "command": command, "timeout": int((deadline + 3) * 1000)}
    return hooks_block(HOOK_EVENTS, TOOL_EVENTS, handler)
