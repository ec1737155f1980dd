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
from collections.abc import Iterator
from typing import Any, Final

import orjson

__all__ = ["MAX_TAIL_BYTES", "SUFFIX", "tail_lines", "tail_objects"]

MAX_TAIL_BYTES: Final = 256 * 1024
"""How much of a transcript's end is read: far more than the replies of one tool batch or one
final answer take, a bounded read however long the session."""
SUFFIX: Final = ".jsonl"
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
