"""`otelguard replay` on hand-written transcripts: the report's numbers per format and scenario."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from otelguard.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "replay"
UNATTENDED = FIXTURES / "unattended.yaml"  # hard stops on, caps web_search 5 / subagents 3 per turn
EXAMPLES = Path(__file__).parent.parent / "otelguard" / "data" / "examples"


def replay_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code = main(["replay", *argv, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def halts(session: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(h["turn"], h["call"], h["call_id"], h["tool"], h["action"], h["code"]) for h in session["halts"]]


# (fixture, turns, tool_calls, decisions, halts, prevented)
SCENARIOS = [
    ("openai/healthy.jsonl", 2, 4, {}, [], 0),
    ("anthropic/healthy.jsonl", 2, 3, {}, [], 0),
    ("claude-code/healthy.jsonl", 2, 4, {}, [], 0),
    # a failing command retried unchanged: warns from the 2nd failure, the 6th to 12th runs are
    # rejected, and the 13th, the same again, stops the turn (all eight are prevented)
    (
        "openai/retry_failing_command.jsonl",
        1,
        13,
        {"exact_failure_warn": 4, "exact_failure_reject": 7, "exact_failure_block": 1},
        [(1, 13, "call_13", "terminal", "block", "exact_failure_block")],
        8,
    ),
    (
        "anthropic/retry_failing_command.json",
        1,
        13,
        {"exact_failure_warn": 4, "exact_failure_reject": 7, "exact_failure_block": 1},
        [(1, 13, "toolu_13", "terminal", "block", "exact_failure_block")],
        8,
    ),
    (
        "claude-code/retry_failing_command.jsonl",
        1,
        13,
        {"exact_failure_warn": 4, "exact_failure_reject": 7, "exact_failure_block": 1},
        [(1, 13, "toolu_13", "Bash", "block", "exact_failure_block")],
        8,
    ),
    # a runaway web-search turn: the 6th search exceeds the turn cap of 5
    (
        "openai/runaway_search.jsonl",
        1,
        7,
        {"cap_turn": 1},
        [(1, 6, "call_6", "web_search", "block", "cap_turn")],
        2,
    ),
    (
        "anthropic/runaway_search.jsonl",
        1,
        7,
        {"cap_turn": 1},
        [(1, 6, "srvtoolu_06", "web_search", "block", "cap_turn")],
        2,
    ),
    (
        "claude-code/runaway_search.jsonl",
        1,
        7,
        {"cap_turn": 1},
        [(1, 6, "toolu_06", "WebSearch", "block", "cap_turn")],
        2,
    ),
    # a delegation storm: batches of 2+1 subagents fill the cap of 3, the next batch of 2 is refused
    (
        "openai/delegation_storm.jsonl",
        1,
        4,
        {"cap_turn": 1},
        [(1, 3, "call_3", "delegate_task", "block", "cap_turn")],
        2,
    ),
    (
        "anthropic/delegation_storm.jsonl",
        1,
        5,
        {"cap_turn": 1},
        [(1, 4, "toolu_04", "spawn_agent", "block", "cap_turn")],
        2,
    ),
    # a read loop: the same read returns the same content; warns from the 2nd, rejects the 6th to 12th
    # and stops at the 13th
    (
        "openai/read_loop.jsonl",
        1,
        13,
        {"no_progress_warn": 4, "no_progress_reject": 7, "no_progress_block": 1},
        [(1, 13, "call_13", "read_file", "block", "no_progress_block")],
        8,
    ),
    (
        "anthropic/read_loop.jsonl",
        1,
        13,
        {"no_progress_warn": 4, "no_progress_reject": 7, "no_progress_block": 1},
        [(1, 13, "toolu_13", "read_file", "block", "no_progress_block")],
        8,
    ),
    (
        "claude-code/read_loop.jsonl",
        1,
        13,
        {"no_progress_warn": 4, "no_progress_reject": 7, "no_progress_block": 1},
        [(1, 13, "toolu_13", "Read", "block", "no_progress_block")],
        8,
    ),
    # a denial-like failure streak: free "permission denied" text is a failure (refusal is never
    # guessed from result text), so the content-blind counter warns from 3 and halts at 8, as
    # hermes-agent does; one tool repeating one error is not same_error, which needs two tools. The
    # halt came from after_call, so only the ninth call is prevented. Claude Code's own fixed denial
    # text is different: it is a host-made result (docs/claude-code-results.md), so that transcript
    # replays as refusals (permission_denied), warned from 2 and halted at 6.
    (
        "openai/denial_streak.jsonl",
        1,
        9,
        {"same_tool_failure_warn": 5, "same_tool_failure_halt": 1},
        [(1, 8, None, "write_file", "halt", "same_tool_failure_halt")],
        1,
    ),
    (
        "anthropic/denial_streak.jsonl",
        1,
        9,
        {"same_tool_failure_warn": 5, "same_tool_failure_halt": 1},
        [(1, 8, "toolu_08", "write_file", "halt", "same_tool_failure_halt")],
        1,
    ),
    (
        "claude-code/denial_streak.jsonl",
        1,
        9,
        {"refusal_warn": 4, "refusal_halt": 1},
        [(1, 6, "toolu_06", "Write", "halt", "refusal_halt")],
        3,
    ),
]


@pytest.mark.parametrize(
    ("fixture", "turns", "tool_calls", "decisions", "halt_list", "prevented"),
    SCENARIOS,
    ids=[s[0] for s in SCENARIOS],
)
def test_scenario_numbers(
    capsys: pytest.CaptureFixture[str],
    fixture: str,
    turns: int,
    tool_calls: int,
    decisions: dict[str, int],
    halt_list: list[tuple[Any, ...]],
    prevented: int,
) -> None:
    """Each fixture replays to exactly the decisions, halts and prevented calls the detectors imply."""
    code, doc = replay_json(capsys, str(FIXTURES / fixture), "--config", str(UNATTENDED))
    assert code == 0
    assert doc["errors"] == []
    expected_format = fixture.split("/")[0]
    assert [(i["format"], i["sessions"], i["errors"]) for i in doc["inputs"]] == [(expected_format, 1, 0)]
    [session] = doc["sessions"]
    assert (session["turns"], session["tool_calls"]) == (turns, tool_calls)
    assert session["decisions"] == decisions
    assert halts(session) == halt_list
    assert session["prevented_calls"] == prevented
    totals = doc["totals"]
    assert totals["halts"] == len(halt_list)
    assert totals["prevented_calls"] == prevented
    assert totals["decisions"] == decisions


def test_claude_code_delegation_storm_with_sidechains(capsys: pytest.CaptureFixture[str]) -> None:
    """Five parallel Task calls: the 4th exceeds the cap of 3; each subagent's sidechain is its own session."""
    code, doc = replay_json(
        capsys, str(FIXTURES / "claude-code/delegation_storm.jsonl"), "--config", str(UNATTENDED)
    )
    assert code == 0
    main_session, *sidechains = doc["sessions"]
    assert main_session["session_id"] == "4e0b3f5d-storm"
    assert (main_session["turns"], main_session["tool_calls"]) == (1, 5)
    assert halts(main_session) == [(1, 4, "toolu_04", "Task", "block", "cap_turn")]
    assert main_session["prevented_calls"] == 2  # the refused 4th call and the 5th
    assert main_session["cap_hits"] == {"subagents": 1}
    assert [s["session_id"] for s in sidechains] == ["4e0b3f5d-storm:4e0b-0007", "4e0b3f5d-storm:4e0b-0011"]
    assert all((s["turns"], s["tool_calls"], s["decisions"]) == (1, 1, {}) for s in sidechains)
    assert doc["inputs"][0]["sessions"] == 3


