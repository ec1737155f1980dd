"""mini-swe-agent trajectories: a message list, or ``{"messages": [...], "info": {...}}``.

Two layouts, told apart message by message, so one reader serves every version:

* **Text actions** (1.x, and 2.x with a text-based model): the model writes exactly one
  ```` ```mswea_bash_command ```` (1.x: ```` ```bash ````) block; that is one call of tool ``bash`` with
  ``{"command": <the block>}``. Since 2.0 the message also records the parsed actions under
  ``extra.actions``, which win over the text. A message with no block or several ran nothing
  (mini-swe-agent answered with a format error), so it is no call. The result is the next user message.
* **Tool calls** (2.x's default, ``"trajectory_format": "mini-swe-agent-1.1"``): assistant
  ``tool_calls`` (chat completions) or a Responses API ``output`` list of ``function_call`` items; the
  results are ``role: tool`` messages (or ``function_call_output`` items) matched by call id.

A result failed when its return code is not 0: ``extra.returncode`` when recorded, else the
``"returncode"`` of a JSON result (2.x's tool-call template), else the ``<returncode>N</returncode>``
before the output; without
any (a timeout message in 1.x) the fallback classifier decides. A run ends with a ``role: exit``
message: a call still waiting then (the final submission, which ends the run instead of answering) gets
that message as its result. An interruption in interactive mode answers the waiting calls: a user's
rejection is a refusal ``user_rejected``, any other interruption a cancellation; a task the user adds
starts a new turn.

Nothing is dropped silently: an observation arriving while no call waits means the model message
before it held an action this reader could not read (a custom action format), which is an input error.
The first user message is the task: a run is one session of one turn.

Every assistant message is a model reply, with the usage of the response recorded beside it
(``extra.response.usage``). mini-swe-agent runs exactly one action per reply and ends a run by a
command, never by a reply: a reply it could not run (no action block, or several; no tool call) was
answered with its format error, so it is a reply with one invalid tool call.
"""

from __future__ import annotations

import re
from collections import deque
from typing import Any, Final

import orjson

from otelguard.readers.events import EventSink, SessionKey, ToolCall
from otelguard.readers.feed import SessionFeed, result_text, type_name
from otelguard.readers.replies import reply_text, usage_tokens
from otelguard.readers.times import parse_time

__all__ = ["MINI_SWE_AGENT", "MiniSweAgentReader", "is_mini_swe_agent_messages"]

MINI_SWE_AGENT: Final = "mini-swe-agent"
TOOL_NAME: Final = "bash"
# mini-swe-agent's own default action patterns (2.x, 1.x), applied as it applies them
_ACTION = re.compile(r"```(?:mswea_bash_command|bash)\s*\n(.*?)\n```", re.DOTALL)
_RETURN_CODE = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>")
_MARKER: Final = "```mswea_bash_command"
_NOT_EXECUTED: Final = "action was not executed"
_REJECTED: Final = "UserRejection"
_NEW_TASK: Final = "UserNewTask"
_FORMAT_ERROR: Final = "FormatError"
_SLOT: Final = "action "
"""A text action has no call id: it is matched to the next observation by this slot name."""


def _text(content: Any) -> str:
    text = result_text(content)
    return text if isinstance(text, str) else ""


def _extra(message: dict[str, Any]) -> dict[str, Any]:
    extra = message.get("extra")
    return extra if isinstance(extra, dict) else {}


def is_mini_swe_agent_messages(messages: Any) -> bool:
    """A message list written by mini-swe-agent: its ``exit`` message or recorded actions (2.x), or
    its action blocks and ``<returncode>`` results with no structured tool calls (1.x; a tool-calling
    list without mini-swe-agent's marks reads as an OpenAI chat)."""
    if not isinstance(messages, list):
        return False
    structured = marker = returncode = False
    for message in messages:
        if not isinstance(message, dict):
            return False
        if message.get("role") == "exit" or isinstance(_extra(message).get("actions"), list):
            return True
        structured = structured or bool(message.get("tool_calls")) or message.get("role") == "tool"
        text = _text(message.get("content"))
        if message.get("role") == "assistant" and _MARKER in text:
            marker = True
        elif message.get("role") == "user" and "<returncode>" in text:
            returncode = True
    return not structured and (marker or returncode)


