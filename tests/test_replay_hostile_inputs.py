"""Replay of hostile or unusual inputs: over-long lines, pipes and FIFOs, signals mid-read, and more
files than the process may open. Each is bounded and answered, never a crash or a hang."""

from __future__ import annotations

import itertools
import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from otelguard import GuardConfig
from otelguard.readers.follow import max_open_files
from otelguard.readers.lines import LineSplitter
from otelguard.replay import ReplayRunner, follow_inputs, replay_inputs
from tests.e2e import stop_process

MiB = 1024 * 1024


def _session_lines(session: str, calls: int = 2) -> str:
    records: list[Any] = [
        {"type": "user", "sessionId": session, "message": {"role": "user", "content": "go"}}
    ]
    for i in range(calls):
        use = {"type": "tool_use", "id": f"{session}-{i}", "name": "Read", "input": {"f": i}}
        records.append(
            {
                "type": "assistant",
                "sessionId": session,
                "message": {"id": f"m{i}", "role": "assistant", "content": [use]},
            }
        )
        result = {"type": "tool_result", "tool_use_id": f"{session}-{i}", "content": "ok"}
        records.append(
            {"type": "user", "sessionId": session, "message": {"role": "user", "content": [result]}}
        )
    return "".join(json.dumps(r) + "\n" for r in records)


def _replay_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "otelguard", "replay", *args]


def _wait_until_open(pid: int, path: Path, timeout_s: float = 30.0) -> None:
    """Until the process holds ``path`` open: it is reading (and its signal handlers are set)."""
    target = str(path.resolve())
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        except OSError:
            links = []
        if target in links:
            return
        time.sleep(0.05)
    pytest.fail(f"the replay never opened {path}")


needs_proc = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to see open files")


def test_splitter_joins_each_line_once_and_counts_over_long_ones() -> None:
    splitter = LineSplitter(limit=10)
    out = [
        *splitter.push(b"ab"),
        *splitter.push(b"c\nxxxxxxxx"),
        *splitter.push(b"xxxxx\nok"),
        *splitter.finish(),
    ]
    assert out == [b"abc", 13, b"ok"]
    assert splitter.pending_bytes == 0


@given(
    data=st.binary(max_size=200), cuts=st.lists(st.integers(0, 200), max_size=10), limit=st.integers(1, 20)
)
def test_splitter_matches_a_plain_split_whatever_the_chunking(
    data: bytes, cuts: list[int], limit: int
) -> None:
    bounds = sorted({0, len(data), *(c for c in cuts if c <= len(data))})
    splitter = LineSplitter(limit)
    out: list[bytes | int] = []
    for start, end in itertools.pairwise(bounds):
        out += splitter.push(data[start:end])
    out += splitter.finish()
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    assert out == [line if len(line) <= limit else len(line) for line in lines]


def test_over_long_line_is_an_error_with_its_length_read_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "long.jsonl"
    with path.open("w") as f:
        f.write(_session_lines("a"))
        f.write('{"type": "user", "sessionId": "a", "pad": "' + "x" * (40 * MiB) + '"}\n')
        f.write(_session_lines("b"))
    size = 40 * MiB + len('{"type": "user", "sessionId": "a", "pad": ""}')
    runner = ReplayRunner(GuardConfig())
    tracemalloc.start()
    try:
        replay_inputs([str(path)], "auto", runner, max_line_bytes=MiB)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    report = runner.finish()
    assert peak < 8 * MiB
    assert [(e.line, e.reason) for e in report.errors] == [
        (6, f"line of {size:,} bytes exceeds the limit of {MiB:,}; line skipped")
    ]
    assert report.totals()["tool_calls"] == 4


def test_follow_reads_a_huge_line_without_newline_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "nonewline.jsonl"
    path.write_bytes(b"x" * (40 * MiB))
    runner = ReplayRunner(GuardConfig())
    tracemalloc.start()
    try:
        follow_inputs([str(path)], "auto", runner, threading.Event(), idle_timeout_s=0.3, max_line_bytes=MiB)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * MiB
    assert [e.reason for e in runner.finish().errors] == [
        f"line of {40 * MiB:,} bytes exceeds the limit of {MiB:,}; line skipped"
    ]


