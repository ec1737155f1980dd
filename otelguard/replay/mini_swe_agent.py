"""mini-swe-agent trajectories: a message list, or ``{"messages": [...], "info": {...}}``.

The model acts by writing exactly one ```` ```mswea_bash_command ```` (older versions: ```` ```bash ````)
block in an assistant message: that is one call of tool ``bash`` with ``{"command": <the block>}``.
A message with no block or several runs nothing (mini-swe-agent answers with a format error), so it is
no call. The result is the next user message (or the closing ``exit`` message); ``<returncode>N</returncode>`` before the output says
how it ended (failed when N is not 0); without one (a timeout, the final submission) the fallback
classifier decides. The first user message is the task: a run is one session of one turn.
"""

from __future__ import annotations

import re
from typing import Any, Final

from otelguard.replay.events import EventSink, SessionKey, ToolCall
from otelguard.replay.feed import SessionFeed, result_text, type_name
from otelguard.replay.times import parse_time

__all__ = ["MINI_SWE_AGENT", "MiniSweAgentReader", "is_mini_swe_agent_messages"]

MINI_SWE_AGENT: Final = "mini-swe-agent"
TOOL_NAME: Final = "bash"
_ACTION = re.compile(r"```(?:mswea_bash_command|bash)[ \t]*\r?\n(.*?)\r?\n?```", re.DOTALL)
_RETURN_CODE = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>")
_MARKER: Final = "```mswea_bash_command"


def _text(content: Any) -> str:
    text = result_text(content)
    return text if isinstance(text, str) else ""


def is_mini_swe_agent_messages(messages: Any) -> bool:
    """A message list written by mini-swe-agent: its action blocks, its ``<returncode>`` results, and
    no structured tool calls (a tool-calling run reads as an OpenAI chat)."""
    if not isinstance(messages, list):
        return False
    marker = returncode = False
    for message in messages:
        if not isinstance(message, dict):
            return False
        if message.get("tool_calls") or message.get("role") == "tool":
            return False
        text = _text(message.get("content"))
        if message.get("role") == "assistant" and _MARKER in text:
            marker = True
        elif message.get("role") == "user" and "<returncode>" in text:
            returncode = True
    return marker or returncode


class _Run:
    def __init__(self, sink: EventSink, key: SessionKey) -> None:
        self.feed = SessionFeed(sink, key)
        self._waiting: str | None = None
        self._actions = 0
        self._started = False

    def message(self, line: int, message: Any, where: str) -> None:
        if not isinstance(message, dict):
            self.feed.error(line, f"{where}expected a message object, got {type_name(message)}")
            return
        role = message.get("role")
        text = _text(message.get("content"))
        time = _time(message)
        if role == "assistant":
            self.feed.tick()
            actions = _ACTION.findall(text)
            if len(actions) == 1:
                self._actions += 1
                self._waiting = slot = f"action {self._actions}"
                self.feed.add_call(ToolCall(None, TOOL_NAME, {"command": actions[0]}, line, time=time), slot)
        elif role != "system":  # user (or the final "exit" message): the environment speaking
            if self._waiting is not None:
                slot, self._waiting = self._waiting, None
                self.feed.add_result(slot, text, _failed(text), line, time=time)
            elif not self._started and role == "user":
                self._started = True
                self.feed.start_turn(time)


def _time(message: dict[str, Any]) -> float | None:
    """Recent versions stamp model answers and observations with ``extra.timestamp`` (epoch seconds)."""
    extra = message.get("extra")
    return parse_time(extra.get("timestamp")) if isinstance(extra, dict) else None


def _failed(text: str) -> bool | None:
    head = text.split("<output", 1)[0]
    match = _RETURN_CODE.search(head)
    return None if match is None else int(match.group(1)) != 0


class MiniSweAgentReader:
    def __init__(self, sink: EventSink, path: str, session_id: str) -> None:
        self.sink = sink
        self.path = path
        self._session_id = session_id
        self._file_run: _Run | None = None
        self._runs = 0

    def feed(self, line: int, record: Any) -> None:
        if isinstance(record, dict) and "messages" in record and "role" not in record:
            self._document(line, record)
        elif isinstance(record, dict) and "role" in record:
            if self._file_run is None:
                self._file_run = _Run(self.sink, SessionKey(self.path, self._session_id))
            self._file_run.message(line, record, "")
        else:
            self.sink.error(self.path, line, "expected a mini-swe-agent message or trajectory")

    def close(self) -> None:
        if self._file_run is not None:
            self._file_run.feed.close()
            self._file_run = None

    def _document(self, line: int, record: dict[str, Any]) -> None:
        messages = record["messages"]
        if not isinstance(messages, list):
            self.sink.error(self.path, line, f"messages is {type_name(messages)}, expected an array")
            return
        self._runs += 1
        session_id = self._session_id if self._runs == 1 else f"{self._session_id}:{self._runs}"
        run = _Run(self.sink, SessionKey(self.path, session_id))
        for index, message in enumerate(messages):
            run.message(line, message, f"messages[{index}].")
        run.feed.close()
