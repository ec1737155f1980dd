"""Reading transcript bytes in bounded memory and time, whatever the input is.

* Lines are split in linear time (a line is joined once, when its newline arrives) and one line
  holds at most ``MAX_LINE_BYTES`` in memory: a longer one is dropped as it streams past and
  reported with its length.
* Inputs are read in chunks that check ``stop`` between them, so SIGINT/SIGTERM are answered
  within a poll interval even in the middle of a huge line.
* Pipes and FIFOs (``<(cat f)``, ``mkfifo``) are streamed, never seeked. Everything is opened with
  ``O_NONBLOCK``: opening a FIFO that has no writer yet would block in ``open()``, where a signal
  handler cannot end the wait; instead the wait happens in ``select`` with a timeout.
"""

from __future__ import annotations

import os
import select
import stat
import threading
from collections.abc import Iterator
from typing import IO, Final

__all__ = ["MAX_LINE_BYTES", "READ_CHUNK", "LineSplitter", "is_regular", "open_nonblocking", "read_chunks"]

MAX_LINE_BYTES: Final = 64 * 1024 * 1024
"""The longest transcript line (or ``.json`` document) read; longer ones are reported and skipped."""
READ_CHUNK: Final = 1 << 16
_WAIT_S: Final = 0.2


class LineSplitter:
    """Bytes in, complete lines out (``bytes``), or the length (``int``) of a line over the limit."""

    __slots__ = ("_parts", "_size", "limit")

    def __init__(self, limit: int = MAX_LINE_BYTES) -> None:
        self.limit = limit
        self._parts: list[bytes] = []
        self._size = 0  # bytes of the unfinished line, kept or (past the limit) only counted

    @property
    def pending_bytes(self) -> int:
        return self._size

    def push(self, chunk: bytes) -> Iterator[bytes | int]:
        start = 0
        while (newline := chunk.find(b"\n", start)) >= 0:
            yield self._complete(chunk[start:newline])
            start = newline + 1
        rest = chunk[start:]
        if rest:
            self._size += len(rest)
            if self._size > self.limit:
                self._parts.clear()  # over the limit: only its length is kept
            else:
                self._parts.append(rest)

    def finish(self) -> Iterator[bytes | int]:
        """The last line when the input ended without a newline."""
        if self._size:
            yield self._complete(b"")

    def _complete(self, tail: bytes) -> bytes | int:
        size = self._size + len(tail)
        parts, self._parts, self._size = self._parts, [], 0
        if size > self.limit:
            return size
        if not parts:
            return tail
        parts.append(tail)
        return b"".join(parts)


def open_nonblocking(path: str) -> IO[bytes]:
    """Open without blocking, even on a FIFO that has no writer yet (see the module docstring)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    return os.fdopen(fd, "rb", buffering=0)


def is_regular(stream: IO[bytes]) -> bool:
    return stat.S_ISREG(os.fstat(stream.fileno()).st_mode)


def read_chunks(stream: IO[bytes], stop: threading.Event) -> Iterator[bytes]:
    """Every chunk up to end of input, ending early when ``stop`` is set. A pipe or FIFO is waited
    on in ``select`` (its writer may not have arrived yet), never in a blocking read."""
    try:
        fd = stream.fileno()
    except (OSError, ValueError):  # an in-memory stream (tests replace stdin with one)
        while not stop.is_set() and (chunk := stream.read(READ_CHUNK)):
            yield chunk
        return
    regular = stat.S_ISREG(os.fstat(fd).st_mode)
    while not stop.is_set():
        if not regular and not select.select([fd], [], [], _WAIT_S)[0]:
            continue
        try:
            chunk = os.read(fd, READ_CHUNK)
        except BlockingIOError:
            continue
        if not chunk:
            return
        yield chunk
