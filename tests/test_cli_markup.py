"""Everything that came from input is printed as literal text: rich markup in a tool name, session id,
call id, path or config value is shown as written, never interpreted and never a crash."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from otelguard.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "replay"

HOSTILE_TOOL = "[/bold]"
HOSTILE_SESSION = "[/]"
HOSTILE_CALL_ID = "[link=https://evil.invalid]x[/link]"


def _looping_claude_transcript(path: Path, *, session: str, tool: str, call_prefix: str) -> None:
    records: list[Any] = [
        {"type": "user", "sessionId": session, "message": {"role": "user", "content": "go"}}
    ]
    for i in range(13):  # 5 failures, 7 rejects (the default), then the would-be halt
        use = {"type": "tool_use", "id": f"{call_prefix}{i}", "name": tool, "input": {"q": "same"}}
        records.append(
            {
                "type": "assistant",
                "sessionId": session,
                "message": {"id": f"m{i}", "role": "assistant", "content": [use]},
            }
        )
        result = {
            "type": "tool_result",
            "tool_use_id": f"{call_prefix}{i}",
            "content": "Error: no",
            "is_error": True,
        }
        records.append(
            {"type": "user", "sessionId": session, "message": {"role": "user", "content": [result]}}
        )
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_replay_tables_print_markup_from_transcripts_literally(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # wide enough that no cell is folded
    transcript = tmp_path / "[bold]run.jsonl"
    _looping_claude_transcript(
        transcript, session=HOSTILE_SESSION, tool=HOSTILE_TOOL, call_prefix=HOSTILE_CALL_ID
    )
    (tmp_path / "bad.jsonl").write_text('{"type": "user", "sessionId": "[/]"\n')
    code = main(["replay", str(tmp_path), "--config", str(FIXTURES / "unattended.yaml")])
    out = capsys.readouterr().out
    assert code == 1  # the malformed line: the report was printed to the end anyway
    assert "would-be halts: 1," in out and "input errors" in out
    assert HOSTILE_TOOL in out
    assert HOSTILE_SESSION in out
    assert "[link=https://evil.invalid]" in out  # shown as text: a rendered link would hide it
    assert "[bold]run.jsonl" in out


def test_check_config_prints_markup_in_values_literally(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    config = tmp_path / "[red]c.yaml"
    config.write_text('tools:\n  read: ["[/]", "[link=https://evil.invalid]x[/link]"]\n')
    assert main(["check-config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "[/]" in out
    assert "[link=https://evil.invalid]x[/link]" in out
    assert "[red]c.yaml" in out
