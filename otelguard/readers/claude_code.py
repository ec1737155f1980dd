"""Claude Code session transcripts (``~/.claude/projects/<project>/<session-id>.jsonl``).

One event per line; ``user``/``assistant`` lines carry an Anthropic ``message``. An assistant message
is often split over several lines with the same ``message.id``. Lines with ``isSidechain: true`` are a
subagent's own conversation and form their own session (``<sessionId>:<sidechain root uuid>``).
Every line's ``timestamp`` is kept: a call's time is its result's line, else its request's.

Each assistant message is one model reply (its lines joined: their text, the calls they make, the
usage of the last line, prompt tokens read from the cache included); a message id seen before in
the session (a resumed session writes it again) is not a second reply.
"""

from __future__ import annotations

from typing import Any, Final

from otelguard.core.bounded_map import BoundedMap
from otelguard.readers.claude_code_results import add_tool_result
from otelguard.readers.events import EventSink, ModelReply, SessionKey, ToolCall
from otelguard.readers.feed import SessionFeed, result_text, type_name
from otelguard.readers.replies import MAX_REPLY_CHARS, reply_text, usage_tokens
from otelguard.readers.times import parse_time

__all__ = ["CLAUDE_CODE", "ClaudeCodeReader"]

CLAUDE_CODE: Final = "claude-code"
_MAX_OPEN_SESSIONS: Final = 256
_MAX_SIDECHAIN_UUIDS: Final = 65536
_MAX_MESSAGE_IDS: Final = 4096
"""Replies remembered per session, to know a message written again by a resumed session."""
"""Bounds that keep memory constant on huge files: sessions and sidechain links seen long ago are
forgotten first (a forgotten sidechain parent starts a new sidechain session)."""

# Lines Claude Code writes as "user" that are not a person asking for something.
_NOT_A_PROMPT: Final = ("[Request interrupted by user", "<local-command-stdout>", "<local-command-stderr>")


class _Session:
    def __init__(self, sink: EventSink, key: SessionKey) -> None:
        self.feed = SessionFeed(sink, key, dedupe=True)
        self._message_id: object = None
        self._reply: ModelReply | None = None
        self._text: list[str] = []
        self._usage: Any = None
        self._replied: BoundedMap[str, bool] = BoundedMap(_MAX_MESSAGE_IDS)

    def assistant(self, line: int, message: dict[str, Any], time: float | None) -> None:
        message_id = message.get("id")
        if message_id is None or message_id != self._message_id:
            self.feed.tick()  # one message split over several lines counts once
            self.end_reply()
            if not (isinstance(message_id, str) and self._replied.use(message_id) is not None):
                self._reply = self.feed.open_reply(line, time)
                if isinstance(message_id, str):
                    self._replied.put(message_id, True)
        self._message_id = message_id
        if self._reply is not None:
            text = reply_text(message.get("content"))
            if text is not None and sum(map(len, self._text)) < MAX_REPLY_CHARS:
                self._text.append(text)
            if message.get("usage") is not None:
                self._usage = message.get("usage")
        content = message.get("content")
        if not isinstance(content, list):
            if not isinstance(content, str):
                self.feed.error(
                    line, f"message.content is {type_name(content)}, expected a string or an array"
                )
            return
        for index, block in enumerate(content):
            if not isinstance(block, dict) or block.get("type") not in ("tool_use", "server_tool_use"):
                continue
            call_id, name = block.get("id"), block.get("name")
            if not isinstance(call_id, str) or not isinstance(name, str) or not name:
                self.feed.error(line, f"message.content[{index}]: tool_use needs a string id and name")
                continue
            self.feed.add_call(ToolCall(call_id, name, block.get("input"), line, time=time))

    def end_reply(self) -> None:
        """The assistant message being read is complete: its reply goes on (before its calls)."""
        reply, self._reply = self._reply, None
        if reply is None:
            return
        tokens_in, tokens_out = usage_tokens(self._usage)
        text = "\n".join(self._text)[:MAX_REPLY_CHARS] or None
        self._text, self._usage = [], None
        self.feed.close_reply(reply, text=text, input_tokens=tokens_in, output_tokens=tokens_out)

    def user(self, line: int, message: dict[str, Any], time: float | None) -> None:
        self.end_reply()
        content = message.get("content")
        if isinstance(content, str):
            if not content.startswith(_NOT_A_PROMPT):
                self.feed.start_turn(time)
            return
        if not isinstance(content, list):
            self.feed.error(line, f"message.content is {type_name(content)}, expected a string or an array")
            return
        prompt = False
        for index, block in enumerate(content):
            if isinstance(block, dict) and block.get("type") == "tool_result":
                call_id = block.get("tool_use_id")
                if not isinstance(call_id, str):
                    self.feed.error(line, f"message.content[{index}].tool_use_id is {type_name(call_id)}")
                    continue
                failed = block.get("is_error") is True
                add_tool_result(self.feed, call_id, result_text(block.get("content")), failed, line, time)
            elif not (
                isinstance(block, dict)
                and isinstance(block.get("text"), str)
                and block["text"].startswith(_NOT_A_PROMPT)
            ):
                prompt = True
        if prompt:
            self.feed.start_turn(time)


