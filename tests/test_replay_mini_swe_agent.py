"""The mini-swe-agent reader on files mini-swe-agent 2.x wrote itself (tool calls, text actions, the
Responses API) and on hand-written cases no such file shows: nothing may be dropped silently."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otelguard.cli import main
from otelguard.readers.sources import InputFile
from otelguard.replay import SessionKey, ToolCall, replay_inputs

V2 = Path(__file__).parent / "fixtures" / "mini-swe-agent-2"

# what every scripted run did, in order: (command, failed)
MOVES = [
    ("ls", False),
    ("cat calc.py", False),
    ("python test_calc.py", True),
    ("sed -i 's/a - b/a + b/' calc.py", False),
    ("python test_calc.py", False),
    ("grep -rn 'a - b' --include=*.py .", True),
    ("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", False),
]


class Sink:
    def __init__(self) -> None:
        self.calls: list[ToolCall] = []
        self.errors: list[tuple[int | None, str]] = []
        self.formats: list[str] = []
        self.turns = 0

    def describe_input(self, path: str, fmt: str) -> None:
        self.formats.append(fmt)

    def begin_session(self, key: SessionKey) -> None:
        pass

    def start_turn(self, key: SessionKey, time: float | None = None) -> None:
        self.turns += 1

    def end_session(self, key: SessionKey) -> None:
        pass

    def tool_call(self, key: SessionKey, call: ToolCall) -> None:
        self.calls.append(call)

    def error(self, path: str, line: int | None, reason: str) -> None:
        self.errors.append((line, reason))


def read(path: Path) -> Sink:
    sink = Sink()
    replay_inputs([str(path)], "auto", sink)
    return sink


def command(call: ToolCall) -> str:
    args = call.args if isinstance(call.args, dict) else json.loads(call.args)
    text: str = args["command"]
    return text


def write(tmp_path: Path, document: Any, name: str = "run.traj.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(document, indent=2))
    return path


# --- files mini-swe-agent 2.4.6 wrote ---------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["toolcall_submitted.traj.json", "textbased_submitted.traj.json", "responses_submitted.traj.json"]
)
def test_every_call_of_a_2x_run_is_read_with_its_outcome(name: str) -> None:
    sink = read(V2 / name)
    assert sink.formats[-1] == "mini-swe-agent"
    assert sink.errors == []
    assert [(command(c), c.failed) for c in sink.calls] == MOVES
    assert all(c.tool_name == "bash" and c.has_result for c in sink.calls)
    assert sink.turns == 1


def test_tool_calls_keep_their_ids_and_the_submission_is_answered_by_the_exit_message() -> None:
    sink = read(V2 / "toolcall_submitted.traj.json")
    assert [c.call_id for c in sink.calls] == [f"call_{n:02d}" for n in range(1, 8)]
    # the submission ended the run instead of getting a tool message: not an input error
    assert sink.calls[-1].result == ""
    # results are the JSON bodies mini-swe-agent's default tool-call template renders
    assert json.loads(sink.calls[2].result)["returncode"] == 1


def test_a_run_stopped_by_its_step_limit_leaves_nothing_unanswered() -> None:
    sink = read(V2 / "textbased_step_limit.traj.json")
    assert sink.errors == []
    assert [(command(c), c.failed) for c in sink.calls] == MOVES[:3]


def test_the_old_reader_lost_these_calls_and_the_cli_now_counts_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "unattended.yaml"
    config.write_text("mode: unattended\nsignature_key: mini-swe-agent-2\n")
    assert main(["replay", str(V2), "--config", str(config), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert {Path(i["path"]).name: i["format"] for i in document["inputs"]} == {
        "responses_submitted.traj.json": "mini-swe-agent",
        "textbased_step_limit.traj.json": "mini-swe-agent",
        "textbased_submitted.traj.json": "mini-swe-agent",
        "toolcall_submitted.traj.json": "mini-swe-agent",
    }
    assert document["totals"]["tool_calls"] == 7 + 7 + 3 + 7
    assert document["totals"]["halts"] == 0


# --- hand-written cases -----------------------------------------------------------------------------

TASK = [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "Fix it."}]


def tool_call(call_id: str, cmd: str) -> dict[str, Any]:
    arguments = json.dumps({"command": cmd})
    return {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": arguments}}


def assistant_calls(*calls: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": "", "tool_calls": list(calls)}


def tool_result(call_id: str, returncode: int, **extra: Any) -> dict[str, Any]:
    return {
        "role": "tool",
        "tool_call_id": call_id,
        "content": f"<returncode>{returncode}</returncode>\n<output>\n</output>",
        "extra": {"returncode": returncode, **extra},
    }


def trajectory(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "info": {"mini_version": "2.1.0"},
        "messages": messages,
        "trajectory_format": "mini-swe-agent-1.1",
    }


def test_an_action_format_the_reader_cannot_read_is_an_input_error_not_a_silent_drop(tmp_path: Path) -> None:
    # a custom action_regex (```sh blocks) and no recorded actions: the observations have no call
    messages = [
        *TASK,
        {"role": "assistant", "content": "```sh\nls\n```"},
        {"role": "user", "content": "<returncode>0</returncode>\n<output>\na\n</output>"},
        {"role": "assistant", "content": "```sh\npytest\n```"},
        {"role": "user", "content": "out", "extra": {"returncode": 1}},
    ]
    sink = read(write(tmp_path, {"messages": messages, "info": {"mini_version": "1.9.0"}}))
    assert sink.calls == []
    assert sink.errors == [
        (
            1,
            f"messages[{i}].a command's output with no call before it: the model message before it "
            "holds an action this reader cannot read",
        )
        for i in (3, 5)
    ]


def test_recorded_actions_win_over_the_text(tmp_path: Path) -> None:
    messages = [
        *TASK,
        {"role": "assistant", "content": "<cmd>ls</cmd>", "extra": {"actions": [{"command": "ls -la"}]}},
        {"role": "user", "content": "<returncode>0</returncode>", "extra": {"returncode": 0}},
    ]
    sink = read(write(tmp_path, trajectory(messages)))
    assert sink.errors == []
    assert [(command(c), c.failed) for c in sink.calls] == [("ls -la", False)]


def test_a_tool_call_never_answered_before_the_file_ends_is_in_progress(tmp_path: Path) -> None:
    """The trajectory is written as the run goes: its last call, unanswered where the file ends, is
    still running (reported as in progress, not as an input error)."""
    messages = [*TASK, assistant_calls(tool_call("c1", "ls"), tool_call("c2", "pwd")), tool_result("c1", 0)]
    sink = read(write(tmp_path, trajectory(messages)))
    assert [(c.call_id, c.has_result, c.in_progress) for c in sink.calls] == [
        ("c1", True, False),
        ("c2", False, True),
    ]
    assert sink.errors == []


def test_a_tool_call_left_unanswered_before_more_of_the_run_is_reported(tmp_path: Path) -> None:
    messages = [
        *TASK,
        assistant_calls(tool_call("c1", "ls"), tool_call("c2", "pwd")),
        tool_result("c1", 0),
        assistant_calls(tool_call("c3", "ls")),
        tool_result("c3", 0),
    ]
    sink = read(write(tmp_path, trajectory(messages)))
    assert [(c.call_id, c.has_result, c.in_progress) for c in sink.calls] == [
        ("c1", True, False),
        ("c2", False, False),
        ("c3", True, False),
    ]
    assert sink.errors == [(1, "tool call c2 (bash) has no result; not replayed")]


def test_a_result_for_no_call_is_reported(tmp_path: Path) -> None:
    messages = [*TASK, assistant_calls(tool_call("c1", "ls")), tool_result("c1", 0), tool_result("c9", 0)]
    sink = read(write(tmp_path, trajectory(messages)))
    assert sink.errors == [(1, "tool result without its call (id c9)")]


def test_a_malformed_tool_call_is_reported_not_dropped(tmp_path: Path) -> None:
    messages = [*TASK, assistant_calls({"id": "c1", "type": "function"}, {"function": {"name": "bash"}})]
    sink = read(write(tmp_path, trajectory(messages)))
    assert sink.calls == []
    assert sink.errors == [
        (1, "messages[2].tool_calls[0] has no function object; call not replayed"),
        (1, "messages[2].tool_calls[1] needs a string call id and tool name; call not replayed"),
    ]


@pytest.mark.parametrize(
    ("content", "extra", "failed"),
    [
        ('{"returncode": 2, "output": "x"}', {}, True),  # 2.x's default tool-call template
        ('{"returncode": 0, "output": "<returncode>1</returncode>"}', {}, False),
        ("<returncode>0</returncode>", {"returncode": 124}, True),  # extra wins over the text
        ("The command timed out.", {}, None),  # no code at all: the classifier decides
        ("{not json", {}, None),
    ],
)
def test_the_return_code_comes_from_extra_then_the_tag_then_a_json_body(
    tmp_path: Path, content: str, extra: dict[str, Any], failed: bool | None
) -> None:
    result = {"role": "tool", "tool_call_id": "c1", "content": content, "extra": extra}
    sink = read(write(tmp_path, trajectory([*TASK, assistant_calls(tool_call("c1", "make")), result])))
    assert [c.failed for c in sink.calls] == [failed]


def test_an_action_mini_swe_agent_did_not_execute_is_cancelled(tmp_path: Path) -> None:
    skipped = tool_result("c2", -1, exception_info="action was not executed")
    messages = [
        *TASK,
        assistant_calls(tool_call("c1", "ls"), tool_call("c2", "pwd")),
        tool_result("c1", 0),
        skipped,
    ]
    sink = read(write(tmp_path, trajectory(messages)))
    assert [(c.call_id, c.cancelled) for c in sink.calls] == [("c1", False), ("c2", True)]


@pytest.mark.parametrize(
    ("interrupt", "refusal", "cancelled", "turns"),
    [
        ("UserRejection", "user_rejected", False, 1),
        ("UserInterruption", None, True, 1),
        ("UserNewTask", None, True, 2),
    ],
)
def test_interactive_interruptions_answer_the_waiting_calls(
    tmp_path: Path, interrupt: str, refusal: str | None, cancelled: bool, turns: int
) -> None:
    stop = {"role": "user", "content": "Commands not executed.", "extra": {"interrupt_type": interrupt}}
    messages = [*TASK, assistant_calls(tool_call("c1", "rm -rf build")), stop]
    sink = read(write(tmp_path, trajectory(messages)))
    assert sink.errors == []
    assert [(c.refusal, c.cancelled) for c in sink.calls] == [(refusal, cancelled)]
    assert sink.turns == turns


def test_a_command_the_user_typed_is_a_call_answered_by_the_next_observation(tmp_path: Path) -> None:
    typed = {
        "role": "user",
        "content": "User command: \n```bash\nls\n```",
        "extra": {"actions": [{"command": "ls"}]},
    }
    answer = {"role": "user", "content": "<returncode>0</returncode>", "extra": {"returncode": 0}}
    sink = read(write(tmp_path, trajectory([*TASK, typed, answer])))
    assert sink.errors == []
    assert [(command(c), c.failed) for c in sink.calls] == [("ls", False)]


def test_messages_after_the_exit_message_are_not_read(tmp_path: Path) -> None:
    exit_message = {"role": "exit", "content": "boom", "extra": {"exit_status": "RuntimeError"}}
    messages = [*TASK, assistant_calls(tool_call("c1", "make")), exit_message, tool_result("c1", 0)]
    sink = read(write(tmp_path, trajectory(messages)))
    assert sink.errors == []
    # not the submission: how the call ended is left to the classifier
    assert [(c.result, c.failed) for c in sink.calls] == [("boom", None)]


def test_a_bare_message_list_with_an_exit_message_is_mini_swe_agent(tmp_path: Path) -> None:
    messages = [
        *TASK,
        assistant_calls(tool_call("c1", "ls")),
        tool_result("c1", 0),
        {"role": "exit", "content": ""},
    ]
    sink = read(write(tmp_path, messages, "run.json"))
    assert sink.formats[-1] == "mini-swe-agent"
    assert [c.call_id for c in sink.calls] == ["c1"]


MESSAGE_KEYS = [
    "role",
    "content",
    "tool_calls",
    "tool_call_id",
    "extra",
    "output",
    "type",
    "call_id",
    "object",
]
VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=12)
    | st.sampled_from(["exit", "tool", "user"]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(MESSAGE_KEYS), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(MESSAGE_KEYS), VALUES, max_size=5), max_size=8))
def test_the_reader_never_raises(messages: list[dict[str, Any]]) -> None:
    sink = Sink()
    source = InputFile("fuzz.traj.json", "mini-swe-agent", sink)
    source.feed_document(trajectory([*TASK, *messages]))
    source.feed_document(messages)
    source.close()
