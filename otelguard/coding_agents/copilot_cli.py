"""GitHub Copilot CLI: its hook events → guard calls → the hook output Copilot CLI reads, and its settings.

Copilot CLI reads hooks from ``.github/hooks/*.json`` in the working folder (loaded once the folder
is trusted), ``{"version": 1, "hooks": {event: [{"type": "command", "bash": CMD, "timeoutSec": N}]}}``.
Its payloads name no event (only ``permissionRequest`` has ``hookName``), so each event gets its own
command, ``otelguard hook copilot-cli --event EVENT``, and the hook command writes the event into the
payload as ``hookName`` before posting it to ``POST /v1/hooks/copilot-cli``. Fields are camelCase
(``sessionId``, ``toolName``, ``toolArgs``, ``toolResult``).

Events: ``userPromptSubmitted`` starts a turn; ``preToolUse`` asks ``before_call``; ``postToolUse``
reports through ``after_call``; ``agentStop`` ends the turn; ``sessionEnd`` ends the session. The
tool events carry no call id: a call's two events are paired by its arguments, in order.
``postToolUse.toolResult.resultType`` is ``"success"`` for a command that exited 2: the failure is
read from the ``<shellId: N completed with exit code N>`` line Copilot CLI writes at the end of the
text it hands the model (``textResultForLlm``), and that text, without the line's shell number (a new
one on every call), is the result the guard compares.

What Copilot CLI honours (1.0.102): ``{"permissionDecision": "deny", "permissionDecisionReason":
R}`` on ``preToolUse``: the call does not run and the model reads ``Denied by preToolUse hook: R``
(the user sees the same line under the call). Nothing a hook answers ends the run: ``continue:
false`` and ``stopReason`` are ignored on every event, ``systemMessage`` is not shown, and a
``decision: "block"`` on ``postToolUse`` only replaces the result of a call that already ran. So a
``block``/``halt`` denies the call with the stop's message (the code and the guard's message), and
every later call of that turn is denied with the same message, until the model gives up or the next
prompt starts a new turn. A warning after a call reaches the model as ``additionalContext`` on
``postToolUse`` (Copilot CLI appends it to the call's output, where the user sees it too).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any, Final

from otelguard.coding_agents.hook import DEFAULT_TIMEOUT_SECONDS
from otelguard.coding_agents.mapping import AgentHooks, required_text, stop_reason
from otelguard.coding_agents.settings import hook_command
from otelguard.core.decisions import Decision

__all__ = [
    "DEFAULT_AGENT",
    "EVENT_FIELD",
    "HOOK_EVENTS",
    "CopilotCliHooks",
    "context",
    "exit_code",
    "refusal",
    "settings_block",
]

DEFAULT_AGENT: Final = "copilot-cli"
HOOK_EVENTS: Final = ("userPromptSubmitted", "preToolUse", "postToolUse", "agentStop", "sessionEnd")
EVENT_FIELD: Final = "hookName"
"""Where the hook command writes the event into the payload: the field ``permissionRequest``
payloads carry already."""
_EXIT_LINE: Final = re.compile(r"<shellId: [^>\n]{1,64} completed with exit code (-?\d+)>\s*$")
_SHELL_ID: Final = re.compile(r"<shellId: [^>\n]{1,64} completed with")
_SCANNED_CHARS: Final = 2000
"""The exit status line ends the text: read from its end."""


class CopilotCliHooks(AgentHooks):
    """Answers Copilot CLI hook payloads (with the ``hookName`` the hook command adds) from the
    sessions of a ``SessionHost`` (one per ``sessionId``), labelled ``copilot-cli``.
    ``CopilotCliHooks(config=None, *, telemetry=None, agent=None, max_sessions=10_000, host=None)``;
    ``handle(payload)`` as ``AgentHooks``."""

    default_agent = DEFAULT_AGENT
    cli = "copilot-cli"

    event_field = EVENT_FIELD
    session_field = "sessionId"
    end_event = "sessionEnd"
    events = HOOK_EVENTS

    def answer(self, event: str, session_id: str, payload: Mapping[str, Any]) -> dict[str, Any] | None:
        session = self.session(session_id)
        if event == "userPromptSubmitted":
            session.start_turn(agent=self.agent)
            return None
        if event == "agentStop":
            session.end_turn()
            return None
        guard = session.main
        tool_name = required_text(payload, "toolName", limit=None)
        args = payload.get("toolArgs")
        if event == "preToolUse":
            return refusal(guard.before_call(tool_name, args), guard.halt_decision)
        result = payload.get("toolResult")
        text = result.get("textResultForLlm") if isinstance(result, Mapping) else None
        if not isinstance(text, str):
            return context(guard.after_call(tool_name, args, result))
        kind = result.get("resultType") if isinstance(result, Mapping) else None
        code = exit_code(text)
        failed = kind in ("failure", "error") or (None if code is None else code != 0)
        return context(guard.after_call(tool_name, args, comparable(text), failed=failed))

    def may_wait_on_state(self, body: Mapping[str, Any], charges: Callable[[Any], bool]) -> bool:
        event = body.get(EVENT_FIELD)
        if event == "preToolUse":
            return charges(body.get("toolName"))
        return event not in ("postToolUse", "userPromptSubmitted", "agentStop")  # nothing refunded there


def exit_code(text: str) -> int | None:
    """The exit status in the ``<shellId: N completed with exit code N>`` line ending a shell call's
    text, ``None`` without one."""
    found = _EXIT_LINE.search(text[-_SCANNED_CHARS:])
    return None if found is None else int(found.group(1))


def comparable(text: str) -> str:
    """The call's text without its shell number, which is new on every call (every result would
    look new)."""
    return _SHELL_ID.sub("<shell completed with", text)


def refusal(decision: Decision, halt: Decision | None = None) -> dict[str, Any] | None:
    """The answer to ``preToolUse``: nothing for an allowed call, a deny for a refusal; a block
    and every later call of a halted turn (``halt``: the decision that halted it) are denied with
    the stop's message, the only stop Copilot CLI's hooks allow."""
    if decision.allows_execution:
        return None
    reason = stop_reason(halt) if halt is not None else decision.message
    return {"permissionDecision": "deny", "permissionDecisionReason": reason}


def context(decision: Decision) -> dict[str, Any] | None:
    """The answer to ``postToolUse``: the guard's warning (or a stop's message) for the model, which
    Copilot CLI appends to the call's output."""
    if decision.action == "allow" or not decision.message:
        return None
    message = stop_reason(decision) if decision.should_halt else decision.message
    return {"additionalContext": message}


def settings_block(url: str | None, timeout: float | None = None, program: str | None = None) -> str:
    """``.github/hooks/otelguard.json``: one command per event the guard needs, since Copilot CLI's
    payloads name no event. ``url``/``timeout``: written into the command when given."""
    deadline = DEFAULT_TIMEOUT_SECONDS if timeout is None else timeout
    hooks: dict[str, list[dict[str, object]]] = {}
    for event in HOOK_EVENTS:
        command = f"{hook_command('copilot-cli', url, timeout, program)} --event {event}"
        # Copilot CLI's own timeout sits above ours, so ours decides: fail open.
        hooks[event] = [{"type": "command", "bash": command, "timeoutSec": int(deadline) + 3}]
    return json.dumps({"version": 1, "hooks": hooks}, indent=2)
