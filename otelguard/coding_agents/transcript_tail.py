"""The end of a transcript file a hook payload names, read so that no file can hang or flood the reader.

A CLI's hook payload names its session's transcript (Claude Code's ``transcript_path``); the model's
last replies and their usage are at its end. The path comes from the request, so it is treated as
hostile: only a regular file whose name ends in ``.jsonl`` is read, never through a symbolic link
at its last component, opened without blocking (a FIFO or a device answers nothing rather than
waiting for a writer), and only its last ``MAX_TAIL_BYTES``. Anything else (missing, unreadable,
another kind of file) reads as nothing: the hook then counts no reply, and the tool calls go on
being guarded.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson

from otelguard.core.bounded_map import BoundedMap

__all__ = [
    "MAX_REPLIES_PER_EVENT",
    "MAX_STREAMS",
    "MAX_TAIL_BYTES",
    "SUFFIX",
    "Reply",
    "ReplyLedger",
    "tail_lines",
    "tail_objects",
]

MAX_TAIL_BYTES: Final = 256 * 1024
"""How much of a transcript's end is read: far more than the replies of one tool batch or one
final answer take, a bounded read however long the session."""
SUFFIX: Final = ".jsonl"
MAX_STREAMS: Final = 16_384
"""Turn streams (a session's main agent, each subagent) whose last reported reply is remembered; one
forgotten reports only its last reply next time, never one twice."""
MAX_REPLIES_PER_EVENT: Final = 64
"""Replies reported at one event at most: more since the last one means the events were not seen."""
_FLAGS: Final = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def tail_lines(path: object, limit: int = MAX_TAIL_BYTES) -> list[bytes]:
    """The whole lines among the last ``limit`` bytes of the file at ``path`` (a cut first line is
    dropped), or none when ``path`` is not a readable regular ``.jsonl`` file."""
    if not isinstance(path, str) or not path.endswith(SUFFIX) or "\0" in path:
        return []
    try:
        descriptor = os.open(path, _FLAGS)
    except (OSError, ValueError):
        return []
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            return []
        start = max(0, info.st_size - limit)
        data = os.pread(descriptor, limit, start)
    except OSError:
        return []
    finally:
        os.close(descriptor)
    lines = data.split(b"\n")
    if start > 0 and lines:
        lines = lines[1:]  # began mid-line
    return [line for line in lines if line.strip()]


def tail_objects(path: object, limit: int = MAX_TAIL_BYTES) -> Iterator[dict[str, Any]]:
    """The JSON objects of ``tail_lines``, in file order; a line that is not one (being written,
    or not JSON at all) is skipped."""
    for line in tail_lines(path, limit):
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(value, dict):
            yield value


@dataclass(frozen=True, slots=True)
class Reply:
    """One model reply of a transcript, as ``after_model`` takes it."""

    message_id: str
    text: str | None
    tool_calls: int
    input_tokens: int | None
    output_tokens: int | None


class ReplyLedger:
    """Which replies of each turn stream were reported already, by message id. Thread-safe, bounded."""

    def __init__(self, max_streams: int = MAX_STREAMS) -> None:
        self._lock = threading.Lock()
        self._last: BoundedMap[Hashable, str] = BoundedMap(max_streams)

    def unreported(
        self, stream: Hashable, replies: Sequence[Reply], *, own_file: bool = False
    ) -> list[Reply]:
        """The replies after the last one reported for ``stream``, now counted as reported; when
        nothing of the stream was reported yet, the last reply alone (a session met mid-way: its
        history is not this turn's), or all of them when the file is the stream's own (``own_file``:
        a subagent's transcript holds its run and nothing else); all of them, too, when the last one
        reported has left the read end of the file. Never more than the newest
        ``MAX_REPLIES_PER_EVENT``."""
        with self._lock:
            last = self._last.get(stream)
            fresh = _after(replies, last, own_file)
            if fresh:
                self._last.put(stream, fresh[-1].message_id)
        return fresh

    def skip(self, stream: Hashable, replies: Sequence[Reply]) -> None:
        """Count every reply in ``replies`` as reported without reporting it (a turn begins: what came
        before is history)."""
        if replies:
            with self._lock:
                self._last.put(stream, replies[-1].message_id)

    def forget(self, stream: Hashable) -> None:
        with self._lock:
            self._last.pop(stream, None)


def _after(replies: Sequence[Reply], last: str | None, own_file: bool) -> list[Reply]:
    if last is None:
        return list(replies[-MAX_REPLIES_PER_EVENT:] if own_file else replies[-1:])
    for index in range(len(replies) - 1, -1, -1):
        if replies[index].message_id == last:
            return list(replies[index + 1 :][-MAX_REPLIES_PER_EVENT:])
    return list(replies[-MAX_REPLIES_PER_EVENT:])
