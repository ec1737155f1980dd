"""The OpenHands, SWE-agent and mini-swe-agent readers on hand-written cases no real file shows, and
format detection from content whatever the file's extension."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otelguard.readers import sources
from otelguard.readers.sources import InputFile
from otelguard.readers.swe_agent import SweAgentReader
from otelguard.replay import SessionKey, ToolCall, detect_format, replay_inputs


class Sink:
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.calls: list[ToolCall] = []
        self.errors: list[tuple[str, int | None, str]] = []
        self.formats: dict[str, str] = {}

    def describe_input(self, path: str, fmt: str) -> None:
        self.formats[Path(path).name] = fmt

    def begin_session(self, key: SessionKey) -> None:
        self.events.append(("session", key.session_id))

    def start_turn(self, key: SessionKey, time: float | None = None) -> None:
        self.events.append(("turn", key.session_id))

    def end_session(self, key: SessionKey) -> None:
        self.events.append(("end", key.session_id))

    def tool_call(self, key: SessionKey, call: ToolCall) -> None:
        self.events.append(("call", key.session_id))
        self.calls.append(call)

    def error(self, path: str, line: int | None, reason: str) -> None:
        self.errors.append((Path(path).name, line, reason))

    def summary(self) -> list[tuple[Any, ...]]:
        return [(c.call_id, c.tool_name, c.args, c.result, c.failed, c.has_result) for c in self.calls]


def read_text(tmp_path: Path, name: str, text: str, fmt: str = "auto") -> Sink:
    path = tmp_path / name
    path.write_text(text)
    sink = Sink()
    replay_inputs([str(path)], fmt, sink)
    return sink


def read_document(tmp_path: Path, name: str, document: Any) -> Sink:
    return read_text(tmp_path, name, json.dumps(document, indent=2))


def read_lines(tmp_path: Path, name: str, records: list[Any]) -> Sink:
    return read_text(tmp_path, name, "".join(json.dumps(r) + "\n" for r in records))


# --- OpenHands ------------------------------------------------------------------------------------


def action(event_id: int, name: str, call_id: str, args: dict[str, Any], kind: str = "run") -> dict[str, Any]:
    return {
        "id": event_id,
        "source": "agent",
        "action": kind,
        "args": {**args, "thought": f"free text {event_id}"},
        "tool_call_metadata": {"function_name": name, "tool_call_id": call_id},
    }


def observation(
    cause: int | None, content: str, kind: str = "run", exit_code: Any = 0, **extra: Any
) -> dict[str, Any]:
    event: dict[str, Any] = {"source": "agent", "observation": kind, "content": content, **extra}
    if cause is not None:
        event["cause"] = cause
    event["extras"] = {"metadata": {"exit_code": exit_code}}
    return event


USER = {"id": 0, "source": "user", "action": "message", "args": {"content": "fix the bug"}}


def test_openhands_events_become_calls_with_their_observations(tmp_path: Path) -> None:
    with_response = action(5, "execute_bash", "c5", {"command": "ls"})
    with_response["tool_call_metadata"]["model_response"] = {
        "choices": [
            {
                "message": {
                    "tool_calls": [
                        {"id": "c5", "function": {"name": "execute_bash", "arguments": '{"command": "ls"}'}}
                    ]
                }
            }
        ]
    }
    events = [
        USER,
        {"id": 1, "source": "environment", "observation": "agent_state_changed", "content": ""},
        {"id": 2, "source": "user", "observation": "null", "content": "", "cause": 0},
        action(3, "execute_bash", "c3", {"command": "make"}),
        observation(3, "make: *** [all] Error 2", exit_code=2),
        action(4, "execute_bash", "c4", {"command": "sleep 999"}),
        observation(4, "still running", exit_code=-1),
        with_response,
        observation(None, "a b", tool_call_metadata={"tool_call_id": "c5"}),
        action(6, "str_replace_editor", "c6", {"path": "/x"}, kind="edit"),
        observation(6, "ERROR: no such file", kind="error", exit_code=None),
        action(7, "finish", "c7", {"message": "done"}, kind="finish"),
    ]
    sink = read_document(tmp_path, "run.json", events)
    assert sink.errors == []
    assert sink.formats == {"run.json": "openhands"}
    assert [(c.call_id, c.tool_name, c.failed) for c in sink.calls] == [
        ("c3", "execute_bash", True),
        ("c4", "execute_bash", False),  # -1: no exit code yet, not a failure
        ("c5", "execute_bash", False),
        ("c6", "str_replace_editor", True),
        ("c7", "finish", False),
    ]
    assert sink.calls[0].args == {"command": "make", "thought": "free text 3"}
    assert sink.calls[2].args == '{"command": "ls"}'  # what the model sent, not the host's extras
    assert sink.events[:2] == [("session", "run"), ("turn", "run")]


def test_openhands_output_jsonl_is_a_session_per_instance(tmp_path: Path) -> None:
    history = [USER, action(3, "execute_bash", "c3", {"command": "ls"}), observation(3, "a")]
    sink = read_lines(
        tmp_path,
        "output.jsonl",
        [
            {"instance_id": "django__django-1", "history": history, "test_result": {}},
            {"instance_id": 7, "history": history},
            {"history": history, "instance_id": None},
        ],
    )
    assert sink.errors == []
    assert [e[1] for e in sink.events if e[0] == "session"] == ["django__django-1", "7", "output:3"]
    assert len(sink.calls) == 3


def test_openhands_bad_records_are_named_never_quoted(tmp_path: Path) -> None:
    secret = "sk-live-SECRET"
    broken = action(4, "execute_bash", "c4", {"command": secret})
    broken["tool_call_metadata"]["function_name"] = 12
    sink = read_lines(
        tmp_path,
        "output.jsonl",
        [
            {"instance_id": "a", "history": "nope"},
            {
                "instance_id": "b",
                "history": [USER, secret, broken, action(5, "execute_bash", "c5", {"command": secret})],
            },
        ],
    )
    assert sink.errors == [
        ("output.jsonl", 1, "history is string, expected an array"),
        ("output.jsonl", 2, "history[1].expected an event object, got string"),
        ("output.jsonl", 2, "history[2].tool_call_metadata.function_name is number"),
        ("output.jsonl", 2, "tool call c5 (execute_bash) has no result; not replayed"),
    ]
    assert all(secret not in reason for *_, reason in sink.errors)


# --- SWE-agent ------------------------------------------------------------------------------------


def test_swe_agent_steps_are_its_commands_or_bash(tmp_path: Path) -> None:
    """A step whose first word is one of SWE-agent's commands is that command; any other action is
    the shell, tool bash, with the whole action as its command."""
    trajectory = {
        "environment": "swe_main",
        "trajectory": [
            {"action": "find_file missing.py\n", "observation": "Found 1 matches", "thought": "…"},
            {"action": "python reproduce.py\n", "observation": "Traceback (most recent call last):\n  ..."},
            {"action": "", "observation": "Your output was not formatted correctly"},
            {"action": "submit\n"},
        ],
        "history": [{"role": "system", "content": "…", "agent": "primary"}],
        "info": {"exit_status": "submitted"},
    }
    sink = read_document(tmp_path, "run.traj", trajectory)
    assert sink.formats == {"run.traj": "swe-agent"}
    assert [(c.tool_name, c.args, c.failed, c.has_result) for c in sink.calls] == [
        ("find_file", {"command": "find_file missing.py\n"}, None, True),
        ("bash", {"command": "python reproduce.py\n"}, None, True),
        ("submit", {"command": "submit\n"}, None, False),
    ]
    # the last step, left unanswered where the document ends, is not an input error: in progress; a
    # step with an empty action (a reply with no command, asked again: SWE-agent ran nothing) is
    # neither a call nor an input error
    assert sink.errors == []
    assert [c.in_progress for c in sink.calls] == [False, False, True]
    assert [e[0] for e in sink.events] == ["session", "turn", "call", "call", "call", "end"]


@pytest.mark.parametrize(
    "command",
    [
        "open", "goto", "scroll_up", "scroll_down", "create", "edit", "insert", "search_dir",
        "search_file", "find_file", "filemap", "submit", "str_replace_editor",
    ],
)  # fmt: skip
def test_swe_agent_own_commands_keep_their_names(tmp_path: Path, command: str) -> None:
    action = f"{command} src/app.py 12\nprint(1)\nend_of_edit\n"
    sink = read_document(tmp_path, "run.traj", {"trajectory": [{"action": action, "observation": "x"}]})
    assert [(c.tool_name, c.args) for c in sink.calls] == [(command, {"command": action})]


@pytest.mark.parametrize(
    "action",
    ["python reproduce.py", "pytest -x tests/", "sed -i 's/a/b/' x.py", "cat <<'EOF' > a.py\nx\nEOF",
     "ls", "set_cursors 1 2", "opener a.py", "python3 -c 'open(1)'"],
)  # fmt: skip
def test_swe_agent_other_actions_are_one_shell(tmp_path: Path, action: str) -> None:
    """Every action that is not a known command runs in bash: a prefix of a command name
    (opener) is not the command, and a command word later in the line does not count."""
    sink = read_document(tmp_path, "run.traj", {"trajectory": [{"action": action, "observation": "x"}]})
    assert [(c.tool_name, c.args) for c in sink.calls] == [("bash", {"command": action})]


def _documented(*names: str) -> str:
    """SWE-agent 1.x's command_docs text, as its tool handler generates it."""
    return "".join(f"{name}:\n  docstring: does {name}\n  signature: {name} <arg>\n\n" for name in names)


