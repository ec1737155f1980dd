"""The model's replies: ``no_action`` and ``repeated_reply`` (docs/model-turns.md).

A turn's replies are counted in its ``ReplyCounts``: the replies in a row without a valid tool call
(``no_action``), and those among them that repeat an earlier reply of the turn or one passage of
their own over and over (``repeated_reply``). A reply with a valid tool call ends both streaks: it
is judged by its calls. A reply that calls nothing at all is a final answer unless the model is
called again in the same turn: it waits (``defer``) and is counted by the next ``before_model``
(``take_pending``); a reply with only invalid calls is counted at once.

Text is read in process only, and only so far: its first and last ``TEXT_ENDS`` characters. What is
kept per turn is a bounded number of sketches (digests, never text); the chanting check keeps
nothing. The detectors are objects in the order ``precedence.AFTER_MODEL`` declares.
"""

from __future__ import annotations

import re
from collections import Counter, deque
from collections.abc import Callable, Sequence
from typing import Any, Final, NamedTuple

import xxhash

from otelguard.core import decisions as codes
from otelguard.core.decisions import MODEL_TOOL, Decision

__all__ = [
    "CHANT_MIN_REPEATS",
    "KEPT_REPLIES",
    "NO_ACTION_HALT",
    "NO_ACTION_WARN",
    "NO_TEXT",
    "REPEATED_REPLY_HALT",
    "REPEATED_REPLY_WARN",
    "TEXT_ENDS",
    "Reply",
    "ReplyCounts",
    "ReplyRule",
    "bounded_text",
    "chants",
]

TEXT_ENDS: Final = 64 * 1024
"""Characters read from each end of a reply; the middle of a longer one is never read."""
KEPT_REPLIES: Final = 32
"""Sketches of earlier replies a turn keeps to compare a reply with (the most recent)."""
CHANT_MIN_REPEATS: Final = 8
"""A passage repeated this many times or more..."""
CHANT_COVER: Final = 0.5
"""...that covers at least this share of the reply's text is chanting."""
CHANT_MIN_CHARS: Final = 200
"""A reply shorter than this never chants: a few short lines alike are an answer, not a runaway."""
_MAX_PERIOD: Final = 16  # words in the longest phrase repeated back to back that is looked for
_TAIL_WORDS: Final = 8192  # words at the end of a reply read for a phrase repeated back to back
_SEGMENT_BREAK: Final = re.compile(r"\n|(?<=[.!?])\s+")
_hash64: Final = xxhash.xxh3_64_intdigest

Sketch = tuple[int, tuple[int, ...]]
"""A reply as compared: the digest of its normalised text and a sketch of its shingles (see
``detectors.stagnation.sketch``)."""


class Reply(NamedTuple):
    """What a reply without a valid tool call leaves for its judgement: no text."""

    sketch: Sketch | None
    """``None``: no text was read (none given, or no detector reads it)."""
    chanting: bool


NO_TEXT: Final = Reply(None, False)


def bounded_text(text: Any) -> str | None:
    """A reply's text as read: a ``str`` (or UTF-8 ``bytes``) cut to its first and last ``TEXT_ENDS``
    characters; anything else is not text, and not read (never converted: its ``__str__`` may be
    anything)."""
    plain: str
    if isinstance(text, (bytes, bytearray)):
        data = bytes(text)
        if len(data) > 8 * TEXT_ENDS:  # four bytes a character at most
            data = data[: 4 * TEXT_ENDS] + b"\n" + data[-4 * TEXT_ENDS :]
        plain = data.decode("utf-8", "replace")
    elif isinstance(text, str):
        plain = str.__str__(text)  # a plain copy of a subclass: its own methods are never asked
    else:
        return None
    if len(plain) > 2 * TEXT_ENDS:
        return f"{plain[:TEXT_ENDS]}\n{plain[-TEXT_ENDS:]}"
    return plain


def chants(text: str) -> bool:
    """Whether one passage repeats over and over: a line or sentence said ``CHANT_MIN_REPEATS`` times
    or more, the repeated ones covering ``CHANT_COVER`` of the text; or the text ending in a phrase of
    up to ``_MAX_PERIOD`` words repeated back to back as often, over as much of it. Rows alike whose
    values differ (a table, a list of results) are different lines, and no phrase repeats across them."""
    if len(text) < CHANT_MIN_CHARS:
        return False
    return _repeated_lines(text) or _repeating_tail(text.split()[-_TAIL_WORDS:])


def _repeated_lines(text: str) -> bool:
    seen: Counter[int] = Counter()
    sizes: dict[int, int] = {}
    total = 0
    for segment in _SEGMENT_BREAK.split(text):
        words = segment.split()
        if not words:
            continue
        line = " ".join(words)
        key = _hash64(line.encode("utf-8", "surrogatepass"))
        seen[key] += 1
        sizes[key] = len(line)
        total += len(line)
    covered = sum(sizes[key] * count for key, count in seen.items() if count >= CHANT_MIN_REPEATS)
    return covered > 0 and covered >= CHANT_COVER * total


