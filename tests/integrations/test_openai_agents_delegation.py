"""OpenAI Agents SDK handoffs in a delegation tree: a real ``Runner`` loop, the SDK's scripted model,
a supervisor and a worker handing one task back and forth."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, FunctionTool, Handoff, RunConfig, Runner, handoff, set_tracing_disabled
from agents.exceptions import UserError
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

from otelguard import GuardConfig, GuardHalted, Telemetry
from otelguard.integrations._openai_agents_sdk import handoff_agent
from otelguard.integrations.openai_agents import agent_of_tool, agent_tool, guard_agent, unguard_agent
from tests.integrations.conftest import Rig

set_tracing_disabled(True)  # the SDK's own trace exporter would try the network
NO_TRACING = RunConfig(tracing_disabled=True)


def _items(call: ModelCall) -> list[dict[str, Any]]:
    return (
        [i if isinstance(i, dict) else i.model_dump() for i in call.input]
        if isinstance(call.input, list)
        else []
    )


def outputs(items: list[dict[str, Any]]) -> list[str]:
    return [str(i.get("output")) for i in items if i.get("type") == "function_call_output"]


class HandsBack:
    """A model that hands the task to ``target`` at every step, until a call result it reads
    says the handoff was not run (then it answers); ``seen`` gets the results it was shown."""

    def __init__(self, target: str, seen: list[str]) -> None:
        self.target = target
        self.seen = seen
        self.calls = 0

    def model(self) -> ScriptedModel:
        return ScriptedModel([ModelStep.respond(self.respond) for _ in range(50)])

    def respond(self, call: ModelCall) -> Sequence[Any]:
        results = outputs(_items(call))
        self.seen.extend(results[len(self.seen) :])
        self.calls += 1
        if results and "Not run" in results[-1]:
            return [assistant_message("did it myself")]
        return [function_call(f"transfer_to_{self.target}", {}, call_id=f"{self.target}{self.calls}")]


def ping_pong(seen: list[str], *, answer_after_refusal: bool = False) -> tuple[Agent[Any], Agent[Any]]:
    supervisor_model = HandsBack("worker", seen)
    worker_model = HandsBack("supervisor", seen)
    if not answer_after_refusal:
        supervisor_model.respond = _always(supervisor_model)  # type: ignore[method-assign]
        worker_model.respond = _always(worker_model)  # type: ignore[method-assign]
    supervisor = Agent(name="supervisor", model=supervisor_model.model())
    worker = Agent(name="worker", model=worker_model.model())
    supervisor.handoffs = [handoff(worker)]
    worker.handoffs = [handoff(supervisor)]
    return supervisor, worker


def _always(model: HandsBack) -> Any:
    def respond(call: ModelCall) -> Sequence[Any]:
        results = outputs(_items(call))
        model.seen.extend(results[len(model.seen) :])
        model.calls += 1
        return [function_call(f"transfer_to_{model.target}", {}, call_id=f"{model.target}{model.calls}")]

    return respond


def run(agent: Agent[Any], hooks: Any) -> Any:
    return asyncio.run(Runner.run(agent, "go", hooks=hooks, run_config=NO_TRACING, max_turns=50))


def decisions(rig: Rig, agent: str, code: str, tool: str, action: str) -> float:
    return rig.sample("otelguard_decisions_total", agent=agent, tool=tool, action=action, code=code)


def tree_config(**delegation: Any) -> GuardConfig:
    return GuardConfig.from_mapping(
        {
            "signature_key": "tests",
            "mode": "unattended",
            "caps": {"tree": {"transfer_to_*": 100}},
            "delegation": {"max_depth": 8, **delegation},
        }
    )


def test_a_handoff_ping_pong_is_warned_then_refused_then_stopped(rig: Rig) -> None:
    """supervisor -> worker runs; worker -> supervisor goes back to an agent on the path (warned, and
    the warning is in the handoff's result); supervisor -> worker again would go back a second time
    (refused once: the supervisor stays and reads why); its next try stops the run."""
    seen: list[str] = []
    supervisor, _worker = ping_pong(seen)
    hooks = guard_agent(supervisor, tree_config(), telemetry=rig.telemetry("own"))
    with pytest.raises(GuardHalted) as halted:
        run(supervisor, hooks)
    assert halted.value.decision.code == "delegation_cycle_block"
    assert decisions(rig, "worker", "delegation_cycle_warn", "transfer_to_supervisor", "warn") == 1
    assert decisions(rig, "supervisor", "delegation_cycle_reject", "transfer_to_worker", "reject") == 1
    assert decisions(rig, "supervisor", "delegation_cycle_block", "transfer_to_worker", "block") == 1
    assert json_agent(seen[0]) == "worker"  # the first handoff: the SDK's own transfer message
    assert json_agent(seen[1].split("\n")[0]) == "supervisor" and "delegation" in seen[1]  # warned
    assert "Not run" in seen[2] and "delegation_cycle_reject" in seen[2]  # refused, the model reads why
    assert len(seen) == 3  # the stop ended the run before the model was called again
    # each agent of the path its own turn: the root's and the supervisor's second turn halted
    assert rig.sample("otelguard_turns_total", agent="supervisor", outcome="halted") == 1
    assert rig.sample("otelguard_turns_total", agent="worker", outcome="completed") == 1


def json_agent(text: str) -> str:
    import json

    return str(json.loads(text)["assistant"])


def test_without_cycle_detection_the_depth_limit_refuses_only_the_handoff(rig: Rig) -> None:
    """With cycles off the ping-pong goes on until an agent at ``delegation.max_depth`` hands off:
    only that handoff is refused (``delegation_depth``), and that agent goes on and answers."""
    seen: list[str] = []
    supervisor, _worker = ping_pong(seen, answer_after_refusal=True)
    hooks = guard_agent(supervisor, tree_config(max_depth=3, cycles=False), telemetry=rig.telemetry())
    result = run(supervisor, hooks)
    assert result.final_output == "did it myself"
    assert result.last_agent.name == "worker"  # depth 3: S W S W; W's handoff was refused
    assert [json_agent(text) for text in seen[:3]] == ["worker", "supervisor", "worker"]
    assert "Not run" in seen[3] and "delegation_depth" in seen[3]
    assert decisions(rig, "worker", "delegation_depth", "transfer_to_supervisor", "reject") == 1


def test_the_tree_cap_counts_handoffs_across_every_agent_of_the_tree(rig: Rig) -> None:
    """``caps.tree`` holds across the agents the task is handed between: the third handoff of the
    tree is refused (``cap_tree``, ``caps.on_hit: reject``) though no agent made more than two."""
    seen: list[str] = []
    supervisor, _worker = ping_pong(seen, answer_after_refusal=True)
    config = GuardConfig.from_mapping(
        {
            "signature_key": "tests",
            "mode": "unattended",
            "caps": {"on_hit": "reject", "tree": {"transfer_to_*": 2}},
            "delegation": {"max_depth": 8, "cycles": False},
        }
    )
    hooks = guard_agent(supervisor, config, telemetry=rig.telemetry())
    result = run(supervisor, hooks)
    assert result.final_output == "did it myself"
    assert len(seen) == 3 and "2 of its 2" in seen[2]
    assert decisions(rig, "supervisor", "cap_tree", "transfer_to_worker", "reject") == 1
    assert rig.sample("otelguard_cap_hits_total", agent="supervisor", cap="transfer_to_*", scope="tree") == 1


def test_the_handoffs_make_one_trace_each_agent_under_the_handoff_that_started_it(rig: Rig) -> None:
    """Every agent the task was handed to has its ``invoke_agent`` span, with its depth, under the
    span of the handoff call that started it: one trace for the whole tree."""
    seen: list[str] = []
    supervisor, _worker = ping_pong(seen)
    telemetry = Telemetry(
        tracer_provider=rig.provider, registry=rig.registry, span_mode="own", turn_spans=True
    )
    hooks = guard_agent(supervisor, tree_config(), telemetry=telemetry)
    with pytest.raises(GuardHalted):
        run(supervisor, hooks)
    spans = rig.exporter.get_finished_spans()
    assert len({s.context.trace_id for s in spans}) == 1
    turns = sorted(
        (s for s in spans if s.name.startswith("invoke_agent")),
        key=lambda s: (s.attributes or {})["otelguard.delegation.depth"],
    )
    assert [(s.name, (s.attributes or {})["otelguard.delegation.depth"]) for s in turns] == [
        ("invoke_agent supervisor", 0),
        ("invoke_agent worker", 1),
        ("invoke_agent supervisor", 2),
    ]
    handoffs = {s.context.span_id: s for s in spans if s.name.startswith("execute_tool transfer_to_")}
    assert turns[0].parent is None
    for delegated, delegator in ((turns[1], turns[0]), (turns[2], turns[1])):
        assert delegated.parent is not None
        call = handoffs[delegated.parent.span_id]  # under the handoff call that started it
        assert call.name == f"execute_tool transfer_to_{delegated.name.split()[-1]}"
        assert call.parent is not None and call.parent.span_id == delegator.context.span_id


# -- an agent calling itself as a tool (``agent_tool``, the SDK's ``as_tool``) --------------------


def asks_itself(*, persist: bool) -> ScriptedModel:
    """A researcher's model: with no result yet it asks itself (its agent tool); told ``Not run`` it
    asks again (``persist``) or answers; any other result it answers with."""

    def respond(call: ModelCall) -> Sequence[Any]:
        results = outputs(_items(call))
        if not results or (persist and "Not run" in results[-1]):
            return [function_call("ask_researcher", {"input": "dig"}, call_id=f"r{len(results)}")]
        if "Not run" in results[-1]:
            return [assistant_message("did it myself")]
        return [assistant_message(f"answer: {results[-1][:400]}")]

    return ScriptedModel([ModelStep.respond(respond) for _ in range(50)])


def self_calling(persist: bool) -> Agent[Any]:
    researcher = Agent(name="researcher", model=asks_itself(persist=persist))
    researcher.tools = [agent_tool(researcher, "ask_researcher", "Ask a researcher.")]
    return researcher


def test_an_agent_calling_itself_as_a_tool_is_warned_then_its_copy_is_refused_then_stopped(
    rig: Rig,
) -> None:
    """researcher(0) asks itself: a delegation back to an agent on the path (warned: the call runs).
    researcher(1) asks itself again: the path would go back a second time (refused, the model reads
    why); asking once more stops researcher(1)'s run. researcher(0) gets that as the tool's error
    and goes on."""
    researcher = self_calling(persist=True)
    telemetry = Telemetry(
        tracer_provider=rig.provider, registry=rig.registry, span_mode="own", turn_spans=True
    )
    hooks = guard_agent(researcher, tree_config(), telemetry=telemetry)
    result = run(researcher, hooks)
    assert decisions(rig, "researcher", "delegation_cycle_warn", "ask_researcher", "warn") == 1
    assert decisions(rig, "researcher", "delegation_cycle_reject", "ask_researcher", "reject") == 1
    assert decisions(rig, "researcher", "delegation_cycle_block", "ask_researcher", "block") == 1
    assert result.final_output.startswith("answer: ") and "delegation" in result.final_output
    assert rig.sample("otelguard_turns_total", agent="researcher", outcome="halted") == 1  # the copy
    assert rig.sample("otelguard_turns_total", agent="researcher", outcome="completed") == 1  # the root
    assert (
        rig.sample("otelguard_tool_calls_total", agent="researcher", tool="ask_researcher", outcome="failed")
        == 1
    )
    spans = rig.exporter.get_finished_spans()
    assert len({s.context.trace_id for s in spans}) == 1
    root, copy = sorted(
        (s for s in spans if s.name == "invoke_agent researcher"),
        key=lambda s: (s.attributes or {})["otelguard.delegation.depth"],
    )
    assert (root.attributes or {})["otelguard.delegation.depth"] == 0
    assert (copy.attributes or {})["otelguard.delegation.depth"] == 1
    assert copy.parent is not None
    call = next(s for s in spans if s.context.span_id == copy.parent.span_id)
    assert call.name == "execute_tool ask_researcher"  # the call that started it
    assert call.parent is not None and call.parent.span_id == root.context.span_id


def test_recursion_as_a_tool_stops_at_the_depth_limit_and_only_the_deepest_call_is_refused(
    rig: Rig,
) -> None:
    """With cycles off, researcher(2) (at ``max_depth: 2``) may not ask itself: only that call is
    refused (``delegation_depth``); it answers, and the answers go back up."""
    researcher = self_calling(persist=False)
    hooks = guard_agent(researcher, tree_config(max_depth=2, cycles=False), telemetry=rig.telemetry())
    result = run(researcher, hooks)
    assert result.final_output.startswith("answer: answer: did it myself")
    assert decisions(rig, "researcher", "delegation_depth", "ask_researcher", "reject") == 1
    assert rig.sample("otelguard_turns_total", agent="researcher", outcome="completed") == 3


def test_the_tree_cap_holds_across_the_recursive_copies(rig: Rig) -> None:
    """Two agent-tool calls for the whole tree: researcher(2)'s is refused (``cap_tree``)."""
    researcher = self_calling(persist=False)
    config = GuardConfig.from_mapping(
        {
            "signature_key": "tests",
            "mode": "unattended",
            "caps": {"on_hit": "reject", "tree": {"ask_*": 2}},
            "delegation": {"max_depth": 8, "cycles": False},
        }
    )
    result = run(researcher, guard_agent(researcher, config, telemetry=rig.telemetry()))
    assert result.final_output.startswith("answer: answer: did it myself")
    assert decisions(rig, "researcher", "cap_tree", "ask_researcher", "reject") == 1
    assert rig.sample("otelguard_cap_hits_total", agent="researcher", cap="ask_*", scope="tree") == 1


def test_agent_tool_is_the_sdks_as_tool_and_outside_a_tree_nothing_changes(rig: Rig) -> None:
    """An ``agent_tool`` is the SDK's own agent tool; a guard in no tree sees a plain call."""
    researcher = self_calling(persist=False)
    tool = researcher.tools[0]
    assert isinstance(tool, FunctionTool) and tool.name == "ask_researcher"
    assert agent_of_tool(tool) is researcher
    config = GuardConfig.from_mapping(
        {"signature_key": "tests", "caps": {"on_hit": "reject", "session": {"ask_*": 2}}}
    )
    result = run(researcher, guard_agent(researcher, config, telemetry=rig.telemetry()))
    assert result.final_output.startswith("answer: answer: did it myself")
    assert (
        rig.sample("otelguard_tool_calls_total", agent="researcher", tool="ask_researcher", outcome="ok") == 2
    )


def test_guarded_handoffs_are_copies_and_unguard_agent_gives_the_lists_back() -> None:
    """``guard_agent`` gives each agent a new handoff list of guarded copies (the SDK's ``Handoff``
    with its own fields: the same tool name, target and agent behind it); ``unguard_agent`` gives
    each agent back the list it had."""
    seen: list[str] = []
    supervisor, worker = ping_pong(seen)
    lists = (supervisor.handoffs, worker.handoffs)
    originals = (supervisor.handoffs[0], worker.handoffs[0])
    guard_agent(supervisor, tree_config())
    assert supervisor.handoffs is not lists[0] and worker.handoffs is not lists[1]
    copy = supervisor.handoffs[0]
    assert isinstance(copy, Handoff) and copy is not originals[0]
    assert (copy.tool_name, copy.agent_name) == (originals[0].tool_name, originals[0].agent_name)
    assert copy.input_json_schema == originals[0].input_json_schema
    assert handoff_agent(copy) is worker  # the SDK's own record of the agent behind it, kept
    unguard_agent(supervisor)
    assert (supervisor.handoffs, worker.handoffs) == lists
    assert supervisor.handoffs is lists[0] and worker.handoffs is lists[1]


def test_a_stop_deep_in_the_recursion_is_the_failure_of_the_call_that_started_that_run(rig: Rig) -> None:
    """researcher(2) is stopped by the tree cap (``caps.on_hit: block``): its run ends, and the
    ``GuardHalted`` is the failure of researcher(1)'s call, recorded by researcher(1)'s guard, whose
    delegating span then ends (a call recorded by another guard would leave it open)."""
    researcher = self_calling(persist=False)
    config = GuardConfig.from_mapping(
        {
            "signature_key": "tests",
            "mode": "unattended",
            "caps": {"on_hit": "block", "tree": {"ask_*": 2}},
            "delegation": {"max_depth": 8, "cycles": False},
        }
    )
    telemetry = Telemetry(
        tracer_provider=rig.provider, registry=rig.registry, span_mode="own", turn_spans=True
    )
    result = run(researcher, guard_agent(researcher, config, telemetry=telemetry))
    assert result.final_output.startswith("answer: answer: ")
    assert decisions(rig, "researcher", "cap_tree", "ask_researcher", "block") == 1
    outcomes = {
        outcome: rig.sample(
            "otelguard_tool_calls_total", agent="researcher", tool="ask_researcher", outcome=outcome
        )
        for outcome in ("ok", "failed", "blocked")
    }
    assert outcomes == {"ok": 1, "failed": 1, "blocked": 1}
    spans = rig.exporter.get_finished_spans()
    calls = [s for s in spans if s.name == "execute_tool ask_researcher"]
    assert len(calls) == 3  # each call's span ended: researcher(0)'s, researcher(1)'s, the refused one
    turns = {
        (s.attributes or {})["otelguard.delegation.depth"]: s
        for s in spans
        if s.name.startswith("invoke_agent")
    }
    assert sorted(turns) == [0, 1, 2]
    assert (turns[2].attributes or {})["otelguard.turn.outcome"] == "halted"


def test_a_stop_raised_through_agent_tools_without_failure_handling_ends_every_run_it_leaves(
    rig: Rig,
) -> None:
    """With ``failure_error_function=None`` the SDK raises a tool's exception out of the run: the
    ``GuardHalted`` of researcher(2) leaves researcher(1)'s run and researcher(0)'s, each call
    recorded as failed by the guard that allowed it (its span ends) and each run's turn ended."""
    researcher = Agent(name="researcher", model=asks_itself(persist=False))
    researcher.tools = [
        agent_tool(researcher, "ask_researcher", "Ask a researcher.", failure_error_function=None)
    ]
    config = GuardConfig.from_mapping(
        {
            "signature_key": "tests",
            "mode": "unattended",
            "caps": {"on_hit": "block", "tree": {"ask_*": 2}},
            "delegation": {"max_depth": 8, "cycles": False},
        }
    )
    telemetry = Telemetry(
        tracer_provider=rig.provider, registry=rig.registry, span_mode="own", turn_spans=True
    )
    with pytest.raises(UserError, match="delegation tree already used 2 of its 2"):  # the SDK's wrap
        run(researcher, guard_agent(researcher, config, telemetry=telemetry))
    spans = rig.exporter.get_finished_spans()
    assert len([s for s in spans if s.name == "execute_tool ask_researcher"]) == 3
    turns = {
        (s.attributes or {})["otelguard.delegation.depth"]: s
        for s in spans
        if s.name.startswith("invoke_agent")
    }
    assert sorted(turns) == [0, 1, 2]
    assert (
        rig.sample("otelguard_tool_calls_total", agent="researcher", tool="ask_researcher", outcome="failed")
        == 2
    )
