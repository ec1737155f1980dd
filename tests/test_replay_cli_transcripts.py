"""Replay of the transcripts the coding-agent CLIs keep themselves: Codex's session rollouts and Gemini
CLI's chats, each recorded from a real guarded run of the pinned CLI against the scripted model (the
same runs as the real-client tests: a failing ``ls`` sent again and again; machine paths rewritten to
``/home/me``).

Each call is read as that CLI's hooks hand it to the guard: Codex's shell calls as ``Bash`` with the
command's own output and no failure flag, Gemini CLI's with its text for the model minus the process
group line and the hooks' appended warnings, failed from ``Exit Code: N``; a call a hook refused is a
refusal, not a failure of the command.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otelguard.cli import main
from otelguard.readers.codex import CODEX, CodexReader
from otelguard.readers.feed import input_ending
from otelguard.readers.gemini_cli import GEMINI_CLI, GeminiCliReader
from otelguard.replay import replay_inputs
from tests.test_replay_new_readers import Sink, read_document, read_lines, read_text

DATA = Path(__file__).parent / "data"
CODEX_STAGNATION = DATA / "codex_rollouts" / "rollout-guarded-stagnation.jsonl"
CODEX_REFUSAL = DATA / "codex_rollouts" / "rollout-guarded-refusal.jsonl"
GEMINI_STOP = DATA / "gemini_cli_chats" / "session-guarded-stop.jsonl"
GEMINI_REFUSALS = DATA / "gemini_cli_chats" / "session-guarded-refusals.jsonl"
CONFIG = Path(__file__).parent / "fixtures" / "replay" / "unattended.yaml"
OUTPUT = "ls: cannot access '/nonexistent-dir': No such file or directory\n"


def read(path: Path) -> Sink:
    sink = Sink()
    replay_inputs([str(path)], "auto", sink)
    return sink


def replay_json(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, Any]:
    code = main(["replay", str(path), "--config", str(CONFIG), "--json", *extra])
    document: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert code == (1 if document["errors"] else 0)
    return document


def halts(document: dict[str, Any]) -> list[tuple[int, int, str]]:
    return [(h["turn"], h["call"], h["code"]) for s in document["sessions"] for h in s["halts"]]


# --- Codex ----------------------------------------------------------------------------------------


def test_a_codex_rollout_is_detected_and_read_as_codex_hooks_hand_each_call() -> None:
    sink = read(CODEX_STAGNATION)
    assert sink.formats == {CODEX_STAGNATION.name: CODEX} and sink.errors == []
    session = "01a24e8a-033a-7e02-91bb-39e1775ada61"  # session_meta's id, not the file's name
    assert sink.events[:2] == [("session", session), ("turn", session)]
    assert [e for e in sink.events if e[0] == "turn"] == [("turn", session)]  # context blocks start none
    assert len(sink.calls) == 24
    assert {(c.tool_name, json.dumps(c.args)) for c in sink.calls} == {
        ("Bash", '{"command": "ls /nonexistent-dir"}')
    }
    ran = [c for c in sink.calls if c.refusal is None]
    refused = [c for c in sink.calls if c.refusal is not None]
    # what ran: the command's output alone (no Chunk ID, wall time or exit line), no failure flag,
    # exactly the PostToolUse tool_response
    assert len(ran) == 13 and all((c.result, c.failed) == (OUTPUT, None) for c in ran)
    # what Codex refused because the hook denied it: a refusal, the call never ran
    assert len(refused) == 11 and {c.refusal for c in refused} == {"hook_denied"}
    assert all(c.result.startswith("Command blocked by PreToolUse hook: ") for c in refused)
    assert all(c.time is not None and c.time > 1.7e9 for c in sink.calls)
    assert [c.call_id for c in sink.calls][:2] == [
        "call_000000000000000000000001",
        "call_000000000000000000000002",
    ]


def test_replay_of_a_guarded_codex_run_halts_where_its_hooks_did(capsys: pytest.CaptureFixture[str]) -> None:
    """The hooks stopped that run at its 22nd call (``stagnation_block``), as the model read it."""
    document = replay_json(CODEX_STAGNATION, capsys)
    assert document["inputs"][0]["format"] == CODEX
    assert halts(document) == [(1, 22, "stagnation_block")]
    assert document["totals"]["prevented_calls"] == 11 and document["totals"]["errors"] == 0
    assert halts(replay_json(CODEX_REFUSAL, capsys)) == []


def test_codex_rollout_records_that_are_not_tool_traffic_are_skipped_and_bad_ones_reported(
    tmp_path: Path,
) -> None:
    records: list[Any] = [
        {"timestamp": "2026-12-07T03:00:00Z", "type": "session_meta", "payload": {"id": "s1"}},
        {"type": "response_item", "payload": {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "<environment_context>\n<cwd>/x</cwd>\n</environment_context>"}]}},
        {"type": "response_item", "payload": {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "fix it"}]}},
        {"type": "response_item", "payload": {"type": "function_call", "name": "exec_command",
                                              "arguments": '{"cmd": "make"}', "call_id": "c1"}},
        {"type": "response_item", "payload": {"type": "function_call_output", "call_id": "c1",
                                              "output": "Chunk ID: a\nWall time: 0.1 seconds\nProcess exited "
                                                        "with code 2\nOriginal token count: 3\nOutput:\nboom\n"}},
        {"type": "response_item", "payload": {"type": "function_call", "name": "update_plan",
                                              "arguments": "{not json", "call_id": "c2"}},
        {"type": "response_item", "payload": {"type": "function_call_output", "call_id": "c2",
                                              "output": {"content": "bad plan", "success": False}}},
        {"type": "turn_context", "payload": {"cwd": "/x"}},
        {"type": "response_item", "payload": "not an object"},
        {"type": "response_item", "payload": {"type": "function_call", "name": 7, "call_id": "c3"}},
        {"type": "response_item", "payload": {"type": "function_call_output", "call_id": None}},
        {"type": "response_item", "payload": {"type": "function_call_output", "call_id": "nobody", "output": "x"}},
        ["not", "a", "record"],
    ]  # fmt: skip
    sink = read_lines(tmp_path, "rollout.jsonl", records)
    assert sink.formats == {"rollout.jsonl": CODEX}
    assert [e for e in sink.events if e[0] == "turn"] == [("turn", "s1")]
    assert sink.summary() == [
        ("c1", "Bash", {"command": "make"}, "boom\n", None, True),
        ("c2", "update_plan", "{not json", "bad plan", True, True),
    ]
    assert [(line, reason.split(" ")[0]) for _, line, reason in sink.errors] == [
        (9, "payload"), (10, "payload:"), (11, "payload.call_id"), (12, "tool"), (13, "expected"),
    ]  # fmt: skip


def test_codex_shell_calls_carry_only_the_command_as_its_hooks_do(tmp_path: Path) -> None:
    """Measured on codex-cli 0.171.0: ``exec_command {"cmd", "workdir", "yield_time_ms"}`` reaches the
    hooks as ``Bash {"command"}``; the older ``shell`` tool's argv is read the same way."""
    records = [
        {"type": "session_meta", "payload": {"id": "s"}},
        {"type": "response_item", "payload": {"type": "function_call", "name": "exec_command", "call_id": "w",
                                              "arguments": '{"cmd": "ls", "workdir": "/tmp", "yield_time_ms": 1}'}},
        {"type": "response_item", "payload": {"type": "function_call_output", "call_id": "w", "output": "x"}},
        {"type": "response_item", "payload": {"type": "function_call", "name": "shell", "call_id": "c",
                                              "arguments": '{"command": ["bash", "-lc", "ls"]}'}},
        {"type": "response_item", "payload": {"type": "function_call_output", "call_id": "c",
                                              "output": "Exit code: 0\nWall time: 0 seconds\nOutput:\na\n"}},
    ]  # fmt: skip
    assert read_lines(tmp_path, "r.jsonl", records).summary() == [
        ("w", "Bash", {"command": "ls"}, "x", None, True),
        ("c", "Bash", {"command": "ls"}, "a\n", None, True),
    ]


