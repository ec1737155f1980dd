"""OpenCode: what otelguard's OpenCode plugin posts → guard calls → the answer the plugin acts on,
and the plugin itself.

OpenCode has no command hooks: a JavaScript plugin in ``.opencode/plugin/`` (or
``~/.config/opencode/plugin/``) gets its ``tool.execute.before``/``tool.execute.after`` hooks, the
``chat.message`` of each prompt and the bus events. otelguard's plugin (``plugin_source``, printed by
``otelguard hook opencode --print-plugin``) posts each of them to ``POST /v1/hooks/opencode`` as
``{"event", "session_id", "tool", "call_id", "args", "output", "exit"}`` and acts on the answer.

Events: ``chat.message`` starts a turn; ``tool.execute.before`` asks ``before_call``;
``tool.execute.after`` reports through ``after_call`` (the exit status from ``output.metadata.exit``,
a command that exited non-zero failed); ``session.idle`` ends the turn; ``session.deleted`` ends the
session.

What OpenCode honours (1.18.33): a plugin that throws in ``tool.execute.before`` refuses the call, and
the thrown message reaches the model as the call's error. No hook output ends the run, but the
plugin holds OpenCode's own client: on a ``block``/``halt`` it writes the stop's message to stderr,
aborts the session's run (``client.session.abort``: no further model request; ``opencode run`` ends
with ``MessageAbortedError``) and throws the stop's message; any later call of that turn is refused
the same way, should the abort not take. A warning after a call is appended to the call's output,
where the model reads it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any, Final

from otelguard.coding_agents.hook import DEFAULT_TIMEOUT_SECONDS
from otelguard.coding_agents.mapping import AgentHooks, optional_text, required_text, stop_reason
from otelguard.config.environment import OTELGUARD_TOKEN, OTELGUARD_URL
from otelguard.core.decisions import Decision

__all__ = ["DEFAULT_AGENT", "EVENTS", "PLUGIN_FILE", "OpenCodeHooks", "answer", "plugin_source"]

DEFAULT_AGENT: Final = "opencode"
EVENTS: Final = (
    "chat.message",
    "tool.execute.before",
    "tool.execute.after",
    "session.idle",
    "session.deleted",
)
PLUGIN_FILE: Final = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "opencode-plugin.js")
"""The plugin's source, with its settings left as placeholders ``plugin_source`` fills in."""


class OpenCodeHooks(AgentHooks):
    """Answers what otelguard's OpenCode plugin posts from the sessions of a ``SessionHost`` (one per
    OpenCode ``sessionID``), labelled ``opencode``. ``OpenCodeHooks(config=None, *, telemetry=None,
    agent=None, max_sessions=10_000, host=None)``; ``handle(payload)`` returns ``{"action": "allow"}``,
    ``{"action": "deny", "message": ...}`` (the plugin throws it) or ``{"action": "allow", "message":
    ...}`` after a call (a warning the plugin appends to the output), or ``None``."""

    default_agent = DEFAULT_AGENT
    cli = "opencode"

    event_field = "event"
    end_event = "session.deleted"
    events = EVENTS

    def answer(self, event: str, session_id: str, payload: Mapping[str, Any]) -> dict[str, Any] | None:
        session = self.session(session_id)
        if event == "chat.message":
            session.start_turn(agent=self.agent)
            return None
        if event == "session.idle":
            session.end_turn()
            return None
        guard = session.main
        tool_name = required_text(payload, "tool", limit=None)
        args = payload.get("args")
        call_id = optional_text(payload, "call_id") or None
        if event == "tool.execute.before":
            return answer(guard.before_call(tool_name, args, call_id=call_id), guard.halt_decision)
        code = payload.get("exit")
        failed = code != 0 if isinstance(code, int) and not isinstance(code, bool) else None
        decision = guard.after_call(tool_name, args, payload.get("output"), failed=failed, call_id=call_id)
        if decision.action == "allow" or not decision.message:
            return None
        message = stop_reason(decision) if decision.should_halt else decision.message
        return {"action": "allow", "message": message}

    def may_wait_on_state(self, body: Mapping[str, Any], charges: Callable[[Any], bool]) -> bool:
        event = body.get("event")
        if event == "tool.execute.before":
            return charges(body.get("tool"))
        return event not in ("tool.execute.after", "chat.message", "session.idle")  # nothing refunded there


def answer(decision: Decision, halt: Decision | None = None) -> dict[str, Any]:
    """The answer to ``tool.execute.before``: allow, or deny with the message the plugin throws; a
    block and every later call of the halted turn (``halt``: the decision that halted it) carry the
    stop's message and ``stop: true``, on which the plugin aborts the session's run."""
    if decision.allows_execution:
        return {"action": "allow"}
    if halt is not None:
        return {"action": "deny", "message": stop_reason(halt), "stop": True}
    return {"action": "deny", "message": decision.message}


def plugin_source(url: str | None, timeout: float | None = None) -> str:
    """The plugin to save as ``.opencode/plugin/otelguard.js``. ``url``: the sidecar written in
    (``None``: ``$OTELGUARD_URL`` where OpenCode runs, else the default); ``timeout``: how long
    each post may take before the call goes ahead (seconds)."""
    with open(PLUGIN_FILE, encoding="utf-8") as file:
        text = file.read()
    deadline = DEFAULT_TIMEOUT_SECONDS if timeout is None else timeout
    settings = {
        "__OTELGUARD_URL__": json.dumps(url),
        "__OTELGUARD_TIMEOUT_MS__": str(int(deadline * 1000)),
        "__OTELGUARD_URL_ENV__": json.dumps(OTELGUARD_URL),
        "__OTELGUARD_TOKEN_ENV__": json.dumps(OTELGUARD_TOKEN),
    }
    for placeholder, value in settings.items():
        text = text.replace(placeholder, value)
    return text
