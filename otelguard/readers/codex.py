"""Codex session rollouts (``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl``), as codex-cli 0.171.0
writes them.

One record per line, ``{"timestamp", "type", "payload"}``: ``session_meta`` names the session
(``payload.id``); ``response_item`` lines are the conversation as the model saw it (``message``,
``function_call``, ``function_call_output``, ``custom_tool_call``, ...); ``event_msg`` lines are what
Codex did (among them ``item_completed`` of a ``CommandExecution``, with the command's own output).
Everything else (``turn_context``, token counts, ``world_state``) carries no tool traffic.

A call is read as Codex's hooks hand it to the guard, so that a replay decides what the hooks decided
in the run: ``exec_command {"cmd": C}`` (and the older ``shell``) is ``Bash {"command": C}``, and its
result is the command's output alone (``aggregated_output``; else the part of the model's text after
``Output:``), with no failure flag: Codex's ``PostToolUse`` carries neither the exit code nor a flag,
so the guard judges that output as it judges any unmarked shell result (the Chunk ID and wall time
lines, new on every call, never reach it). An output that is Codex's refusal of a call its
``PreToolUse`` hook denied (``Command blocked by PreToolUse hook: ...``) is a refusal (``hook_denied``):
the call never ran. A user message starts a turn, except the context blocks Codex writes as the user
(``<environment_context>``, ``<user_instructions>``, ...). Every line's ``timestamp`` is kept.

The model's replies: the items the model answered with (its messages, reasoning and calls) up to the
next result or request are one reply; the ``token_count`` event Codex writes after a response gives
its usage (``last_token_usage``).
"""

from __future__ import annotations

import re
from typing import Any, Final

import orjson

from otelguard.core.bounded_map import BoundedMap
from otelguard.readers.claude_code_results import HOOK_DENIED
from otelguard.readers.events import EventSink, ModelReply, SessionKey, ToolCall
from otelguard.readers.feed import SessionFeed, type_name
from otelguard.readers.replies import MAX_REPLY_CHARS, reply_text, usage_tokens
from otelguard.readers.times import parse_time

__all__ = ["CODEX", "CodexReader", "is_codex_record"]

CODEX: Final = "codex"
_RECORD_TYPES: Final = frozenset({"session_meta", "response_item", "event_msg", "turn_context", "compacted"})
_CALLS: Final = frozenset({"function_call", "custom_tool_call", "local_shell_call"})
_MODEL_ITEMS: Final = _CALLS | {"reasoning", "web_search_call"}
"""Items only the model writes (beside its ``assistant`` messages): each belongs to a reply."""
_SHELL_TOOLS: Final = frozenset({"exec_command", "shell", "local_shell", "container.exec"})
_HOOK_SHELL_NAME: Final = "Bash"
"""What Codex's hooks name its shell tool (``tool_name``), whatever the model called it."""
_HOOK_DENIAL: Final = "Command blocked by PreToolUse hook: "
_CONTEXT_BLOCK: Final = re.compile(r"\s*<([A-Za-z_][\w-]*)>.*</\1>\s*", re.DOTALL)
_OUTPUT_MARK: Final = "\nOutput:\n"
_HEADER_LINES: Final = ("Chunk ID:", "Wall time:", "Process exited with code", "Exit code:")
_REMEMBERED_OUTPUTS: Final = 1024
_MAX_REMEMBERED_OUTPUT: Final = 1 << 20
"""Command outputs are kept only until their call's result line: a few, each bounded."""


def is_codex_record(record: dict[str, Any]) -> bool:
    """A rollout line: a known ``type`` with an object ``payload``."""
    return record.get("type") in _RECORD_TYPES and isinstance(record.get("payload"), dict)


def hook_view(name: str, arguments: Any) -> tuple[str, Any]:
    """A call's tool name and arguments as Codex's hooks name them (``tool_name``, ``tool_input``)."""
    args: Any = arguments
    if isinstance(arguments, str):
        try:
            args = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            return name, arguments  # the model's malformed arguments, fingerprinted as sent
    if name not in _SHELL_TOOLS or not isinstance(args, dict):
        return name, args
    command = args.get("cmd", args.get("command"))
    if isinstance(command, list):  # the older shell tool: ["bash", "-lc", SCRIPT]
        words = [str(word) for word in command]
        command = words[-1] if len(words) >= 3 and words[-2] == "-lc" else " ".join(words)
    if not isinstance(command, str):
        return name, args
    return _HOOK_SHELL_NAME, {"command": command}


def command_output(text: str) -> str:
    """The command's own output in exec_command's text for the model: what follows ``Output:`` after
    the header lines (chunk id, wall time, exit status, token count); any other text as it is."""
    if not text.startswith(_HEADER_LINES):
        return text
    _head, mark, body = text.partition(_OUTPUT_MARK)
    return body if mark else text