def _repeating_tail(words: Sequence[str]) -> bool:
    """Whether the words end in one phrase repeated back to back, covering enough of them."""
    size = len(words)
    for period in range(1, _MAX_PERIOD + 1):
        if size < period * CHANT_MIN_REPEATS:
            break
        last = size - 1
        i = last
        while i >= period and words[i] == words[i - period]:
            i -= 1
        span = last - i + period  # the repeated words, the first repetition included
        if span >= period * CHANT_MIN_REPEATS and span >= CHANT_COVER * size:
            return True
    return False


class ReplyCounts:
    """One turn's replies: the streaks and the sketches of the replies judged."""

    __slots__ = ("no_action", "pending", "repeated", "repeats", "sketches")

    def __init__(self) -> None:
        self.no_action = 0  # replies in a row without a valid tool call, answered by the harness
        self.repeats = 0  # of them, those that repeated an earlier reply or a passage of their own
        self.repeated = False  # the reply counted last was one of those
        self.pending: Reply | None = None  # a reply that called nothing, until the model is called again
        self.sketches: deque[Sketch] = deque(maxlen=KEPT_REPLIES)

    def valid_call(self) -> None:
        """A reply with a valid tool call: it ends the streaks (and is never judged by its text)."""
        self.no_action = self.repeats = 0
        self.repeated = False
        self.pending = None

    def defer(self, reply: Reply) -> None:
        """A reply that called nothing: a final answer unless the model is called again this turn."""
        self.pending = reply

    def take_pending(self, near: Callable[[Sketch, Sketch], bool]) -> bool:
        """The model is called again: the reply that called nothing was answered by the harness and
        is counted now. Whether there was one."""
        reply, self.pending = self.pending, None
        if reply is None:
            return False
        self.count(reply, near)
        return True

    def count(self, reply: Reply, near: Callable[[Sketch, Sketch], bool]) -> None:
        """Count a reply without a valid tool call answered by the harness (a reply waiting to be
        counted before it was no request's answer: it is dropped)."""
        self.pending = None
        self.no_action += 1
        sketch = reply.sketch
        self.repeated = reply.chanting or (
            sketch is not None and any(near(sketch, earlier) for earlier in self.sketches)
        )
        if self.repeated:
            self.repeats += 1
        if sketch is not None:
            self.sketches.append(sketch)


_MESSAGES: Final = {
    codes.NO_ACTION_WARN: "{count} model replies in a row made no tool call that could run (an invalid "
    "call, or none at all). Call one of the available tools with valid arguments, or give your final "
    "answer.",
    codes.NO_ACTION_HALT: "Stopping this turn: {count} model replies in a row made no tool call that "
    "could run (limit {limit}). Tell the user what is blocking you.",
    codes.REPEATED_REPLY_WARN: "This reply repeats what was already said ({count} replies without a tool "
    "call repeated an earlier reply or one passage over and over). Saying it again changes nothing: call "
    "a tool, or give your final answer.",
    codes.REPEATED_REPLY_HALT: "Stopping this turn: {count} replies without a tool call repeated an "
    "earlier reply or one passage over and over (limit {limit}). Tell the user what is blocking you.",
}


class ReplyRule:
    """One detector's verdict on the reply just counted: a warning or a halt from its threshold on."""

    __slots__ = ("code", "name", "warns")

    def __init__(self, name: str, code: str, warns: bool) -> None:
        self.name = name
        """The detector's name, as ``warn_after`` and ``hard_stop_after`` know it."""
        self.code = code
        self.warns = warns
        """A warning (never given with ``warnings`` off); else a halt (only ever with ``hard_stop``)."""

    def judge(self, counts: ReplyCounts, limit: int) -> Decision | None:
        count = counts.no_action if self.name == "no_action" else counts.repeats + 1
        if count < limit or (self.name == "repeated_reply" and not counts.repeated):
            return None
        return Decision(
            action="warn" if self.warns else "halt",
            code=self.code,
            message=_MESSAGES[self.code].format(count=count, limit=limit),
            tool_name=MODEL_TOOL,
            count=count,
            limit=limit,
        )


NO_ACTION_WARN: Final = ReplyRule("no_action", codes.NO_ACTION_WARN, warns=True)
NO_ACTION_HALT: Final = ReplyRule("no_action", codes.NO_ACTION_HALT, warns=False)
REPEATED_REPLY_WARN: Final = ReplyRule("repeated_reply", codes.REPEATED_REPLY_WARN, warns=True)
REPEATED_REPLY_HALT: Final = ReplyRule("repeated_reply", codes.REPEATED_REPLY_HALT, warns=False)
