"""`otelguard replay --follow`: appended lines and new files are picked up, like tail -F."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from otelguard import GuardConfig
from otelguard.replay import ReplayRunner, follow_inputs, replay_inputs
from tests.e2e import free_port, http_get, wait_until


def openai_turn(prefix: str, calls: int, *, tool: str = "read_file") -> list[str]:
    lines: list[Any] = [{"role": "user", "content": "go"}]
    for i in range(calls):
        call_id = f"{prefix}{i}"
        function = {"name": tool, "arguments": json.dumps({"path": f"{prefix}/{i}"})}
        lines.append(
            {"role": "assistant", "tool_calls": [{"id": call_id, "type": "function", "function": function}]}
        )
        lines.append({"role": "tool", "tool_call_id": call_id, "content": f"content {i}"})
    return [json.dumps(line) + "\n" for line in lines]


def append(path: Path, lines: list[str]) -> None:
    with path.open("a") as stream:
        stream.writelines(lines)


def calls_seen(runner: ReplayRunner) -> int:
    return sum(s.tool_calls for s in runner.open_sessions()) + sum(
        s.tool_calls for s in runner.report.sessions
    )


def test_follow_picks_up_appended_lines_partial_lines_and_new_files(tmp_path: Path) -> None:
    first = tmp_path / "a.jsonl"
    first.write_text("".join(openai_turn("a", 2)))
    runner = ReplayRunner(GuardConfig())
    stop = threading.Event()
    thread = threading.Thread(target=follow_inputs, args=([str(tmp_path)], "auto", runner, stop))
    thread.start()
    try:
        wait_until(lambda: calls_seen(runner) == 2, 10, 0.05, what="the existing lines")
        more = openai_turn("b", 3)
        append(first, more[:-1])
        half = len(more[-1]) // 2
        append(first, [more[-1][:half]])  # a line still being written is not read yet...
        wait_until(lambda: calls_seen(runner) == 4, 10, 0.05, what="appended lines")
        append(first, [more[-1][half:]])  # ...until its newline arrives
        wait_until(lambda: calls_seen(runner) == 5, 10, 0.05, what="the completed line")
        (tmp_path / "sub").mkdir()
        (tmp_path / "sub" / "new.jsonl").write_text("".join(openai_turn("c", 4)))
        wait_until(lambda: calls_seen(runner) == 9, 10, 0.05, what="the new file")
    finally:
        stop.set()
        thread.join(10)
    report = runner.finish()
    assert report.errors == []
    assert [(s.session_id, s.turns, s.tool_calls) for s in report.sessions] == [("a", 2, 5), ("new", 1, 4)]


def test_follow_stops_after_idle_timeout(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_text("".join(openai_turn("a", 1)))
    runner = ReplayRunner(GuardConfig())
    follow_inputs([str(path)], "auto", runner, threading.Event(), idle_timeout_s=0.5)
    assert runner.finish().totals()["tool_calls"] == 1


def test_follow_replaced_file_is_read_again_from_the_start(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_text("".join(openai_turn("a", 3)))
    runner = ReplayRunner(GuardConfig())
    stop = threading.Event()
    thread = threading.Thread(target=follow_inputs, args=([str(path)], "auto", runner, stop))
    thread.start()
    try:
        wait_until(lambda: calls_seen(runner) == 3, 10, 0.05, what="the first file")
        replacement = tmp_path / "a.jsonl.tmp"
        replacement.write_text("".join(openai_turn("z", 1)))
        replacement.replace(path)  # rotation: a new inode under the same name
        wait_until(lambda: calls_seen(runner) == 4, 10, 0.05, what="the replaced file")
    finally:
        stop.set()
        thread.join(10)
    report = runner.finish()
    assert [s.tool_calls for s in report.sessions] == [3, 1]


def test_follow_reads_a_json_document_whole_and_again_when_rewritten(tmp_path: Path) -> None:
    """A pretty-printed .json replays under --follow as without it; a rewrite is read again, whole."""
    fixture = Path(__file__).parent / "fixtures" / "replay" / "anthropic" / "retry_failing_command.json"
    path = tmp_path / "body.json"
    path.write_bytes(fixture.read_bytes())
    once = ReplayRunner(GuardConfig())
    replay_inputs([str(path)], "auto", once)
    expected = once.finish().to_json()
    assert expected["errors"] == [] and expected["totals"]["tool_calls"] > 0
    runner = ReplayRunner(GuardConfig())
    stop = threading.Event()
    thread = threading.Thread(target=follow_inputs, args=([str(tmp_path)], "auto", runner, stop))
    thread.start()
    try:
        wait_until(lambda: len(runner.report.sessions) == 1, 10, 0.05, what="the document")
        messages = openai_turn("z", 2)
        path.write_text(json.dumps([json.loads(m) for m in messages], indent=2))  # rewritten in place
        wait_until(lambda: len(runner.report.sessions) == 2, 10, 0.05, what="the rewritten document")
    finally:
        stop.set()
        thread.join(10)
    report = runner.finish().to_json()
    assert report["errors"] == []
    assert report["sessions"][0] == expected["sessions"][0]
    assert report["sessions"][1]["tool_calls"] == 2


def tool_calls_metric(url: str) -> float:
    body = http_get(url).decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
        if sample.name == "otelguard_tool_calls_total"
    )


def test_follow_command_serves_live_metrics_and_ends_cleanly_on_sigterm(tmp_path: Path) -> None:
    """An operator tails a directory of live transcripts and scrapes it; SIGTERM prints the report, exit 0."""
    path = tmp_path / "live.jsonl"
    path.write_text("".join(openai_turn("a", 2)))
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "otelguard.cli",
            "replay",
            str(tmp_path),
            "--follow",
            "--serve",
            str(port),
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(lambda: tool_calls_metric(url) == 2, 30, what="the existing lines on /metrics")
        append(path, openai_turn("b", 3))
        wait_until(lambda: tool_calls_metric(url) == 5, 30, what="appended lines on /metrics")
        (tmp_path / "second.jsonl").write_text("".join(openai_turn("c", 1)))
        wait_until(lambda: tool_calls_metric(url) == 6, 30, what="the new file on /metrics")
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err
    doc = json.loads(out)
    assert doc["totals"]["tool_calls"] == 6
    assert [(s["session_id"], s["turns"]) for s in doc["sessions"]] == [("live", 2), ("second", 1)]


def test_follow_parks_idle_files_and_resumes_where_they_stopped(tmp_path: Path) -> None:
    """An idle file is closed (its session ends); when it grows again it continues as a new session."""
    path = tmp_path / "a.jsonl"
    path.write_text("".join(openai_turn("a", 2)))
    runner = ReplayRunner(GuardConfig())
    stop = threading.Event()
    args = ([str(tmp_path)], "auto", runner, stop, None, 0.3)
    thread = threading.Thread(target=follow_inputs, args=args)
    thread.start()
    try:
        wait_until(lambda: len(runner.report.sessions) == 1, 10, 0.05, what="the idle file to be parked")
        assert runner.open_sessions() == []
        append(path, ['{"role": "tool", "tool_call_id": "nobody", "content": "x"}\n', *openai_turn("b", 1)])
        wait_until(lambda: calls_seen(runner) == 3, 10, 0.05, what="the resumed file")
    finally:
        stop.set()
        thread.join(10)
    report = runner.finish()
    assert [(s.session_id, s.turns, s.tool_calls) for s in report.sessions] == [("a", 1, 2), ("a", 1, 1)]
    # line numbers continue from where the file stopped: 5 lines were read before parking
    assert [(e.line, e.reason) for e in report.errors] == [(6, "tool result without its call (id nobody)")]
