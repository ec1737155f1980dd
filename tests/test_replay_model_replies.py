"""Every reader whose format records the model's replies hands them on, in their place among the
calls they made: text for the guard alone, how many calls the harness ran or could not run, and the
usage the transcript records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from otelguard.readers.events import ModelReply
from otelguard.readers.replies import MAX_REPLY_CHARS
from otelguard.replay import SessionKey, ToolCall, replay_inputs


class Sink:
    """Records the normalised stream: turns, replies (with their counts and tokens) and calls."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.texts: list[str | None] = []
        self.errors: list[tuple[str, int | None, str]] = []

    def describe_input(self, path: str, fmt: str) -> None:
        pass

    def begin_session(self, key: SessionKey) -> None:
        pass

    def start_turn(self, key: SessionKey, time: float | None = None) -> None:
        self.events.append(("turn",))

    def model_reply(self, key: SessionKey, reply: ModelReply) -> None:
        self.events.append(
            ("reply", reply.tool_calls, reply.invalid_tool_calls, reply.input_tokens, reply.output_tokens)
        )
        self.texts.append(reply.text)

    def tool_call(self, key: SessionKey, call: ToolCall) -> None:
        self.events.append(("call", call.tool_name))

    def end_session(self, key: SessionKey) -> None:
        pass

    def error(self, path: str, line: int | None, reason: str) -> None:
        self.errors.append((Path(path).name, line, reason))


def read(tmp_path: Path, name: str, text: str) -> Sink:
    path = tmp_path / name
    path.write_text(text)
    sink = Sink()
    replay_inputs([str(path)], "auto", sink)
    return sink


def lines(records: list[Any]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


# --- mini-swe-agent: a reply without exactly one action was answered with a format error ----------


def test_mini_swe_agent_format_errors_are_replies_with_an_invalid_call(tmp_path: Path) -> None:
    usage = {"response": {"usage": {"prompt_tokens": 100, "completion_tokens": 7}}}
    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Fix the bug."},
        {"role": "assistant", "content": "THOUGHT: look\n\n```bash\nls\n```", "extra": usage},
        {"role": "user", "content": "<returncode>0</returncode>\n<output>\na\n</output>"},
        {"role": "assistant", "content": "I think it is done."},
        {"role": "user", "content": "Please always provide EXACTLY ONE action in triple backticks."},
        {"role": "assistant", "content": "```bash\nls\n```\n```bash\npwd\n```"},
        {"role": "user", "content": "Please always provide EXACTLY ONE action in triple backticks."},
        {"role": "assistant", "content": "```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"},
    ]
    sink = read(tmp_path, "run.traj.json", json.dumps({"messages": messages}))
    assert sink.events == [
        ("turn",),
        ("reply", 1, 0, 100, 7),
        ("call", "bash"),
        ("reply", 0, 1, None, None),
        ("reply", 0, 1, None, None),
        ("reply", 1, 0, None, None),
        ("call", "bash"),
    ]
    assert sink.texts[1] == "I think it is done."


# --- SWE-agent: a step with no action was a reply SWE-agent asked again for -----------------------


def test_swe_agent_steps_without_an_action_are_replies_with_an_invalid_call(tmp_path: Path) -> None:
    trajectory = [
        {"action": "ls\n", "observation": "a b", "response": "DISCUSSION\nlist\n```\nls\n```"},
        {"action": "", "observation": "", "response": "```\nls\n```\n```\npwd\n```"},
        {"action": "submit\n", "observation": "diff", "response": "```\nsubmit\n```"},
        {"action": "", "observation": "", "response": "Done."},
    ]
    sink = read(tmp_path, "run.traj", json.dumps({"trajectory": trajectory, "history": []}, indent=2))
    assert sink.events == [
        ("turn",),
        ("reply", 1, 0, None, None),
        ("call", "bash"),
        ("reply", 0, 1, None, None),
        ("reply", 1, 0, None, None),
        ("call", "submit"),
        ("reply", 0, 0, None, None),  # the reply the run ended on is not a format error
    ]


# --- OpenHands: one reply per model response; a message with no action called nothing -------------


