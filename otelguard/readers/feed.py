"""What every reader's session does the same way: pair tool calls with results, release them in the
order the calls were made (the model's replies in their place among them), and report calls the
transcript never answered.

A call still unanswered when its input ends, made in the session's last model message, is *in
progress* (a live session: the host is still running it), not an input error. Whether the input has
ended is known only to the one who read it (``sources.InputFile``): it closes its reader inside
``input_ending()``, so no reader has to pass it on. A session closed earlier (the next conversation
of the same file begins, a turn starts after the call) reports the call as having no result.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from typing import Any, Final

from otelguard.core.bounded_map import BoundedMap
from otelguard.readers.events import EventSink, ModelReply, SessionKey, ToolCall

__all__ = ["SessionFeed", "input_ending", "result_text", "type_name"]

_RECENT_IDS: Final = 1024
"""How many answered call ids a session remembers, to recognise a duplicated transcript line."""
MAX_WAIT_MESSAGES: Final = 64
"""A call still unanswered after this many more model messages is reported as "no result": real
request bodies sometimes carry a result a model message or two late, never dozens. Results and tool
output do not advance the count, so a parallel batch of any size has all the time it needs."""
MAX_PENDING_CALLS: Final = 4096
"""Calls waiting for results per session; past it the oldest is reported, so memory stays flat."""
_INPUT_ENDED: Final[contextvars.ContextVar[bool]] = contextvars.ContextVar("input_ended", default=False)


@contextlib.contextmanager
def input_ending(ended: bool = True) -> Iterator[None]:
    """Sessions closed inside this block close because their input ended (``ended``: it was read to
    its end, not cut short): their last unanswered calls are in progress."""
    token = _INPUT_ENDED.set(ended)
    try:
        yield
    finally:
        _INPUT_ENDED.reset(token)


def type_name(value: Any) -> str:
    """A JSON type name for error reasons: they describe the shape, never the content."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def result_text(content: Any) -> Any:
    """A tool result as the guard should fingerprint it: strings as they are, block lists as the
    concatenation of their text parts (images carry no text worth comparing)."""
    if isinstance(content, list):
        parts = [
            block["text"]
            for block in content
            if isinstance(block, dict) and isinstance(block.get("text"), str)
        ]
        return "\n".join(parts)
    return content


