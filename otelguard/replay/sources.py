"""Inputs: which files to read, what format each is in, and feeding their lines to a reader.

Everything streams line by line; only a ``.json`` file that is one document (a pretty-printed request
body, or a JSON array of messages) is parsed whole, since a JSON document cannot be read in parts.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, Final, Protocol

import orjson

from otelguard.errors import UsageError
from otelguard.replay.chat import ANTHROPIC, OPENAI, ChatReader
from otelguard.replay.claude_code import CLAUDE_CODE, ClaudeCodeReader
from otelguard.replay.events import EventSink

__all__ = [
    "AUTO",
    "FORMATS",
    "STDIN",
    "InputFile",
    "UsageError",
    "detect_format",
    "expand_paths",
    "replay_inputs",
]

AUTO: Final = "auto"
FORMATS: Final = (AUTO, OPENAI, ANTHROPIC, CLAUDE_CODE)
STDIN: Final = "-"
SUFFIXES: Final = (".jsonl", ".json")
_CLAUDE_CODE_TYPES: Final = frozenset(
    {"user", "assistant", "summary", "system", "file-history-snapshot", "queue-operation"}
)
_PROGRESS_EVERY_BYTES: Final = 1 << 20


def detect_format(record: Any) -> str | None:
    """The format a transcript's first record reveals; ``None`` when it is none of the known ones.

    A chat record does not say whether it is OpenAI or Anthropic until tool traffic appears; the
    chat reader settles that later (``auto`` then reports the dialect it saw, ``openai`` if none).
    """
    if not isinstance(record, dict):
        return None
    if "role" in record or "messages" in record:
        return "chat"
    kind = record.get("type")
    if isinstance(kind, str) and (
        kind in _CLAUDE_CODE_TYPES or any(key in record for key in ("sessionId", "uuid", "leafUuid"))
    ):
        return CLAUDE_CODE
    return None


def expand_paths(paths: list[str], *, allow_missing: bool = False) -> list[str]:
    """Files to read, in command-line order; directories are searched recursively (sorted)."""
    files: list[str] = []
    for raw in paths:
        if raw == STDIN:
            files.append(STDIN)
            continue
        path = Path(raw)
        if path.is_dir():
            files.extend(str(p) for p in transcript_files(path))
        elif path.exists() or allow_missing:
            files.append(raw)
        else:
            raise UsageError(f"no such file or directory: {raw}")
    return files


def transcript_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.suffix in SUFFIXES and p.is_file())


class _Reader(Protocol):
    def feed(self, line: int, record: Any) -> None: ...

    def close(self) -> None: ...


class InputFile:
    """One input's state: its line count, its format (detected from the first record under ``auto``)
    and its reader. Lines are pushed in, so the same object serves one-shot reads and ``--follow``."""

    def __init__(self, path: str, fmt: str, sink: EventSink) -> None:
        self.path = path
        self.sink = sink
        self.line = 0
        self._fmt = fmt
        self._reader: _Reader | None = None
        self._dead = False
        self._stem = "stdin" if path == STDIN else Path(path).stem
        sink.describe_input(path, fmt if fmt != AUTO else "unknown")
        if fmt != AUTO:
            self._reader = self._make_reader(fmt)

    def feed_line(self, raw: bytes) -> None:
        self.line += 1
        if self._dead:
            return
        raw = raw.strip()
        if not raw:
            return
        try:
            record = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            self.sink.error(self.path, self.line, f"invalid JSON (column {exc.colno}); line skipped")
            return
        self.feed_record(self.line, record)

    def feed_record(self, line: int, record: Any) -> None:
        if self._reader is None:
            detected = detect_format(record)
            if detected is None:
                self._dead = True
                self.sink.error(
                    self.path,
                    line,
                    "unknown transcript format: expected OpenAI chat, Anthropic Messages or Claude Code "
                    "records (use --format to force one); file skipped",
                )
                return
            self._reader = self._make_reader(detected)
            if detected == CLAUDE_CODE:
                self.sink.describe_input(self.path, CLAUDE_CODE)
        self._reader.feed(line, record)

    def close(self) -> None:
        if self._reader is not None:
            reader, self._reader = self._reader, None
            if isinstance(reader, ChatReader) and reader.dialect is None:
                self.sink.describe_input(self.path, OPENAI)
            reader.close()

    def _make_reader(self, fmt: str) -> _Reader:
        if fmt == CLAUDE_CODE:
            return ClaudeCodeReader(self.sink, self.path, self._stem)
        dialect = fmt if fmt in (OPENAI, ANTHROPIC) else None
        return ChatReader(self.sink, self.path, self._stem, dialect)


def replay_inputs(
    files: list[str],
    fmt: str,
    sink: EventSink,
    progress: Callable[[int], None] | None = None,
    stop: threading.Event | None = None,
) -> None:
    """Read every file to its end, one after the other; ``progress`` gets the bytes read since its
    last call. Setting ``stop`` ends the reading early (what was read is still reported)."""
    stop = stop or threading.Event()
    for path in files:
        if stop.is_set():
            break
        source = InputFile(path, fmt, sink)
        try:
            if path == STDIN:
                _feed_stream(source, sys.stdin.buffer, progress, stop)
            else:
                with open(path, "rb") as stream:
                    _feed_file(source, stream, progress, stop)
        except OSError as exc:
            sink.error(path, None, f"cannot read: {exc.strerror or type(exc).__name__}")
        finally:
            source.close()


def _feed_file(
    source: InputFile, stream: IO[bytes], progress: Callable[[int], None] | None, stop: threading.Event
) -> None:
    if source.path.endswith(".json") and _is_document(stream):
        stream.seek(0)
        _feed_document(source, stream)
        if progress is not None:
            progress(os.fstat(stream.fileno()).st_size)
        return
    stream.seek(0)
    _feed_stream(source, stream, progress, stop)


def _feed_stream(
    source: InputFile, stream: IO[bytes], progress: Callable[[int], None] | None, stop: threading.Event
) -> None:
    pending = 0
    for raw in _lines(stream):
        if stop.is_set():
            break
        source.feed_line(raw)
        pending += len(raw)
        if progress is not None and pending >= _PROGRESS_EVERY_BYTES:
            progress(pending)
            pending = 0
    if progress is not None and pending:
        progress(pending)


def _lines(stream: IO[bytes]) -> Iterator[bytes]:
    # readline on a buffered binary file: one line in memory at a time
    yield from iter(stream.readline, b"")


def _is_document(stream: IO[bytes]) -> bool:
    """True when a ``.json`` file is one document to parse whole: its first non-blank line is not a
    whole JSON value (a pretty-printed document) or is an array (of messages), not a record."""
    for raw in _lines(stream):
        if raw.strip():
            try:
                return isinstance(orjson.loads(raw), list)
            except orjson.JSONDecodeError:
                return True
    return False


def _feed_document(source: InputFile, stream: IO[bytes]) -> None:
    try:
        document = orjson.loads(stream.read())
    except orjson.JSONDecodeError as exc:
        source.sink.error(
            source.path, exc.lineno, f"invalid JSON document (column {exc.colno}); file skipped"
        )
        return
    source.line = 1
    records = document if isinstance(document, list) else [document]
    for record in records:
        source.feed_record(1, record)
