"""A live session's last call, still running when its transcript ends, is *in progress*: listed in the
JSON document, the text report and the HTML report, never fed to the guard, not an input error (exit
0). Only calls made in the last model message of a transcript that ends there qualify; an unanswered
call followed by more of the conversation is still reported as having no result."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from otelguard.cli import main

SESSION = "0b9a4c1e-live"


def claude_code(*lines: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"sessionId": SESSION, "uuid": f"u{i}", **line} for i, line in enumerate(lines)]


def cc_prompt(text: str) -> dict[str, Any]:
    return {"type": "user", "message": {"role": "user", "content": text}}


def cc_calls(message_id: str, *calls: tuple[str, str]) -> dict[str, Any]:
    content = [{"type": "tool_use", "id": cid, "name": name, "input": {"q": cid}} for cid, name in calls]
    return {"type": "assistant", "message": {"id": message_id, "role": "assistant", "content": content}}


def cc_result(call_id: str) -> dict[str, Any]:
    block = {"type": "tool_result", "tool_use_id": call_id, "content": "ok", "is_error": False}
    return {"type": "user", "message": {"role": "user", "content": [block]}}


LIVE_CLAUDE_CODE = claude_code(
    cc_prompt("find the bug"),
    cc_calls("m1", ("toolu_1", "Grep")),
    cc_result("toolu_1"),
    cc_calls("m2", ("toolu_2", "Read"), ("toolu_3", "Bash")),  # a parallel batch
    cc_result("toolu_2"),  # Bash is still running
)


def openai_call(call_id: str, name: str) -> dict[str, Any]:
    function = {"name": name, "arguments": json.dumps({"q": call_id})}
    return {"role": "assistant", "tool_calls": [{"id": call_id, "type": "function", "function": function}]}


def anthropic_call(call_id: str, name: str) -> dict[str, Any]:
    block = {"type": "tool_use", "id": call_id, "name": name, "input": {"q": call_id}}
    return {"role": "assistant", "content": [block]}


def anthropic_result(call_id: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": "ok"}]}


def openhands_action(event_id: int, call_id: str) -> dict[str, Any]:
    return {
        "id": event_id,
        "source": "agent",
        "action": "run",
        "args": {"command": "make"},
        "tool_call_metadata": {"function_name": "execute_bash", "tool_call_id": call_id},
    }


def swe_agent_call(call_id: str) -> dict[str, Any]:
    function = {"name": "bash", "arguments": "{}"}
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": call_id, "type": "function", "function": function}],
    }


# each: (format, file name, the file's text, the call id still running)
TRAILING: list[tuple[str, str, str, str | None]] = [
    ("claude-code", "live.jsonl", "".join(json.dumps(r) + "\n" for r in LIVE_CLAUDE_CODE), "toolu_3"),
    (
        "openai",
        "chat.jsonl",
        "".join(
            json.dumps(m) + "\n"
            for m in (
                {"role": "user", "content": "go"},
                openai_call("c1", "read_file"),
                {"role": "tool", "tool_call_id": "c1", "content": "ok"},
                openai_call("c2", "terminal"),
            )
        ),
        "c2",
    ),
    (
        "anthropic",
        "messages.jsonl",
        "".join(
            json.dumps(m) + "\n"
            for m in (
                {"role": "user", "content": "go"},
                anthropic_call("t1", "grep"),
                anthropic_result("t1"),
                anthropic_call("t2", "grep"),
            )
        ),
        "t2",
    ),
    (
        "anthropic",
        "request.json",
        json.dumps(
            {"model": "m", "messages": [{"role": "user", "content": "go"}, anthropic_call("t9", "grep")]},
            indent=2,
        ),
        "t9",
    ),
    (
        "openhands",
        "events.jsonl",
        "".join(
            json.dumps(e) + "\n"
            for e in (
                {"id": 0, "source": "user", "action": "message", "args": {"content": "fix it"}},
                openhands_action(1, "oh1"),
            )
        ),
        "oh1",
    ),
    (
        "swe-agent",
        "run.traj",
        json.dumps(
            {
                "history": [
                    {"role": "system", "content": "…"},
                    {"role": "user", "content": "the issue"},
                    swe_agent_call("s1"),
                    {"role": "tool", "content": "ok", "tool_call_ids": ["s1"]},
                    swe_agent_call("s2"),
                ],
                "trajectory": [],
            },
            indent=2,
        ),
        "s2",
    ),
    (
        "mini-swe-agent",
        "run.traj.json",
        json.dumps(
            [
                {
                    "role": "system",
                    "content": "You are a helpful assistant that can interact with a computer.",
                },
                {"role": "user", "content": "Please solve this issue"},
                {"role": "assistant", "content": "```mswea_bash_command\nls\n```"},
                {"role": "user", "content": "<returncode>0</returncode>\n<output>\na\n</output>"},
                {"role": "assistant", "content": "```mswea_bash_command\nmake test\n```"},
            ]
        ),
        None,  # mini-swe-agent calls carry no id
    ),
]


def replay_json(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict[str, Any]]:
    code = main(["replay", str(path), "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(("fmt", "name", "text", "call_id"), TRAILING, ids=[t[1] for t in TRAILING])
def test_every_reader_reports_a_trailing_call_as_in_progress_and_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str, name: str, text: str, call_id: str | None
) -> None:
    path = tmp_path / name
    path.write_text(text)
    code, doc = replay_json(path, capsys)
    assert (code, doc["errors"]) == (0, [])
    assert doc["inputs"][0]["format"] == fmt
    assert doc["totals"]["in_progress"] == 1
    (session,) = doc["sessions"]
    (running,) = session["in_progress"]
    assert running["call_id"] == call_id
    assert running["turn"] == 1 and running["call"] == session["tool_calls"]


def test_a_live_claude_code_session_lists_the_running_call_in_every_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "live.jsonl"
    path.write_text(TRAILING[0][2])
    page = tmp_path / "report.html"
    code, doc = replay_json(path, capsys, "--html", str(page))
    assert code == 0
    assert doc["sessions"][0]["in_progress"] == [
        {"session_call": 3, "turn": 1, "call": 3, "call_id": "toolu_3", "tool": "Bash"}
    ]
    assert doc["sessions"][0]["tool_calls"] == 3
    html = page.read_text()
    assert '<p id="in-progress">1 tool call was still in progress' in html
    assert 'class="m6"' in html  # its mark
    assert main(["replay", str(path)]) == 0
    text = capsys.readouterr().out
    assert "in progress: 1 (still running when the transcript ended; not replayed)" in text


def test_an_unanswered_call_in_the_middle_is_still_an_input_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Followed by another model message, or by the next prompt, a call with no result never had one."""
    lines = claude_code(
        cc_prompt("go"),
        cc_calls("m1", ("toolu_1", "Grep")),  # never answered
        cc_calls("m2", ("toolu_2", "Read")),
        cc_result("toolu_2"),
        cc_prompt("next"),
        cc_calls("m3", ("toolu_3", "Read")),  # never answered, and a prompt follows
        cc_prompt("and now?"),
    )
    path = tmp_path / "middle.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    code, doc = replay_json(path, capsys)
    assert code == 1
    assert doc["totals"]["in_progress"] == 0
    assert [e["reason"] for e in doc["errors"]] == [
        "tool call toolu_1 (Grep) has no result; not replayed",
        "tool call toolu_3 (Read) has no result; not replayed",
    ]


def test_a_conversation_recorded_whole_on_one_line_is_a_finished_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One conversation per line (tau-bench, hermes-agent): each line is written once its run is over,
    so a call it leaves unanswered has no result, on the last line too."""
    first = [{"role": "user", "content": "a"}, openai_call("c1", "read_file")]
    second = [{"role": "user", "content": "b"}, openai_call("c2", "read_file")]
    path = tmp_path / "runs.jsonl"
    path.write_text(
        json.dumps({"id": "one", "messages": first}) + "\n" + json.dumps({"id": "two", "messages": second})
    )
    code, doc = replay_json(path, capsys)
    assert code == 1
    assert doc["totals"]["in_progress"] == 0
    assert [e["reason"] for e in doc["errors"]] == [
        "tool call c1 (read_file) has no result; not replayed",
        "tool call c2 (read_file) has no result; not replayed",
    ]
