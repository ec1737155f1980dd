"""Claude Code hook events → guard calls → the hook output Claude Code expects. One home for the mapping.

Used by ``otelguard serve`` (``POST /v1/hooks/claude-code``, which the ``otelguard hook claude-code``
command posts to) and by ``otelguard.integrations.claude_agent_sdk``; sits on the session host
(``otelguard.core.sessions``) like every adapter. Imports no framework and no adapter.

Events: ``UserPromptSubmit`` starts a turn (no output: anything printed there would be added to the
model's context); ``PreToolUse`` asks ``before_call``; ``PostToolUse`` and ``PostToolUseFailure``
report through ``after_call`` (an interrupted call, ``is_interrupt: true``, is cancelled, not
failed); ``PermissionDenied`` is a refusal (``refusal="permission_denied"``); ``Stop`` ends the turn;
``StopFailure`` (a turn that an API error ended) ends it as ``errored``; ``SubagentStop`` ends a
subagent's turn; ``PostToolBatch`` (after each batch of calls) repeats the stop of a turn the guard
halted, the one place Claude Code honours it in ``-p`` mode; ``SessionEnd`` ends the session's open
turns and forgets it. Payloads with an ``agent_id`` come from a subagent: its calls are a turn stream
of their own inside the session, sharing the session's caps.

Output rules Claude Code enforces silently: every ``hookSpecificOutput`` names its
``hookEventName``; an allowed call gets no ``permissionDecision`` at all (``"allow"`` would skip
Claude Code's own permission prompt); a refusal is ``"deny"`` with the guard's message as
``permissionDecisionReason``; a ``block``/``halt`` also sets ``continue: false`` and ``stopReason``;
a cap ``reject`` denies without stopping. Warnings reach the model as ``additionalContext``.

Also the checks of a payload's fields, for the hook payloads here and ``otelguard serve``'s ``/v1/``
bodies alike (``required_text``, ``optional_text``, ``optional_bool``): each raises
``HookPayloadError`` naming the field and what it should be, never its value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from otelguard.claude_code.events import HOOK_EVENTS
from otelguard.core.decisions import Decision
from otelguard.core.guard import Guard
from otelguard.errors import HookPayloadError
from otelguard.hosting import SessionHosted

__all__ = [
    "DEFAULT_AGENT",
    "EVENTS",
    "MAX_ID_CHARS",
    "ClaudeCodeHooks",
    "HookPayloadError",
    "batch_output",
    "hook_output",
    "optional_bool",
    "optional_text",
    "required_text",
]

DEFAULT_AGENT: Final = "claude-code"
EVENTS: Final = HOOK_EVENTS
MAX_ID_CHARS: Final = 256


class ClaudeCodeHooks(SessionHosted):
    """Answers Claude Code hook payloads from the sessions of a ``SessionHost`` (one per ``session_id``).

    ``ClaudeCodeHooks(config=None, *, telemetry=None, agent=None, max_sessions=10_000, host=None)``
    (``otelguard.hosting.SessionHosted``; ``host``: a session host to share, the sidecar's; the agent
    label defaults to ``claude-code``). ``handle(payload)`` returns the hook output as a dict, or
    ``None`` when Claude Code should get no output. It raises ``HookPayloadError`` for a payload
    missing a field it needs; the guard itself never raises.
    """

    default_agent = DEFAULT_AGENT

    def handle(self, payload: Mapping[str, Any]) -> dict[str, Any] | None:
        if not isinstance(payload, Mapping):
            raise HookPayloadError("body", "a JSON object")
        event = required_text(payload, "hook_event_name")
        session_id = required_text(payload, "session_id")
        if event == "SessionEnd":
            self.sessions.end_session(session_id)
            return None
        if event not in EVENTS:
            return None  # an event this mapping does not use (SessionStart, Notification, ...)
        agent_id = optional_text(payload, "agent_id") or None
        session = self.sessions.session(session_id)
        if event == "UserPromptSubmit":
            session.start_turn()
            return None
        if event == "Stop" or event == "StopFailure":  # Claude Code ignores StopFailure's output
            session.end_turn(errored=event == "StopFailure")
            return None
        if event == "SubagentStop":
            if agent_id is not None:
                session.end_subagent(agent_id)
            return None
        guard = session.guard(agent_id, optional_text(payload, "agent_type") or None)
        if event == "PostToolBatch":
            return batch_output(guard.halt_decision)
        return self._tool_event(event, guard, payload)

    def _tool_event(self, event: str, guard: Guard, payload: Mapping[str, Any]) -> dict[str, Any] | None:
        tool_name = required_text(payload, "tool_name", limit=None)
        args = payload.get("tool_input")
        call_id = optional_text(payload, "tool_use_id") or None
        if event == "PreToolUse":
            return hook_output(event, guard.before_call(tool_name, args, call_id=call_id))
        if event == "PermissionDenied":  # refused before it ran: a refusal, never a failure
            decision = guard.after_call(tool_name, args, None, refusal="permission_denied", call_id=call_id)
            if not decision.should_halt:
                return None
            return {
                "hookSpecificOutput": {"hookEventName": event},
                "continue": False,
                "stopReason": stop_reason(decision),
            }
        if event == "PostToolUse":
            result = payload.get("tool_response")
            return hook_output(
                event, guard.after_call(tool_name, args, result, failed=False, call_id=call_id)
            )
        if payload.get("is_interrupt") is True:  # the user interrupted the call: it did not fail
            return hook_output(
                event, guard.after_call(tool_name, args, None, call_id=call_id, cancelled=True)
            )
        error = payload.get("error")
        return hook_output(event, guard.after_call(tool_name, args, error, failed=True, call_id=call_id))


def hook_output(event: str, decision: Decision) -> dict[str, Any] | None:
    """The hook output for a decision on ``event``; ``None`` when Claude Code should get nothing."""
    if decision.action == "allow" or not decision.message:
        return None
    specific: dict[str, Any] = {"hookEventName": event}
    if event == "PreToolUse" and not decision.allows_execution:
        specific["permissionDecision"] = "deny"
        specific["permissionDecisionReason"] = decision.message
    else:
        specific["additionalContext"] = decision.message
    output: dict[str, Any] = {"hookSpecificOutput": specific}
    if decision.should_halt:
        output["continue"] = False
        output["stopReason"] = stop_reason(decision)
    return output


def batch_output(halt: Decision | None) -> dict[str, Any] | None:
    """The answer to ``PostToolBatch``: the stop of a turn the guard halted, else nothing. Claude Code
    ignores ``continue: false`` on ``PreToolUse`` in ``-p`` mode, and honours it here, after the
    batch that held the blocked call (its calls, denied ones included, are already reported)."""
    if halt is None:
        return None
    return {"continue": False, "stopReason": stop_reason(halt)}


def stop_reason(decision: Decision) -> str:
    """What the user reads when the guard stops Claude: the code (to look up) and the message."""
    return f"otelguard stopped this turn ({decision.code}): {decision.message}"


def required_text(body: Mapping[str, Any], field: str, limit: int | None = MAX_ID_CHARS) -> str:
    """The field's string: present, not empty, and at most ``limit`` characters (``None``: any length)."""
    value = body.get(field)
    if field not in body:
        raise HookPayloadError(field, "a string (missing)")
    if not isinstance(value, str) or not value or (limit is not None and len(value) > limit):
        expected = f"a string of 1 to {limit} characters" if limit is not None else "a non-empty string"
        raise HookPayloadError(field, expected)
    return value


def optional_text(body: Mapping[str, Any], field: str) -> str | None:
    """The field's string of at most ``MAX_ID_CHARS`` characters, or ``None`` when it is absent or null."""
    value = body.get(field)
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > MAX_ID_CHARS:
        raise HookPayloadError(field, f"a string of at most {MAX_ID_CHARS} characters, or null")
    return value


def optional_bool(body: Mapping[str, Any], field: str) -> bool | None:
    """The field's ``true``/``false``, or ``None`` when it is absent or null."""
    value = body.get(field)
    if value is None or isinstance(value, bool):
        return value
    raise HookPayloadError(field, "true, false or null")
