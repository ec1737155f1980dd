"""Gemini CLI chats (``~/.gemini/tmp/<project>/chats/session-*.jsonl``), as Gemini CLI 0.61.0 writes
them; also the older single-document ``session-*.json`` (the same fields, ``messages`` inline).

The first line names the session (``{"sessionId", "projectHash", "startTime", ...}``); each later
line is a message (``{"id", "timestamp", "type", "content", ...}``) or an update of the session's
fields (``{"$set": {...}}``, whose ``messages``, when it holds some, are messages too). A model
message (``type: "gemini"``) is written again, under the same ``id``, once its ``toolCalls`` are done:
each call carries its ``name``, ``args``, ``status`` and its ``result`` (``functionResponse`` parts).
A user message with text starts a turn, except the ``<session_context>`` block Gemini CLI writes as
the user; a user message of ``functionResponse`` parts is the results as sent to the model, which
answers a call its model message left without one.

A call is read as Gemini CLI's hooks hand it to the guard (``AfterTool``'s ``llmContent``), so that a
replay decides what the hooks decided in the run: the ``output`` text without its process-group line
and without the ``<hook_context>`` a hook's warning appended to it, failed when its ``Exit Code: N``
line says so. An ``error`` is a failure, except Gemini CLI's own texts for a call a hook refused
(``Tool execution blocked: ...``) or stopped (``Agent execution stopped by hook: ...``): a refusal
(``hook_denied``), the call never ran. A call ``cancelled`` never ran either. Every message's and
call's ``timestamp`` is kept: a call's time is its own (when it ended), else its message's.

Each model message is one model reply (its text, its calls, its ``tokens``: ``input`` and ``output``
as Gemini reports them), counted once however often it is written again.
"""

from __future__ import annotations

import re
from typing import Any, Final

from otelguard.coding_agents.gemini_cli import shell_result
from otelguard.core.bounded_map import BoundedMap
from otelguard.readers.claude_code_results import HOOK_DENIED
from otelguard.readers.events import EventSink, ModelReply, SessionKey, ToolCall
from otelguard.readers.feed import SessionFeed, type_name
from otelguard.readers.replies import reply_text, usage_tokens
from otelguard.readers.times import parse_time

__all__ = ["GEMINI_CLI", "GeminiCliReader", "is_gemini_cli_session"]

GEMINI_CLI: Final = "gemini-cli"
_HOOK_REFUSALS: Final = ("Tool execution blocked: ", "Agent execution stopped by hook: ")
_HOOK_CONTEXT: Final = re.compile(r"\s*<hook_context>.*?</hook_context>\s*\Z", re.DOTALL)
_SESSION_CONTEXT: Final = re.compile(r"\s*<session_context>.*</session_context>\s*", re.DOTALL)
_MAX_MESSAGE_IDS: Final = 4096
"""Model messages remembered per session, to count a message written again once."""
_MAX_HOOK_CONTEXTS: Final = 8
"""Warnings appended to one call's output (one per hook that answered): more is not Gemini CLI's."""


def is_gemini_cli_session(record: dict[str, Any]) -> bool:
    """A chat's first line (or a whole older chat document): its session id and project hash."""
    return isinstance(record.get("sessionId"), str) and "projectHash" in record


def model_text(output: str) -> str:
    """A call's output without the warnings hooks appended to it (``<hook_context>``): the text
    ``AfterTool`` handed the hooks, before any hook answered."""
    for _ in range(_MAX_HOOK_CONTEXTS):
        found = _HOOK_CONTEXT.search(output)
        if found is None:
            break
        output = output[: found.start()]
    return output


