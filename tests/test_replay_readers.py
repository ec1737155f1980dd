"""Transcript readers: the normalised stream they produce, and how they report bad input."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from otelguard.replay import SessionKey, ToolCall, detect_format, replay_bytes, replay_inputs


class Recorder:
    """An event sink that writes down what the readers emitted."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.formats: dict[str, str] = {}
        self.errors: list[tuple[str, int | None, str]] = []

    def describe_input(self, path: str, fmt: str) -> None:
        self.formats[path] = fmt

    def begin_session(self, key: SessionKey) -> None:
        self.events.append(("session", key.session_id))

    def start_turn(self, key: SessionKey, time: float | None = None) -> None:
        self.events.append(("turn", key.session_id))

    def tool_call(self, key: SessionKey, call: ToolCall) -> None:
        self.events.append(
            ("call", key.session_id, call.call_id, call.tool_name, call.result, call.failed, call.has_result)
        )

    def end_session(self, key: SessionKey) -> None:
        self.events.append(("end", key.session_id))

    def error(self, path: str, line: int | None, reason: str) -> None:
        self.errors.append((Path(path).name, line, reason))

    def calls(self) -> list[tuple[Any, ...]]:
        return [e[2:] for e in self.events if e[0] == "call"]


def read(tmp_path: Path, name: str, records: list[Any], fmt: str = "auto") -> Recorder:
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    sink = Recorder()
    replay_inputs([str(path)], fmt, sink)
    return sink


def openai_calls(*calls: tuple[str, str, Any]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            for cid, name, args in calls
        ],
    }


# --- OpenAI -------------------------------------------------------------------------------------


def test_openai_batch_results_in_any_order_are_fed_in_call_order(tmp_path: Path) -> None:
    sink = read(
        tmp_path,
        "batch.jsonl",
        [
            {"role": "user", "content": "go"},
            openai_calls(("c1", "read_file", {"p": 1}), ("c2", "grep", {"q": 2}), ("c3", "ls", {})),
            {"role": "tool", "tool_call_id": "c3", "content": "three"},
            {"role": "tool", "tool_call_id": "c1", "content": "one"},
            {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "two"}]},
        ],
    )
    assert sink.calls() == [
        ("c1", "read_file", "one", None, True),
        ("c2", "grep", "two", None, True),
        ("c3", "ls", "three", None, True),
    ]
    assert sink.formats == {str(tmp_path / "batch.jsonl"): "openai"}
    assert sink.events[:2] == [("session", "batch"), ("turn", "batch")]
    assert sink.events[-1] == ("end", "batch")


def test_openai_failed_is_left_to_the_guard(tmp_path: Path) -> None:
    """OpenAI has no error flag: failed=None, so the guard's fallback classifier decides."""
    sink = read(
        tmp_path,
        "f.jsonl",
        [
            openai_calls(("c1", "terminal", {})),
            {"role": "tool", "tool_call_id": "c1", "content": '{"exit_code": 2}'},
        ],
    )
    assert sink.calls() == [("c1", "terminal", '{"exit_code": 2}', None, True)]


def test_openai_conversation_per_line_is_a_session_each(tmp_path: Path) -> None:
    convo = [{"role": "user", "content": "hi"}, openai_calls(("c1", "ls", {}))]
    convo.append({"role": "tool", "tool_call_id": "c1", "content": "x"})
    sink = read(tmp_path, "c.jsonl", [{"id": "conv-a", "messages": convo}, {"messages": convo}])
    sessions = [e[1] for e in sink.events if e[0] == "session"]
    assert sessions == ["conv-a", "c:2"]
    assert [e[0] for e in sink.events].count("end") == 2


def test_openai_legacy_function_calls_match_by_order(tmp_path: Path) -> None:
    sink = read(
        tmp_path,
        "legacy.jsonl",
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "function_call": {"name": "ls", "arguments": "{}"}},
            {"role": "function", "name": "ls", "content": "a b"},
            {"role": "assistant", "function_call": {"name": "cat", "arguments": "{not json"}},
            {"role": "function", "name": "cat", "content": "Error: nope"},
        ],
    )
    assert sink.calls() == [(None, "ls", "a b", None, True), (None, "cat", "Error: nope", None, True)]