@pytest.mark.parametrize("as_json_string", [False, True], ids=["object", "json-string"])
def test_swe_agent_commands_declared_by_the_recorded_config(tmp_path: Path, as_json_string: bool) -> None:
    """Commands the run's replay_config documents (an object, or the JSON string SWE-agent writes)
    keep their names; others are still bash."""
    tools = {
        "command_docs": _documented("bash", "goto", "set_cursors", "debug_start"),
        "multi_line_command_endings": {"edit_block": "end_of_edit"},
        "submit_command": "finish_task",
    }
    config: Any = {"agent": {"tools": tools}}
    steps = ["set_cursors 3 9", "debug_start ./a.out", "edit_block 1:2\nx\nend_of_edit", "finish_task",
             "connect_start host 80", "goto 40"]  # fmt: skip
    document = {
        "trajectory": [{"action": step, "observation": "x"} for step in steps],
        "replay_config": json.dumps(config) if as_json_string else config,
    }
    sink = read_document(tmp_path, "run.traj", document)
    assert sink.errors == []
    assert [c.tool_name for c in sink.calls] == [
        "set_cursors", "debug_start", "edit_block", "finish_task", "bash", "goto",
    ]  # fmt: skip


@pytest.mark.parametrize(
    "replay_config",
    [None, "not json {", 42, {"agent": "x"}, {"agent": {"tools": []}},
     {"agent": {"tools": {"command_docs": 7, "multi_line_command_endings": [], "submit_command": 3}}},
     {"agent": {"tools": {"command_docs": "set_cursors - moves the cursors\n"}}}],
)  # fmt: skip
def test_swe_agent_unreadable_or_missing_command_config_falls_back_to_the_known_commands(
    tmp_path: Path, replay_config: Any
) -> None:
    """A config that records no commands in a readable way (SWE-agent 0.x writes none; 0.x's one-line
    docs are not 1.x's) leaves the known commands only; it is never an input error."""
    steps = [{"action": "set_cursors 1 2", "observation": "x"}, {"action": "open a.py", "observation": "y"}]
    sink = read_document(tmp_path, "run.traj", {"trajectory": steps, "replay_config": replay_config})
    assert sink.errors == []
    assert [c.tool_name for c in sink.calls] == ["bash", "open"]