class SessionFeed:
    """One session's pending tool calls between the reader and the sink.

    Calls wait in the order they were made until their results arrive, matched by call id wherever
    the result sits (results of a parallel batch may come in any order, or a message late); the front
    of the queue is released as soon as it is answered. ``tick`` counts model messages: a call still
    unanswered ``MAX_WAIT_MESSAGES`` model messages later is reported and released. ``drain``
    releases everything, reporting the calls that never got a result.
    """

    def __init__(self, sink: EventSink, key: SessionKey, *, dedupe: bool = False) -> None:
        self.sink = sink
        self.key = key
        # a queue released from the front (by answers, age or overflow), not a cache: no LRU order
        self._pending: OrderedDict[str, ToolCall | ModelReply] = OrderedDict()
        self._made_at: dict[str, int] = {}
        self._messages = 0
        self._legacy: deque[str] = deque()
        self._serial = 0
        # Claude Code sometimes writes the same message twice (resumed sessions); its call ids are
        # globally unique, so a repeated id there is a duplicate line, not a new call.
        self._dedupe = dedupe
        self._answered: BoundedMap[str, bool] = BoundedMap(_RECENT_IDS)
        # a sink that counts tool calls alone (tests, tools of their own) is handed no replies
        self._model_reply = getattr(sink, "model_reply", None)
        self._replies = 0
        self._calls_added = 0
        self._reply_from = 0
        self._idle_reply = False
        """The last reply called nothing (a request after it may be the harness's)."""
        self._requests: BoundedMap[bytes, bool] = BoundedMap(_RECENT_IDS)
        sink.begin_session(key)

    def error(self, line: int | None, reason: str) -> None:
        self.sink.error(self.key.path, line, reason)

    def start_turn(self, time: float | None = None, text: str | None = None) -> None:
        """A new user request (at ``time``, when known): a call of the previous turn still unanswered
        never will be. A request that answers a reply that called nothing, with a ``text`` repeating
        (normalised) an earlier request of the session, is the harness's (the fixed "continue" it
        sends when the model called nothing): no person asked anything new, so no turn starts and the
        model's streak of replies goes on."""
        self.drain()
        repeated = text is not None and self._seen_request(text)
        if repeated and self._idle_reply:
            return
        self.sink.start_turn(self.key, time)

    def _seen_request(self, text: str) -> bool:
        normalised = " ".join(text.casefold().split())
        if not normalised:
            return False
        digest = hashlib.blake2b(normalised.encode("utf-8", "replace"), digest_size=16).digest()
        if self._requests.use(digest) is not None:
            return True
        self._requests.put(digest, True)
        return False

    def tick(self) -> None:
        """One more model message; report the calls that waited too long."""
        self._messages += 1
        self._expire(lambda slot: self._messages - self._made_at.get(slot, 0) > MAX_WAIT_MESSAGES)

    def open_reply(self, line: int, time: float | None = None) -> ModelReply:
        """A model reply begins: it takes its place before the calls added until ``close_reply``."""
        reply = ModelReply(line, time=time)
        self._reply_from = self._calls_added
        if self._model_reply is not None:
            self._replies += 1
            slot = f"\0reply{self._replies}"
            self._pending[slot] = reply
            self._made_at[slot] = self._messages
        return reply

    def close_reply(
        self,
        reply: ModelReply,
        *,
        text: str | None = None,
        invalid_tool_calls: int = 0,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
    ) -> None:
        """The reply's calls are all added: it holds as many valid calls as were added since it
        opened, and goes to the sink as soon as every call before it has."""
        reply.text = text
        reply.tool_calls = self._calls_added - self._reply_from
        reply.invalid_tool_calls = invalid_tool_calls
        reply.input_tokens, reply.output_tokens = input_tokens, output_tokens
        reply.done = True
        self._idle_reply = reply.tool_calls == 0
        self._release_ready()

    def add_call(self, call: ToolCall, slot: str | None = None) -> None:
        """Queue a call; ``slot`` (default: the call id) is the key its result is matched by."""
        slot = slot if slot is not None else call.call_id
        if slot is None:
            self._serial += 1
            slot = f"\0legacy{self._serial}"
            self._legacy.append(slot)
        else:
            if self._dedupe and (slot in self._answered or slot in self._pending):
                return
            if slot in self._pending:
                self.error(call.line, f"tool call id {slot} repeats a call still waiting for its result")
                return
        self._pending[slot] = call
        self._made_at[slot] = self._messages
        self._calls_added += 1
        if len(self._pending) > MAX_PENDING_CALLS:
            self._expire(lambda _slot: len(self._pending) > MAX_PENDING_CALLS)

    def add_result(
        self,
        call_id: str | None,
        result: Any,
        failed: bool | None,
        line: int,
        *,
        cancelled: bool = False,
        refusal: str | None = None,
        time: float | None = None,
    ) -> None:
        """Attach a result to its call; ``call_id=None`` answers the oldest unanswered legacy call.
        ``time`` is the result line's: the call's time from then on (else its request's)."""
        if call_id is None:
            slot = self._oldest_legacy()
        else:
            slot = call_id if call_id in self._pending else None
            if slot is None and self._dedupe and call_id in self._answered:
                return
        call = self._pending.get(slot) if slot is not None else None
        if not isinstance(call, ToolCall) or call.has_result:
            which = f"id {call_id}" if call_id is not None else "legacy function result"
            self.error(line, f"tool result without its call ({which})")
            return
        call.result, call.failed, call.has_result = result, failed, True
        call.cancelled, call.refusal = cancelled, refusal
        if time is not None:
            call.time = time
        self._release_ready()

    def has_pending(self, slot: str) -> bool:
        return slot in self._pending

    def __len__(self) -> int:
        """Calls (and replies) waiting for their results (or for an earlier call's)."""
        return len(self._pending)

    def drain(self) -> None:
        """Release every pending call; report the ones without a result (they are not replayed)."""
        self._expire(lambda _slot: True)
        self._legacy.clear()

    def close(self) -> None:
        if _INPUT_ENDED.get():
            self._expire(lambda _slot: True, running=lambda slot: self._made_at.get(slot) == self._messages)
            self._legacy.clear()
        else:
            self.drain()
        self.sink.end_session(self.key)

    def _oldest_legacy(self) -> str | None:
        while self._legacy:
            slot = self._legacy[0]
            call = self._pending.get(slot)
            if isinstance(call, ToolCall) and not call.has_result:
                return slot
            self._legacy.popleft()
        return None

    def _release_ready(self) -> None:
        while self._pending:
            slot, call = next(iter(self._pending.items()))
            if not _ready(call):
                return
            del self._pending[slot]
            self._emit(slot, call)

    def _expire(self, overdue: Callable[[str], bool], running: Callable[[str], bool] | None = None) -> None:
        """Release calls from the front while the front is answered or ``overdue``; an unanswered
        overdue call is in progress when ``running`` says so, else reported as having no result (it
        is not replayed either way)."""
        while self._pending:
            slot, call = next(iter(self._pending.items()))
            if isinstance(call, ModelReply):
                if not call.done and not overdue(slot):
                    return  # still being read: its calls are not all counted yet
            elif not call.has_result:
                if not overdue(slot):
                    return
                if running is not None and running(slot):
                    call.in_progress = True
                else:
                    # a call without an id is named by its reader's slot ("step 4"), else by its kind
                    which = call.call_id or ("(legacy function call)" if slot.startswith("\0") else slot)
                    self.error(call.line, f"tool call {which} ({call.tool_name}) has no result; not replayed")
            del self._pending[slot]
            self._emit(slot, call)

    def _emit(self, slot: str, call: ToolCall | ModelReply) -> None:
        self._made_at.pop(slot, None)
        if isinstance(call, ModelReply):
            if self._model_reply is not None:
                self._model_reply(self.key, call)
            return
        if self._dedupe and call.call_id is not None:
            self._answered.put(slot, True)
        self.sink.tool_call(self.key, call)


def _ready(entry: ToolCall | ModelReply) -> bool:
    return entry.done if isinstance(entry, ModelReply) else entry.has_result