def test_openhands_replies_follow_model_responses_and_agent_messages(tmp_path: Path) -> None:
    response = {
        "id": "resp-1",
        "choices": [{"message": {"content": "Two reads."}}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 9},
    }

    def read_action(event_id: int, call_id: str) -> dict[str, Any]:
        meta = {"function_name": "str_replace_editor", "tool_call_id": call_id, "model_response": response}
        return {"id": event_id, "source": "agent", "action": "read", "args": {}, "tool_call_metadata": meta}

    def read_result(cause: int) -> dict[str, Any]:
        return {"id": cause + 10, "source": "agent", "observation": "read", "cause": cause, "content": "x"}

    def message(event_id: int, source: str, content: str) -> dict[str, Any]:
        return {"id": event_id, "source": source, "action": "message", "args": {"content": content}}

    history = [
        message(1, "user", "Fix the bug."),
        read_action(2, "c1"),
        read_action(3, "c2"),
        read_result(2),
        read_result(3),
        message(20, "agent", "I am thinking."),
        message(21, "user", "Please continue working on the task."),
        message(22, "agent", "Still thinking."),
        message(23, "user", "Please  continue working on the task."),
        message(24, "agent", "Still thinking."),
    ]
    sink = read(tmp_path, "output.jsonl", lines([{"instance_id": "i-1", "history": history}]))
    assert sink.events == [
        ("turn",),
        ("reply", 2, 0, 50, 9),
        ("call", "str_replace_editor"),
        ("call", "str_replace_editor"),
        ("reply", 0, 0, None, None),
        ("turn",),  # the first "continue" cannot be told from a person's request
        ("reply", 0, 0, None, None),
        # the same text again, after a reply that called nothing: the harness's, no new turn
        ("reply", 0, 0, None, None),
    ]


# --- chat transcripts: assistant messages and their usage ---------------------------------------


def test_chat_replies_carry_usage_and_a_person_repeating_a_request_still_opens_a_turn(tmp_path: Path) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}
    records = [
        {"role": "user", "content": "find it"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [call],
            "usage": {"prompt_tokens": 12, "completion_tokens": 3},
        },
        {"role": "tool", "tool_call_id": "c1", "content": "found"},
        {"role": "user", "content": "find it"},  # after a reply with a call: a person's request
        {"role": "assistant", "content": "It is here."},
        {"role": "user", "content": "Find it"},  # after a reply that called nothing, seen before
        {"role": "assistant", "content": "It is here."},
    ]
    sink = read(tmp_path, "chat.jsonl", lines(records))
    assert sink.events == [
        ("turn",),
        ("reply", 1, 0, 12, 3),
        ("call", "search"),
        ("turn",),
        ("reply", 0, 0, None, None),
        ("reply", 0, 0, None, None),
    ]


def test_chat_malformed_lines_are_still_reported_by_line_beside_the_replies(tmp_path: Path) -> None:
    text = (
        json.dumps({"role": "user", "content": "hi"})
        + "\n{not json\n"
        + json.dumps({"role": "assistant", "content": "hello", "tool_calls": "oops"})
        + "\n"
    )
    sink = read(tmp_path, "chat.jsonl", text)
    assert sink.events == [("turn",), ("reply", 0, 0, None, None)]
    assert [(name, line) for name, line, _ in sink.errors] == [("chat.jsonl", 2), ("chat.jsonl", 3)]
    assert "tool_calls is string, expected an array" in sink.errors[1][2]


# --- Claude Code: one reply per message id, usage with the cached prompt -------------------------


def test_claude_code_assistant_entries_are_one_reply_per_message_with_usage(tmp_path: Path) -> None:
    usage = {
        "input_tokens": 4,
        "cache_creation_input_tokens": 100,
        "cache_read_input_tokens": 1000,
        "output_tokens": 30,
    }

    def entry(kind: str, message: dict[str, Any]) -> dict[str, Any]:
        return {"type": kind, "sessionId": "s1", "uuid": "u", "isSidechain": False, "message": message}

    text_block = {"type": "text", "text": "Let me look."}
    tool_use = {"type": "tool_use", "id": "toolu_1", "name": "Grep", "input": {"pattern": "x"}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "none"}
    records = [
        entry("user", {"role": "user", "content": "find x"}),
        entry("assistant", {"id": "m1", "role": "assistant", "content": [text_block], "usage": usage}),
        entry("assistant", {"id": "m1", "role": "assistant", "content": [tool_use], "usage": usage}),
        entry("user", {"role": "user", "content": [result]}),
        entry("assistant", {"id": "m2", "role": "assistant", "content": [{"type": "text", "text": "No x."}]}),
        # a resumed session writes an earlier message again: not a second reply
        entry("assistant", {"id": "m1", "role": "assistant", "content": [tool_use], "usage": usage}),
    ]
    sink = read(tmp_path, "session.jsonl", lines(records))
    assert sink.events == [
        ("turn",),
        ("reply", 1, 0, 1104, 30),
        ("call", "Grep"),
        ("reply", 0, 0, None, None),
    ]
    assert sink.texts == ["Let me look.", "No x."]