CONFIG_KEYS = ["agent", "tools", "command_docs", "multi_line_command_endings", "submit_command", "x"]
CONFIG_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=40) | st.just(_documented("open", "x-y")),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(CONFIG_KEYS), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=60, deadline=None)
@given(CONFIG_VALUES, st.booleans())
def test_swe_agent_reads_any_recorded_config_without_raising(config: Any, as_json_string: bool) -> None:
    """Whatever the replay_config holds, the steps are read, each as a command or as bash."""
    record = {"trajectory": [{"action": "x-y 1", "observation": "a"}], "replay_config": config}
    if as_json_string:
        record["replay_config"] = json.dumps(config)
    sink = Sink()
    reader = SweAgentReader(sink, "run.traj", "run")
    reader.feed(1, record)
    reader.close()
    assert sink.errors == []
    assert [c.tool_name for c in sink.calls] in (["x-y"], ["bash"])


def test_swe_agent_function_calls_skip_demonstrations(tmp_path: Path) -> None:
    def call(call_id: str, name: str, demo: bool = False) -> dict[str, Any]:
        entry = {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}
            ],
        }
        return {**entry, "is_demo": True} if demo else entry

    history = [
        {"role": "system", "content": "…"},
        call("demo1", "open", demo=True),
        {"role": "tool", "content": "demo output", "tool_call_ids": ["demo1"], "is_demo": True},
        {"role": "user", "content": "the issue"},
        call("c1", "open"),
        {"role": "tool", "content": "[File: a.py]", "tool_call_ids": ["c1"]},
        call("c2", "bash"),
        {"role": "tool", "content": "ok", "tool_call_id": "c2"},
    ]
    trajectory = [
        {"action": "open a.py"},
        {"action": "ls"},
        {"action": "submit", "observation": "diff --git"},
    ]
    sink = read_document(tmp_path, "fc.traj", {"history": history, "trajectory": trajectory})
    assert sink.errors == []
    assert [(c.call_id, c.tool_name, c.result) for c in sink.calls] == [
        ("c1", "open", "[File: a.py]"),
        ("c2", "bash", "ok"),
        (None, "submit", "diff --git"),  # the last step, recorded only in the trajectory
    ]


