"""The normalised stream every transcript reader produces, and the sink that consumes it.

Readers turn lines of any format into: a session begins, a turn starts, a model reply (when the format
records the model's replies), a tool call (with its result when the transcript has one), a session
ends, an input error. The guard runner is the only sink that
matters; tests use a recording sink.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["EventSink", "ModelReply", "ModelSink", "SessionKey", "ToolCall"]


@dataclass(frozen=True, slots=True)
class SessionKey:
    """A session is identified by the file it was read from and its id inside that file."""

    path: str
    session_id: str


@dataclass(slots=True)
class ToolCall:
    """One tool call as the transcript recorded it.

    ``failed`` is ``None`` when the format has no error flag (OpenAI): the guard's fallback classifier
    decides then. ``has_result`` is false for a call the transcript never answered; such a call is
    never fed to the guard, because its outcome would have to be guessed: it is reported as an input
    error, unless ``in_progress`` says it is still running (made in the last model message of a
    transcript that ends there: a live session). ``cancelled`` marks a call the host cancelled before
    it ran; ``refusal`` is the category of a host refusal. ``time`` (seconds since the epoch) is when
    the transcript says the call ended: its result's line, else its request's; ``None`` when the
    format records no time.
    """

    call_id: str | None
    tool_name: str
    args: Any
    line: int
    result: Any = None
    failed: bool | None = None
    has_result: bool = False
    cancelled: bool = False
    refusal: str | None = None
    in_progress: bool = False
    time: float | None = None


@dataclass(slots=True)
class ModelReply:
    """One reply of the model, as the transcript recorded it, in order with the calls it made.

    ``tool_calls`` counts the calls the harness ran from it; ``invalid_tool_calls`` the ones it could
    not run (a format error the harness answered, a call it could not parse). ``text`` is the reply's
    text for the guard to fingerprint in process: it never reaches a report. Token counts are the
    provider's, ``None`` when the transcript does not record them.
    """

    line: int
    text: str | None = None
    tool_calls: int = 0
    invalid_tool_calls: int = 0
    input_tokens: int | None = None
    output_tokens: int | None = None
    time: float | None = None
    done: bool = False
    """The reader has counted the reply's calls: the feed may release it."""


class EventSink(Protocol):
    def describe_input(self, path: str, fmt: str) -> None:
        """The format of ``path`` is known (``auto`` detected it, or the user named it)."""

    def begin_session(self, key: SessionKey) -> None: ...

    def start_turn(self, key: SessionKey, time: float | None = None) -> None:
        """A user request starts a turn; ``time`` is its line's, when the format records one."""

    def tool_call(self, key: SessionKey, call: ToolCall) -> None: ...

    def end_session(self, key: SessionKey) -> None: ...

    def error(self, path: str, line: int | None, reason: str) -> None:
        """A malformed record or an unreadable input. ``reason`` never quotes the input's content."""


class ModelSink(EventSink, Protocol):
    """A sink that also takes the model's replies. Readers hand replies only to sinks that have
    ``model_reply``: a sink that counts tool calls alone needs nothing new."""

    def model_reply(self, key: SessionKey, reply: ModelReply) -> None:
        """The model replied (before the calls of that reply, which follow as ``tool_call``)."""
