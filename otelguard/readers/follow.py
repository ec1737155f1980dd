"""``--follow``: keep reading transcripts as they grow, like ``tail -F``.

Each file is read from its start, then polled for new complete lines (a line still being written
waits for its newline). Directories are rescanned for new ``*.jsonl``/``*.json`` files; a file that
is replaced or truncated is read again from its start as a new input. At most ``max_open_files()``
files are open at once: past it, the one that had data least recently is closed (parked, as below).
A FIFO is read as it is written and never parked. A file idle for
``park_after_s`` is closed (its sessions end, so their turns reach the metrics, and a directory of
thousands of finished transcripts does not hold thousands of open files); if it grows again it is
reopened where it stopped, as a new session. A ``.json`` file is a document, not a log: it is not
tailed but read whole, exactly as without ``--follow``, once it has not changed for ``_SETTLE_S``,
and read whole again, as a new input, each time it is rewritten. Follow ends when ``stop`` is set
(SIGINT/SIGTERM) or after ``idle_timeout_s`` without new data.
"""

from __future__ import annotations

import errno
import os
import resource
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final

from otelguard.readers.events import EventSink
from otelguard.readers.lines import MAX_LINE_BYTES, READ_CHUNK, LineSplitter, is_regular, open_nonblocking
from otelguard.readers.sources import STDIN, InputFile, replay_inputs, transcript_files

__all__ = ["follow_inputs"]

_POLL_S: Final = 0.2
_READ_CHUNK: Final = READ_CHUNK
_SETTLE_S: Final = 0.5  # a .json document is read once it has not been modified for this long
PARK_AFTER_S: Final = 300.0
MAX_OPEN_FILES: Final = 256


@dataclass(frozen=True, slots=True)
class _Parked:
    inode: int
    offset: int
    lines: int


class _Tailed:
    def __init__(
        self, path: str, fmt: str, sink: EventSink, parked: _Parked | None, max_line_bytes: int
    ) -> None:
        self.path = path
        self.stream: IO[bytes] = open_nonblocking(path)
        self.regular = is_regular(self.stream)
        self.inode = os.fstat(self.stream.fileno()).st_ino
        self.offset = 0
        self.source = InputFile(path, fmt, sink, max_line_bytes)
        if parked is not None and parked.inode == self.inode and self.regular:
            self.offset = self.stream.seek(parked.offset)
            self.source.line = parked.lines
        self.broken = False
        self.last_data = time.monotonic()

    def read_available(self, stop: threading.Event) -> bool:
        """Feed every complete line written since the last poll; True when there was new data.
        Ends early when ``stop`` is set, so a signal is answered even in the middle of a big read."""
        got = False
        while not stop.is_set():
            try:
                chunk = os.read(self.stream.fileno(), _READ_CHUNK)
            except BlockingIOError:  # a pipe or FIFO with nothing new
                break
            if not chunk:  # end of file for now (or a FIFO with no writer at the moment)
                break
            got = True
            self.offset += len(chunk)
            self.source.feed_chunk(chunk)
        if got:
            self.last_data = time.monotonic()
        return got

    def replaced(self) -> bool:
        if not self.regular:
            return False
        try:
            stat = os.stat(self.path)
        except OSError:
            return False  # gone for now (rotation in progress): keep what we have
        return stat.st_ino != self.inode or stat.st_size < self.offset

    def park(self) -> _Parked:
        """Close the file but remember where the last complete line ended."""
        parked = _Parked(self.inode, self.offset - self.source.lines.pending_bytes, self.source.line)
        self.source.lines = LineSplitter(self.source.lines.limit)  # the partial line is read again
        self.close()
        return parked

    def close(self) -> None:
        self.source.finish_lines()
        self.stream.close()
        self.source.close()


class _Document:
    """A ``.json`` file, read whole each time it settles after a change (see the module docstring)."""

    def __init__(self, path: str, fmt: str, sink: EventSink) -> None:
        self.path = path
        self.fmt = fmt
        self.sink = sink
        self.read: tuple[int, int, int] | None = None  # (inode, size, mtime) of the version read

    def poll(self, *, final: bool = False) -> bool:
        """Read the file if it changed and settled (or changed at all, when follow is ending)."""
        try:
            stat = os.stat(self.path)
        except OSError:
            return False  # not there yet, or being replaced
        stamp = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if stamp == self.read or stat.st_size == 0:
            return False
        if not final and time.time_ns() - stat.st_mtime_ns < _SETTLE_S * 1e9:
            return False  # perhaps still being written
        self.read = stamp
        replay_inputs([self.path], self.fmt, self.sink)
        return True