def _role_steps(*steps: tuple[str, str, str]) -> dict[str, Any]:
    """A trajectory of a multi-agent system on SWE-agent 0.x (CodeR): (role, action, observation) per
    step; the history names the role of each model message, one per step, after each role's prompt."""
    history: list[dict[str, Any]] = []
    for role, action, _ in steps:
        if not history or history[-1]["agent"] != role:
            history.append({"role": "system", "content": f"You are the {role}.", "agent": role})
        history.append({"role": "assistant", "content": f"```\n{action}\n```", "agent": role})
        history.append({"role": "user", "content": "(Open file: n/a) $", "agent": role})
    trajectory = [{"action": action, "observation": observation} for _, action, observation in steps]
    return {"environment": "swe_main", "trajectory": trajectory, "history": history, "info": {}}


def test_swe_agent_roles_are_turns_and_their_hand_offs_are_not_shell_commands(tmp_path: Path) -> None:
    """Each role of a multi-agent run starts a turn of its own; a role's last step before another
    role's, one word that is not a command, is the role handing on, read under its own name."""
    document = _role_steps(
        ("Manager", 'plan\n{"entry": "Reproducer"}\nend_of_plan', "the manager has planned"),
        ("Reproducer", "python reproduce.py", "Traceback (most recent call last):"),
        ("Reproducer", "fail", ""),
        ("Programmer", "open src/a.py", "[File: src/a.py (9 lines total)]"),
        ("Programmer", "ls", "a.py"),  # one word, but not the role's last step: the shell
        ("Programmer", "succeed", ""),
        ("Manager", "submit", "diff --git"),
    )
    sink = read_document(tmp_path, "coder.traj", document)
    assert sink.errors == []
    assert [c.tool_name for c in sink.calls] == ["plan", "bash", "fail", "open", "bash", "succeed", "submit"]
    assert [e[0] for e in sink.events] == [
        "session", "turn", "call", "turn", "call", "call", "turn", "call", "call", "call", "turn", "call",
        "end",
    ]  # fmt: skip


