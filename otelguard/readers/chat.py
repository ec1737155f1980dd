"""OpenAI chat and Anthropic Messages transcripts.

Both are lists of ``{"role", "content"}`` messages, one per line or one conversation per line
(``{"messages": [...]}``, also an Anthropic request body). They differ only where tools appear, so
one reader serves both and learns the dialect from the first tool traffic it sees:

* OpenAI: ``tool_calls`` on assistant messages (``function.arguments`` is a JSON string), results in
  ``role: tool`` messages matched by ``tool_call_id``; no error flag (``failed=None``). Older logs use
  ``function_call`` + ``role: function``, matched by order; so are ``tool_calls`` written without ids
  and ``role: tool`` results without ``tool_call_id`` (an agent of a tau-bench fork writes them so).
* Anthropic: ``tool_use`` blocks in assistant content, ``tool_result`` blocks in user content
  (``is_error`` → failed); server tools (``server_tool_use`` + ``*_tool_result`` in the same message).

Two layouts of OpenAI messages written by agent harnesses are read too:

* tau2-bench results (``{"simulations": [...]}``): one session per simulation (its ``id``); tool calls
  are flat ``{"id", "name", "arguments"}``, results ``role: tool`` messages naming the call by ``id``
  with an ``error`` flag (→ failed). The simulated user's own tool calls (a user message with
  ``tool_calls``, results with ``requestor: user``) are the user acting on their device, not the
  agent's calls and not a new request: skipped.
* tau-bench results of its text agents (act, react, few-shot prompts without tool calling): the
  action is JSON after the last ``Action:`` of an assistant message, ``{"name", "arguments"}``
  (``respond`` is the reply to the user, not a call; text that does not parse is a reply too, as the
  harness takes it), and the environment answers in a user message starting ``API output:``.
* OpenHands LLM completion logs (``{"messages", "fncall_messages", "fncall_response"}``): the
  conversation with the calls as the model made them is ``fncall_messages`` (``messages`` holds it
  rewritten as text for a model without function calling), and the model's last reply is
  ``fncall_response.choices[0].message``. Logs of the older shape (``{"messages", "response", "args",
  "kwargs", "timestamp", "cost"}``) keep the conversation in ``messages`` and the reply in
  ``response.choices[0].message``. A result is failed when the shell's output ends with a non-zero
  ``[Command finished with exit code N]`` or the editor answered ``ERROR:``.

Every assistant message is a model reply (its text, the calls read from it, its ``usage`` when the
message records one, as tau2-bench's do). A user message that repeats, normalised, an earlier one of
the same conversation is the harness's, not a person's (OpenHands' "please continue" when the model
called nothing, say): it opens no new turn, so replies that call nothing run up to it as one streak.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import orjson

from otelguard.readers.claude_code_results import add_tool_result
from otelguard.readers.events import EventSink, SessionKey, ToolCall
from otelguard.readers.feed import SessionFeed, input_ending, result_text, type_name
from otelguard.readers.openhands import completion_log_fields
from otelguard.readers.recorded_failures import openhands_result_failed, tau_bench_result_failed
from otelguard.readers.replies import reply_text, usage_tokens

__all__ = ["ChatReader"]

OPENAI: Final = "openai"
ANTHROPIC: Final = "anthropic"
_IGNORED_ROLES: Final = frozenset({"system", "developer"})
_USER: Final = "user"
_TEXT_ACTION: Final = "Action:"
_TEXT_OBSERVATION: Final = "API output: "
_TEXT_REPLY: Final = "respond"


class _ChatSession:
    def __init__(
        self,
        reader: ChatReader,
        key: SessionKey,
        result_failed: Callable[[Any], bool | None] | None = None,
        text_actions: bool = False,
    ) -> None:
        self.reader = reader
        self.feed = SessionFeed(reader.sink, key)
        self.result_failed = result_failed
        """How the harness that wrote the log marks a failed result in its text, when it does."""
        self.text_actions = text_actions
        """Actions may be written as text (tau-bench's text agents): ``Action:`` + JSON."""
        self._text_calls = 0
        """Text actions still waiting for their ``API output:``."""

    def message(self, line: int, msg: Any, where: str) -> None:
        if not isinstance(msg, dict):
            self.feed.error(line, f"{where}expected a message object, got {type_name(msg)}")
            return
        role = msg.get("role")
        if role == "assistant":
            self.feed.tick()
            reply = self.feed.open_reply(line)
            self._assistant(line, msg, where)
            tokens_in, tokens_out = usage_tokens(msg.get("usage"))
            self.feed.close_reply(
                reply, text=reply_text(msg.get("content")), input_tokens=tokens_in, output_tokens=tokens_out
            )
        elif role == "user":
            if msg.get("tool_calls"):  # a simulated user acting on its own device (tau2-bench)
                return
            content = msg.get("content")
            if self._text_calls and isinstance(content, str) and content.startswith(_TEXT_OBSERVATION):
                self._text_result(line, content[len(_TEXT_OBSERVATION) :])
                return
            self._user(line, content, where)
        elif role == "tool":
            if msg.get("requestor") == _USER:  # the result of such a user action
                return
            self._tool_result(line, msg, where)
        elif role == "function":
            self.reader.saw(OPENAI)
            self.feed.add_result(None, result_text(msg.get("content")), None, line)
        elif not isinstance(role, str):
            self.feed.error(line, f"{where}role is {type_name(role)}, expected a string")
        # other roles (system, developer, vendor extensions) carry no tool traffic

    def _user(self, line: int, content: Any, where: str) -> None:
        if isinstance(content, list):
            starts_turn = False
            for index, block in enumerate(content):
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    self.reader.saw(ANTHROPIC)
                    self._block_result(line, block, f"{where}content[{index}].")
                else:
                    starts_turn = True
            if starts_turn or not content:
                self.feed.start_turn(text=reply_text(content))
        elif content is None or isinstance(content, str):
            self.feed.start_turn(text=content)
        else:
            self.feed.error(line, f"{where}content is {type_name(content)}, expected a string or an array")

    def _block_result(self, line: int, block: dict[str, Any], where: str) -> None:
        call_id = block.get("tool_use_id")
        if not isinstance(call_id, str):
            self.feed.error(line, f"{where}tool_use_id is {type_name(call_id)}, expected a string")
            return
        content = block.get("content")
        if block.get("type") != "tool_result":  # server tool results: errors are typed, not flagged
            failed = isinstance(content, dict) and str(content.get("type", "")).endswith("_error")
            self.feed.add_result(call_id, result_text(content), failed, line)
        else:
            # request bodies captured from Claude Code carry its host-made results too
            add_tool_result(self.feed, call_id, result_text(content), block.get("is_error") is True, line)

    def _tool_result(self, line: int, msg: dict[str, Any], where: str) -> None:
        self.reader.saw(OPENAI)
        call_id = msg.get("tool_call_id", msg.get("id"))  # tau2-bench names the call by ``id``
        if call_id is not None and not isinstance(call_id, str):  # none: the oldest call waiting
            self.feed.error(line, f"{where}tool_call_id is {type_name(call_id)}, expected a string")
            return
        flag = msg.get("error")  # tau2-bench records whether the tool raised
        content = result_text(msg.get("content"))
        failed = flag if isinstance(flag, bool) else None
        if failed is None and self.result_failed is not None:
            failed = self.result_failed(content)
        self.feed.add_result(call_id, content, failed, line)

    def _text_result(self, line: int, content: str) -> None:
        self._text_calls -= 1
        failed = self.result_failed(content) if self.result_failed is not None else None
        self.feed.add_result(None, content, failed, line)

    def _text_action(self, line: int, content: str) -> None:
        """tau-bench's text agents: the JSON after the last ``Action:`` (else the text is a reply)."""
        try:
            action = orjson.loads(content.rsplit(_TEXT_ACTION, 1)[1].strip())
        except orjson.JSONDecodeError:
            return
        name = action.get("name") if isinstance(action, dict) else None
        if isinstance(name, str) and name and name != _TEXT_REPLY:
            self.reader.saw(OPENAI)
            self.feed.add_call(ToolCall(None, name, action.get("arguments"), line))
            self._text_calls += 1

    def _assistant(self, line: int, msg: dict[str, Any], where: str) -> None:
        tool_calls = msg.get("tool_calls")
        content = msg.get("content")
        if self.text_actions and not tool_calls and isinstance(content, str) and _TEXT_ACTION in content:
            self._text_action(line, content)
        if tool_calls is not None:
            self._openai_calls(line, tool_calls, where)
        function_call = msg.get("function_call")
        if function_call is not None:
            self.reader.saw(OPENAI)
            self._function_call(line, None, function_call, f"{where}function_call.")
        if isinstance(content, list):
            self._content_calls(line, content, where)
        elif content is not None and not isinstance(content, str):
            self.feed.error(line, f"{where}content is {type_name(content)}, expected a string or an array")

    def _openai_calls(self, line: int, tool_calls: Any, where: str) -> None:
        if not isinstance(tool_calls, list):
            self.feed.error(line, f"{where}tool_calls is {type_name(tool_calls)}, expected an array")
            return
        self.reader.saw(OPENAI)
        for index, item in enumerate(tool_calls):
            here = f"{where}tool_calls[{index}]."
            if not isinstance(item, dict):
                self.feed.error(line, f"{here[:-1]} is {type_name(item)}, expected an object")
                continue
            call_id = item.get("id")
            if call_id is not None and not isinstance(call_id, str):  # none: matched by order
                self.feed.error(line, f"{here}id is {type_name(call_id)}, expected a string")
                continue
            if "function" not in item and "name" in item:  # flat {id, name, arguments} (tau2-bench)
                self._function_call(line, call_id, item, here)
            else:
                self._function_call(line, call_id, item.get("function"), f"{here}function.")

    def _function_call(self, line: int, call_id: str | None, function: Any, where: str) -> None:
        if not isinstance(function, dict):
            self.feed.error(line, f"{where[:-1]} is {type_name(function)}, expected an object")
            return
        name = function.get("name")
        if not isinstance(name, str) or not name:
            self.feed.error(line, f"{where}name is {type_name(name)}, expected a tool name")
            return
        # arguments stay as recorded: the guard parses a JSON string and hashes an invalid one raw
        self.feed.add_call(ToolCall(call_id, name, function.get("arguments"), line))

    def _content_calls(self, line: int, content: list[Any], where: str) -> None:
        for index, block in enumerate(content):
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            here = f"{where}content[{index}]."
            if kind in ("tool_use", "server_tool_use"):
                self.reader.saw(ANTHROPIC)
                call_id, name = block.get("id"), block.get("name")
                if not isinstance(call_id, str) or not isinstance(name, str) or not name:
                    self.feed.error(line, f"{here}{kind} needs a string id and name")
                    continue
                self.feed.add_call(ToolCall(call_id, name, block.get("input"), line))
            elif isinstance(kind, str) and kind.endswith("_tool_result"):
                self._block_result(line, block, here)


class ChatReader:
    """Reads one OpenAI or Anthropic transcript file, record by record.

    Message lines form one session per file (id: the file's stem, or ``stdin``); a conversation line
    (``{"messages": [...]}``, a tau-bench result ``{"task_id", "trial", "traj": [...]}``, a ToolBench
    answer ``{"answer_generation": {"train_messages": [...]}}``) is a
    session of its own (id: its ``session_id``/``id``, ``task-<task_id>-trial-<trial>``, else
    ``<stem>:<line>``).
    """

    def __init__(self, sink: EventSink, path: str, session_id: str, dialect: str | None = None) -> None:
        self.sink = sink
        self.path = path
        self._session_id = session_id
        self.dialect = dialect
        self._file_session: _ChatSession | None = None

    @property
    def format_name(self) -> str:
        return self.dialect or OPENAI

    def saw(self, dialect: str) -> None:
        if self.dialect is None:
            self.dialect = dialect
            self.sink.describe_input(self.path, dialect)

    def feed(self, line: int, record: Any) -> None:
        if isinstance(record, dict) and isinstance(record.get("simulations"), list):
            self._simulations(line, record["simulations"])
        elif isinstance(record, dict) and (fields := completion_log_fields(record)) is not None:
            self._completion_log(line, record, *fields)
        elif isinstance(record, dict) and "messages" in record and "role" not in record:
            self._conversation(line, record, record["messages"], "messages")
        elif isinstance(record, dict) and "traj" in record and "role" not in record:
            self._conversation(
                line, record, record["traj"], "traj", tau_bench_result_failed, text_actions=True
            )
        elif isinstance(record, dict) and isinstance(record.get("answer_generation"), dict):
            self._toolbench(line, record["answer_generation"])
        elif isinstance(record, dict) and "role" in record:
            if self._file_session is None:
                self._file_session = _ChatSession(self, SessionKey(self.path, self._session_id))
            self._file_session.message(line, record, "")
        else:
            self.sink.error(
                self.path, line, f"expected a chat message or a conversation, got {_shape(record)}"
            )

    def close(self) -> None:
        if self._file_session is not None:
            self._file_session.feed.close()
            self._file_session = None

    def _conversation(
        self,
        line: int,
        record: dict[str, Any],
        messages: Any,
        field: str,
        result_failed: Callable[[Any], bool | None] | None = None,
        *,
        text_actions: bool = False,
    ) -> None:
        if not isinstance(messages, list):
            self.sink.error(self.path, line, f"{field} is {type_name(messages)}, expected an array")
            return
        key = SessionKey(self.path, self._conversation_id(line, record))
        session = _ChatSession(self, key, result_failed, text_actions)
        for index, msg in enumerate(messages):
            session.message(line, msg, f"{field}[{index}].")
        session.feed.close()

    def _simulations(self, line: int, simulations: list[Any]) -> None:
        """tau2-bench results: one conversation per simulation."""
        for index, simulation in enumerate(simulations):
            where = f"simulations[{index}]"
            if not isinstance(simulation, dict):
                self.sink.error(self.path, line, f"{where} is {type_name(simulation)}, expected an object")
                continue
            self._conversation(line, simulation, simulation.get("messages"), f"{where}.messages")

    def _completion_log(self, line: int, record: dict[str, Any], conversation: str, reply_field: str) -> None:
        """An OpenHands completion log: the function-calling conversation, then the model's reply."""
        messages = list(record[conversation])
        response = record.get(reply_field)
        choices = response.get("choices") if isinstance(response, dict) else None
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            reply = choices[0].get("message")
            if isinstance(reply, dict):
                messages.append(reply)
        # the log was written when the model replied: the reply's calls ran after it, so they are the
        # calls a transcript ends on (in progress), whether the file is one line or a document
        with input_ending():
            self._conversation(line, record, messages, conversation, openhands_result_failed)

    def _toolbench(self, line: int, answer: dict[str, Any]) -> None:
        """A ToolBench answer: ``train_messages`` holds the conversation as it grew, step by step;
        the last, longest list is the whole run (legacy ``function_call`` messages)."""
        steps = answer.get("train_messages")
        if not isinstance(steps, list) or not steps or not isinstance(steps[-1], list):
            where = "answer_generation.train_messages"
            self.sink.error(
                self.path, line, f"{where} is {type_name(steps)}, expected an array of message arrays"
            )
            return
        self._conversation(line, {}, steps[-1], "answer_generation.train_messages[-1]")

    def _conversation_id(self, line: int, record: dict[str, Any]) -> str:
        ident = record.get("session_id", record.get("id"))
        if isinstance(ident, str) and ident:
            return ident
        task = record.get("task_id")  # a tau-bench result: one conversation per task and trial
        if isinstance(task, (int, str)) and not isinstance(task, bool):
            trial = record.get("trial")
            return f"task-{task}" if trial is None else f"task-{task}-trial-{trial}"
        return f"{self._session_id}:{line}"


def _shape(record: Any) -> str:
    if isinstance(record, dict):
        return "an object without role or messages"
    return type_name(record)