class _Session:
    def __init__(self, sink: EventSink, key: SessionKey) -> None:
        self.feed = SessionFeed(sink, key, dedupe=True)
        self.outputs: BoundedMap[str, str] = BoundedMap(_REMEMBERED_OUTPUTS)
        self._calling = False  # the last item was a call: the next one is of the same model answer
        self._reply: ModelReply | None = None
        self._text: list[str] = []
        self._answered = False  # a result came after the open reply: the model's next item is a new one

    def end_reply(self, usage: Any = None) -> None:
        """The reply being read is complete (``usage``: its token count, when Codex wrote one)."""
        reply, self._reply = self._reply, None
        if reply is None:
            return
        tokens_in, tokens_out = usage_tokens(usage)
        text = "\n".join(self._text)[:MAX_REPLY_CHARS] or None
        self._text = []
        self.feed.close_reply(reply, text=text, input_tokens=tokens_in, output_tokens=tokens_out)

    def _model_item(self, line: int, time: float | None, text: str | None = None) -> None:
        if self._reply is None or self._answered:
            self.end_reply()
            self._reply, self._answered = self.feed.open_reply(line, time), False
        if text is not None and sum(map(len, self._text)) < MAX_REPLY_CHARS:
            self._text.append(text)

    def item(self, line: int, item: dict[str, Any], time: float | None) -> None:
        kind = item.get("type")
        calling, self._calling = self._calling, kind in _CALLS
        if kind in _MODEL_ITEMS or (kind == "message" and item.get("role") == "assistant"):
            self._model_item(line, time, reply_text(item.get("content")) if kind == "message" else None)
        if kind == "message":
            if item.get("role") == "user" and _is_prompt(item.get("content")):
                self.end_reply()
                self.feed.start_turn(time)
            elif item.get("role") == "assistant":
                self.feed.tick()
        elif kind in _CALLS:
            if not calling:
                self.feed.tick()  # one model answer, however many calls it made at once
            call_id, name = item.get("call_id"), item.get("name")
            if kind == "local_shell_call":
                name = "local_shell"
            if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
                self.feed.error(line, f"payload: {kind} needs a string call_id and name")
                return
            raw = item.get("arguments", item.get("input", item.get("action")))
            tool, args = hook_view(name, raw)
            self.feed.add_call(ToolCall(call_id, tool, args, line, time=time))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            self._answered = self._reply is not None
            self._output(line, item, time)

    def command_done(self, item: dict[str, Any]) -> None:
        """A command's own output, which Codex's ``PostToolUse`` hands its hooks."""
        call_id, output = item.get("id"), item.get("aggregated_output")
        if isinstance(call_id, str) and isinstance(output, str) and len(output) <= _MAX_REMEMBERED_OUTPUT:
            self.outputs.put(call_id, output)

    def _output(self, line: int, item: dict[str, Any], time: float | None) -> None:
        call_id, output = item.get("call_id"), item.get("output")
        if not isinstance(call_id, str):
            self.feed.error(line, f"payload.call_id is {type_name(call_id)}, expected a string")
            return
        if isinstance(output, dict):  # older versions: {"content": TEXT, "success": BOOL}
            content = output.get("content")
            failed = None if not isinstance(output.get("success"), bool) else not output["success"]
            self.feed.add_result(call_id, content, failed, line, time=time)
            return
        if not isinstance(output, str):
            self.feed.error(line, f"payload.output is {type_name(output)}, expected a string")
            return
        if output.startswith(_HOOK_DENIAL):
            self.feed.add_result(call_id, output, True, line, refusal=HOOK_DENIED, time=time)
            return
        result = self.outputs.pop(call_id, None)
        self.feed.add_result(
            call_id, command_output(output) if result is None else result, None, line, time=time
        )


def _is_prompt(content: Any) -> bool:
    """A user message a person wrote: some text that is not one of Codex's own context blocks."""
    if isinstance(content, str):
        return not _CONTEXT_BLOCK.fullmatch(content)
    if not isinstance(content, list):
        return False
    texts = [block.get("text") for block in content if isinstance(block, dict)]
    return any(isinstance(text, str) and not _CONTEXT_BLOCK.fullmatch(text) for text in texts)


class CodexReader:
    def __init__(self, sink: EventSink, path: str, fallback_session_id: str) -> None:
        self.sink = sink
        self.path = path
        self._fallback = fallback_session_id
        self._session: _Session | None = None

    def feed(self, line: int, record: Any) -> None:
        if not isinstance(record, dict):
            self.sink.error(self.path, line, f"expected a rollout record object, got {type_name(record)}")
            return
        kind, payload = record.get("type"), record.get("payload")
        if not isinstance(kind, str):
            self.sink.error(self.path, line, f"type is {type_name(kind)}, expected a string")
            return
        if not isinstance(payload, dict):
            self.sink.error(self.path, line, f"payload is {type_name(payload)}, expected an object")
            return
        if kind == "session_meta":
            if self._session is None:
                session_id = payload.get("id", payload.get("session_id"))
                self._open(session_id if isinstance(session_id, str) and session_id else self._fallback)
            return  # a resumed or forked rollout repeats its parent's: the first one names the file
        time = parse_time(record.get("timestamp"))
        if kind == "response_item":
            self._current().item(line, payload, time)
        elif kind == "event_msg" and payload.get("type") == "item_completed":
            item = payload.get("item")
            if isinstance(item, dict) and item.get("type") == "CommandExecution":
                self._current().command_done(item)
        elif kind == "event_msg" and payload.get("type") == "token_count":
            info = payload.get("info")
            if isinstance(info, dict):
                self._current().end_reply(info.get("last_token_usage"))

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