def test_an_over_long_first_line_through_a_fifo_is_an_error_in_bounded_memory(tmp_path: Path) -> None:
    """The first line decides a file's format, and is bounded all the same: the chunks kept to decide
    are let go once it is past the limit, never held to its end."""
    fifo = tmp_path / "first.jsonl"
    os.mkfifo(fifo)
    piece = b"x" * MiB
    opening = b'{"type": "user", "sessionId": "a", "pad": "'

    def write() -> None:
        with fifo.open("wb") as f:
            f.write(opening)
            for _ in range(32):  # written lazily: the line exists whole only in the reader, if anywhere
                f.write(piece)
            f.write(b'"}\n' + _session_lines("b").encode())

    writer = threading.Thread(target=write)
    writer.start()
    runner = ReplayRunner(GuardConfig())
    tracemalloc.start()
    try:
        replay_inputs([str(fifo)], "auto", runner, max_line_bytes=MiB)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        writer.join(30)
    report = runner.finish()
    size = len(opening) + 32 * MiB + 2
    assert [(e.path, e.line, e.reason) for e in report.errors] == [
        (str(fifo), 1, f"line of {size:,} bytes exceeds the limit of {MiB:,}; line skipped")
    ]
    assert peak < 8 * MiB  # the line is 32 MiB
    assert report.totals()["tool_calls"] == 2


@needs_proc
def test_sigterm_mid_read_of_a_huge_line_ends_follow_with_a_report(tmp_path: Path) -> None:
    path = tmp_path / "huge.jsonl"
    with path.open("wb") as f:
        f.write(_session_lines("s").encode())
        f.write(b'{"pad": "' + b"x" * (60 * MiB))
    process = subprocess.Popen(_replay_command(str(path), "--follow", "--json"), stdout=subprocess.PIPE)
    try:
        _wait_until_open(process.pid, path)
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=20)  # a bound against a hang, not a timing assert
    finally:
        stop_process(process)
    assert process.returncode in (0, 1)
    assert json.loads(out)["totals"]["sessions"] == 1


@needs_proc
def test_fifo_without_writer_waits_but_answers_sigterm(tmp_path: Path) -> None:
    fifo = tmp_path / "in.jsonl"
    os.mkfifo(fifo)
    process = subprocess.Popen(_replay_command(str(fifo), "--json"), stdout=subprocess.PIPE)
    try:
        _wait_until_open(process.pid, fifo)
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=20)
    finally:
        stop_process(process)
    assert process.returncode == 0
    assert json.loads(out)["totals"]["sessions"] == 0


def test_fifo_with_a_writer_is_streamed(tmp_path: Path) -> None:
    fifo = tmp_path / "in.jsonl"
    os.mkfifo(fifo)
    content = _session_lines("a") + _session_lines("b")

    def write() -> None:
        with fifo.open("w") as f:
            for line in content.splitlines(keepends=True):
                f.write(line)
                f.flush()

    writer = threading.Thread(target=write)
    writer.start()
    runner = ReplayRunner(GuardConfig())
    replay_inputs([str(fifo)], "auto", runner)
    writer.join(10)
    report = runner.finish()
    assert report.errors == []
    assert report.totals()["sessions"] == 2 and report.totals()["tool_calls"] == 4


def test_process_substitution_is_streamed(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(_session_lines("a"))
    command = " ".join(_replay_command(f"<(cat {path})", "--json"))
    done = subprocess.run(["bash", "-c", command], capture_output=True, timeout=60, check=False)
    doc = json.loads(done.stdout)
    assert done.returncode == 0, doc["errors"]
    assert doc["totals"]["tool_calls"] == 2


def test_follow_on_a_fifo_reads_what_is_written(tmp_path: Path) -> None:
    fifo = tmp_path / "live.jsonl"
    os.mkfifo(fifo)
    runner = ReplayRunner(GuardConfig())
    stop = threading.Event()
    thread = threading.Thread(target=follow_inputs, args=([str(fifo)], "auto", runner, stop))
    thread.start()
    with fifo.open("w") as f:
        f.write(_session_lines("a"))
    deadline = time.monotonic() + 20
    while not runner.open_sessions() and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    thread.join(10)
    assert runner.finish().totals()["tool_calls"] == 2


def test_open_files_are_bounded_by_the_process_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        assert max_open_files() == 64
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_follow_a_directory_of_more_files_than_the_open_file_limit(tmp_path: Path) -> None:
    for i in range(400):
        (tmp_path / f"{i:04}.jsonl").write_text(_session_lines(f"s{i}", calls=1))

    def low_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    done = subprocess.run(
        _replay_command(str(tmp_path), "--follow", "--idle-timeout", "1", "--json"),
        capture_output=True,
        timeout=300,
        preexec_fn=low_limit,
        check=False,
    )
    assert b"Traceback" not in done.stderr
    doc = json.loads(done.stdout)
    assert done.returncode == 0, doc["errors"][:3]
    assert doc["totals"]["sessions"] == 400 and doc["totals"]["tool_calls"] == 400
