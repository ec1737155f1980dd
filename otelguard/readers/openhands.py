"""OpenHands event streams: an evaluation ``output.jsonl`` or a bare JSON list of events.

An ``output.jsonl`` line is one instance (``{"instance_id", "history": [event...]}``; older versions
wrote ``[action, observation]`` pairs), a session of its own. A bare list (a downloaded trajectory) is one session named after the file. A call is an action
event with ``tool_call_metadata`` (``function_name``, ``tool_call_id``); its arguments are the ones the
model sent (the matching tool call of ``model_response``), else the event's ``args``. Its result is the
observation event whose ``cause`` is the action's ``id`` (or, without a cause, the one with the same
``tool_call_id``): failed when ``observation == "error"`` or ``extras.metadata.exit_code`` is a
non-zero number other than -1 (-1 means "no exit code yet", a timeout or a still-running command).
Events of the OpenHands agent SDK (V1, typed by ``kind``) are read the same way: an ``ActionEvent``
is a call (``tool_name``, ``tool_call_id``, the model's ``tool_call.arguments``), answered by the
``ObservationEvent`` (failed when ``observation.is_error`` or a non-zero exit code other than -1),
``AgentErrorEvent`` (failed) or ``UserRejectObservation`` (a refusal) that names its ``action_id`` or
shares its ``tool_call_id``; a user ``MessageEvent`` starts a turn.
An observation ``user_rejected`` (the user declined the action in confirmation mode) is a refusal of
category ``user_rejected``. A user ``message`` action starts a turn. ``finish`` ends the run and ``message``/``reject`` speak to
the user: the host never answers those with an observation, so they count as calls that succeeded.
Every event's ``timestamp`` is kept (naive times are UTC): a call's time is its observation's, else
its action's.

The model's replies: the actions of one model response (``tool_call_metadata.model_response``, the
SDK's ``llm_response_id``) are one reply, with that response's text and ``usage``; an agent ``message``
without tool call metadata (the SDK's agent ``MessageEvent``) is a reply that called nothing. A user
message repeating an earlier one of the session (the "please continue" OpenHands sends when the model
called nothing) opens no turn.
"""

from __future__ import annotations

from typing import Any, Final

from otelguard.core.bounded_map import BoundedMap
from otelguard.readers.events import EventSink, ModelReply, SessionKey, ToolCall
from otelguard.readers.feed import SessionFeed, result_text, type_name
from otelguard.readers.replies import reply_text, usage_tokens
from otelguard.readers.times import parse_time

__all__ = ["OPENHANDS", "OpenHandsReader", "completion_log_fields", "is_openhands_event"]

OPENHANDS: Final = "openhands"
_ANSWERED_BY_DESIGN: Final = frozenset({"finish", "message", "reject"})
_NO_EXIT_CODE: Final = -1
_USER_REJECTED: Final = "user_rejected"
_REMEMBERED_CALL_IDS: Final = 4096


_SDK_CALLS: Final = frozenset({"ActionEvent", "NonExecutableActionEvent"})
_SDK_ANSWERS: Final = frozenset({"ObservationEvent", "AgentErrorEvent", "UserRejectObservation"})
_SDK_KINDS: Final = _SDK_CALLS | _SDK_ANSWERS | {"MessageEvent", "SystemPromptEvent"}


_COMPLETION_LOG_MARKS: Final = ("kwargs", "args", "cost", "timestamp")
"""Fields an OpenHands LLM completion log of the older shape records beside the request's
``messages`` and the model's ``response`` (a plain chat request body has none of them)."""


def completion_log_fields(record: Any) -> tuple[str, str] | None:
    """Where an OpenHands LLM completion log keeps its conversation and the model's reply:
    ``("fncall_messages", "fncall_response")`` in the newer shape, ``("messages", "response")`` in the
    older one (``{"messages", "response", "args", "kwargs", "timestamp", "cost"}``); ``None`` for any
    other record."""
    if not isinstance(record, dict):
        return None
    if isinstance(record.get("fncall_messages"), list):
        return ("fncall_messages", "fncall_response")
    if (
        isinstance(record.get("messages"), list)
        and isinstance(record.get("response"), dict)
        and "role" not in record
        and any(mark in record for mark in _COMPLETION_LOG_MARKS)
    ):
        return ("messages", "response")
    return None


def is_openhands_event(record: Any) -> bool:
    return (
        isinstance(record, dict)
        and "source" in record
        and ("action" in record or "observation" in record or record.get("kind") in _SDK_KINDS)
    )