def test_swe_agent_one_role_or_roles_that_do_not_match_the_steps_stay_one_turn(tmp_path: Path) -> None:
    """SWE-agent's own runs name one agent ("primary"): one turn, as before; a history whose model
    messages do not give one role per step says nothing about the steps."""
    single = _role_steps(("primary", "ls", "a"), ("primary", "fail", ""), ("primary", "submit", "d"))
    mismatched = _role_steps(("A", "ls", "a"), ("B", "fail", ""))
    history = mismatched["history"]  # one model message fewer than steps
    mismatched["history"] = [m for m in history if m["role"] != "assistant" or m["agent"] != "B"]
    for name, document in (("single.traj", single), ("mismatched.traj", mismatched)):
        sink = read_document(tmp_path, name, document)
        assert [e[0] for e in sink.events].count("turn") == 1, name
        assert [c.tool_name for c in sink.calls][:2] == ["bash", "bash"], name


def test_a_pretty_printed_trajectory_is_one_document_whatever_its_name(tmp_path: Path) -> None:
    document = {"trajectory": [{"action": "ls", "observation": "a"}], "history": []}
    for name in ("run.traj", "run.json", "run.jsonl", "trajectory"):
        sink = read_document(tmp_path, name, document)
        assert (sink.errors, len(sink.calls), sink.formats) == ([], 1, {name: "swe-agent"})


def test_a_broken_trajectory_is_one_error_not_one_per_line(tmp_path: Path) -> None:
    text = json.dumps({"trajectory": [{"action": "ls", "observation": "a"}] * 20}, indent=2)
    sink = read_text(tmp_path, "run.traj", text[:-40])
    assert len(sink.errors) == 1
    assert sink.errors[0][2].startswith("invalid JSON document")


# --- mini-swe-agent -------------------------------------------------------------------------------


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


MINI = [
    {"role": "system", "content": "You are a helpful assistant that can interact with a computer."},
    user("Please solve this issue: the build fails"),
    assistant("Let me look.\n\n```mswea_bash_command\nls -la\n```"),
    user("<returncode>0</returncode>\n<output>\na b\n</output>"),
    assistant("THOUGHT: two commands\n\n```mswea_bash_command\nls\n```\n\n```mswea_bash_command\npwd\n```"),
    user("Please always provide EXACTLY ONE action in triple backticks, found 2 actions."),
    assistant("Now run it.\n```bash\npython run.py\n```"),
    user("<returncode>1</returncode>\n<output>\nTraceback ... <returncode>0</returncode>\n</output>"),
    assistant("```mswea_bash_command\nsleep 1000\n```"),
    user("The last command <command>sleep 1000</command> timed out and has been killed."),
    assistant("Done.\n```mswea_bash_command\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"),
    user("diff --git a/x b/x"),
]


