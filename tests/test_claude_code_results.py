"""Claude Code's own fixed tool results: cancelled calls and refusals, by whole-content match only.

The texts are Claude Code's exact templates (docs/claude-code-results.md lists where each was seen).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from otelguard.cli import main
from otelguard.readers.claude_code_results import HostResult, host_result
from otelguard.replay import SessionKey, ToolCall, replay_inputs

STOP = "STOP what you are doing and wait for the user to tell you how to proceed."
NOT_WRITTEN = (
    "The tool use was rejected (eg. if it was a file edit, the new_string was NOT written to the file)."
)
REJECTED = f"The user doesn't want to proceed with this tool use. {NOT_WRITTEN} {STOP}"
SUBAGENT_REJECTED = (
    f"Permission for this tool use was denied. {NOT_WRITTEN} Try a different approach or report the "
    "limitation to complete your task."
)
CANCELLED = f"The user doesn't want to take this action right now. {STOP}"
GUIDANCE = (
    "IMPORTANT: You *may* attempt to accomplish this action using other tools that might naturally be "
    "used to accomplish this goal, e.g. using head instead of cat. But you *should not* attempt to work "
    "around this denial in malicious ways, e.g. do not use your ability to run tests to execute non-test "
    "actions. You should only try to work around this restriction in reasonable ways that do not attempt "
    "to bypass the intent behind this denial. If you believe this capability is essential to complete "
    "your request, STOP and explain to the user what you were trying to do and why you need this "
    "permission. Let the user decide how to proceed."
)
DONT_ASK = "Permission to use Bash has been denied because Claude Code is running in don't ask mode."

MAPPED = [
    ("<tool_use_error>Sibling tool call errored</tool_use_error>", HostResult(cancelled=True)),
    ("Sibling tool call errored", HostResult(cancelled=True)),
    ("[Request interrupted by user for tool use]", HostResult(cancelled=True)),
    (CANCELLED, HostResult(cancelled=True)),
    ("Streaming fallback - tool execution discarded", HostResult(cancelled=True)),
    (
        '<tool_use_error>Cancelled: parallel tool call Bash(echo "=== plans dir ===" && ls -la docs/plans/ | '
        'grep -i "(x)") errored</tool_use_error>',
        HostResult(cancelled=True),
    ),
    ("Cancelled: parallel tool call Read(/src/app.py) errored", HostResult(cancelled=True)),
    (REJECTED, HostResult(refusal="user_rejected")),
    (SUBAGENT_REJECTED, HostResult(refusal="user_rejected")),
    (DONT_ASK, HostResult(refusal="permission_denied")),
    (f"{DONT_ASK} {GUIDANCE}", HostResult(refusal="permission_denied")),
    (
        "Permission to use mcp__github__create_issue has been denied because Claude Code is running in "
        "don't ask mode.",
        HostResult(refusal="permission_denied"),
    ),
    (f"Permission to use Write has been denied. {GUIDANCE}", HostResult(refusal="permission_denied")),
    ("Hook PreToolUse:Bash denied this tool", HostResult(refusal="hook_denied")),
    (
        "<tool_use_error>Hook PreToolUse:mcp__db__query denied this tool</tool_use_error>",
        HostResult(refusal="hook_denied"),
    ),
    ("  \n<tool_use_error>Sibling tool call errored</tool_use_error>\n", HostResult(cancelled=True)),
]


@pytest.mark.parametrize(("text", "meaning"), MAPPED)
def test_a_whole_template_is_mapped(text: str, meaning: HostResult) -> None:
    assert host_result(text) == meaning


NEAR_MISSES = [
    # a tool's own output quoting a template is tool output
    "Error: Sibling tool call errored while reading the log",
    "     1→<tool_use_error>Sibling tool call errored</tool_use_error>",
    '{"content": "<tool_use_error>Sibling tool call errored</tool_use_error>"}',
    f"{REJECTED}\nand more",
    # the user's own words after the rejection: a template plus free text is not a template
    f"The user doesn't want to proceed with this tool use. {NOT_WRITTEN} To tell you how to proceed, the "
    "user said:\nuse the staging database",
    "[Request interrupted by user]",
    "Cancelled: parallel tool call Bash(ls) errored, retry it",
    "Cancelled by the user",
    "sibling tool call errored",
    "Sibling tool call errored.",
    "<tool_use_error>File does not exist.</tool_use_error>",
    "<tool_use_error>File has not been read yet. Read it first before writing to it.</tool_use_error>",
    "Permission to use Bash has been denied because Claude Code is running in don't ask mode. Sorry.",
    "Permission to use Bash with spaces has been denied because Claude Code is running in don't ask mode.",
    "Hook PreToolUse:Bash denied this tool: rm -rf is blocked by policy",
    "PreToolUse:Bash hook denied this tool",
    "bash: /etc/shadow: Permission denied",
    "<tool_use_error></tool_use_error>",
    "",
]


@pytest.mark.parametrize("text", NEAR_MISSES)
def test_a_near_miss_is_tool_output(text: str) -> None:
    assert host_result(text) is None


@pytest.mark.parametrize(
    "value", [None, 3, ["Sibling tool call errored"], {"text": "Sibling tool call errored"}]
)
def test_anything_but_a_string_is_tool_output(value: Any) -> None:
    assert host_result(value) is None


def test_a_long_result_is_not_scanned() -> None:
    assert host_result("Sibling tool call errored" + " " * 5000) is None


@given(st.text(max_size=300))
def test_host_result_never_raises(text: str) -> None:
    result = host_result(text)
    assert result is None or result.cancelled or result.refusal is not None


# --- the reader -----------------------------------------------------------------------------------


class Calls:
    def __init__(self) -> None:
        self.calls: list[ToolCall] = []
        self.errors: list[str] = []

    def describe_input(self, path: str, fmt: str) -> None: ...

    def begin_session(self, key: SessionKey) -> None: ...

    def start_turn(self, key: SessionKey, time: float | None = None) -> None: ...

    def end_session(self, key: SessionKey) -> None: ...

    def tool_call(self, key: SessionKey, call: ToolCall) -> None:
        self.calls.append(call)

    def error(self, path: str, line: int | None, reason: str) -> None:
        self.errors.append(reason)


def transcript(
    calls: list[tuple[str, dict[str, Any], Any, bool]], prompt: str = "go"
) -> list[dict[str, Any]]:
    """Claude Code lines: a prompt, then each call and its result (``content`` as written)."""
    lines: list[dict[str, Any]] = [
        {"type": "user", "sessionId": "s1", "uuid": "u0", "message": {"role": "user", "content": prompt}}
    ]
    for n, (name, args, content, is_error) in enumerate(calls):
        use = {"type": "tool_use", "id": f"toolu_{n:02d}", "name": name, "input": args}
        result = {
            "type": "tool_result",
            "tool_use_id": f"toolu_{n:02d}",
            "content": content,
            "is_error": is_error,
        }
        lines.append(
            {
                "type": "assistant",
                "sessionId": "s1",
                "uuid": f"a{n}",
                "message": {"id": f"m{n}", "role": "assistant", "content": [use]},
            }
        )
        lines.append(
            {
                "type": "user",
                "sessionId": "s1",
                "uuid": f"r{n}",
                "message": {"role": "user", "content": [result]},
            }
        )
    return lines


def write(tmp_path: Path, lines: list[dict[str, Any]], name: str = "session.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def read(path: Path) -> Calls:
    sink = Calls()
    replay_inputs([str(path)], "auto", sink)
    return sink


def test_reader_marks_host_results(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        transcript(
            [
                ("Read", {"file_path": "/a"}, "<tool_use_error>File does not exist.</tool_use_error>", True),
                (
                    "Read",
                    {"file_path": "/b"},
                    "<tool_use_error>Sibling tool call errored</tool_use_error>",
                    True,
                ),
                (
                    "Bash",
                    {"command": "sleep 99"},
                    [{"type": "text", "text": "[Request interrupted by user for tool use]"}],
                    True,
                ),
                ("Write", {"file_path": "/c"}, REJECTED, True),
                ("Bash", {"command": "rm x"}, DONT_ASK, True),
                ("Bash", {"command": "git push -f"}, "Hook PreToolUse:Bash denied this tool", True),
                ("Grep", {"pattern": "x"}, "Sibling tool call errored in my notes", False),
            ]
        ),
    )
    sink = read(path)
    assert sink.errors == []
    assert [(c.tool_name, c.cancelled, c.refusal, c.failed) for c in sink.calls] == [
        ("Read", False, None, True),
        ("Read", True, None, True),
        ("Bash", True, None, True),
        ("Write", False, "user_rejected", True),
        ("Bash", False, "permission_denied", True),
        ("Bash", False, "hook_denied", True),
        ("Grep", False, None, False),
    ]


# --- loops seen in the wild that no public transcript here shows: hand-written -------------------

NOT_READ = "<tool_use_error>File has not been read yet. Read it first before writing to it.</tool_use_error>"


@pytest.fixture
def unattended(tmp_path: Path) -> Path:
    path = tmp_path / "unattended.yaml"
    path.write_text("mode: unattended\nsignature_key: host-results\n")
    return path


def replay(path: Path, config: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    main(["replay", str(path), "--config", str(config), "--json"])
    document: dict[str, Any] = json.loads(capsys.readouterr().out)
    return document


def test_edits_on_unread_files_are_stopped_by_same_error(
    tmp_path: Path, unattended: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Edit, MultiEdit and Write on files never read, thirteen times the same error."""
    tools = ["Edit", "MultiEdit", "Write"]
    calls = [
        (tools[n % 3], {"file_path": f"/src/f{n}.py", "content": str(n)}, NOT_READ, True) for n in range(13)
    ]
    document = replay(write(tmp_path, transcript(calls)), unattended, capsys)
    session = document["sessions"][0]
    assert session["decisions"]["same_error_warn"] >= 1
    assert [(h["call"], h["code"]) for h in session["halts"]] == [(6, "same_error_halt")]


