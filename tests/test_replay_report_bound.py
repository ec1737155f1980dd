"""The replay report keeps per-session detail for a bounded number of sessions (those that halted
or warned most first) and counts every session in the totals: memory does not grow with sessions."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from otelguard import GuardConfig
from otelguard.cli import main
from otelguard.replay import ReplayRunner, replay_inputs
from otelguard.replay.report import ReplayReport, SessionReport

FIXTURES = Path(__file__).parent / "fixtures" / "replay"


def _conversation(i: int, *, looping: bool) -> dict[str, Any]:
    messages: list[Any] = [{"role": "user", "content": "go"}]
    for c in range(14 if looping else 1):  # a loop: 5 failures, 7 rejects, the block, one call more
        call = {
            "id": f"c{i}-{c}",
            "type": "function",
            "function": {"name": "terminal", "arguments": '{"x": 1}'},
        }
        messages.append({"role": "assistant", "tool_calls": [call]})
        messages.append(
            {"role": "tool", "tool_call_id": f"c{i}-{c}", "content": "Error: no" if looping else "ok"}
        )
    return {"id": f"s{i}", "messages": messages}


def _write(path: Path, sessions: int, looping_every: int) -> None:
    with path.open("w") as f:
        for i in range(sessions):
            f.write(json.dumps(_conversation(i, looping=i % looping_every == 0)) + "\n")


def test_detail_is_bounded_and_halting_sessions_are_kept_first(tmp_path: Path) -> None:
    path = tmp_path / "many.jsonl"
    _write(path, 300, looping_every=50)  # sessions 0, 50, ..., 250 loop and halt
    runner = ReplayRunner(GuardConfig.from_file(FIXTURES / "unattended.yaml"), max_detailed_sessions=20)
    replay_inputs([str(path)], "auto", runner)
    report = runner.finish()
    kept = report.sessions
    assert len(kept) == 20 and report.sessions_omitted == 280
    assert {f"s{i}" for i in range(0, 300, 50)} <= {s.session_id for s in kept}
    assert [s.seq for s in kept] == sorted(s.seq for s in kept)
    totals = report.totals()
    assert totals["sessions"] == 300 and totals["halts"] == 6
    assert totals["tool_calls"] == 294 + 6 * 14
    doc = report.to_json()
    assert doc["sessions_omitted"] == 280 and len(doc["sessions"]) == 20


def test_report_memory_does_not_grow_with_sessions() -> None:
    def retained(sessions: int) -> int:
        tracemalloc.start()
        report = ReplayReport(max_detailed_sessions=100)
        for i in range(sessions):
            session = SessionReport(session_id=f"session-{i:08}", path="p", seq=i, turns=1, tool_calls=3)
            session.decisions["exact_failure_warn"] = i % 3
            report.add_session(session)
        current, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert report.totals()["sessions"] == sessions
        return current

    small, large = retained(1_000), retained(20_000)
    assert large < small * 1.5


def test_cli_detail_sessions_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "many.jsonl"
    _write(path, 30, looping_every=10)
    assert main(["replay", str(path), "--json", "--detail-sessions", "5"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["sessions"]) == 5 and doc["sessions_omitted"] == 25 and doc["totals"]["sessions"] == 30
