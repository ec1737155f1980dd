"""Replay feeds the model's replies to the guard's model hooks: the model's decisions count in a
session's ``decisions``, a model stop is a halt of tool ``model``, and the JSON, text and HTML
reports show them without a word of what the model said."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from otelguard import GuardConfig
from otelguard.cli import main
from otelguard.replay import ReplayRunner, replay_inputs

REPLY_CANARY = "CANARY-REPLY-7f3a9c"
FORMAT_ERROR = "Please always provide EXACTLY ONE action in triple backticks."
CONFIG = "mode: unattended\nwarn_after:\n  no_action: 2\nhard_stop_after:\n  no_action: 3\n"
SETTINGS = {"mode": "unattended", "warn_after": {"no_action": 2}, "hard_stop_after": {"no_action": 3}}


def stuck_run(path: Path) -> Path:
    """A mini-swe-agent run whose model stops writing actions: every reply is answered with the
    harness's format error, then one more command is sent (it would never have run)."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Fix the bug."},
        {"role": "assistant", "content": "```bash\nls\n```"},
        {"role": "user", "content": "<returncode>0</returncode>\n<output>\na\n</output>"},
    ]
    for index in range(5):
        thought = (
            "alpha beta gamma",
            "one two three four",
            "the quick brown fox",
            "lorem ipsum dolor",
            "x y z",
        )[index]
        messages.append({"role": "assistant", "content": f"{REPLY_CANARY} {thought}: I will think more."})
        messages.append({"role": "user", "content": FORMAT_ERROR})
    messages.append({"role": "assistant", "content": "```bash\npwd\n```"})
    messages.append({"role": "user", "content": "<returncode>0</returncode>\n<output>\n/\n</output>"})
    path.write_text(json.dumps({"messages": messages}))
    return path


def config(tmp_path: Path) -> Path:
    path = tmp_path / "guard.yaml"
    path.write_text(CONFIG)
    return path


def test_the_runner_counts_model_decisions_and_a_model_stop_as_a_halt(tmp_path: Path) -> None:
    transcript = stuck_run(tmp_path / "run.traj.json")
    runner = ReplayRunner(GuardConfig.from_mapping(SETTINGS))
    replay_inputs([str(transcript)], "auto", runner)
    report = runner.finish()
    (session,) = report.sessions
    assert session.model_replies == 7
    assert session.decisions["no_action_warn"] >= 1
    assert session.decisions["no_action_halt"] == 1
    assert session.model_decisions["no_action_halt"] == 1
    (halt,) = session.halts
    assert (halt.tool_name, halt.code, halt.turn, halt.call, halt.call_id) == (
        "model",
        "no_action_halt",
        1,
        1,
        None,
    )
    # after the stop no reply would have been asked for and no call made
    assert session.prevented_calls == 1
    assert session.prevented_replies >= 1
    assert session.tool_calls == 2


def test_the_reports_show_model_decisions_and_never_what_the_model_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    transcript = str(stuck_run(tmp_path / "run.traj.json"))
    guard_config = str(config(tmp_path))
    page = tmp_path / "report.html"
    assert main(["replay", transcript, "--config", guard_config, "--json", "--html", str(page)]) == 0
    out = capsys.readouterr().out
    doc = json.loads(out)
    (session,) = doc["sessions"]
    assert session["decisions"]["no_action_halt"] == 1
    assert session["model"]["replies"] == 7
    assert session["model"]["decisions"]["no_action_halt"] == 1
    assert [(h["tool"], h["code"]) for h in session["halts"]] == [("model", "no_action_halt")]
    assert doc["totals"]["model"]["replies"] == 7
    html = page.read_text()
    assert 'data-total="model_replies"' in html
    assert "no_action_halt" in html
    # the stop is a mark of its own on the session's timeline, after the turn's one call; the calls
    # keep their numbers (the JSON's session_call)
    assert "model reply after session call 1 · turn 1 · model · no_action_halt</title>" in html
    assert "session call 2 · turn 1, call 2 · bash · prevented</title>" in html
    assert main(["replay", transcript, "--config", guard_config]) == 0
    text = capsys.readouterr().out
    assert "model replies: 7" in text
    assert "no_action_halt" in text
    for shown in (out, html, text):
        assert REPLY_CANARY not in shown
        assert "think more" not in shown


def test_a_transcript_of_replies_alone_is_replayed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chat = tmp_path / "chat.jsonl"
    chat.write_text(
        "".join(
            json.dumps(line) + "\n"
            for line in (
                {"role": "user", "content": "hello"},
                {"role": "assistant", "content": f"{REPLY_CANARY} hi", "usage": {"prompt_tokens": 5}},
            )
        )
    )
    assert main(["replay", str(chat), "--json"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out)["totals"]["model"] == {"replies": 1, "prevented": 0, "decisions": {}}
    assert REPLY_CANARY not in out


def test_sources_without_replies_report_as_before(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A format that records no reply (tool results alone) leaves the report's shape unchanged."""
    calls = tmp_path / "calls.jsonl"
    calls.write_text(
        json.dumps({"role": "user", "content": "go"})
        + "\n"
        + json.dumps({"role": "tool", "tool_call_id": "x", "content": "orphan"})
        + "\n"
    )
    main(["replay", str(calls), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert "model" not in doc["totals"]
    assert all("model" not in session for session in doc["sessions"])