def test_mini_swe_agent_blocks_are_bash_calls_ended_by_their_return_code(tmp_path: Path) -> None:
    sink = read_document(tmp_path, "run.traj.json", MINI)
    assert sink.formats == {"run.traj.json": "mini-swe-agent"}
    assert sink.errors == []
    assert [(c.tool_name, c.args["command"], c.failed) for c in sink.calls] == [
        ("bash", "ls -la", False),
        ("bash", "python run.py", True),  # the return code before the output decides, not one inside it
        ("bash", "sleep 1000", None),
        ("bash", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", None),
    ]
    # the task is the one turn; the format-error message starts none
    assert [e[0] for e in sink.events].count("turn") == 1


def test_mini_swe_agent_wrapped_trajectory(tmp_path: Path) -> None:
    document = {
        "info": {"mini_version": "1.9.0", "exit_status": "Submitted"},
        "messages": MINI,
        "trajectory_format": "mini-swe-agent-1",
    }
    sink = read_document(tmp_path, "django__django-1.traj.json", document)
    assert sink.formats == {"django__django-1.traj.json": "mini-swe-agent"}
    assert len(sink.calls) == 4


def test_a_tool_calling_message_list_stays_an_openai_chat(tmp_path: Path) -> None:
    messages = [
        user("go"),
        {
            "role": "assistant",
            "content": "```bash\nls\n```",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "<returncode>0</returncode>"},
    ]
    sink = read_document(tmp_path, "run.json", messages)
    assert sink.formats == {"run.json": "openai"}
    assert [(c.call_id, c.tool_name) for c in sink.calls] == [("c1", "bash")]


# --- detection ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("record", "fmt"),
    [
        ({"id": 3, "source": "agent", "action": "run", "args": {}}, "openhands"),
        ({"id": 4, "source": "agent", "observation": "run", "content": ""}, "openhands"),
        ({"instance_id": "x", "history": []}, "openhands"),
        ({"trajectory": [], "history": [], "info": {}}, "swe-agent"),
        ({"history": [{"role": "system", "content": ""}]}, "swe-agent"),
        ({"messages": MINI, "info": {"mini_version": "1.0"}}, "mini-swe-agent"),
        ({"messages": MINI}, "mini-swe-agent"),
        ({"task_id": 9, "trial": 2, "reward": 0.0, "traj": []}, "chat"),
        ({"messages": [user("hi")]}, "chat"),
        ({"source": "agent"}, None),
    ],
)
def test_detect_format(record: dict[str, Any], fmt: str | None) -> None:
    assert detect_format(record) == fmt


def test_tau_bench_results_are_a_session_per_task_and_trial(tmp_path: Path) -> None:
    traj = [
        {"role": "system", "content": "policy"},
        user("book it"),
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "book_reservation", "arguments": "{}"},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "call_1",
            "name": "book_reservation",
            "content": "Error: payment amount does not add up",
        },
    ]
    sink = read_document(
        tmp_path,
        "gpt-4o-airline.json",
        [{"task_id": 9, "trial": 2, "traj": traj}, {"task_id": 9, "traj": traj}],
    )
    assert [e[1] for e in sink.events if e[0] == "session"] == ["task-9-trial-2", "task-9"]
    assert sink.errors == []
    assert len(sink.calls) == 2


def test_tau_bench_text_agents_act_in_their_message_text(tmp_path: Path) -> None:
    """tau-bench's act/react agents write each action as JSON after ``Action:``; the environment
    answers in a user message starting ``API output:``. ``respond`` and text that does not parse are
    replies to the user (the harness takes them so), and the user's next message is a new request."""
    search = {"name": "search_direct_flight", "arguments": {"origin": "JFK", "destination": "SEA"}}
    traj = [
        {"role": "system", "content": "policy"},
        user("book a flight"),
        {"role": "assistant", "content": "Thought: search first.\nAction:\n" + json.dumps(search)},
        user("API output: Error: no flight on that date"),
        {
            "role": "assistant",
            "content": "Action: a typo\nAction:\n" + json.dumps({**search, "arguments": {}}),
        },
        user('API output: [{"flight_number": "HAT069"}]'),
        {"role": "assistant", "content": 'Action:\n{"name": "respond", "arguments": {"content": "HAT069?"}}'},
        user("API output: yes, that one"),  # the user's own words after a reply: a new request
        {"role": "assistant", "content": "Action: {not json"},
        user("ok"),
    ]
    sink = read_document(tmp_path, "react-airline.json", [{"task_id": 3, "trial": 0, "traj": traj}])
    assert sink.errors == []
    assert [(c.call_id, c.tool_name, c.args, c.result, c.failed) for c in sink.calls] == [
        (None, "search_direct_flight", search["arguments"], "Error: no flight on that date", True),
        (None, "search_direct_flight", {}, '[{"flight_number": "HAT069"}]', None),
    ]
    assert [e[0] for e in sink.events].count("turn") == 3


