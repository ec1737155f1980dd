"""Replay's prevented_calls: the calls that would not have run.

A call refused at before_call (block, or a cap's reject) counts itself; after a turn's first
block/halt every later call of that turn counts; a halt from after_call came after its call ran, so
that call does not. The human table's "calls that would not have run" is the same number.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from otelguard import GuardConfig
from otelguard.cli import main
from otelguard.readers.events import SessionKey, ToolCall
from otelguard.replay.report import ReplayReport
from otelguard.replay.runner import ReplayRunner
from tests.test_detectors import KEY

SESSION = SessionKey("transcript.jsonl", "s1")


def call(n: int, tool: str, args: Any, result: str = "ok", failed: bool = False) -> ToolCall:
    return ToolCall(f"c{n}", tool, args, n, result, failed, True)


def searches(count: int) -> list[ToolCall]:
    return [call(i, "web_search", {"q": f"query {i}"}) for i in range(count)]


def replay(turns: list[list[ToolCall]], **config: Any) -> ReplayReport:
    runner = ReplayRunner(GuardConfig.from_mapping({"signature_key": KEY, "mode": "unattended", **config}))
    runner.begin_session(SESSION)
    for calls in turns:
        runner.start_turn(SESSION)
        for tool_call in calls:
            runner.tool_call(SESSION, tool_call)
    runner.end_session(SESSION)
    return runner.finish()


def prevented(report: ReplayReport) -> int:
    [session] = report.sessions
    return session.prevented_calls


def test_a_block_counts_itself_and_every_later_call_of_its_turn() -> None:
    """Turn cap 3: the 4th search is refused (block); it and the 2 after it would not have run."""
    report = replay([searches(6)], caps={"turn": {"web_search": 3}})
    assert prevented(report) == 3
    assert report.to_json()["totals"]["prevented_calls"] == 3


def test_a_halt_from_after_call_does_not_count_its_own_call() -> None:
    """A same_tool_failure halt at the 8th failure (the same error each time): that call ran; only
    the 2 after it are prevented."""
    failing = [call(i, "web_fetch", {"url": f"u{i}"}, "Error: 503", failed=True) for i in range(10)]
    report = replay([failing])
    [session] = report.sessions
    assert [(h.call, h.action, h.code) for h in session.halts] == [(8, "halt", "same_tool_failure_halt")]
    assert prevented(report) == 2


def test_a_reject_counts_only_itself_and_the_turn_goes_on() -> None:
    """caps.on_hit reject: each refused call is prevented, the calls after it still run."""
    report = replay([searches(6)], caps={"on_hit": "reject", "turn": {"web_search": 3}})
    [session] = report.sessions
    assert session.halts == []
    assert session.decisions == {"cap_turn": 3}
    assert prevented(report) == 3


def test_the_next_turn_runs_again() -> None:
    """Prevention ends with the turn: a new user message starts fresh."""
    report = replay([searches(5), searches(2)], caps={"turn": {"web_search": 3}})
    assert prevented(report) == 2


def test_a_before_call_block_that_is_the_last_call_counts_one() -> None:
    """A block on the turn's last call: that one call would not have run."""
    report = replay([searches(4)], caps={"turn": {"web_search": 3}})
    assert prevented(report) == 1


def test_the_human_table_shows_the_same_number(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`otelguard replay` without --json says "calls that would not have run" with the same count."""
    lines = [{"role": "user", "content": "search"}]
    for i in range(6):
        arguments = json.dumps({"query": f"query {i}"})
        lines.append(
            {
                "role": "assistant",
                "content": None,
                "function_call": {"name": "web_search", "arguments": arguments},
            }
        )
        lines.append({"role": "function", "name": "web_search", "content": f"results {i}"})
    transcript = tmp_path / "searches.jsonl"
    transcript.write_text("".join(json.dumps(line) + "\n" for line in lines))
    config = tmp_path / "config.yaml"
    config.write_text("mode: unattended\ncaps: {turn: {web_search: 3}}\n")
    assert main(["replay", str(transcript), "--config", str(config), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["totals"]["prevented_calls"] == 3
    assert main(["replay", str(transcript), "--config", str(config)]) == 0
    assert "calls that would not have run: 3" in " ".join(capsys.readouterr().out.split())