def _close(_session_id: str, session: _Session) -> None:
    session.end_reply()
    session.feed.close()


class ClaudeCodeReader:
    def __init__(self, sink: EventSink, path: str, fallback_session_id: str) -> None:
        self.sink = sink
        self.path = path
        self._fallback = fallback_session_id
        self._sessions: BoundedMap[str, _Session] = BoundedMap(_MAX_OPEN_SESSIONS, _close)
        self._sidechain_roots: BoundedMap[str, str] = BoundedMap(_MAX_SIDECHAIN_UUIDS)

    def feed(self, line: int, record: Any) -> None:
        if not isinstance(record, dict):
            self.sink.error(self.path, line, f"expected an event object, got {type_name(record)}")
            return
        kind = record.get("type")
        if kind not in ("user", "assistant"):
            if not isinstance(kind, str):
                self.sink.error(self.path, line, f"type is {type_name(kind)}, expected a string")
            return  # summary, system, file-history-snapshot, ...: no tool traffic
        message = record.get("message")
        if not isinstance(message, dict):
            self.sink.error(self.path, line, f"message is {type_name(message)}, expected an object")
            return
        if kind == "user" and record.get("isMeta") is True:
            return
        session = self._session(self._session_id(record))
        time = parse_time(record.get("timestamp"))
        if kind == "assistant":
            session.assistant(line, message, time)
        else:
            session.user(line, message, time)

    def close(self) -> None:
        self._sessions.evict(len(self._sessions))

    def _session_id(self, record: dict[str, Any]) -> str:
        session_id = record.get("sessionId")
        if not isinstance(session_id, str) or not session_id:
            session_id = self._fallback
        if record.get("isSidechain") is not True:
            return session_id
        return f"{session_id}:{self._sidechain_root(record)}"

    def _sidechain_root(self, record: dict[str, Any]) -> str:
        uuid, parent = record.get("uuid"), record.get("parentUuid")
        root = self._sidechain_roots.use(parent) if isinstance(parent, str) else None
        if root is None:
            root = uuid if isinstance(uuid, str) else "sidechain"
        if isinstance(uuid, str):
            self._sidechain_roots.put(uuid, root)
        return root

    def _session(self, session_id: str) -> _Session:
        session = self._sessions.use(session_id)
        if session is not None:
            return session
        if len(self._sessions) >= _MAX_OPEN_SESSIONS:
            self._sessions.evict(1)  # before the new one begins: at most this many open at once
        session = _Session(self.sink, SessionKey(self.path, session_id))
        self._sessions.put(session_id, session)
        return session
