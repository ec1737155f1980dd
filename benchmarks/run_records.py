"""What a run's own record says about how it ended: at a budget limit or not, and how many tool calls it
made, read from the transcript file itself (independently of otelguard's readers).

A run ended at its budget limit when the agent did not stop by itself:

* SWE-agent: its last trajectory step is ``exit_cost``/``exit_context``/... (the harness autosubmits
  then, so ``info.exit_status`` may still say ``submitted``), or the exit status names such a limit
  (``submitted (exit_cost)``: SWE-agent 1.x's last step then has an empty action). Its calls are its
  steps with a command (an empty action is a reply SWE-agent ran nothing for), or, in a document of
  the function-calling history alone, the history's calls;
* mini-swe-agent: ``info.exit_status`` is ``LimitsExceeded`` (or another limit it names);
* OpenHands: the run reached its iteration limit (``Agent reached maximum iteration`` in an event or
  in the output's ``error``); a completion log (``fncall_messages``, or ``messages`` + ``response`` in
  the older shape) made as many model calls as the source's ``budget.model_calls`` and its last call
  is not ``finish``;
* tau-bench: the agent took the source's ``budget.steps`` actions and the user never said
  ``###STOP###`` (its calls: the tool calls, or the text agents' ``Action:`` JSON naming a tool other
  than ``respond``);
* tau2-bench: its ``termination_reason`` is ``max_steps`` or ``too_many_errors``;
* AutoCodeRover (a conversation file, a list of chat messages): its search rounds ran out, that is the
  conversation does not end on the harness's ``Here are the code in buggy locations:`` (the one way out
  of the rounds before the limit); its calls are the search results the harness answered, one
  ``Result of <api>(...):`` each (the model writes its calls as text, a second model extracts them).

A file holding several runs (tau-bench, tau2-bench) gives one record per run, keyed by the session id
the replay gives it; a file of one run gives one record keyed ``None``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

import orjson

__all__ = ["RunRecord", "run_records"]

SWE_AGENT_LIMITS: Final = ("exit_cost", "exit_context", "exit_api", "exit_format", "exit_error")
"""SWE-agent's own exits when the run could not go on: a cost, context, API, format or error limit."""
MINI_SWE_AGENT_LIMITS: Final = frozenset({"LimitsExceeded", "TimeoutError", "ExecutionTimeoutError"})
MINI_FORMAT_ERROR: Final = "Please always provide EXACTLY ONE action"
"""mini-swe-agent's answer to a model message without exactly one command: nothing ran."""
TAU2_LIMITS: Final = frozenset({"max_steps", "too_many_errors"})
TAU_STOP: Final = "###STOP###"
TAU_TEXT_ACTION: Final = "Action:"
TAU_REPLY: Final = "respond"
OPENHANDS_LIMIT: Final = "maximum iteration"
ACR_SEARCH_PROMPT: Final = "Based on the files, classes, methods, code statements from the issue"
"""AutoCodeRover's first instruction in every conversation: tells its conversation file apart."""
ACR_LOCATED: Final = "Here are the code in buggy locations:"
ACR_RESULT: Final = re.compile(r"^Result of \w+\(", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class RunRecord:
    at_limit: bool
    calls: int
    """Tool calls the run recorded (for SWE-agent: its steps with a command)."""


def run_records(data: bytes, budget: dict[str, Any] | None = None) -> dict[str | None, RunRecord]:
    """The records of the runs in one transcript file; empty when its format is not one of these."""
    budget = budget or {}
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        return _openhands_output(data)
    if isinstance(doc, dict) and isinstance(doc.get("simulations"), list):
        return {str(s.get("id")): _tau2(s) for s in doc["simulations"] if isinstance(s, dict)}
    if isinstance(doc, list) and doc and all(isinstance(r, dict) and "traj" in r for r in doc):
        steps = int(budget.get("steps", 30))
        return {_tau_id(r): _tau(r, steps) for r in doc}
    if isinstance(doc, list) and _is_auto_code_rover(doc):
        return {None: _auto_code_rover(doc)}
    if isinstance(doc, list):
        return {None: _openhands_events(doc)}
    if not isinstance(doc, dict):
        return {}
    if isinstance(doc.get("fncall_messages"), list):
        return {None: _openhands_completion(doc, int(budget.get("model_calls", 0)))}
    if _older_completion_log(doc):
        older = {"fncall_messages": doc["messages"], "fncall_response": doc["response"]}
        return {None: _openhands_completion(older, int(budget.get("model_calls", 0)))}
    if isinstance(doc.get("trajectory"), list) and doc.get("trajectory_format") is None:
        return {None: _swe_agent(doc)}
    if isinstance(doc.get("history"), list) and "instance_id" in doc:  # an OpenHands output of one row
        return _openhands_output(data)
    if isinstance(doc.get("history"), list) and "trajectory" not in doc and "messages" not in doc:
        return {None: _swe_agent_history(doc)}
    if isinstance(doc.get("messages"), list) and isinstance(doc.get("info"), dict):
        return {None: _mini_swe_agent(doc)}
    return {}


def _swe_agent(doc: dict[str, Any]) -> RunRecord:
    steps = [s for s in doc["trajectory"] if isinstance(s, dict) and not s.get("is_demo")]
    last = str(steps[-1].get("action", "")).strip() if steps else ""
    status = str((doc.get("info") or {}).get("exit_status") or "")
    at_limit = last.startswith(SWE_AGENT_LIMITS) or any(limit in status for limit in SWE_AGENT_LIMITS)
    actions = [str(s.get("action", "")).strip() for s in steps]
    # a step with an empty action is a reply with no command: SWE-agent ran nothing
    calls = sum(1 for action in actions if action and not action.startswith(SWE_AGENT_LIMITS))
    return RunRecord(at_limit, calls)


def _swe_agent_history(doc: dict[str, Any]) -> RunRecord:
    """A SWE-agent trajectory with a function-calling history and no trajectory array."""
    calls = sum(
        len(_tool_calls(entry))
        for entry in doc["history"]
        if isinstance(entry, dict) and entry.get("role") == "assistant" and not entry.get("is_demo")
    )
    status = str((doc.get("info") or {}).get("exit_status") or "")
    return RunRecord(any(limit in status for limit in SWE_AGENT_LIMITS), calls)


def _mini_swe_agent(doc: dict[str, Any]) -> RunRecord:
    messages = [m for m in doc["messages"] if isinstance(m, dict)]
    calls = sum(
        1
        for m, answer in zip(messages, [*messages[1:], {}], strict=True)
        if m.get("role") == "assistant" and not str(answer.get("content", "")).startswith(MINI_FORMAT_ERROR)
    )
    return RunRecord(doc["info"].get("exit_status") in MINI_SWE_AGENT_LIMITS, calls)


def _is_auto_code_rover(doc: list[Any]) -> bool:
    return all(isinstance(m, dict) and "role" in m for m in doc) and any(
        m["role"] == "user" and str(m.get("content", "")).startswith(ACR_SEARCH_PROMPT) for m in doc
    )


def _auto_code_rover(doc: list[dict[str, Any]]) -> RunRecord:
    answers = [str(m.get("content", "")) for m in doc if m["role"] == "user"]
    located = doc[-1]["role"] == "user" and str(doc[-1].get("content", "")).startswith(ACR_LOCATED)
    return RunRecord(not located, sum(len(ACR_RESULT.findall(answer)) for answer in answers))


def _tool_calls(message: Any) -> list[dict[str, Any]]:
    calls = message.get("tool_calls") if isinstance(message, dict) else None
    return [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []


def _name(call: dict[str, Any]) -> str:
    function = call.get("function")
    return str(function.get("name") if isinstance(function, dict) else call.get("name"))


def _openhands_completion(doc: dict[str, Any], model_calls: int) -> RunRecord:
    messages = [m for m in doc["fncall_messages"] if isinstance(m, dict) and m.get("role") == "assistant"]
    calls = sum(len(_tool_calls(m)) for m in messages)
    response = doc.get("fncall_response")
    choices = response.get("choices") if isinstance(response, dict) else None
    last = choices[0].get("message") if isinstance(choices, list) and choices else None
    final = _tool_calls(last)
    finished = any(_name(c) == "finish" for c in final)
    at_limit = bool(model_calls) and len(messages) + 1 >= model_calls and not finished
    return RunRecord(at_limit, calls + len(final))


def _older_completion_log(doc: dict[str, Any]) -> bool:
    """An OpenHands completion log of the older shape: ``{"messages", "response", "args", "kwargs",
    "timestamp", "cost"}``."""
    return (
        isinstance(doc.get("messages"), list)
        and isinstance(doc.get("response"), dict)
        and any(mark in doc for mark in ("kwargs", "args", "cost", "timestamp"))
    )


def _openhands_events(events: list[Any]) -> RunRecord:
    calls = sum(1 for e in events if isinstance(e, dict) and e.get("tool_call_metadata"))
    return RunRecord(any(OPENHANDS_LIMIT in str(e) for e in events[-3:]), calls)


def _openhands_output(data: bytes) -> dict[str | None, RunRecord]:
    records: dict[str | None, RunRecord] = {}
    for line in data.splitlines():
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(row, dict) and isinstance(row.get("history"), list):
            record = _openhands_events(row["history"])
            at_limit = record.at_limit or OPENHANDS_LIMIT in str(row.get("error") or "")
            records[str(row.get("instance_id"))] = RunRecord(at_limit, record.calls)
    return records


def _tau_id(run: dict[str, Any]) -> str:
    trial = run.get("trial")
    return f"task-{run.get('task_id')}" if trial is None else f"task-{run.get('task_id')}-trial-{trial}"


def _tau(run: dict[str, Any], steps: int) -> RunRecord:
    traj = [m for m in run["traj"] if isinstance(m, dict)]
    actions = sum(1 for m in traj if m.get("role") == "assistant")
    stopped = any(m.get("role") == "user" and TAU_STOP in str(m.get("content") or "") for m in traj)
    calls = sum(len(_tool_calls(m)) or _tau_text_call(m) for m in traj if m.get("role") == "assistant")
    return RunRecord(actions >= steps and not stopped, calls)


def _tau_text_call(message: dict[str, Any]) -> int:
    """1 when a text agent's message ends in an action naming a tool (not the reply to the user)."""
    content = message.get("content")
    if not isinstance(content, str) or TAU_TEXT_ACTION not in content:
        return 0
    try:
        action = orjson.loads(content.rsplit(TAU_TEXT_ACTION, 1)[1].strip())
    except orjson.JSONDecodeError:
        return 0
    name = action.get("name") if isinstance(action, dict) else None
    return int(isinstance(name, str) and bool(name) and name != TAU_REPLY)


def _tau2(simulation: dict[str, Any]) -> RunRecord:
    messages = simulation.get("messages")
    agent = (
        [m for m in messages if isinstance(m, dict) and m.get("role") == "assistant"]
        if isinstance(messages, list)
        else []
    )
    calls = sum(len(_tool_calls(m)) for m in agent)
    return RunRecord(simulation.get("termination_reason") in TAU2_LIMITS, calls)