def test_default_config_is_interactive_so_loops_only_warn(capsys: pytest.CaptureFixture[str]) -> None:
    """Without --config the loop detectors warn but never stop (interactive mode); caps still apply."""
    code, doc = replay_json(capsys, str(FIXTURES / "claude-code/retry_failing_command.jsonl"))
    assert code == 0
    [session] = doc["sessions"]
    assert session["halts"] == [] and session["prevented_calls"] == 0
    assert session["decisions"]["exact_failure_warn"] == 12  # the 2nd to 13th failures


def test_directory_is_searched_recursively(capsys: pytest.CaptureFixture[str]) -> None:
    """A directory argument replays every *.jsonl/*.json below it, each file detected on its own."""
    code, doc = replay_json(capsys, str(FIXTURES), "--config", str(UNATTENDED))
    assert code == 0
    assert len(doc["inputs"]) == 18
    assert {i["format"] for i in doc["inputs"]} == {"openai", "anthropic", "claude-code"}
    totals = doc["totals"]
    assert totals["sessions"] == 20  # 18 files, plus two sidechains
    assert totals["halts"] == 15
    # 6 loop turns refused their 6th to 13th calls at before_call (eight each), 6 cap turns refused a
    # call (it and the call after it), one halted from after_call at its 6th call (the three calls
    # after it) and two at their 8th (the call after it): 48 + 12 + 3 + 2
    assert totals["prevented_calls"] == 65


