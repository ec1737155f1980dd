"""Failures the harness wrote into the result in a fixed form of its own are read as failures; what a
command printed is never read as one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from otelguard.readers.recorded_failures import editor_failed, openhands_result_failed, swe_agent_step_failed
from otelguard.replay import SessionKey, ToolCall, replay_inputs

REAL = Path(__file__).parent / "data" / "real"


class Sink:
    def __init__(self) -> None:
        self.calls: list[ToolCall] = []
        self.sessions: list[str] = []
        self.errors: list[str] = []
        self.formats: list[str] = []

    def describe_input(self, path: str, fmt: str) -> None:
        self.formats.append(fmt)

    def begin_session(self, key: SessionKey) -> None:
        self.sessions.append(key.session_id)

    def start_turn(self, key: SessionKey, time: float | None = None) -> None:
        pass

    def end_session(self, key: SessionKey) -> None:
        pass

    def tool_call(self, key: SessionKey, call: ToolCall) -> None:
        self.calls.append(call)

    def error(self, path: str, line: int | None, reason: str) -> None:
        self.errors.append(reason)


def read(path: Path) -> Sink:
    sink = Sink()
    replay_inputs([str(path)], "auto", sink)
    return sink


def test_real_swe_agent_lint_rejections_are_failures_and_a_crashing_script_is_not() -> None:
    """gpt-4 on pydicom: SWE-agent's linter refuses three edits; the reproduction script's traceback
    is what the script printed (SWE-agent 0.x records no exit code), left to the fallback."""
    sink = read(REAL / "swe-agent" / "pydicom__pydicom-1458.traj")
    assert [(c.tool_name, c.failed) for c in sink.calls] == [
        ("create", None), ("edit", None), ("bash", None), ("find_file", None), ("open", None),
        ("edit", True), ("edit", True), ("edit", True), ("edit", None),
        ("bash", None), ("bash", None), ("submit", None),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("tool", "observation"),
    [
        ("edit", "Your proposed edit has introduced new syntax error(s). Please read this error message"),
        ("edit", "Usage: edit <start_line>:<end_line>"),
        ("search_file", "Usage: search_file <search_term> [<file>]"),
        ("goto", "No file open. Use the open command first."),
        ("open", "File gson/src/main/java/com/google/gson/internal/.java not found"),
        ("bash", "EXECUTION TIMED OUT"),
        ("str_replace_editor", "No replacement was performed, old_str `x` did not appear verbatim in /a.py."),
        ("str_replace_editor", "Invalid `path` parameter: /repo/x.py. The path /repo/x.py does not exist."),
    ],
)
def test_swe_agent_own_failure_answers(tool: str, observation: str) -> None:
    assert swe_agent_step_failed(tool, observation) is True


@pytest.mark.parametrize(
    ("tool", "observation"),
    [
        ("bash", "Usage: mytool [-h] FILE"),  # a command's own usage text: the shell answered
        ("bash", 'Traceback (most recent call last):\n  File "t.py", line 1\nValueError: x'),
        ("bash", "File x not found"),
        ("open", "[File: /repo/a.py (10 lines total)]\n1:File b not found"),
        ("find_file", 'No matches found for "JsonParser" in /repo'),  # a search that finds nothing
        ("edit", "[File: /repo/a.py (3 lines total)]\n1:Usage: "),
    ],
)
def test_what_a_command_printed_is_not_a_failure_answer(tool: str, observation: str) -> None:
    assert swe_agent_step_failed(tool, observation) is None


@pytest.mark.parametrize(
    ("text", "failed"),
    [
        ("collected 3 items\n3 passed\n[Command finished with exit code 0]", False),
        ("FAILED test_a.py::test_x\n[Command finished with exit code 1]", True),
        ("Traceback (most recent call last):\nKeyError: 'a'\n[Command finished with exit code 1]", True),
        ("[The command has no new output after 30 seconds.]\n[Command finished with exit code -1]", None),
        ("ERROR:\nInvalid `path` parameter: /workspace/x.py. The path /workspace/x.py does not exist.", True),
        ("Here's the result of running `cat -n` on /workspace/a.py:\n     1\tERROR:\n", None),
        ("The file /workspace/a.py has been edited.", None),
    ],
)
def test_openhands_exit_code_and_editor_refusal(text: str, failed: bool | None) -> None:
    assert openhands_result_failed(text) is failed


@given(st.text(), st.sampled_from(["bash", "edit", "open", "str_replace_editor", "x"]))
def test_recognition_never_raises(text: str, tool: str) -> None:
    assert swe_agent_step_failed(tool, text) in (True, None)
    assert openhands_result_failed(text) in (True, False, None)
    assert isinstance(editor_failed(text), bool)


def test_openhands_completion_log_results_carry_their_exit_codes(tmp_path: Path) -> None:
    def call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)},
        }

    def result(call_id: str, name: str, text: str) -> dict[str, Any]:
        return {
            "role": "tool",
            "tool_call_id": call_id,
            "name": name,
            "content": [{"type": "text", "text": text}],
        }

    conversation = [
        {"role": "user", "content": "Fix the issue"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [call("t1", "execute_bash", {"command": "pytest"})],
        },
        result("t1", "execute_bash", "1 failed\n[Command finished with exit code 1]"),
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [call("t2", "str_replace_editor", {"command": "view"})],
        },
        result("t2", "str_replace_editor", "ERROR:\nInvalid `path` parameter: /workspace/nope.py."),
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [call("t3", "execute_bash", {"command": "pytest"})],
        },
        result("t3", "execute_bash", "1 passed\n[Command finished with exit code 0]"),
    ]
    log = {"messages": [], "fncall_messages": conversation, "fncall_response": {"choices": []}}
    path = tmp_path / "log.json"
    path.write_text(json.dumps(log))
    sink = read(path)
    assert sink.errors == []
    assert [c.failed for c in sink.calls] == [True, True, False]


def test_a_swe_agent_trajectory_with_each_roles_messages_is_read_as_swe_agent(tmp_path: Path) -> None:
    """Multi-agent systems record each role's messages beside the trajectory (a top-level array of
    message arrays): the trajectory's steps are the calls, nothing is an input error."""
    steps = [
        {"action": "open a.py\n", "observation": "File a.py not found", "thought": ""},
        {"action": "python a.py\n", "observation": "ok", "thought": ""},
        {"action": "submit\n", "observation": "diff", "thought": ""},
    ]
    messages = [[{"role": "system", "content": "planner"}], [{"role": "user", "content": "coder"}]]
    document = {"environment": "x", "trajectory": steps, "history": [], "info": {}, "messages": messages}
    path = tmp_path / "run.traj"
    path.write_text(json.dumps(document, indent=2))
    sink = read(path)
    assert sink.formats[-1] == "swe-agent"
    assert sink.errors == []
    assert [(c.tool_name, c.failed) for c in sink.calls] == [("open", True), ("bash", None), ("submit", None)]