def test_a_build_retried_with_new_descriptions_is_one_failing_call(
    tmp_path: Path, unattended: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    failure = "Exit code 1\nnpm ERR! Missing script: build"
    calls = [
        ("Bash", {"command": "npm run build", "description": text}, failure, True)
        for text in ("Build the project", "Run the build", "Try building again", "Build once more")
    ]
    session = replay(write(tmp_path, transcript(calls)), unattended, capsys)["sessions"][0]
    assert session["decisions"].get("exact_failure_warn") == 3
    assert session["halts"] == []


def test_a_batch_cancelled_after_one_failure_is_flagged_call_by_call(tmp_path: Path) -> None:
    """The reader's side of the cancelled outcome; the core's verdict on it is checked on a real
    subagent in test_real_transcripts."""
    calls = [
        ("Read", {"file_path": "/missing"}, "<tool_use_error>File does not exist.</tool_use_error>", True)
    ]
    calls += [
        ("Read", {"file_path": f"/f{n}"}, "<tool_use_error>Sibling tool call errored</tool_use_error>", True)
        for n in range(7)
    ]
    sink = read(write(tmp_path, transcript(calls)))
    assert [c.cancelled for c in sink.calls] == [False] + [True] * 7


def test_anthropic_request_bodies_from_claude_code_get_the_same_mapping(tmp_path: Path) -> None:
    body = {
        "model": "claude-sonnet-4-5",
        "messages": [
            {"role": "user", "content": "read both"},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "toolu_a", "name": "Read", "input": {"file_path": "/a"}},
                    {"type": "tool_use", "id": "toolu_b", "name": "Read", "input": {"file_path": "/b"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_a",
                        "is_error": True,
                        "content": "File does not exist.",
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_b",
                        "is_error": True,
                        "content": [
                            {
                                "type": "text",
                                "text": "<tool_use_error>Sibling tool call errored</tool_use_error>",
                            }
                        ],
                    },
                ],
            },
        ],
    }
    path = tmp_path / "body.json"
    path.write_text(json.dumps(body, indent=2))
    sink = read(path)
    assert [(c.call_id, c.cancelled, c.failed) for c in sink.calls] == [
        ("toolu_a", False, True),
        ("toolu_b", True, True),
    ]