# --- Gemini CLI: a model message written again once its calls are done is one reply -------------


def test_gemini_cli_messages_are_one_reply_each_with_their_tokens(tmp_path: Path) -> None:
    tokens = {"input": 10, "output": 4, "cached": 0, "thoughts": 0, "tool": 0, "total": 14}
    shell = {
        "id": "call-1",
        "name": "run_shell_command",
        "args": {"command": "ls"},
        "status": "success",
        "result": [{"functionResponse": {"id": "call-1", "response": {"output": "Output: a\nExit Code: 0"}}}],
    }
    records = [
        {"sessionId": "g1", "projectHash": "p", "startTime": "2026-01-01T00:00:00Z"},
        {"id": "u1", "timestamp": "2026-01-01T00:00:01Z", "type": "user", "content": "list"},
        {"id": "m1", "timestamp": "2026-01-01T00:00:02Z", "type": "gemini", "content": "", "tokens": tokens},
        {
            "id": "m1",
            "timestamp": "2026-01-01T00:00:02Z",
            "type": "gemini",
            "content": "",
            "tokens": tokens,
            "toolCalls": [shell],
        },
        {
            "id": "m2",
            "timestamp": "2026-01-01T00:00:03Z",
            "type": "gemini",
            "content": "Done.",
            "tokens": tokens,
        },
    ]
    sink = read(tmp_path, "session-1.jsonl", lines(records))
    assert sink.events == [
        ("turn",),
        ("reply", 1, 0, 10, 4),
        ("call", "run_shell_command"),
        ("reply", 0, 0, 10, 4),
    ]


# --- Codex: a response's items up to the next result are one reply; its token count follows it ----


def test_codex_rollout_replies_with_their_token_counts() -> None:
    """The rollout real Codex wrote under the hooks: eight replies of one command each, then the
    reply it ended on; each reply's usage is the ``token_count`` Codex wrote after it."""
    sink = Sink()
    rollout = Path(__file__).parent / "data" / "codex_rollouts" / "rollout-guarded-refusal.jsonl"
    replay_inputs([str(rollout)], "auto", sink)
    assert sink.errors == []
    assert sink.events == [
        ("turn",),
        *[("reply", 1, 0, 10, 10), ("call", "Bash")] * 8,
        ("reply", 0, 0, 10, 10),
    ]


def test_swe_agent_function_calling_history_replies(tmp_path: Path) -> None:
    """With a function-calling history, an assistant entry without a tool call was answered with
    SWE-agent's format error (an invalid call), unless it is the last."""

    def call(call_id: str) -> dict[str, Any]:
        function = {"name": "bash", "arguments": json.dumps({"command": "ls"})}
        return {"id": call_id, "type": "function", "function": function}

    history = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Fix the bug."},
        {"role": "assistant", "content": "Looking.", "tool_calls": [call("c1")]},
        {"role": "tool", "content": "a b", "tool_call_ids": ["c1"]},
        {"role": "assistant", "content": "I forgot to call a tool."},
        {"role": "user", "content": "Your last output did not use any tool calls!"},
        {"role": "assistant", "content": "Again.", "tool_calls": [call("c2")]},
        {"role": "tool", "content": "a b", "tool_call_ids": ["c2"]},
        {"role": "assistant", "content": "All done."},
    ]
    sink = read(tmp_path, "run.traj", json.dumps({"history": history, "trajectory": []}, indent=2))
    assert sink.events == [
        ("turn",),
        ("reply", 1, 0, None, None),
        ("call", "bash"),
        ("reply", 0, 1, None, None),
        ("reply", 1, 0, None, None),
        ("call", "bash"),
        ("reply", 0, 0, None, None),
    ]


def test_a_huge_reply_reaches_the_guard_bounded(tmp_path: Path) -> None:
    chant = "I will now call the tool. " * 100_000  # 2.6 MB of one passage
    records = [{"role": "user", "content": "go"}, {"role": "assistant", "content": chant}]
    sink = read(tmp_path, "chat.jsonl", lines(records))
    [text] = sink.texts
    assert text is not None and len(text) == MAX_REPLY_CHARS and chant.startswith(text)