def test_tau_bench_tool_calls_are_not_read_twice_from_an_action_in_the_text(tmp_path: Path) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "get_user_details", "arguments": "{}"}}
    text = 'Action:\n{"name": "cancel_reservation", "arguments": {}}'
    traj = [
        user("cancel it"),
        {"role": "assistant", "content": text, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "{}"},
    ]
    sink = read_document(tmp_path, "gpt-4o-airline.json", [{"task_id": 1, "traj": traj}])
    assert (sink.errors, [c.tool_name for c in sink.calls]) == ([], ["get_user_details"])
    plain = read_document(
        tmp_path, "chat.json", {"messages": [user("go"), {"role": "assistant", "content": text}]}
    )
    assert (plain.errors, plain.calls) == ([], [])  # only tau-bench results are read for text actions


def test_openhands_history_of_action_observation_pairs(tmp_path: Path) -> None:
    """Older evaluation outputs wrote the history as [action, observation] pairs."""
    history = [[USER, {"source": "user", "observation": "null", "content": ""}]]
    history.append([action(3, "execute_bash", "c3", {"command": "ls"}), observation(3, "a", exit_code=1)])
    sink = read_lines(tmp_path, "output.jsonl", [{"instance_id": "old", "history": history}])
    assert sink.errors == []
    assert [(c.call_id, c.failed) for c in sink.calls] == [("c3", True)]


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=25,
)
KEYS = [
    "id",
    "source",
    "action",
    "observation",
    "cause",
    "tool_call_metadata",
    "history",
    "instance_id",
    "trajectory",
    "role",
    "content",
    "tool_calls",
    "tool_call_ids",
    "messages",
    "info",
    "extras",
    "args",
]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.dictionaries(st.sampled_from(KEYS), JSON_VALUES, max_size=6), max_size=6),
    st.sampled_from(["openhands", "swe-agent", "mini-swe-agent", "auto"]),
)
def test_new_readers_never_raise(records: list[dict[str, Any]], fmt: str) -> None:
    sink = Sink()
    for record in records:
        source = InputFile("fuzz.json", fmt, sink)
        source.feed_document(record)
        source.feed_document([record, record])
        source.close()


def test_a_document_too_large_to_parse_at_once_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sources, "MAX_DOCUMENT_BYTES", 1 << 20)
    document = {"trajectory": [{"action": "ls", "observation": "x" * 1000}] * 2000}
    sink = read_document(tmp_path, "big.traj", document)
    assert sink.calls == []
    assert sink.errors == [
        (
            "big.traj",
            None,
            "one JSON document larger than 1 MiB cannot be read in parts; file skipped (split it into JSON lines)",
        )
    ]


def test_openhands_user_rejection_is_a_refusal(tmp_path: Path) -> None:
    events = [
        USER,
        action(3, "execute_bash", "c3", {"command": "rm -rf build"}),
        observation(3, "Action has been rejected by the user! Reason: too risky", kind="user_rejected"),
    ]
    sink = read_document(tmp_path, "confirm.json", events)
    assert [(c.call_id, c.refusal, c.failed) for c in sink.calls] == [("c3", "user_rejected", True)]


def test_mini_swe_agent_exit_message_answers_the_last_call(tmp_path: Path) -> None:
    messages = [
        *MINI[:2],
        assistant("```mswea_bash_command\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"),
    ]
    messages.append({"role": "exit", "content": "Submitted"})
    sink = read_document(tmp_path, "exit.traj.json", messages)
    assert sink.errors == []
    assert [(c.result, c.has_result) for c in sink.calls] == [("Submitted", True)]


def sdk_action(event_id: str, tool: str, call_id: str, arguments: str) -> dict[str, Any]:
    return {
        "kind": "ActionEvent",
        "id": event_id,
        "source": "agent",
        "thought": [{"type": "text", "text": "…"}],
        "action": {"kind": "ExecuteBashAction", "command": "ignored: the model's arguments win"},
        "tool_name": tool,
        "tool_call_id": call_id,
        "tool_call": {"id": call_id, "name": tool, "arguments": arguments, "origin": "completion"},
    }