def test_a_live_codex_rollout_ends_with_its_calls_in_progress(tmp_path: Path) -> None:
    """A rollout still being written: the calls of the model's last answer (two at once) await their
    output, which is no input error."""
    records = [
        {"type": "session_meta", "payload": {"id": "s"}},
        {"type": "response_item", "payload": {"type": "message", "role": "user", "content": "go"}},
        {"type": "response_item", "payload": {"type": "function_call", "name": "exec_command", "call_id": "a",
                                              "arguments": '{"cmd": "ls"}'}},
        {"type": "response_item", "payload": {"type": "function_call", "name": "exec_command", "call_id": "b",
                                              "arguments": '{"cmd": "pwd"}'}},
    ]  # fmt: skip
    sink = read_lines(tmp_path, "live.jsonl", records)
    assert sink.errors == [] and [(c.call_id, c.in_progress) for c in sink.calls] == [
        ("a", True),
        ("b", True),
    ]


# --- Gemini CLI -----------------------------------------------------------------------------------


def test_a_gemini_cli_chat_is_detected_and_read_as_its_hooks_hand_each_call() -> None:
    sink = read(GEMINI_STOP)
    assert sink.formats == {GEMINI_STOP.name: GEMINI_CLI} and sink.errors == []
    session = "db865c13-80ca-48fa-9ad5-2c9c5a8969bf"
    assert sink.events[:2] == [("session", session), ("turn", session)]
    assert [e for e in sink.events if e[0] == "turn"] == [("turn", session)]  # <session_context> starts none
    assert len(sink.calls) == 13  # each model message is written twice: each call counts once
    assert [c.args["description"] for c in sink.calls] == [f"Attempt {n}" for n in range(1, 14)]
    ran, refused = sink.calls[:5], sink.calls[5:]
    # what ran: AfterTool's llmContent, without the process group line nor the hooks' <hook_context>
    expected = f"<untrusted_context>\nOutput: {OUTPUT}Exit Code: 2\n</untrusted_context>"
    assert all((c.result, c.failed, c.refusal) == (expected, True, None) for c in ran), ran[1].result
    assert {c.refusal for c in refused} == {"hook_denied"}
    assert refused[-1].result.startswith("Agent execution stopped by hook: otelguard stopped this turn")
    assert all(c.time is not None and c.time > 1.7e9 for c in sink.calls)