class _Session:
    def __init__(self, sink: EventSink, key: SessionKey) -> None:
        self.feed = SessionFeed(sink, key, dedupe=True)
        self._message_id: object = None
        self._prompts: set[str] = set()
        self._reply: ModelReply | None = None
        self._reply_fields: tuple[str | None, int | None, int | None] = (None, None, None)
        self._replied: BoundedMap[str, bool] = BoundedMap(_MAX_MESSAGE_IDS)

    def end_reply(self) -> None:
        """The model message being read is complete: its reply goes on (before its calls)."""
        reply, self._reply = self._reply, None
        if reply is not None:
            text, tokens_in, tokens_out = self._reply_fields
            self.feed.close_reply(reply, text=text, input_tokens=tokens_in, output_tokens=tokens_out)

    def message(self, line: int, message: dict[str, Any]) -> None:
        kind, time = message.get("type"), parse_time(message.get("timestamp"))
        if kind == "user":
            self.end_reply()
            self._user(line, message, time)
        elif kind == "gemini":
            message_id = message.get("id")
            if message_id is None or message_id != self._message_id:
                self.feed.tick()  # a message written again once its calls are done counts once
                self.end_reply()
                if not (isinstance(message_id, str) and self._replied.use(message_id) is not None):
                    self._reply = self.feed.open_reply(line, time)
                    if isinstance(message_id, str):
                        self._replied.put(message_id, True)
            if self._reply is not None:  # the last writing of the message holds its final tokens
                self._reply_fields = (
                    reply_text(message.get("content")),
                    *usage_tokens(message.get("tokens")),
                )
            self._message_id = message_id
            calls = message.get("toolCalls")
            if calls is None:
                return
            if not isinstance(calls, list):
                self.feed.error(line, f"toolCalls is {type_name(calls)}, expected an array")
                return
            for index, call in enumerate(calls):
                self._call(line, index, call, time)
        elif not isinstance(kind, str):
            self.feed.error(line, f"type is {type_name(kind)}, expected a string")
        # info, error, warning: Gemini CLI's notes to the user, no tool traffic

    def _user(self, line: int, message: dict[str, Any], time: float | None) -> None:
        content = message.get("content")
        if isinstance(content, str):
            content = [{"text": content}]
        if not isinstance(content, list):
            self.feed.error(line, f"content is {type_name(content)}, expected a string or an array")
            return
        prompt = False
        for part in content:
            if not isinstance(part, dict):
                continue
            response = part.get("functionResponse")
            if isinstance(response, dict):
                call_id = response.get("id")
                if isinstance(call_id, str) and self.feed.has_pending(call_id):
                    self._result(call_id, response.get("response"), None, line, time)
            elif isinstance(part.get("text"), str) and not _SESSION_CONTEXT.fullmatch(part["text"]):
                prompt = True
        message_id = message.get("id")
        if prompt and not (isinstance(message_id, str) and message_id in self._prompts):
            if isinstance(message_id, str) and len(self._prompts) < 65536:
                self._prompts.add(message_id)  # a history written again starts no turn twice
            self.feed.start_turn(time)

    def _call(self, line: int, index: int, call: Any, time: float | None) -> None:
        if not isinstance(call, dict):
            self.feed.error(line, f"toolCalls[{index}] is {type_name(call)}, expected an object")
            return
        call_id, name = call.get("id"), call.get("name")
        if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
            self.feed.error(line, f"toolCalls[{index}] needs a string id and name")
            return
        ended = parse_time(call.get("timestamp"))
        self.feed.add_call(ToolCall(call_id, name, call.get("args"), line, time=ended or time))
        if not self.feed.has_pending(call_id):
            return  # written before: already answered
        if call.get("status") == "cancelled":
            self.feed.add_result(call_id, None, None, line, cancelled=True, time=ended)
            return
        result = call.get("result")
        responses = [
            part["functionResponse"]
            for part in (result if isinstance(result, list) else [])
            if isinstance(part, dict) and isinstance(part.get("functionResponse"), dict)
        ]
        if responses:
            self._result(call_id, responses[0].get("response"), call.get("status"), line, ended)

    def _result(self, call_id: str, response: Any, status: Any, line: int, time: float | None) -> None:
        if not isinstance(response, dict):
            self.feed.error(line, f"functionResponse of {call_id}: response is {type_name(response)}")
            return
        error = response.get("error")
        if isinstance(error, str):
            refusal = HOOK_DENIED if error.startswith(_HOOK_REFUSALS) else None
            self.feed.add_result(call_id, error, True, line, refusal=refusal, time=time)
            return
        output = response.get("output")
        if isinstance(output, str):
            text, failed = shell_result(model_text(output))
            if failed is None and status == "error":
                failed = True
            self.feed.add_result(call_id, text, failed, line, time=time)
            return
        self.feed.add_result(call_id, response, True if status == "error" else None, line, time=time)


class GeminiCliReader:
    def __init__(self, sink: EventSink, path: str, fallback_session_id: str) -> None:
        self.sink = sink
        self.path = path
        self._fallback = fallback_session_id
        self._session: _Session | None = None

    def feed(self, line: int, record: Any) -> None:
        if not isinstance(record, dict):
            self.sink.error(self.path, line, f"expected a chat record object, got {type_name(record)}")
            return
        if is_gemini_cli_session(record):
            if self._session is None:
                self._open(record["sessionId"] or self._fallback)
            messages = record.get("messages")
            if isinstance(messages, list):  # the older whole-document chat
                self._messages(line, messages)
            return
        update = record.get("$set")
        if isinstance(update, dict):
            messages = update.get("messages")
            if isinstance(messages, list):
                self._messages(line, messages)
            return
        if any(isinstance(key, str) and key.startswith("$") for key in record):
            return  # another update of the session's fields
        self._current().message(line, record)

    def _messages(self, line: int, messages: list[Any]) -> None:
        session = self._current()
        for index, message in enumerate(messages):
            if isinstance(message, dict):
                session.message(line, message)
            else:
                self.sink.error(
                    self.path, line, f"messages[{index}] is {type_name(message)}, expected an object"
                )

    def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            session.end_reply()
            session.feed.close()

    def _current(self) -> _Session:
        return self._session if self._session is not None else self._open(self._fallback)

    def _open(self, session_id: str) -> _Session:
        self._session = _Session(self.sink, SessionKey(self.path, session_id))
        return self._session
