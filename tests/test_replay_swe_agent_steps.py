"""SWE-agent 1.x trajectories with function calling: the history and the trajectory hold the steps
differently, and each call is read once.

The documents are built the way SWE-agent 1.x writes them (``sweagent/agent/agents.py``): each step
that ran is an assistant entry of the ``history`` (with its ``action`` and one OpenAI tool call) and
its tool entry, and a ``trajectory`` step; a reply SWE-agent asked the model again for (a format
error) is a trajectory step with an empty action and no history entry; a run ending at its cost limit
ends with a trajectory step with an empty action (``Exited (autosubmitted)``) and an assistant entry
with no tool call. Some runs' histories stop before the final ``submit``, others hold it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import orjson

from benchmarks.run_records import RunRecord, run_records
from otelguard import GuardConfig
from otelguard.readers.events import SessionKey, ToolCall
from otelguard.replay import ReplayRunner, replay_inputs

ASKED_AGAIN: Final = None
"""A step SWE-agent asked the model again for: in the trajectory only, with an empty action."""
Step = tuple[str, dict[str, Any], str, str] | None


def view(path: str) -> Step:
    return (
        "str_replace_editor",
        {"command": "view", "path": path},
        f"str_replace_editor view {path}",
        "1\tx = 1",
    )


def bash(command: str, output: str) -> Step:
    return ("bash", {"command": command}, command, output)


SUBMIT: Final[Step] = ("submit", {}, "submit", "diff --git a/a.py b/a.py")
EDIT: Final[Step] = (
    "str_replace_editor",
    {"command": "str_replace", "path": "/testbed/a.py", "old_str": "x = 1", "new_str": "x = 2"},
    "str_replace_editor str_replace /testbed/a.py   --old_str 'x = 1' --new_str 'x = 2'",
    "The file /testbed/a.py has been edited.",
)


def trajectory_1x(
    steps: list[Step], *, history_holds_submit: bool = True, at_cost_limit: bool = False
) -> dict[str, Any]:
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a helpful assistant", "agent": "main", "message_type": "system_prompt"},
        {"role": "user", "content": "<uploaded_files>/testbed</uploaded_files> fix it", "agent": "main",
         "message_type": "observation"},
    ]  # fmt: skip
    trajectory: list[dict[str, Any]] = []
    for index, step in enumerate(steps):
        if step is ASKED_AGAIN:
            trajectory.append(_step("", "", "I will now fix the file."))
            continue
        tool, args, action, observation = step
        trajectory.append(_step(action, observation, f"Let me run {tool}."))
        if step is SUBMIT and not history_holds_submit:
            continue
        call_id = f"toolu_{index:02d}"
        call = {"id": call_id, "type": "function", "function": {"name": tool, "arguments": json.dumps(args)}}
        history.append(
            {"role": "assistant", "content": f"Let me run {tool}.", "thought": f"Let me run {tool}.",
             "action": action, "agent": "main", "tool_calls": [call], "message_type": "action",
             "thinking_blocks": []}
        )  # fmt: skip
        history.append(
            {"role": "tool", "content": [{"type": "text", "text": f"OBSERVATION:\n{observation}"}],
             "agent": "main", "message_type": "observation", "tool_call_ids": [call_id]}
        )  # fmt: skip
    exit_status = "submitted"
    if at_cost_limit:
        trajectory.append(_step("", "Exited (autosubmitted)", "Exit due to cost limit"))
        history.append(
            {"role": "assistant", "content": "Exit due to cost limit", "thought": "Exit due to cost limit",
             "action": "", "agent": "main", "tool_calls": None, "message_type": "action", "thinking_blocks": []}
        )  # fmt: skip
        exit_status = "submitted (exit_cost)"
    info = {
        "exit_status": exit_status,
        "submission": "diff --git a/a.py b/a.py",
        "swe_agent_version": "1.0.1",
    }
    return {
        "environment": "main",
        "trajectory": trajectory,
        "history": history,
        "info": info,
        "replay_config": json.dumps({"agent": {"tools": {"submit_command": "submit"}}}),
    }


def _step(action: str, observation: str, response: str) -> dict[str, Any]:
    return {
        "action": action,
        "observation": observation,
        "response": response,
        "thought": response,
        "execution_time": 0.5,
        "state": {"working_dir": "/testbed", "open_file": "n/a"},
        "query": [{"role": "system", "content": "..."}],
        "extra_info": {},
    }


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


def write(tmp_path: Path, document: dict[str, Any]) -> Path:
    path = tmp_path / "astropy__astropy-12907.traj"
    path.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2))
    return path


def read(tmp_path: Path, document: dict[str, Any]) -> Calls:
    sink = Calls()
    replay_inputs([str(write(tmp_path, document))], "auto", sink)
    return sink


WORK: Final = [view("/testbed/a.py"), bash("python reproduce.py", "x is 1"), ASKED_AGAIN, EDIT,
               bash("python reproduce.py", "x is 2"), SUBMIT]  # fmt: skip
NAMES: Final = ["str_replace_editor", "bash", "str_replace_editor", "bash", "submit"]


def test_a_reply_asked_again_does_not_read_the_final_submit_twice(tmp_path: Path) -> None:
    """The history holds the 5 calls, submit included; the trajectory has 6 steps, one of them the
    empty reply SWE-agent asked the model again for. Counting the history's calls as the first 5
    steps read the submit a second time."""
    document = trajectory_1x(WORK)
    sink = read(tmp_path, document)
    assert [c.tool_name for c in sink.calls] == NAMES
    assert sink.errors == []
    assert run_records(orjson.dumps(document)) == {None: RunRecord(at_limit=False, calls=5)}


def test_a_history_ending_before_the_submit_reads_the_submit_from_the_trajectory(tmp_path: Path) -> None:
    document = trajectory_1x(WORK, history_holds_submit=False)
    sink = read(tmp_path, document)
    assert [c.tool_name for c in sink.calls] == NAMES
    assert sink.calls[-1].args == {"command": "submit"}
    assert sink.errors == []


def test_a_run_ended_at_its_cost_limit_reads_no_call_for_its_exit_step(tmp_path: Path) -> None:
    """The exit step SWE-agent writes (an empty action, ``Exited (autosubmitted)``) is not a call,
    and not an input error."""
    document = trajectory_1x([*WORK[:-1], ASKED_AGAIN], at_cost_limit=True)
    sink = read(tmp_path, document)
    assert [c.tool_name for c in sink.calls] == NAMES[:-1]
    assert sink.errors == []
    assert run_records(orjson.dumps(document)) == {None: RunRecord(at_limit=True, calls=4)}


def test_a_history_without_actions_falls_back_to_the_steps_with_a_command(tmp_path: Path) -> None:
    """Histories that do not record each call's ``action`` are matched by counting the steps that
    have a command, so a reply asked again still does not shift them."""
    document = trajectory_1x(WORK)
    for entry in document["history"]:
        entry.pop("action", None)
    sink = read(tmp_path, document)
    assert [c.tool_name for c in sink.calls] == NAMES


def test_the_calls_a_halt_prevents_are_the_calls_after_it(tmp_path: Path) -> None:
    """The same file viewed 5 times (each after a reply asked again), then the submit: with no
    refusal before a stop, ``identical_call`` halts after the 5th, and the one call the stop prevents
    is the submit; none is read twice."""
    document = trajectory_1x([ASKED_AGAIN, view("/testbed/a.py")] * 5 + [SUBMIT])
    config = GuardConfig.from_mapping({"mode": "unattended", "rejects_before_stop": 0})
    runner = ReplayRunner(config)
    replay_inputs([str(write(tmp_path, document))], "auto", runner)
    [session] = runner.finish().sessions
    [halt] = session.halts
    assert (session.tool_calls, halt.code, halt.session_call) == (6, "identical_call_halt", 5)
    assert session.prevented_calls == session.tool_calls - halt.session_call == 1
    assert run_records(orjson.dumps(document))[None].calls == session.tool_calls


def test_a_history_without_a_trajectory_records_its_calls(tmp_path: Path) -> None:
    """A document of the history alone (SWE-agent's function-calling demonstrations) records the
    history's calls."""
    document = trajectory_1x(WORK)
    del document["trajectory"]
    sink = read(tmp_path, document)
    assert run_records(orjson.dumps(document)) == {None: RunRecord(at_limit=False, calls=len(sink.calls))}
    assert len(sink.calls) == 5
