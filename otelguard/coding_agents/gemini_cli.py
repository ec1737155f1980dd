"""Gemini CLI: its hook events → guard calls → the hook output Gemini CLI reads, and its settings.

Gemini CLI reads hooks from the ``"hooks"`` key of its ``settings.json`` (``~/.gemini/settings.json``,
or the project's ``.gemini/settings.json``) in Claude Code's layout, with timeouts in milliseconds.
Used by ``otelguard serve`` (``POST /v1/hooks/gemini-cli``, which ``otelguard hook gemini-cli`` posts
to).

Events: ``BeforeAgent`` (a prompt) starts a turn; ``BeforeModel`` (before each model request) reports
the reply before it through ``after_model`` and asks ``before_model``; ``BeforeTool`` asks
``before_call``; ``AfterTool`` reports through ``after_call``; ``AfterAgent`` reports the final reply
and ends the turn; ``SessionEnd`` ends the session. The replies come from the chat file the payload
names (``transcript_path``), read as Claude Code's transcript is (``transcript_tail``): each
``gemini`` message with its text, its tool calls and its tokens (input as Gemini counts it, the
cached part included; output with the model's thoughts). ``AfterModel`` is not used: Gemini CLI fires
it for every streamed chunk, with the text only (its function calls dropped), so a hook there would
start a process per chunk and still not know whether the reply called a tool. The
tool events carry no call id: a call's two events are paired by its arguments, in order. ``AfterTool``
has no failure flag: a tool that failed (a file not found, ...) carries an ``error`` object beside its
text, and a shell command's failure is read from the ``Exit Code: N`` line Gemini CLI writes into the
text it hands the model (``tool_response.llmContent``); that text, without its process-group line (a
new number on every run), is the result the guard compares. A call Gemini CLI rejects before running
it (arguments that fail its checks, a path outside the workspace) fires no hook at all.

What Gemini CLI honours (0.61.0): ``{"decision": "deny", "reason": R}`` refuses the call, and the
model reads ``Tool execution blocked: R``; ``{"continue": false, "stopReason": S}`` on ``BeforeTool``
does not run the call and ends the run at once (the user reads ``Agent execution stopped by hook:
S``). So a refusal is a deny with the guard's message, and a ``block``/``halt`` is that stop. The
same ``continue: false`` on ``BeforeModel`` ends the run before the request is made: the answer when
the guard refuses the model request (a spent token cap) or a reply halted the turn, with the reason
as ``systemMessage`` too: Gemini CLI ends such a run without showing ``stopReason``. A
warning after a call reaches the model as ``additionalContext`` (appended to the call's output as
``<hook_context>``), and a ``systemMessage`` is shown to the user (``Hook system message: ...``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from otelguard.coding_agents.hook import DEFAULT_TIMEOUT_SECONDS
from otelguard.coding_agents.mapping import (
    MAX_COUNT,
    MAX_ID_CHARS,
    MAX_REPLY_CHARS,
    AgentHooks,
    report_replies,
    required_text,
    stop_reason,
)
from otelguard.coding_agents.settings import hook_command, hooks_block
from otelguard.coding_agents.transcript_tail import Reply, tail_objects
from otelguard.core.decisions import Decision

__all__ = [
    "DEFAULT_AGENT",
    "HOOK_EVENTS",
    "MODEL_EVENTS",
    "TOOL_EVENTS",
    "GeminiCliHooks",
    "chat_replies",
    "context",
    "exit_code",
    "model_request",
    "refusal",
    "settings_block",
    "shell_result",
]

DEFAULT_AGENT: Final = "gemini-cli"
HOOK_EVENTS: Final = ("BeforeAgent", "BeforeModel", "BeforeTool", "AfterTool", "AfterAgent", "SessionEnd")
MODEL_EVENTS: Final = ("BeforeAgent", "BeforeModel", "AfterAgent")
"""The events around a model request: a turn's start (what came before is history), before each
request (the reply before it, then the request), the turn's end (the final reply)."""
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
    model_events = MODEL_EVENTS
    transcript_events = MODEL_EVENTS

    def answer(self, event: str, session_id: str, payload: Mapping[str, Any]) -> dict[str, Any] | None:
        session = self.session(session_id)
        guard = session.main
        if event in MODEL_EVENTS:
            replies = chat_replies(tail_objects(payload.get("transcript_path")))
            if event == "BeforeAgent":
                session.start_turn(agent=self.agent)
                self.reported.skip(session_id, replies)
                return None
            report_replies(guard, self.reported.unreported(session_id, replies))
            if event == "AfterAgent":
                session.end_turn()
                return None
            return model_request(guard.before_model(), guard.halt_decision)
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
        # nothing refunded there; a model event waits on the state only for a token cap kept there
        return event not in ("AfterTool", "BeforeAgent", "AfterAgent", "BeforeModel")


def model_request(decision: Decision, halt: Decision | None) -> dict[str, Any] | None:
    """The answer to ``BeforeModel``: nothing when the model may be asked; the stop when the guard
    refuses the request or a reply halted the turn (``halt``)."""
    stop = halt if halt is not None else None if decision.allows_execution else decision
    if stop is None:
        return None
    # Gemini CLI 0.61.0 ends the run on this without showing its reason: the system message shows it
    reason = stop_reason(stop)
    return {"continue": False, "stopReason": reason, "systemMessage": reason}


def chat_replies(objects: Iterable[Mapping[str, Any]]) -> list[Reply]:
    """The ``gemini`` messages of a Gemini CLI chat file, one per id (a message is written again as it
    gains its tool calls: the last line of an id wins), in order. Messages set in bulk (``$set``)
    count as written one by one."""
    found: dict[str, Reply] = {}
    for entry in objects:
        bulk = entry.get("$set")
        messages = bulk.get("messages") if isinstance(bulk, Mapping) else None
        for message in messages if isinstance(messages, list) else (entry,):
            reply = _chat_reply(message) if isinstance(message, Mapping) else None
            if reply is not None:
                found.pop(reply.message_id, None)  # in the order of its last write
                found[reply.message_id] = reply
    return list(found.values())


def _chat_reply(message: Mapping[str, Any]) -> Reply | None:
    message_id = message.get("id")
    if (
        message.get("type") != "gemini"
        or not isinstance(message_id, str)
        or not 0 < len(message_id) <= MAX_ID_CHARS
    ):
        return None
    content = message.get("content")
    text = content[:MAX_REPLY_CHARS] if isinstance(content, str) and content else None
    calls = message.get("toolCalls")
    tokens = message.get("tokens")
    tokens = tokens if isinstance(tokens, Mapping) else {}
    output = [_count(tokens.get(field)) for field in ("output", "thoughts")]
    spent = [value for value in output if value is not None]
    return Reply(
        message_id,
        text,
        len(calls) if isinstance(calls, list) else 0,
        _count(tokens.get("input")),
        sum(spent) if spent else None,
    )


def _count(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT:
        return value
    return None


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
