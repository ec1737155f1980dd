"""Transcripts written by agent benchmark harnesses: tau2-bench results files and OpenHands LLM
completion logs, read as the OpenAI chat they are."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from otelguard.replay import SessionKey, ToolCall, replay_inputs

REAL = Path(__file__).parent / "data" / "real"


class Sink:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.calls: list[ToolCall] = []
        self.errors: list[tuple[int | None, str]] = []
        self.formats: list[str] = []

    def describe_input(self, path: str, fmt: str) -> None:
        self.formats.append(fmt)

    def begin_session(self, key: SessionKey) -> None:
        self.events.append(("session", key.session_id))

    def start_turn(self, key: SessionKey, time: float | None = None) -> None:
        self.events.append(("turn", key.session_id))

    def end_session(self, key: SessionKey) -> None:
        self.events.append(("end", key.session_id))

    def tool_call(self, key: SessionKey, call: ToolCall) -> None:
        self.events.append(("call", call.tool_name))
        self.calls.append(call)

    def error(self, path: str, line: int | None, reason: str) -> None:
        self.errors.append((line, reason))


def read(path: Path) -> Sink:
    sink = Sink()
    replay_inputs([str(path)], "auto", sink)
    return sink


def write(tmp_path: Path, name: str, document: Any, indent: int | None = 2) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(document, indent=indent))
    return path


# --- tau2-bench -----------------------------------------------------------------------------------


def message(role: str, content: str | None = "", **extra: Any) -> dict[str, Any]:
    return {"role": role, "content": content, "turn_idx": 0, "timestamp": None, **extra}


def flat(call_id: str, name: str, arguments: dict[str, Any], requestor: str = "assistant") -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": arguments, "requestor": requestor}


def simulation(sim_id: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": sim_id, "task_id": "0", "termination_reason": "user_stop", "messages": messages}


def test_tau2_results_are_a_session_per_simulation_with_flat_calls(tmp_path: Path) -> None:
    messages = [
        message("assistant", "Hi! How can I help you today?"),
        message("user", "Change my flight."),
        message(
            "assistant", None, tool_calls=[flat("c1", "get_reservation_details", {"reservation_id": "X"})]
        ),
        message("tool", '{"reservation_id": "X"}', id="c1", requestor="assistant", error=False),
        message(
            "assistant", None, tool_calls=[flat("c2", "update_reservation_flights", {"cabin": "economy"})]
        ),
        message("tool", "Error: Certificate cannot be used", id="c2", requestor="assistant", error=True),
    ]
    document = {"info": {}, "tasks": [], "simulations": [simulation("s1", messages), simulation("s2", [])]}
    sink = read(write(tmp_path, "results.json", document))
    assert sink.errors == []
    assert sink.formats[-1] == "openai"
    assert [e for e in sink.events if e[0] == "session"] == [("session", "s1"), ("session", "s2")]
    assert [(c.tool_name, c.args, c.failed) for c in sink.calls] == [
        ("get_reservation_details", {"reservation_id": "X"}, False),
        ("update_reservation_flights", {"cabin": "economy"}, True),
    ]


def test_tau2_real_refusal_is_a_failed_call() -> None:
    sink = read(REAL / "tau2-bench" / "grok3_airline_flight_not_found.json")
    assert sink.errors == []
    # the flag is read as recorded, never left to a guess
    assert [(c.tool_name, c.failed) for c in sink.calls] == [
        ("get_flight_status", True),
        ("get_flight_status", False),
        ("transfer_to_human_agents", False),
    ]


def test_tau2_simulated_users_device_calls_are_not_the_agents() -> None:
    """The user's own tool calls neither count as the agent's calls nor start a request."""
    sink = read(REAL / "tau2-bench" / "grok3_telecom_user_device_calls.json")
    assert sink.errors == []
    assert [c.tool_name for c in sink.calls] == ["get_customer_by_phone"]
    assert sum(1 for e in sink.events if e[0] == "turn") == 7  # the user's seven requests


# --- OpenHands completion logs ---------------------------------------------------------------------
# The Multi-SWE-bench OpenHands runs measured here state no licence, so this file is synthesised in
# their layout: the last model call's request (``messages`` rewritten as text, ``fncall_messages`` as
# the model made them) and its reply.


def completion_log(reply_calls: list[dict[str, Any]]) -> dict[str, Any]:
    bash = {
        "id": "toolu_01",
        "type": "function",
        "function": {"name": "execute_bash", "arguments": '{"command": "ls"}'},
    }
    fncall = [
        {"role": "system", "content": "You are OpenHands agent"},
        {"role": "user", "content": "Fix the issue"},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [bash]},
        {"role": "tool", "tool_call_id": "toolu_01", "name": "execute_bash", "content": "README.md"},
    ]
    text = [
        {"role": "system", "content": "You are OpenHands agent"},
        {"role": "user", "content": "Fix the issue"},
        {"role": "assistant", "content": "<function=execute_bash>ls</function>"},
        {"role": "user", "content": "EXECUTION RESULT of [execute_bash]: README.md"},
    ]
    reply = {"role": "assistant", "content": "Done.", "tool_calls": reply_calls}
    return {
        "messages": text,
        "response": {"choices": [{"message": {"role": "assistant", "content": "<function=finish>"}}]},
        "args": [],
        "kwargs": {},
        "timestamp": 1743405761.3,
        "cost": 0.0,
        "fncall_messages": fncall,
        "fncall_response": {"choices": [{"finish_reason": "tool_calls", "index": 0, "message": reply}]},
    }


def test_openhands_completion_log_reads_the_calls_the_model_made(tmp_path: Path) -> None:
    finish = {"id": "toolu_02", "type": "function", "function": {"name": "finish", "arguments": "{}"}}
    for indent in (2, None):  # pretty-printed or one line, as the logs are written
        sink = read(write(tmp_path, "Claude-3.5-Sonnet-1743405761.json", completion_log([finish]), indent))
        assert sink.errors == []  # the reply's call ran after the log was written: in progress
        assert [(c.tool_name, c.has_result, c.in_progress) for c in sink.calls] == [
            ("execute_bash", True, False),
            ("finish", False, True),
        ]
        assert sink.calls[0].result == "README.md"
