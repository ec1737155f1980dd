"""Inputs: which files to read, what format each is in, and feeding their lines to a reader.

Everything streams line by line; only a file that is one document (a pretty-printed request body or
trajectory, or a JSON array of messages or events) is parsed whole, since a JSON document cannot be
read in parts. Whether a file is one document is read from its content, whatever its extension.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final, Protocol

import orjson

from otelguard.errors import UsageError
from otelguard.readers.chat import ANTHROPIC, OPENAI, ChatReader
from otelguard.readers.claude_code import CLAUDE_CODE, ClaudeCodeReader
from otelguard.readers.codex import CODEX, CodexReader, is_codex_record
from otelguard.readers.events import EventSink
from otelguard.readers.feed import input_ending
from otelguard.readers.gemini_cli import GEMINI_CLI, GeminiCliReader, is_gemini_cli_session
from otelguard.readers.lines import MAX_LINE_BYTES, LineSplitter, open_nonblocking, read_chunks
from otelguard.readers.mini_swe_agent import MINI_SWE_AGENT, MiniSweAgentReader, is_mini_swe_agent_messages
from otelguard.readers.openhands import OPENHANDS, OpenHandsReader, completion_log_fields, is_openhands_event
from otelguard.readers.swe_agent import SWE_AGENT, SweAgentReader, is_swe_agent_trajectory

__all__ = [
    "AUTO",
    "FORMATS",
    "STDIN",
    "InputFile",
    "UsageError",
    "detect_format",
    "expand_paths",
    "replay_bytes",
    "replay_inputs",
]

AUTO: Final = "auto"
FORMATS: Final = (
    AUTO,
    OPENAI,
    ANTHROPIC,
    CLAUDE_CODE,
    CODEX,
    GEMINI_CLI,
    OPENHANDS,
    SWE_AGENT,
    MINI_SWE_AGENT,
)
STDIN: Final = "-"
SUFFIXES: Final = (".jsonl", ".json", ".traj")
_DOCUMENT_SUFFIXES: Final = (".json", ".traj")
_DOCUMENT_OPENINGS: Final = (b"{", b"[")
_CLAUDE_CODE_TYPES: Final = frozenset(
    {"user", "assistant", "summary", "system", "file-history-snapshot", "queue-operation"}
)
_PROGRESS_EVERY_BYTES: Final = 1 << 20
MAX_DOCUMENT_BYTES: Final = 256 << 20
"""A whole-file document (a trajectory, a request body) is parsed at once; past this size it is refused
rather than read into memory."""


def detect_format(record: Any) -> str | None:
    """The format a transcript's first record reveals; ``None`` when it is none of the known ones.

    A chat record does not say whether it is OpenAI or Anthropic until tool traffic appears; the
    chat reader settles that later (``auto`` then reports the dialect it saw, ``openai`` if none).
    """
    if not isinstance(record, dict):
        return None
    if is_gemini_cli_session(record):  # before the chat checks: an older chat holds "messages"
        return GEMINI_CLI
    if is_codex_record(record):
        return CODEX
    if ("history" in record and "instance_id" in record) or is_openhands_event(record):
        return OPENHANDS
    if completion_log_fields(record) is not None:  # read as chat, whatever its messages look like
        return "chat"
    if "messages" in record and "role" not in record and _is_mini_swe_agent_run(record):
        return MINI_SWE_AGENT
    if isinstance(record.get("trajectory"), list) and is_swe_agent_trajectory(record):
        # a trajectory that also records each role's messages (multi-agent systems) is still one
        return SWE_AGENT
    if "role" in record or "messages" in record or isinstance(record.get("traj"), list):
        return "chat"
    if isinstance(record.get("simulations"), list):  # tau2-bench results
        return "chat"
    if isinstance(record.get("answer_generation"), dict):  # a ToolBench answer
        return "chat"
    if is_swe_agent_trajectory(record):
        return SWE_AGENT
    kind = record.get("type")
    if isinstance(kind, str) and (
        kind in _CLAUDE_CODE_TYPES or any(key in record for key in ("sessionId", "uuid", "leafUuid"))
    ):
        return CLAUDE_CODE
    return None


def detect_document(document: Any) -> str | None:
    """The format of a whole JSON document: a list is read by its items, except that a message list
    written by mini-swe-agent looks like any chat until its assistant messages are read."""
    if isinstance(document, list):
        if document and isinstance(document[0], dict) and "role" in document[0]:
            return MINI_SWE_AGENT if is_mini_swe_agent_messages(document) else "chat"
        return detect_format(document[0]) if document else None
    return detect_format(document)


def _is_mini_swe_agent_run(record: dict[str, Any]) -> bool:
    info = record.get("info")
    marked = str(record.get("trajectory_format", "")).startswith("mini-swe-agent") or (
        isinstance(info, dict) and "mini_version" in info
    )
    return marked or is_mini_swe_agent_messages(record.get("messages"))


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

    def __init__(self, path: str, fmt: str, sink: EventSink, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self.path = path
        self.sink = sink
        self.line = 0
        self.lines = LineSplitter(max_line_bytes)
        self._fmt = fmt
        self._reader: _Reader | None = None
        self._dead = False
        self._stem = "stdin" if path == STDIN else Path(path).stem
        sink.describe_input(path, fmt if fmt != AUTO else "unknown")
        if fmt != AUTO:
            self._reader = self._make_reader(fmt)

    def feed_chunk(self, chunk: bytes) -> None:
        """Bytes as read: every line they complete is fed (an over-long one reported)."""
        for item in self.lines.push(chunk):
            self._feed_item(item)

    def finish_lines(self) -> None:
        """The input ended: a last line without its newline is still a line."""
        for item in self.lines.finish():
            self._feed_item(item)

    def _feed_item(self, item: bytes | int) -> None:
        if isinstance(item, bytes):
            self.feed_line(item)
            return
        self.line += 1
        self.sink.error(
            self.path,
            self.line,
            f"line of {item:,} bytes exceeds the limit of {self.lines.limit:,}; line skipped",
        )

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
        if self._reader is None and not self._detect(line, detect_format(record)):
            return
        assert self._reader is not None
        self._reader.feed(line, record)

    def feed_document(self, document: Any) -> None:
        """A whole-file JSON document: a list is fed item by item, anything else as one record."""
        self.line = 1
        if self._reader is None and not self._detect(1, detect_document(document)):
            return
        records = document if isinstance(document, list) else [document]
        for index, record in enumerate(records):
            # the document is the whole file: a session its last record closes ends with the file
            with input_ending(index == len(records) - 1):
                self.feed_record(1, record)

    def _detect(self, line: int, detected: str | None) -> bool:
        if detected is None:
            self._dead = True
            self.sink.error(
                self.path,
                line,
                "unknown transcript format: expected OpenAI chat, Anthropic Messages, Claude Code, Codex, "
                "Gemini CLI, OpenHands, SWE-agent or mini-swe-agent records (use --format to force one); file skipped",
            )
            return False
        self._reader = self._make_reader(detected)
        if detected != "chat":
            self.sink.describe_input(self.path, detected)
        return True

    def close(self, *, ended: bool = True) -> None:
        """The input is done with; ``ended``: it was read to its end (its last unanswered calls are
        in progress), not cut short."""
        if self._reader is not None:
            reader, self._reader = self._reader, None
            if isinstance(reader, ChatReader) and reader.dialect is None:
                self.sink.describe_input(self.path, OPENAI)
            with input_ending(ended):
                reader.close()

    def _make_reader(self, fmt: str) -> _Reader:
        if fmt == CLAUDE_CODE:
            return ClaudeCodeReader(self.sink, self.path, self._stem)
        if fmt == CODEX:
            return CodexReader(self.sink, self.path, self._stem)
        if fmt == GEMINI_CLI:
            return GeminiCliReader(self.sink, self.path, self._stem)
        if fmt == OPENHANDS:
            return OpenHandsReader(self.sink, self.path, self._stem)
        if fmt == SWE_AGENT:
            return SweAgentReader(self.sink, self.path, self._stem)
        if fmt == MINI_SWE_AGENT:
            return MiniSweAgentReader(self.sink, self.path, self._stem)
        dialect = fmt if fmt in (OPENAI, ANTHROPIC) else None
        return ChatReader(self.sink, self.path, self._stem, dialect)


def replay_inputs(
    files: list[str],
    fmt: str,
    sink: EventSink,
    progress: Callable[[int], None] | None = None,
    stop: threading.Event | None = None,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> None:
    """Read every file to its end, one after the other; ``progress`` gets the bytes read since its
    last call. Setting ``stop`` ends the reading early (what was read is still reported). Pipes and
    FIFOs are streamed; a line longer than ``max_line_bytes`` is an error, not a crash."""
    stop = stop or threading.Event()
    for path in files:
        if stop.is_set():
            break
        source = InputFile(path, fmt, sink, max_line_bytes)
        ended = False
        try:
            if path == STDIN:
                _feed_stream(source, read_chunks(sys.stdin.buffer, stop), progress)
            else:
                with open_nonblocking(path) as stream:
                    _feed_file(source, read_chunks(stream, stop), progress)
            ended = not stop.is_set()
        except OSError as exc:
            sink.error(path, None, f"cannot read: {exc.strerror or type(exc).__name__}")
        finally:
            source.close(ended=ended)


def replay_bytes(
    path: str, data: bytes, fmt: str, sink: EventSink, max_line_bytes: int = MAX_LINE_BYTES
) -> None:
    """Read one input already in memory (a member of an archive, say) exactly as ``replay_inputs``
    reads a file of that name and content: same format detection, same errors, named ``path``."""
    source = InputFile(path, fmt, sink, max_line_bytes)
    try:
        _feed_file(source, iter((data,)), None)
    finally:
        source.close()


def _feed_stream(source: InputFile, chunks: Iterator[bytes], progress: Callable[[int], None] | None) -> None:
    pending = 0
    for chunk in chunks:
        source.feed_chunk(chunk)
        pending += len(chunk)
        if progress is not None and pending >= _PROGRESS_EVERY_BYTES:
            progress(pending)
            pending = 0
    source.finish_lines()
    if progress is not None and pending:
        progress(pending)


def _feed_file(source: InputFile, chunks: Iterator[bytes], progress: Callable[[int], None] | None) -> None:
    """A file is one document to parse whole when its first non-blank line is an array (of messages
    or events), or is not a whole JSON value but opens one (a pretty-printed document; a ``.json`` or
    ``.traj`` file whose first line is not a whole value is a document whatever it opens); otherwise
    it is JSON lines. Decided from the bytes read so far, so a pipe needs no seek."""
    head: list[bytes] = []
    size = 0
    first_line: bytes | int | None = None
    splitter = LineSplitter(source.lines.limit)
    for chunk in chunks:
        head.append(chunk)
        size += len(chunk)
        first_line = next(
            (line for line in splitter.push(chunk) if not isinstance(line, bytes) or line.strip()), None
        )
        if first_line is not None:
            break
        if splitter.pending_bytes > splitter.limit:
            # the first line is over the limit: it is no document's opening, and the chunks kept
            # to decide that are dropped; its length alone is counted on, as for any other line
            _feed_over_long_first_line(source, head, chunks, progress)
            return
    if first_line is None:
        first_line = next(splitter.finish(), None)  # the whole input, ended without a newline
    document_suffix = source.path.endswith(_DOCUMENT_SUFFIXES)
    if isinstance(first_line, bytes) and _starts_document(first_line.strip(), document_suffix):
        _feed_document(source, head, chunks, size)
        if progress is not None:
            progress(size)
        return
    _feed_stream(source, _chain(head, chunks), progress)


def _feed_over_long_first_line(
    source: InputFile, head: list[bytes], chunks: Iterator[bytes], progress: Callable[[int], None] | None
) -> None:
    """JSON lines whose first non-blank line is already over the line limit: the kept chunks are
    pushed through the source's own splitter (which keeps only the length of a line past the limit),
    then let go, and the rest streams as usual."""
    size = 0
    while head:
        chunk = head.pop(0)
        size += len(chunk)
        source.feed_chunk(chunk)
    if progress is not None:
        progress(size)
    _feed_stream(source, chunks, progress)


def _chain(head: list[bytes], chunks: Iterator[bytes]) -> Iterator[bytes]:
    yield from head
    yield from chunks


def _starts_document(line: bytes, document_suffix: bool) -> bool:
    if not line:
        return False
    try:
        return isinstance(orjson.loads(line), list)
    except orjson.JSONDecodeError:
        return document_suffix or line in _DOCUMENT_OPENINGS


def _feed_document(source: InputFile, head: list[bytes], chunks: Iterator[bytes], size: int) -> None:
    for chunk in chunks:
        size += len(chunk)
        if size > MAX_DOCUMENT_BYTES:
            break
        head.append(chunk)
    if size > MAX_DOCUMENT_BYTES:
        source.sink.error(
            source.path,
            None,
            f"one JSON document larger than {MAX_DOCUMENT_BYTES >> 20} MiB cannot be read in parts; "
            "file skipped (split it into JSON lines)",
        )
        return
    try:
        document = orjson.loads(b"".join(head))
    except orjson.JSONDecodeError as exc:
        source.sink.error(
            source.path, exc.lineno, f"invalid JSON document (column {exc.colno}); file skipped"
        )
        return
    source.feed_document(document)