def sdk_answer(kind: str, action_id: str | None, call_id: str, tool: str, **fields: Any) -> dict[str, Any]:
    event = {
        "kind": kind,
        "id": f"obs-{call_id}",
        "source": "environment",
        "tool_name": tool,
        "tool_call_id": call_id,
        **fields,
    }
    if action_id is not None:
        event["action_id"] = action_id
    return event


def test_openhands_agent_sdk_events(tmp_path: Path) -> None:
    """The typed events of the OpenHands agent SDK (V1), as in a conversation's events directory."""
    events = [
        {
            "kind": "SystemPromptEvent",
            "id": "e0",
            "source": "agent",
            "system_prompt": {"type": "text", "text": "…"},
            "tools": [],
        },
        {
            "kind": "MessageEvent",
            "id": "e1",
            "source": "user",
            "llm_message": {"role": "user", "content": [{"type": "text", "text": "fix it"}]},
        },
        sdk_action("e2", "execute_bash", "call_a", '{"command": "make test"}'),
        sdk_answer(
            "ObservationEvent",
            "e2",
            "call_a",
            "execute_bash",
            observation={
                "kind": "ExecuteBashObservation",
                "content": [{"type": "text", "text": "FAILED"}],
                "exit_code": 2,
            },
        ),
        sdk_action("e3", "str_replace_editor", "call_b", '{"command": "view", "path": "/x"}'),
        sdk_answer("AgentErrorEvent", None, "call_b", "str_replace_editor", error="Invalid path"),
        sdk_action("e4", "execute_bash", "call_c", '{"command": "rm -rf /"}'),
        sdk_answer("UserRejectObservation", "e4", "call_c", "execute_bash", rejection_reason="no"),
        sdk_action("e5", "finish", "call_d", '{"message": "done"}'),
        sdk_answer(
            "ObservationEvent",
            "e5",
            "call_d",
            "finish",
            observation={
                "kind": "FinishObservation",
                "content": [{"type": "text", "text": "done"}],
                "is_error": False,
            },
        ),
    ]
    sink = read_document(tmp_path, "events.json", events)
    assert sink.formats == {"events.json": "openhands"}
    assert sink.errors == []
    assert [(c.call_id, c.tool_name, c.args, c.result, c.failed, c.refusal) for c in sink.calls] == [
        ("call_a", "execute_bash", '{"command": "make test"}', "FAILED", True, None),
        ("call_b", "str_replace_editor", '{"command": "view", "path": "/x"}', "Invalid path", True, None),
        ("call_c", "execute_bash", '{"command": "rm -rf /"}', None, True, "user_rejected"),
        ("call_d", "finish", '{"message": "done"}', "done", False, None),
    ]
    assert [e[0] for e in sink.events].count("turn") == 1


def test_toolbench_answer_replays_its_whole_run(tmp_path: Path) -> None:
    def call(name: str, arguments: str) -> dict[str, Any]:
        return {"role": "assistant", "content": None, "function_call": {"name": name, "arguments": arguments}}

    full = [
        {"role": "system", "content": "You are AutoGPT…"},
        {"role": "user", "content": "find the lyrics"},
        call("search_for_lyrics", '{"q": "x"}'),
        {
            "role": "function",
            "name": "search_for_lyrics",
            "content": '{"error": "Rate limit", "response": ""}',
        },
        call("search_for_lyrics", '{"q": "x"}'),
        {
            "role": "function",
            "name": "search_for_lyrics",
            "content": '{"error": "Rate limit", "response": ""}',
        },
    ]
    answer = {
        "answer_generation": {"valid_data": True, "final_answer": "", "train_messages": [full[:4], full]}
    }
    sink = read_document(tmp_path, "12345_ChatGPT_CoT.json", answer)
    assert sink.errors == []
    assert [(c.tool_name, c.args) for c in sink.calls] == [("search_for_lyrics", '{"q": "x"}')] * 2
    broken = read_document(tmp_path, "bad.json", {"answer_generation": {"train_messages": "x"}})
    assert broken.errors == [
        ("bad.json", 1, "answer_generation.train_messages is string, expected an array of message arrays")
    ]