def test_openai_tool_calls_without_ids_match_by_order(tmp_path: Path) -> None:
    """An agent of a tau-bench fork writes its calls without ids and their results without
    ``tool_call_id``: each result answers the oldest call still waiting."""
    sink = read(
        tmp_path,
        "noid.jsonl",
        [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "tool_calls": [{"function": {"name": "find_user", "arguments": "{'zip': '1'}"}}],
            },
            {"role": "tool", "name": "find_user", "content": "yusuf_rossi_9620"},
            {
                "role": "assistant",
                "tool_calls": [
                    {"type": "function", "function": {"name": "get_order", "arguments": "{}"}},
                    {"id": None, "type": "function", "function": {"name": "get_user", "arguments": "{}"}},
                ],
            },
            {"role": "tool", "name": "get_order", "content": "Error: order not found"},
            {"role": "tool", "tool_call_id": None, "name": "get_user", "content": "{}"},
            {"role": "tool", "name": "get_user", "content": "one result too many"},
        ],
    )
    assert sink.calls() == [
        (None, "find_user", "yusuf_rossi_9620", None, True),
        (None, "get_order", "Error: order not found", None, True),
        (None, "get_user", "{}", None, True),
    ]
    assert sink.errors == [("noid.jsonl", 7, "tool result without its call (legacy function result)")]


def test_openai_ids_of_the_wrong_type_are_input_errors(tmp_path: Path) -> None:
    sink = read(
        tmp_path,
        "badid.jsonl",
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "tool_calls": [{"id": 7, "function": {"name": "ls", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": ["c1"], "content": "x"},
        ],
    )
    assert sink.errors == [
        ("badid.jsonl", 2, "tool_calls[0].id is number, expected a string"),
        ("badid.jsonl", 3, "tool_call_id is array, expected a string"),
    ]
    assert sink.calls() == []


def test_new_turn_at_every_user_message(tmp_path: Path) -> None:
    sink = read(
        tmp_path,
        "t.jsonl",
        [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "one"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": [{"type": "text", "text": "two"}]},
        ],
    )
    assert [e[0] for e in sink.events] == ["session", "turn", "turn", "end"]


# --- Anthropic ----------------------------------------------------------------------------------


def test_anthropic_tool_results_continue_the_turn_and_carry_is_error(tmp_path: Path) -> None:
    sink = read(
        tmp_path,
        "a.jsonl",
        [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "looking"},
                    {"type": "tool_use", "id": "t1", "name": "read_file", "input": {"p": 1}},
                    {"type": "tool_use", "id": "t2", "name": "terminal", "input": {"c": 2}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t2", "is_error": True, "content": "boom"},
                    {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "a"}]},
                ],
            },
        ],
    )
    assert [e[0] for e in sink.events] == ["session", "turn", "call", "call", "end"]
    assert sink.calls() == [("t1", "read_file", "a", False, True), ("t2", "terminal", "boom", True, True)]
    assert sink.formats[str(tmp_path / "a.jsonl")] == "anthropic"


def test_pretty_printed_request_body_is_read_whole(tmp_path: Path) -> None:
    body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "ls", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x"}]},
        ],
    }
    path = tmp_path / "body.json"
    path.write_text(json.dumps(body, indent=2))
    sink = Recorder()
    replay_inputs([str(path)], "auto", sink)
    assert sink.errors == []
    assert sink.calls() == [("t1", "ls", "x", False, True)]


def test_json_array_of_messages_is_read_whole_on_one_line_or_pretty_printed(tmp_path: Path) -> None:
    messages = [
        {"role": "user", "content": "go"},
        openai_calls(("c1", "read_file", {"path": "a"})),
        {"role": "tool", "tool_call_id": "c1", "content": "x"},
    ]
    seen = []
    for name, text in (
        ("one-line.json", json.dumps(messages)),
        ("pretty.json", json.dumps(messages, indent=2)),
    ):
        (tmp_path / name).write_text(text + "\n")
        sink = Recorder()
        replay_inputs([str(tmp_path / name)], "auto", sink)
        assert sink.errors == [], name
        seen.append(sink.calls())
    assert seen[0] == seen[1] == [("c1", "read_file", "x", None, True)]


# --- Claude Code --------------------------------------------------------------------------------