class _Events:
    def __init__(self, sink: EventSink, key: SessionKey) -> None:
        self.feed = SessionFeed(sink, key)
        self._slot_of_call_id: BoundedMap[str, str] = BoundedMap(_REMEMBERED_CALL_IDS)
        self._reply: ModelReply | None = None
        self._response: object = None
        self._reply_fields: tuple[str | None, int | None, int | None] = (None, None, None)

    def end_reply(self) -> None:
        """The model response being read has no more actions: its reply goes on."""
        reply, self._reply = self._reply, None
        if reply is not None:
            text, tokens_in, tokens_out = self._reply_fields
            self.feed.close_reply(reply, text=text, input_tokens=tokens_in, output_tokens=tokens_out)

    def _begin_reply(self, line: int, response_id: object, response: Any, time: float | None) -> None:
        """An action of model response ``response_id``: the first one opens its reply."""
        if response_id is not None and response_id == self._response:
            return  # a later action of a response whose reply is already on its way
        self.end_reply()
        self._reply, self._response = self.feed.open_reply(line, time), response_id
        self._reply_fields = _response_fields(response)

    def _message_reply(self, line: int, text: Any, time: float | None) -> None:
        self.end_reply()
        self._response = None
        reply = self.feed.open_reply(line, time)
        self.feed.close_reply(reply, text=reply_text(text))

    def event(self, line: int, event: Any, where: str) -> None:
        if not isinstance(event, dict):
            self.feed.error(line, f"{where}expected an event object, got {type_name(event)}")
            return
        kind = event.get("kind")
        time = parse_time(event.get("timestamp"))
        if kind not in _SDK_CALLS and "action" not in event:
            self.end_reply()
        if isinstance(kind, str) and kind in _SDK_KINDS:
            self._sdk_event(line, event, kind, where, time)
        elif "observation" in event:
            self._observation(line, event, time)
        elif "action" in event:
            self.feed.tick()
            self._action(line, event, where, time)

    def _sdk_event(self, line: int, event: dict[str, Any], kind: str, where: str, time: float | None) -> None:
        """An event of the OpenHands agent SDK (V1): typed by ``kind``, calls and answers share
        ``tool_call_id``, an answer names its action by ``action_id``."""
        if kind in _SDK_CALLS:
            self.feed.tick()
            self._begin_reply(line, event.get("llm_response_id"), None, time)
            tool_call = event.get("tool_call")
            args = tool_call.get("arguments") if isinstance(tool_call, dict) else None
            self._queue_call(
                line, event, event.get("tool_name"), event.get("tool_call_id"), args, where, "tool_name", time
            )
        elif kind in _SDK_ANSWERS:
            slot = self._answered_slot(_slot_of_cause(event.get("action_id")), event.get("tool_call_id"))
            if slot is None:
                return
            if kind == "UserRejectObservation":
                self.feed.add_result(slot, None, True, line, refusal=_USER_REJECTED, time=time)
            elif kind == "AgentErrorEvent":
                self.feed.add_result(slot, result_text(event.get("error")), True, line, time=time)
            else:
                observation = event.get("observation")
                content = observation.get("content") if isinstance(observation, dict) else observation
                self.feed.add_result(slot, result_text(content), _sdk_failed(observation), line, time=time)
        elif kind == "MessageEvent" and event.get("source") == "user":
            self.feed.start_turn(time, _sdk_message_text(event))
        elif kind == "MessageEvent" and event.get("source") == "agent":
            self._message_reply(line, _sdk_message_text(event), time)

    def _action(self, line: int, event: dict[str, Any], where: str, time: float | None) -> None:
        meta = event.get("tool_call_metadata")
        if not isinstance(meta, dict):
            self.end_reply()
            if event.get("action") == "message":
                content = _args(event).get("content")
                if event.get("source") == "user":
                    self.feed.start_turn(time, content if isinstance(content, str) else None)
                elif event.get("source") == "agent":
                    self._message_reply(line, content, time)
            return
        response = meta.get("model_response")
        self._begin_reply(line, response.get("id") if isinstance(response, dict) else None, response, time)
        args = _model_arguments(meta.get("model_response"), meta.get("tool_call_id"))
        if args is None:
            args = event.get("args")
        name_field = "tool_call_metadata.function_name"
        slot = self._queue_call(
            line, event, meta.get("function_name"), meta.get("tool_call_id"), args, where, name_field, time
        )
        if slot is not None and event.get("action") in _ANSWERED_BY_DESIGN:
            self.feed.add_result(slot, None, False, line, time=time)

    def _queue_call(
        self,
        line: int,
        event: dict[str, Any],
        name: Any,
        call_id: Any,
        args: Any,
        where: str,
        name_field: str,
        time: float | None,
    ) -> str | None:
        """Queue one call; returns the slot its answer is matched by (None when it is unusable)."""
        if not isinstance(name, str) or not name:
            self.feed.error(line, f"{where}{name_field} is {type_name(name)}")
            return None
        call_id = call_id if isinstance(call_id, str) else None
        event_id = event.get("id")
        if isinstance(event_id, (int, str)) and not isinstance(event_id, bool):
            slot = f"event {event_id}"
        elif call_id is not None:
            slot = f"call {call_id}"
        else:
            self.feed.error(line, f"{where}action has neither an id nor a tool_call_id; not replayed")
            return None
        self.feed.add_call(ToolCall(call_id, name, args, line, time=time), slot)
        if call_id is not None:
            self._slot_of_call_id.put(call_id, slot)
        return slot

    def _answered_slot(self, slot: str | None, call_id: Any) -> str | None:
        """The pending call an answer belongs to: by its action's event id, else by tool call id."""
        if slot is None or not self.feed.has_pending(slot):
            slot = self._slot_of_call_id.get(call_id) if isinstance(call_id, str) else None
        return slot if slot is not None and self.feed.has_pending(slot) else None

    def _observation(self, line: int, event: dict[str, Any], time: float | None) -> None:
        meta = event.get("tool_call_metadata")
        call_id = meta.get("tool_call_id") if isinstance(meta, dict) else None
        slot = self._answered_slot(_slot_of_cause(event.get("cause")), call_id)
        if slot is None:
            return  # observations of user messages, state changes, ...: no tool call to answer
        content = result_text(event.get("content"))
        if event.get("observation") == _USER_REJECTED:  # the user declined it in confirmation mode
            self.feed.add_result(slot, content, True, line, refusal=_USER_REJECTED, time=time)
        else:
            self.feed.add_result(slot, content, _failed(event), line, time=time)