def test_bundled_example(capsys: pytest.CaptureFixture[str]) -> None:
    """The shipped Claude Code example: turn 2's 51st web search hits the default cap of 50; it and the
    4 calls after it never run."""
    code, doc = replay_json(capsys, str(EXAMPLES / "claude-code-runaway-search.jsonl"))
    assert code == 0
    [session] = doc["sessions"]
    assert (session["turns"], session["tool_calls"]) == (2, 61)
    assert [(h["turn"], h["call"], h["tool"], h["code"]) for h in session["halts"]] == [
        (2, 51, "WebSearch", "cap_turn")
    ]
    assert session["prevented_calls"] == 5
    assert session["decisions"] == {"cap_turn": 1, "exact_failure_warn": 2, "read_only_streak_warn": 11}


def test_human_report_lists_halts_and_totals(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["replay", str(FIXTURES / "openai/runaway_search.jsonl"), "--config", str(UNATTENDED)])
    out = capsys.readouterr().out
    assert code == 0
    assert "would-be halts" in out and "cap_turn" in out and "web_search" in out
    # the refused 6th search and the 7th call after it
    assert "would-be halts: 1, calls that would not have run: 2" in " ".join(out.split())


def test_forced_format_reads_the_file_as_that_format(capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = replay_json(capsys, str(FIXTURES / "anthropic/healthy.jsonl"), "--format", "anthropic")
    assert code == 0 and doc["inputs"][0]["format"] == "anthropic"
    code, doc = replay_json(capsys, str(FIXTURES / "claude-code/healthy.jsonl"), "--format", "openai")
    assert code == 1  # Claude Code events are not chat messages: every line is an input error
    assert doc["totals"]["tool_calls"] == 0
    assert all("expected a chat message" in e["reason"] for e in doc["errors"])


def test_readme_example_output_is_the_real_output(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The output pasted in the docs' replay section is what the command prints today."""
    command = "$ otelguard replay otelguard/data/examples/claude-code-runaway-search.jsonl\n"
    root = Path(__file__).parent.parent
    documents = [root / "README.md", root / "docs" / "replay.md"]
    pasted = [p.read_text() for p in documents if command in p.read_text()]
    assert pasted, "the docs no longer show `otelguard replay` on the bundled example"
    monkeypatch.setenv("COLUMNS", "110")
    monkeypatch.chdir(root)
    assert main(["replay", "otelguard/data/examples/claude-code-runaway-search.jsonl"]) == 0
    actual = "\n".join(line.rstrip() for line in capsys.readouterr().out.strip().splitlines())
    for text in pasted:
        block = text.split(command, 1)[1].split("\n```", 1)[0]
        assert block.strip() == actual