def cc_line(kind: str, content: Any, *, msg_id: str | None = None, **extra: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": kind, "content": content}
    if msg_id is not None:
        message["id"] = msg_id
    return {"type": kind, "sessionId": "s1", "uuid": extra.pop("uuid", "u"), "message": message, **extra}


def use(tid: str, name: str = "Read") -> list[dict[str, Any]]:
    return [{"type": "tool_use", "id": tid, "name": name, "input": {"file_path": tid}}]


def result(tid: str, text: str = "r", **extra: Any) -> list[dict[str, Any]]:
    return [{"type": "tool_result", "tool_use_id": tid, "content": text, **extra}]


def test_claude_code_split_assistant_message_is_one_message(tmp_path: Path) -> None:
    """Lines with the same message.id are one message: results after all of them still match."""
    sink = read(
        tmp_path,
        "cc.jsonl",
        [
            {"type": "summary", "summary": "x", "leafUuid": "l"},
            cc_line("user", "go"),
            cc_line("assistant", [{"type": "text", "text": "hm"}], msg_id="m1"),
            cc_line("assistant", use("t1"), msg_id="m1"),
            cc_line("assistant", use("t2", "Grep"), msg_id="m1"),
            cc_line("user", result("t2", "two", is_error=True)),
            cc_line("user", result("t1", "one")),
        ],
    )
    assert sink.errors == []
    assert sink.calls() == [("t1", "Read", "one", False, True), ("t2", "Grep", "two", True, True)]
    assert sink.formats[str(tmp_path / "cc.jsonl")] == "claude-code"


def test_claude_code_sidechains_are_their_own_sessions(tmp_path: Path) -> None:
    sink = read(
        tmp_path,
        "side.jsonl",
        [
            cc_line("user", "go", uuid="u0"),
            cc_line("assistant", use("t1", "Task"), msg_id="m1", uuid="a1"),
            cc_line("user", "sub task", uuid="r1", parentUuid=None, isSidechain=True),
            cc_line("assistant", use("s1"), msg_id="m2", uuid="r2", parentUuid="r1", isSidechain=True),
            cc_line("user", result("s1"), uuid="r3", parentUuid="r2", isSidechain=True),
            cc_line("user", result("t1"), uuid="u1", parentUuid="a1"),
        ],
    )
    assert [(e[1], e[2]) for e in sink.events if e[0] == "call"] == [("s1:r1", "s1"), ("s1", "t1")]


def test_claude_code_duplicated_lines_are_not_new_calls(tmp_path: Path) -> None:
    line_use = cc_line("assistant", use("t1"), msg_id="m1")
    line_result = cc_line("user", result("t1"))
    sink = read(tmp_path, "dup.jsonl", [cc_line("user", "go"), line_use, line_result, line_use, line_result])
    assert sink.errors == []
    assert len(sink.calls()) == 1


def test_claude_code_interruptions_and_meta_lines_do_not_start_turns(tmp_path: Path) -> None:
    sink = read(
        tmp_path,
        "int.jsonl",
        [
            cc_line("user", "go"),
            cc_line("user", "Caveat: generated by local commands", isMeta=True),
            cc_line("user", [{"type": "text", "text": "[Request interrupted by user]"}]),
            cc_line("user", "<local-command-stdout>ok</local-command-stdout>"),
            {"type": "system", "subtype": "compact_boundary", "sessionId": "s1"},
        ],
    )
    assert [e[0] for e in sink.events] == ["session", "turn", "end"]


# --- bad input ----------------------------------------------------------------------------------


def test_malformed_lines_are_reported_and_skipped(tmp_path: Path) -> None:
    sink = read(
        tmp_path,
        "bad.jsonl",
        [
            {"role": "user", "content": "go"},
            '{"role": "assistant", "tool_calls": [{"id": "c1", "type": "func',  # truncated JSON
            {"role": "assistant", "tool_calls": "c1"},  # wrong type
            {"role": "user", "content": 42},  # wrong type
            {"role": "tool", "tool_call_id": "ghost", "content": "x"},  # result without its call
            openai_calls(("c2", "ls", {})),
            {"role": "tool", "tool_call_id": "c2", "content": "ok"},
            [1, 2],
            openai_calls(("c3", "ls", {"a": 1})),  # never answered
            {"role": "user", "content": "next"},
        ],
    )
    assert sink.errors == [
        ("bad.jsonl", 2, "invalid JSON (column 64); line skipped"),
        ("bad.jsonl", 3, "tool_calls is string, expected an array"),
        ("bad.jsonl", 4, "content is number, expected a string or an array"),
        ("bad.jsonl", 5, "tool result without its call (id ghost)"),
        ("bad.jsonl", 8, "expected a chat message or a conversation, got array"),
        ("bad.jsonl", 9, "tool call c3 (ls) has no result; not replayed"),
    ]
    assert sink.calls() == [("c2", "ls", "ok", None, True), ("c3", "ls", None, None, False)]


def test_wrong_types_in_claude_code_and_anthropic(tmp_path: Path) -> None:
    sink = read(
        tmp_path,
        "w.jsonl",
        [
            cc_line("user", "go"),
            {"type": "assistant", "sessionId": "s1", "message": "not an object"},
            cc_line("assistant", [{"type": "tool_use", "id": 7, "name": "Read", "input": {}}], msg_id="m"),
            cc_line("user", [{"type": "tool_result", "tool_use_id": None, "content": "x"}]),
            cc_line("user", result("nope")),
            {"type": 3},
        ],
    )
    assert [(line, reason) for _, line, reason in sink.errors] == [
        (2, "message is string, expected an object"),
        (3, "message.content[0]: tool_use needs a string id and name"),
        (4, "message.content[0].tool_use_id is null"),
        (5, "tool result without its call (id nope)"),
        (6, "type is number, expected a string"),
    ]


def test_unknown_format_names_the_file_and_skips_it(tmp_path: Path) -> None:
    sink = read(tmp_path, "weird.jsonl", [{"event": "x"}, {"role": "user", "content": "go"}])
    assert len(sink.errors) == 1
    name, line, reason = sink.errors[0]
    assert (name, line) == ("weird.jsonl", 1)
    assert reason.startswith("unknown transcript format")
    assert sink.events == []


def test_detect_format() -> None:
    assert detect_format({"role": "user", "content": "x"}) == "chat"
    assert detect_format({"messages": []}) == "chat"
    assert detect_format({"type": "summary", "leafUuid": "x"}) == "claude-code"
    assert detect_format({"type": "assistant", "sessionId": "s", "message": {}}) == "claude-code"
    assert detect_format({"type": "message"}) is None
    assert detect_format([]) is None


def test_stdin_is_read_as_one_input(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = [{"role": "user", "content": "go"}, openai_calls(("c1", "ls", {}))]
    lines.append({"role": "tool", "tool_call_id": "c1", "content": "x"})
    data = "".join(json.dumps(r) + "\n" for r in lines).encode()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))
    sink = Recorder()
    replay_inputs(["-"], "auto", sink)
    assert sink.events[0] == ("session", "stdin")
    assert sink.calls() == [("c1", "ls", "x", None, True)]


REAL = Path(__file__).parent / "data" / "real"


@pytest.mark.parametrize(
    "name",
    [
        "claude-code/cc_test_fix_loop.jsonl",  # JSON lines
        "swe-agent/pydicom__pydicom-1458.traj",  # one pretty-printed document
        "tau-bench/tau_bench_gpt4o_airline.json",  # a JSON array of conversations
    ],
)
def test_an_input_in_memory_reads_exactly_as_the_file(name: str) -> None:
    path = REAL / name
    from_file, from_memory = Recorder(), Recorder()
    replay_inputs([str(path)], "auto", from_file)
    replay_bytes(str(path), path.read_bytes(), "auto", from_memory)
    assert from_memory.events == from_file.events != []
    assert (from_memory.formats, from_memory.errors) == (from_file.formats, from_file.errors)


def test_an_unreadable_input_in_memory_is_reported_under_its_name() -> None:
    recorder = Recorder()
    replay_bytes("runs/broken.traj", b'{"trajectory": [', "auto", recorder)
    assert recorder.events == []
    assert list(recorder.formats) == ["runs/broken.traj"]
    assert [reason.split(" (")[0] for _, _, reason in recorder.errors] == ["invalid JSON document"]