def _args(event: dict[str, Any]) -> dict[str, Any]:
    args = event.get("args")
    return args if isinstance(args, dict) else {}


def _sdk_message_text(event: dict[str, Any]) -> str | None:
    message = event.get("llm_message")
    return reply_text(message.get("content")) if isinstance(message, dict) else None


def _response_fields(response: Any) -> tuple[str | None, int | None, int | None]:
    """A model response's text and token usage (OpenAI chat shape, as OpenHands records it)."""
    if not isinstance(response, dict):
        return None, None, None
    choices = response.get("choices")
    message = (
        choices[0].get("message")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict)
        else None
    )
    text = reply_text(message.get("content")) if isinstance(message, dict) else None
    return (text, *usage_tokens(response.get("usage")))


def _slot_of_cause(cause: Any) -> str | None:
    if isinstance(cause, (int, str)) and not isinstance(cause, bool):
        return f"event {cause}"
    return None


def _failed(event: dict[str, Any]) -> bool:
    if event.get("observation") == "error":
        return True
    extras = event.get("extras")
    metadata = extras.get("metadata") if isinstance(extras, dict) else None
    return _exit_failed(metadata.get("exit_code") if isinstance(metadata, dict) else None)


def _sdk_failed(observation: Any) -> bool:
    if not isinstance(observation, dict):
        return False
    return observation.get("is_error") is True or _exit_failed(observation.get("exit_code"))


def _exit_failed(code: Any) -> bool:
    if isinstance(code, bool) or not isinstance(code, (int, float)):
        return False
    return code not in (0, _NO_EXIT_CODE)


def _model_arguments(response: Any, call_id: str | None) -> Any:
    """The arguments string the model sent for ``call_id``, when the event kept the model response."""
    if call_id is None or not isinstance(response, dict):
        return None
    choices = response.get("choices")
    for choice in choices if isinstance(choices, list) else ():
        message = choice.get("message") if isinstance(choice, dict) else None
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        for call in calls if isinstance(calls, list) else ():
            if isinstance(call, dict) and call.get("id") == call_id:
                function = call.get("function")
                return function.get("arguments") if isinstance(function, dict) else None
    return None


class OpenHandsReader:
    def __init__(self, sink: EventSink, path: str, session_id: str) -> None:
        self.sink = sink
        self.path = path
        self._session_id = session_id
        self._file_session: _Events | None = None

    def feed(self, line: int, record: Any) -> None:
        if isinstance(record, dict) and "history" in record and "source" not in record:
            self._instance(line, record)
        elif is_openhands_event(record):
            if self._file_session is None:
                self._file_session = _Events(self.sink, SessionKey(self.path, self._session_id))
            self._file_session.event(line, record, "")
        else:
            self.sink.error(self.path, line, "expected an OpenHands event or an instance with a history")

    def close(self) -> None:
        if self._file_session is not None:
            self._file_session.end_reply()
            self._file_session.feed.close()
            self._file_session = None

    def _instance(self, line: int, record: dict[str, Any]) -> None:
        history = record["history"]
        if not isinstance(history, list):
            self.sink.error(self.path, line, f"history is {type_name(history)}, expected an array")
            return
        ident = record.get("instance_id")
        if isinstance(ident, (int, str)) and not isinstance(ident, bool) and str(ident):
            session_id = str(ident)
        else:
            session_id = f"{self._session_id}:{line}"
        session = _Events(self.sink, SessionKey(self.path, session_id))
        for index, event in enumerate(history):
            if isinstance(event, list):  # older evaluation outputs: [action, observation] pairs
                for part, item in enumerate(event):
                    session.event(line, item, f"history[{index}][{part}].")
            else:
                session.event(line, event, f"history[{index}].")
        session.end_reply()
        session.feed.close()