class _Run:
    def __init__(self, sink: EventSink, key: SessionKey) -> None:
        self.feed = SessionFeed(sink, key)
        self._waiting: deque[str] = deque()  # calls without their result yet, in the order made
        self._actions = 0
        self._started = False
        self._ended = False
        self._time: float | None = None  # the message being read: recent versions stamp it in extra

    def message(self, line: int, message: Any, where: str) -> None:
        if not isinstance(message, dict):
            self.feed.error(line, f"{where}expected a message object, got {type_name(message)}")
            return
        if self._ended:
            return
        self._time = parse_time(_extra(message).get("timestamp"))
        role = message.get("role")
        kind = message.get("type")
        if role == "assistant" or (role is None and isinstance(message.get("output"), list)):
            self.feed.tick()
            self._model_message(line, message, where)
        elif role == "tool" or kind == "function_call_output":
            self._tool_result(line, message, where)
        elif role == "exit":
            self._exit(line, message)
        elif role == "user":
            self._user(line, message, where)
        # system and vendor roles carry no tool traffic

    # --- calls ------------------------------------------------------------------------------------

    def _model_message(self, line: int, message: dict[str, Any], where: str) -> None:
        reply = self.feed.open_reply(line, self._time)
        waiting = len(self._waiting)
        tool_calls = message.get("tool_calls")
        output = message.get("output")
        if tool_calls:
            self._tool_calls(line, tool_calls, f"{where}tool_calls")
        elif isinstance(output, list):
            self._response_items(line, output, f"{where}output")
        else:
            self._text_actions(line, message, where)
        response = _extra(message).get("response")
        tokens_in, tokens_out = usage_tokens(response.get("usage") if isinstance(response, dict) else None)
        self.feed.close_reply(
            reply,
            text=reply_text(message.get("content")),
            invalid_tool_calls=0 if len(self._waiting) > waiting else 1,
            input_tokens=tokens_in,
            output_tokens=tokens_out,
        )

    def _tool_calls(self, line: int, tool_calls: Any, where: str) -> None:
        if not isinstance(tool_calls, list):
            self.feed.error(line, f"{where} is {type_name(tool_calls)}, expected an array")
            return
        for index, item in enumerate(tool_calls):
            function = item.get("function") if isinstance(item, dict) else None
            if not isinstance(function, dict):
                self.feed.error(line, f"{where}[{index}] has no function object; call not replayed")
                continue
            self._call(
                line, item.get("id"), function.get("name"), function.get("arguments"), f"{where}[{index}]"
            )

    def _response_items(self, line: int, output: list[Any], where: str) -> None:
        for index, item in enumerate(output):
            if isinstance(item, dict) and item.get("type") == "function_call":
                call_id = item.get("call_id") or item.get("id")
                self._call(line, call_id, item.get("name"), item.get("arguments"), f"{where}[{index}]")

    def _call(self, line: int, call_id: Any, name: Any, arguments: Any, where: str) -> None:
        if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
            self.feed.error(line, f"{where} needs a string call id and tool name; call not replayed")
            return
        if self.feed.has_pending(call_id):
            self.feed.error(line, f"tool call id {call_id} repeats a call still waiting for its result")
            return
        # arguments stay as recorded: the guard parses a JSON string and hashes an invalid one raw
        self.feed.add_call(ToolCall(call_id, name, arguments, line, time=self._time))
        self._waiting.append(call_id)

    def _text_actions(self, line: int, message: dict[str, Any], where: str) -> None:
        recorded = _extra(message).get("actions")
        if isinstance(recorded, list):
            commands: list[Any] = [a.get("command") if isinstance(a, dict) else None for a in recorded]
        else:
            blocks = [block.strip() for block in _ACTION.findall(_text(message.get("content")))]
            commands = blocks if len(blocks) == 1 else []
        for index, command in enumerate(commands):
            if not isinstance(command, str):
                self.feed.error(
                    line, f"{where}extra.actions[{index}] has no command string; call not replayed"
                )
                continue
            self._actions += 1
            slot = f"{_SLOT}{self._actions}"
            self.feed.add_call(ToolCall(None, TOOL_NAME, {"command": command}, line, time=self._time), slot)
            self._waiting.append(slot)

    # --- results ----------------------------------------------------------------------------------

    def _tool_result(self, line: int, message: dict[str, Any], where: str) -> None:
        call_id = message.get("tool_call_id", message.get("call_id"))
        if not isinstance(call_id, str):
            self.feed.error(line, f"{where}tool result without a string call id")
            return
        content = (
            message.get("output") if message.get("type") == "function_call_output" else message.get("content")
        )
        if call_id in self._waiting:
            self._waiting.remove(call_id)
        self._answer(call_id, _text(content), _extra(message), line)

    def _user(self, line: int, message: dict[str, Any], where: str) -> None:
        extra = _extra(message)
        if isinstance(extra.get("actions"), list):  # a command the user typed in interactive mode
            self._text_actions(line, message, where)
            return
        text = _text(message.get("content"))
        interrupt = extra.get("interrupt_type")
        slot = next((slot for slot in self._waiting if slot.startswith(_SLOT)), None)
        if not self._started:  # the task
            self._started = True
            self.feed.start_turn(self._time)
        elif interrupt == _NEW_TASK or (interrupt not in (None, _FORMAT_ERROR) and self._waiting):
            while self._waiting:  # the user stopped the calls before they ran
                waiting = self._waiting.popleft()
                if interrupt == _REJECTED:
                    self.feed.add_result(waiting, text, True, line, refusal="user_rejected", time=self._time)
                else:
                    self.feed.add_result(waiting, text, None, line, cancelled=True, time=self._time)
            if interrupt == _NEW_TASK:
                self.feed.start_turn(self._time)
        elif slot is not None:
            self._waiting.remove(slot)
            self._answer(slot, text, extra, line)
        elif "returncode" in extra or _RETURN_CODE.search(_head(text)):
            self.feed.error(
                line,
                f"{where}a command's output with no call before it: the model message before it holds an "
                "action this reader cannot read",
            )

    def _exit(self, line: int, message: dict[str, Any]) -> None:
        """The run is over; a call still waiting ended it (the submission) rather than got an answer."""
        self._ended = True
        text = _text(message.get("content"))
        submitted = _extra(message).get("exit_status") == "Submitted"
        while self._waiting:
            self.feed.add_result(
                self._waiting.popleft(), text, False if submitted else None, line, time=self._time
            )

    def _answer(self, slot: str, text: str, extra: dict[str, Any], line: int) -> None:
        if extra.get("exception_info") == _NOT_EXECUTED:
            self.feed.add_result(slot, text, None, line, cancelled=True, time=self._time)
        else:
            self.feed.add_result(slot, text, _failed(text, extra), line, time=self._time)


def _head(text: str) -> str:
    return text.split("<output", 1)[0]


def _failed(text: str, extra: dict[str, Any]) -> bool | None:
    code = extra.get("returncode")
    if not _is_code(code) and text.startswith("{"):  # 2.x's default tool-call observation is JSON
        try:
            document = orjson.loads(text)
        except orjson.JSONDecodeError:
            document = None
        code = document.get("returncode") if isinstance(document, dict) else None
    if _is_code(code):
        return bool(code != 0)
    match = _RETURN_CODE.search(_head(text))
    return None if match is None else int(match.group(1)) != 0


def _is_code(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


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
        elif isinstance(record, dict) and ("role" in record or "type" in record or "object" in record):
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
