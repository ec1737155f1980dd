"""Claude Code: its hook events → guard calls → the hook output Claude Code expects, and its settings.

The one home of the mapping, used by ``otelguard serve`` (``POST /v1/hooks/claude-code``, which the
``otelguard hook claude-code`` command posts to) and by ``otelguard.integrations.claude_agent_sdk``;
sits on the session host (``otelguard.core.sessions``) like every adapter. Imports no framework and
no adapter.

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

``settings_block``/``http_settings_block``: the hooks block for ``.claude/settings.json`` that
``otelguard hook claude-code --print-settings`` prints (a command per event, or Claude Code's ``http``
hooks).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from otelguard.coding_agents.hook import DEFAULT_TIMEOUT_SECONDS
from otelguard.coding_agents.mapping import (
    MAX_ID_CHARS,
    AgentHooks,
    HookPayloadError,
    optional_bool,
    optional_text,
    required_text,
    stop_reason,
)
from otelguard.coding_agents.settings import hook_command, hooks_block
from otelguard.config.environment import OTELGUARD_TOKEN
from otelguard.core.decisions import Decision
from otelguard.core.guard import Guard

__all__ = [
    "DEFAULT_AGENT",
    "EVENTS",
    "HOOK_EVENTS",
    "MAX_ID_CHARS",
    "TOOL_EVENTS",
    "ClaudeCodeHooks",
    "HookPayloadError",
    "batch_output",
    "hook_output",
    "http_settings_block",
    "optional_bool",
    "optional_text",
    "required_text",
    "settings_block",
    "stop_reason",
]

DEFAULT_AGENT: Final = "claude-code"
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
"""The events the guard listens to. ``PostToolBatch`` (Claude Code 2.1.197 on) follows each batch of
tool calls, denied ones included: where a stop is honoured, since ``continue: false`` on
``PreToolUse`` is ignored in ``-p`` mode."""
EVENTS: Final = HOOK_EVENTS
TOOL_EVENTS: Final = ("PreToolUse", "PostToolUse", "PostToolUseFailure", "PermissionDenied")
"""The events about one tool call: their settings entry takes a tool ``matcher``."""


class ClaudeCodeHooks(AgentHooks):
    """Answers Claude Code hook payloads from the sessions of a ``SessionHost`` (one per ``session_id``).

    ``ClaudeCodeHooks(config=None, *, telemetry=None, agent=None, max_sessions=10_000, host=None)``
    (``otelguard.hosting.SessionHosted``; ``host``: a session host to share, the sidecar's; the agent
    label defaults to ``claude-code``). ``handle(payload)`` returns the hook output as a dict, or
    ``None`` when Claude Code should get no output. It raises ``HookPayloadError`` for a payload
    missing a field it needs; the guard itself never raises.
    """

    default_agent = DEFAULT_AGENT
    cli = "claude-code"
    # the sidecar's host is labelled claude-code already, and the Claude Agent SDK hands a host
    # labelled claude-agent-sdk: its sessions keep that label
    label_own_sessions = False

    events = EVENTS

    def answer(self, event: str, session_id: str, payload: Mapping[str, Any]) -> dict[str, Any] | None:
        agent_id = optional_text(payload, "agent_id") or None
        session = self.session(session_id)
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

    def may_wait_on_state(self, body: Mapping[str, Any], charges: Callable[[Any], bool]) -> bool:
        event = body.get("hook_event_name")
        if event == "PreToolUse":
            return charges(body.get("tool_name"))
        # refunded: a call Claude Code's permissions denied, an interrupted one
        interrupted = event == "PostToolUseFailure" and body.get("is_interrupt") is True
        return interrupted or event not in ("PostToolUse", "PostToolUseFailure", "UserPromptSubmit", "Stop")

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


def settings_block(url: str | None, timeout: float | None = None, program: str | None = None) -> str:
    """The ``hooks`` block for ``.claude/settings.json``: every event the guard needs, one command.
    ``url``/``timeout``: written into the command when given (``None``: the command's defaults).
    ``program``: what runs otelguard (``None``: this installation)."""
    command = hook_command("claude-code", url, timeout, program)
    deadline = DEFAULT_TIMEOUT_SECONDS if timeout is None else timeout
    # Claude Code's own per-hook timeout (seconds) sits above ours, so ours decides: fail open.
    handler = {"type": "command", "command": command, "timeout": int(deadline) + 3}
    return hooks_block(HOOK_EVENTS, TOOL_EVENTS, handler)


def http_settings_block(hook_url: str, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> str:
    """The ``hooks`` block with Claude Code's ``http`` hooks: it posts each event to the sidecar itself,
    so no process starts per event. Claude Code fails open on its own: an answer that is not a 2xx,
    a refused connection or the timeout is a non-blocking error and the call goes ahead. The bearer
    token comes from ``OTELGUARD_TOKEN`` where Claude Code runs (an empty header without it, which a
    sidecar without a token ignores). ``hook_url``: the sidecar's hook endpoint."""
    handler: dict[str, object] = {
        "type": "http",
        "url": hook_url,
        "timeout": int(timeout) if timeout == int(timeout) else timeout,
        "headers": {"Authorization": f"Bearer ${OTELGUARD_TOKEN}"},
        "allowedEnvVars": [OTELGUARD_TOKEN],
    }
    return hooks_block(HOOK_EVENTS, TOOL_EVENTS, handler)
