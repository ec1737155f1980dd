"""Codex (``codex-cli``): its hook events → guard calls → the hook output Codex reads, and its settings.

Codex reads hooks from ``$CODEX_HOME/hooks.json`` in Claude Code's layout and sends Claude Code's
payload shape (``tool_name``, ``tool_input``, ``tool_use_id``, plus ``turn_id``). Used by ``otelguard
serve`` (``POST /v1/hooks/codex``, which ``otelguard hook codex`` posts to).

Events: ``UserPromptSubmit`` starts a turn (Codex's ``turn_id``); ``PreToolUse`` asks
``before_call``; ``PostToolUse`` reports through ``after_call``; ``Stop`` ends the turn;
``SessionEnd`` ends the session. ``PostToolUse`` carries the call's output only, never whether it
failed: the guard reads the failure from the text (``Process exited with code N``, ``Exit code: N``
as Codex writes them for the model) when it is there, and otherwise judges the result as it judges
any unmarked result.

What Codex honours (codex-cli 0.171.0): a plain deny (``permissionDecision: "deny"`` with its
reason), which reaches the model as the call's output. An answer that also holds ``continue`` or
``stopReason`` is ignored whole and the call runs, so none is ever sent; and nothing a hook answers
stops ``codex exec``. So a ``block``/``halt`` denies the call with the stop's message (the code and
the guard's message), and every later call of that turn is denied with the same message, until the
model gives up or the next prompt starts a new turn. A warning after a call reaches the model as
``additionalContext``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from otelguard.coding_agents.hook import DEFAULT_TIMEOUT_SECONDS
from otelguard.coding_agents.mapping import (
    AgentHooks,
    optional_text,
    required_text,
    stop_reason,
)
from otelguard.coding_agents.settings import hook_command, hooks_block
from otelguard.core.decisions import Decision

__all__ = ["DEFAULT_AGENT", "HOOK_EVENTS", "TOOL_EVENTS", "CodexHooks", "settings_block", "trust_note"]

DEFAULT_AGENT: Final = "codex"
HOOK_EVENTS: Final = ("UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop", "SessionEnd")
TOOL_EVENTS: Final = ("PreToolUse", "PostToolUse")
"""The events about one tool call: their settings entry takes a tool ``matcher``."""
SESSION_END_TIMEOUT: Final = 3
"""Codex clamps a ``SessionEnd`` hook's timeout to 3 s (and says so on every run above it)."""


class CodexHooks(AgentHooks):
    """Answers Codex hook payloads from the sessions of a ``SessionHost`` (one per ``session_id``),
    labelled ``codex``. ``CodexHooks(config=None, *, telemetry=None, agent=None, max_sessions=10_000,
    host=None)``; ``handle(payload)`` as ``AgentHooks``."""

    default_agent = DEFAULT_AGENT
    cli = "codex"

    events = HOOK_EVENTS

    def answer(self, event: str, session_id: str, payload: Mapping[str, Any]) -> dict[str, Any] | None:
        session = self.session(session_id)
        if event == "UserPromptSubmit":
            session.start_turn(turn_id=optional_text(payload, "turn_id"), agent=self.agent)
            return None
        if event == "Stop":
            session.end_turn()
            return None
        guard = session.main
        tool_name = required_text(payload, "tool_name", limit=None)
        args = payload.get("tool_input")
        call_id = optional_text(payload, "tool_use_id") or None
        if event == "PreToolUse":
            decision = guard.before_call(tool_name, args, call_id=call_id)
            if decision.allows_execution:
                return None
            halt = guard.halt_decision
            return deny(stop_reason(halt) if halt is not None else decision.message)
        # failed=None: the output's own exit status line, else the guard's reading of the result
        result = payload.get("tool_response")
        return context(guard.after_call(tool_name, args, result, failed=None, call_id=call_id))

    def may_wait_on_state(self, body: Mapping[str, Any], charges: Callable[[Any], bool]) -> bool:
        event = body.get("hook_event_name")
        if event == "PreToolUse":
            return charges(body.get("tool_name"))
        return event not in ("PostToolUse", "UserPromptSubmit", "Stop")  # nothing refunded there


def deny(reason: str) -> dict[str, Any]:
    """A plain deny, the only refusal Codex honours: no ``continue``, no ``stopReason`` (either one
    makes Codex ignore the whole answer and run the call)."""
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": reason,
        }
    }


def context(decision: Decision) -> dict[str, Any] | None:
    """The answer to ``PostToolUse``: the guard's warning (or a stop's message) for the model."""
    if decision.action == "allow" or not decision.message:
        return None
    message = stop_reason(decision) if decision.should_halt else decision.message
    return {"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": message}}


def settings_block(url: str | None, timeout: float | None = None, program: str | None = None) -> str:
    """The ``hooks.json`` for ``$CODEX_HOME`` (``~/.codex``): every event the guard needs, one
    command. ``url``/``timeout``: written into the command when given. Codex runs a hook only once
    it is trusted: see ``trust_note``."""
    command = hook_command("codex", url, timeout, program)
    deadline = DEFAULT_TIMEOUT_SECONDS if timeout is None else timeout
    handler = {"type": "command", "command": command, "timeout": int(deadline) + 3}
    # Codex clamps SessionEnd's timeout (and warns on each run above it): ask for no more than it gives
    ending = {**handler, "timeout": min(int(deadline) + 3, SESSION_END_TIMEOUT)}
    return hooks_block(HOOK_EVENTS, TOOL_EVENTS, handler, {"SessionEnd": ending})


def trust_note() -> str:
    """What trusting the hooks takes: Codex skips an untrusted hook silently."""
    return (
        "Codex runs a hook only once it is trusted, and skips an untrusted one silently (the guard off):\n"
        "  save the block above as $CODEX_HOME/hooks.json (~/.codex/hooks.json), then trust the hooks when\n"
        "  Codex shows them for review (it keeps each trusted hook's hash in its config), or run\n"
        "  codex exec --dangerously-bypass-hook-trust ... to run them for that one invocation.\n"
    )
