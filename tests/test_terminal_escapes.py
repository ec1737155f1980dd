"""Names from transcripts (session ids, tool names, file names) never reach the terminal raw: no
escape sequence, and no forged ``otelguard replay:`` line, on stdout or stderr of a real process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from otelguard.readers.printable import printable

FORGED = "otelguard replay: forged"
SESSION = f"s\x1b[31mred\n{FORGED}\u202e"
TOOL = f"t\x1b]0;title\x07ool\r\n{FORGED}"


def _hostile_transcript(directory: Path, *, timestamps: bool = True) -> Path:
    records: list[dict[str, object]] = [
        {"type": "user", "sessionId": SESSION, "message": {"role": "user", "content": "go"}}
    ]
    for i in range(6):
        use = {"type": "tool_use", "id": f"c{i}", "name": TOOL, "input": {"q": 1}}
        result = {"type": "tool_result", "tool_use_id": f"c{i}", "content": "Error", "is_error": True}
        records.append(
            {
                "type": "assistant",
                "sessionId": SESSION,
                "message": {"id": f"m{i}", "role": "assistant", "content": [use]},
            }
        )
        records.append(
            {"type": "user", "sessionId": SESSION, "message": {"role": "user", "content": [result]}}
        )
    stray = {"type": "tool_result", "tool_use_id": f"x\x1b[2J\n{FORGED}", "content": "x"}
    records.append({"type": "user", "sessionId": SESSION, "message": {"role": "user", "content": [stray]}})
    if timestamps:
        for record in records:
            record["timestamp"] = "2025-03-03T10:00:00Z"
    path = directory / f"a\x1b[2Jb\n{FORGED}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + "not json\n", encoding="utf-8")
    return path


def _run(*arguments: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTELGUARD_")} | {"COLUMNS": "300"}
    return subprocess.run(
        [sys.executable, "-m", "otelguard", *arguments],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


def _assert_clean(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert not any(line.lstrip("│ ").startswith(FORGED) for line in text.splitlines())


def test_replay_tables_and_errors_escape_names_from_input(tmp_path: Path) -> None:
    _hostile_transcript(tmp_path)
    done = _run("replay", str(tmp_path))
    assert done.returncode == 1  # the input errors
    for channel in (done.stdout, done.stderr):
        _assert_clean(channel)
    assert "s\\x1b[31mred\\notelguard replay: forged" in done.stdout  # shown, escaped


def test_openmetrics_names_untimed_sessions_escaped(tmp_path: Path) -> None:
    _hostile_transcript(tmp_path, timestamps=False)
    done = _run("replay", str(tmp_path), "--openmetrics", str(tmp_path / "out.om"))
    assert "without timestamps" in done.stderr
    for channel in (done.stdout, done.stderr):
        _assert_clean(channel)


def test_a_file_name_in_a_usage_error_is_escaped(tmp_path: Path) -> None:
    done = _run("replay", str(tmp_path / f"missing\x1b[2J\n{FORGED}.jsonl"))
    assert done.returncode == 2
    _assert_clean(done.stderr)


@given(st.text())
def test_printable_leaves_no_character_that_acts_on_a_terminal(text: str) -> None:
    shown = printable(text)
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in shown)
    assert "\u2028" not in shown and "\u202e" not in shown
    if text.isprintable() and "\u2028" not in text:
        assert shown == text