def test_tau_bench_error_answers_are_failures() -> None:
    """gpt-4o, airline task 9 trial 2: the environment refuses book_reservation five times with its
    ``Error: ...`` template; every other result is left as the format gives it (no flag)."""
    sink = read(REAL / "tau-bench" / "tau_bench_gpt4o_airline.json")
    assert sink.errors == []
    failed = [c.tool_name for c in sink.calls if c.failed]
    assert failed.count("book_reservation") >= 5
    assert {c.failed for c in sink.calls if c.tool_name == "calculate"} == {None}
    assert all(str(c.result).startswith("Error: ") for c in sink.calls if c.failed)


def _older_completion_log(messages: list[dict[str, Any]], reply: dict[str, Any]) -> dict[str, Any]:
    """An OpenHands LLM completion log of the older shape: the request's ``messages`` with the calls
    as the model made them, the model's ``response``, and the call's ``args``, ``kwargs``, time and
    cost beside them (synthesised in that layout)."""
    return {
        "messages": messages,
        "response": {"id": "r1", "choices": [{"finish_reason": "tool_calls", "index": 0, "message": reply}]},
        "args": [],
        "kwargs": {"tools": [], "tool_choice": "auto"},
        "timestamp": 1731456000.5,
        "cost": 0.012,
    }


def _older_log_conversation() -> list[dict[str, Any]]:
    def call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)},
        }

    def result(call_id: str, name: str, text: str) -> dict[str, Any]:
        return {
            "role": "tool",
            "tool_call_id": call_id,
            "name": name,
            "content": [{"type": "text", "text": text}],
        }

    return [
        {"role": "system", "content": [{"type": "text", "text": "You are OpenHands agent"}]},
        {"role": "user", "content": [{"type": "text", "text": "Fix the issue"}]},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [call("t1", "execute_bash", {"command": "python r.py"})],
        },
        result("t1", "execute_bash", "Traceback ...\nValueError\n[Command finished with exit code 1]"),
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [call("t2", "str_replace_editor", {"command": "view"})],
        },
        result("t2", "str_replace_editor", "ERROR:\nInvalid `path` parameter: /workspace/nope.py."),
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [call("t3", "execute_bash", {"command": "sleep 999"})],
        },
        result("t3", "execute_bash", "still running\n[Command finished with exit code -1]"),
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [call("t4", "execute_bash", {"command": "python r.py"})],
        },
        result("t4", "execute_bash", "ok\n[Command finished with exit code 0]"),
    ]


def test_an_older_openhands_completion_log_reads_exit_codes_and_editor_errors(tmp_path: Path) -> None:
    """``{messages, response, args, kwargs, timestamp, cost}``: read as an OpenHands completion log, not
    as plain chat, so a non-zero exit code and the editor's ``ERROR:`` are failures (-1: no exit code
    yet, not judged), and the reply's call is the one the log ends on (in progress)."""
    finish = {"id": "t5", "type": "function", "function": {"name": "finish", "arguments": "{}"}}
    log = _older_completion_log(
        _older_log_conversation(), {"role": "assistant", "content": "", "tool_calls": [finish]}
    )
    for indent in (2, None):
        path = tmp_path / "claude-3-5-sonnet-20241022-1731456000.5.json"
        path.write_text(json.dumps(log, indent=indent))
        sink = read(path)
        assert sink.errors == []
        assert [(c.tool_name, c.failed) for c in sink.calls] == [
            ("execute_bash", True),
            ("str_replace_editor", True),
            ("execute_bash", None),
            ("execute_bash", False),
            ("finish", None),
        ]
        assert sink.calls[-1].in_progress


def test_a_plain_chat_request_with_a_response_is_not_a_completion_log(tmp_path: Path) -> None:
    """A chat body with ``messages`` and ``response`` but none of the log's own fields stays plain chat:
    its results' text is not judged."""
    log = _older_completion_log(_older_log_conversation(), {"role": "assistant", "content": "done"})
    for mark in ("args", "kwargs", "timestamp", "cost"):
        del log[mark]
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(log))
    sink = read(path)
    assert [c.failed for c in sink.calls] == [None, None, None, None]