class _Follower:
    def __init__(
        self, paths: list[str], fmt: str, sink: EventSink, park_after_s: float, stop: threading.Event
    ) -> None:
        self.paths = paths
        self.fmt = fmt
        self.sink = sink
        self.park_after_s = park_after_s
        self.stop = stop
        self.max_open = max_open_files()
        self.max_line_bytes = MAX_LINE_BYTES
        self.tailed: dict[str, _Tailed] = {}
        self.parked: dict[str, _Parked] = {}
        self.documents: dict[str, _Document] = {}

    def poll(self) -> bool:
        got = False
        for path in _current_files(self.paths):
            if self.stop.is_set():
                break
            if path.endswith(".json"):
                document = self.documents.get(path)
                if document is None:
                    document = self.documents[path] = _Document(path, self.fmt, self.sink)
                got = document.poll() or got
                continue
            entry = self._entry(path)
            if entry is None or entry.broken:
                continue
            try:
                got = entry.read_available(self.stop) or got
            except OSError as exc:
                self.sink.error(path, None, f"cannot read: {exc.strerror or type(exc).__name__}")
                entry.broken = True
                continue
            if time.monotonic() - entry.last_data >= self.park_after_s:
                self.parked[path] = self.tailed.pop(path).park()
        return got

    def _entry(self, path: str) -> _Tailed | None:
        entry = self.tailed.get(path)
        if entry is not None and entry.replaced():
            entry.close()
            entry = None
        if entry is not None:
            return entry
        parked = self.parked.get(path)
        if parked is not None and not _grew(path, parked):
            return None
        if len(self.tailed) >= self.max_open:
            self._park_least_recent()
        try:
            entry = _Tailed(path, self.fmt, self.sink, self.parked.get(path), self.max_line_bytes)
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE):  # other code holds files too: make room
                self._park_least_recent()
            return None  # not there yet (tail -F waits for it), or tried again on the next poll
        self.parked.pop(path, None)
        self.tailed[path] = entry
        return entry

    def _park_least_recent(self) -> None:
        """Close the file that had data least recently (it is reopened at its offset if it grows):
        the files open at once stay under ``max_open_files()`` however many are followed."""
        regular = [entry for entry in self.tailed.values() if entry.regular]
        if regular:
            idle = min(regular, key=lambda entry: entry.last_data)
            self.parked[idle.path] = self.tailed.pop(idle.path).park()

    def close(self) -> None:
        for entry in self.tailed.values():
            entry.close()
        self.tailed.clear()
        for document in self.documents.values():  # like a last line without its newline
            document.poll(final=True)


def _grew(path: str, parked: _Parked) -> bool:
    try:
        stat = os.stat(path)
    except OSError:
        return False
    return stat.st_ino != parked.inode or stat.st_size != parked.offset


def follow_inputs(
    paths: list[str],
    fmt: str,
    sink: EventSink,
    stop: threading.Event,
    idle_timeout_s: float | None = None,
    park_after_s: float = PARK_AFTER_S,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> None:
    """Tail ``paths`` (files, directories, FIFOs, ``-``) until ``stop`` is set or the input stays idle."""
    if STDIN in paths:  # stdin is followed by reading it to its end
        replay_inputs([STDIN], fmt, sink, stop=stop, max_line_bytes=max_line_bytes)
    follower = _Follower(paths, fmt, sink, park_after_s, stop)
    follower.max_line_bytes = max_line_bytes
    last_data = time.monotonic()
    try:
        while not stop.is_set():
            got = follower.poll()
            now = time.monotonic()
            if got:
                last_data = now
            elif idle_timeout_s is not None and now - last_data >= idle_timeout_s:
                break
            if not got:
                stop.wait(_POLL_S)
    finally:
        follower.close()


def max_open_files() -> int:
    """Transcripts kept open at once: a quarter of the process's file limit (the rest is for the
    metrics server, sockets and the host), at most ``MAX_OPEN_FILES``."""
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return MAX_OPEN_FILES
    if soft == resource.RLIM_INFINITY:
        return MAX_OPEN_FILES
    return max(4, min(MAX_OPEN_FILES, soft // 4))


def _current_files(paths: list[str]) -> list[str]:
    files: list[str] = []
    for raw in paths:
        if raw == STDIN:
            continue
        path = Path(raw)
        if path.is_dir():
            files.extend(str(p) for p in transcript_files(path))
        else:
            files.append(raw)
    return files