def test_replay_of_a_guarded_gemini_cli_run_halts_where_its_hooks_did(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The hooks stopped that run at its 13th call (``exact_failure_block``): the chat's last call."""
    document = replay_json(GEMINI_STOP, capsys)
    assert document["inputs"][0]["format"] == GEMINI_CLI
    assert halts(document) == [(1, 13, "exact_failure_block")]
    assert document["totals"]["decisions"]["exact_failure_reject"] == 7
    refusals = replay_json(GEMINI_REFUSALS, capsys)
    assert halts(refusals) == [] and refusals["totals"]["decisions"]["exact_failure_reject"] == 3


def gemini_call(call_id: str, response: dict[str, Any], status: str = "success") -> dict[str, Any]:
    return {
        "id": call_id, "name": "run_shell_command", "args": {"command": "make"}, "status": status,
        "timestamp": "2026-12-07T03:00:02Z",
        "result": [{"functionResponse": {"id": call_id, "name": "run_shell_command", "response": response}}],
    }  # fmt: skip


def test_the_older_gemini_cli_chat_document_is_read_the_same(tmp_path: Path) -> None:
    document = {
        "sessionId": "g1", "projectHash": "abc", "startTime": "2026-12-07T03:00:00Z",
        "messages": [
            {"id": "u1", "type": "user", "timestamp": "2026-12-07T03:00:00Z", "content": "build it"},
            {"id": "m1", "type": "gemini", "timestamp": "2026-12-07T03:00:01Z", "content": "", "toolCalls": [
                gemini_call("a", {"output": "Output: ok\nExit Code: 0\nProcess Group PGID: 12"}),
                gemini_call("b", {"error": "no such tool"}, "error"),
                gemini_call("c", {"output": "Output: x\nExit Code: 1\n\n<hook_context>warned</hook_context>"}),
                gemini_call("d", {"error": "Tool execution blocked: Not run"}, "error"),
            ]},
            {"id": "i1", "type": "info", "content": "note"},
        ],
    }  # fmt: skip
    sink = read_document(tmp_path, "session-1.json", document)
    assert sink.formats == {"session-1.json": GEMINI_CLI} and sink.errors == []
    assert sink.events[:2] == [("session", "g1"), ("turn", "g1")]
    assert [(c.call_id, c.result, c.failed, c.refusal) for c in sink.calls] == [
        ("a", "Output: ok\nExit Code: 0\n", False, None),
        ("b", "no such tool", True, None),
        ("c", "Output: x\nExit Code: 1", True, None),
        ("d", "Tool execution blocked: Not run", True, "hook_denied"),
    ]


def test_gemini_cli_chat_lines_that_are_malformed_are_reported_by_line(tmp_path: Path) -> None:
    records: list[Any] = [
        {"sessionId": "g2", "projectHash": "abc", "startTime": "2026-12-07T03:00:00Z", "kind": "main"},
        {"$set": {"lastUpdated": "2026-12-07T03:00:00Z"}},
        {"id": "u1", "type": "user", "content": [{"text": "go"}]},
        {"id": "m1", "type": "gemini", "content": "", "toolCalls": "many"},
        {"id": "m2", "type": "gemini", "content": "", "toolCalls": [7, {"name": "x"}]},
        {"id": "m3", "type": "gemini", "content": "", "toolCalls": [{"id": "k", "name": "t", "args": {},
                                                                     "result": [{"functionResponse": {
                                                                         "id": "k", "response": "text"}}]}]},
        {"id": "u2", "type": "user", "content": 5},
        {"id": 9, "type": 3},
        "a string",
        {"id": "m4", "type": "gemini", "content": "", "toolCalls": [{"id": "w", "name": "t", "args": {}}]},
        {"id": "u3", "type": "user", "content": [{"functionResponse": {"id": "w", "response": {"output": "fine"}}}]},
    ]  # fmt: skip
    sink = read_lines(tmp_path, "session.jsonl", records)
    assert sink.formats == {"session.jsonl": GEMINI_CLI}
    # the call whose result is malformed is not replayed either: said when its session ends
    assert [line for _, line, _ in sink.errors] == [4, 5, 5, 6, 7, 8, 9, 6]
    assert all("text" not in reason for *_, reason in sink.errors)  # shapes, never content
    # a call whose model message carried no result is answered by the user message that sent it
    assert [(c.call_id, c.result, c.failed, c.has_result) for c in sink.calls] == [
        ("k", None, None, False),
        ("w", "fine", None, True),
    ]


def test_the_cli_reports_a_malformed_line_as_file_line_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "rollout.jsonl"
    path.write_text(
        CODEX_REFUSAL.read_text().splitlines()[0] + "\n{not json\n" + '{"type": "event_msg", "payload": 3}\n'
    )
    document = replay_json(path, capsys)
    assert [(e["path"], e["line"], e["reason"]) for e in document["errors"]] == [
        (str(path), 2, "invalid JSON (column 2); line skipped"),
        (str(path), 3, "payload is number, expected an object"),
    ]


@pytest.mark.parametrize("path", [CODEX_STAGNATION, GEMINI_STOP], ids=lambda p: p.parent.name)
def test_any_cut_of_a_real_transcript_reads_without_crashing(path: Path, tmp_path: Path) -> None:
    data = path.read_bytes()
    for cut in range(0, len(data), max(1, len(data) // 97)):
        read_text(tmp_path, "cut.jsonl", data[:cut].decode("utf-8", "replace"))


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)
_CODEX_ITEM = st.fixed_dictionaries(
    {"type": st.sampled_from(["message", "function_call", "function_call_output", "custom_tool_call"])},
    optional={"role": st.sampled_from(["user", "assistant"]), "name": _JSON, "call_id": st.sampled_from(["a", "b", 3]),
              "arguments": _JSON, "output": _JSON, "content": _JSON},
)  # fmt: skip
_GEMINI_MESSAGE = st.fixed_dictionaries(
    {"type": st.sampled_from(["user", "gemini", "info", 5])},
    optional={"id": st.sampled_from(["m1", "m2", 7]), "content": _JSON, "timestamp": _JSON,
              "toolCalls": st.lists(st.fixed_dictionaries({}, optional={"id": st.sampled_from(["a", "b"]),
                                                                       "name": _JSON, "args": _JSON, "status": _JSON,
                                                                       "result": _JSON}), max_size=3) | _JSON},
)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.one_of(_CODEX_ITEM.map(lambda item: {"type": "response_item", "payload": item}), _JSON), max_size=8
    )
)
def test_hostile_rollout_lines_never_crash_the_codex_reader(records: list[Any]) -> None:
    sink = Sink()
    sink_feed(CodexReader(sink, "r.jsonl", "r"), [{"type": "session_meta", "payload": {"id": "s"}}, *records])
    assert all(isinstance(reason, str) and line is not None for _, line, reason in sink.errors)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(_GEMINI_MESSAGE, st.fixed_dictionaries({"$set": _JSON}), _JSON), max_size=8))
def test_hostile_chat_lines_never_crash_the_gemini_cli_reader(records: list[Any]) -> None:
    sink = Sink()
    sink_feed(GeminiCliReader(sink, "c.jsonl", "c"), [{"sessionId": "g", "projectHash": "h"}, *records])
    assert all(isinstance(reason, str) and line is not None for _, line, reason in sink.errors)


def sink_feed(reader: CodexReader | GeminiCliReader, records: list[Any]) -> None:
    for line, record in enumerate(records, 1):
        reader.feed(line, record)
    with input_ending():
        reader.close()
