"""Pydantic AI agents called from tools, in a delegation tree: real agent runs with ``FunctionModel``
as the scripted model, a supervisor and a worker each asking the other through a tool."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent
from pydantic_ai.capabilities import Instrumentation
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings

from otelguard import GuardConfig, Telemetry
from otelguard.integrations.pydantic_ai import DELEGATES_TO, GuardCapability
from tests.integrations.conftest import Rig


def results(messages: list[ModelMessage]) -> list[str]:
    """What the model was shown as its tool calls' results, successes and failures alike."""
    return [
        str(p.content)
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, (ToolReturnPart, RetryPromptPart))
    ]


def asks(tool: str, *, persist: bool, seen: list[str]) -> FunctionModel:
    """With no result yet the model asks through ``tool``; told its delegation was refused as a
    cycle it asks again (``persist``); told ``Not run`` otherwise it answers itself; any other
    result it answers with."""

    def respond(messages: list[ModelMessage], info: Any) -> ModelResponse:
        shown = results(messages)
        if shown:
            seen.append(shown[-1])
        if not shown or (persist and "delegation_cycle_reject" in shown[-1]):
            return ModelResponse(
                parts=[ToolCallPart(tool, {"task": "dig"}, tool_call_id=f"{tool}{len(shown)}")]
            )
        if "Not run" in shown[-1]:
            return ModelResponse(parts=[TextPart("did it myself")])
        return ModelResponse(parts=[TextPart(f"answer: {shown[-1][:300]}")])

    return FunctionModel(respond)


def tree_config(**delegation: Any) -> GuardConfig:
    return GuardConfig.from_mapping(
        {
            "signature_key": "tests",
            "mode": "unattended",
            "caps": {"on_hit": "reject", "tree": {"ask_*": 100}},
            "delegation": {"max_depth": 8, **delegation},
        }
    )


def ping_pong(
    config: GuardConfig, telemetry: Any, *, persist: bool, seen: list[str], instrument: Any = None
) -> Agent[None, str]:
    """A supervisor whose tool runs the worker, whose tool runs the supervisor: each agent's
    ``GuardCapability`` labels it with its name, and each tool's metadata names the agent it runs."""
    extra = [instrument] if instrument is not None else []
    supervisor: Agent[None, str] = Agent(
        asks("ask_worker", persist=persist, seen=seen),
        name="supervisor",
        capabilities=[GuardCapability(config, telemetry=telemetry, agent="supervisor"), *extra],
    )
    worker: Agent[None, str] = Agent(
        asks("ask_supervisor", persist=persist, seen=seen),
        name="worker",
        capabilities=[GuardCapability(config, telemetry=telemetry, agent="worker"), *extra],
    )

    @supervisor.tool_plain(metadata={DELEGATES_TO: "worker"})
    async def ask_worker(task: str) -> str:
        """Hand the task to the worker."""
        return (await worker.run(task)).output

    @worker.tool_plain(metadata={DELEGATES_TO: "supervisor"})
    async def ask_supervisor(task: str) -> str:
        """Hand the task back to the supervisor."""
        return (await supervisor.run(task)).output

    return supervisor


def decisions(rig: Rig, agent: str, code: str, tool: str, action: str) -> float:
    return rig.sample("otelguard_decisions_total", agent=agent, tool=tool, action=action, code=code)


def test_tools_handing_a_task_back_and_forth_are_warned_then_refused_then_stopped(rig: Rig) -> None:
    """supervisor(0) -> worker(1) runs; worker -> supervisor goes back to an agent on the path
    (warned: it runs, and the warning is in its result); supervisor(2) -> worker would go back a
    second time (refused, the model reads why); its next try stops supervisor(2)'s run, which
    reaches the worker as its tool's failure: the worker and the root supervisor go on and answer."""
    seen: list[str] = []
    supervisor = ping_pong(tree_config(), rig.telemetry(), persist=True, seen=seen)
    result = supervisor.run_sync("go")
    assert decisions(rig, "worker", "delegation_cycle_warn", "ask_supervisor", "warn") == 1
    assert decisions(rig, "supervisor", "delegation_cycle_reject", "ask_worker", "reject") == 1
    assert decisions(rig, "supervisor", "delegation_cycle_block", "ask_worker", "block") == 1
    assert "Not run" in seen[0] and "delegation_cycle_reject" in seen[0]  # supervisor(2) read why
    assert "delegation_cycle_block" in seen[1]  # the worker read that supervisor(2) was stopped
    assert result.output == "answer: did it myself"  # the root got the worker's answer
    assert rig.sample("otelguard_turns_total", agent="supervisor", outcome="halted") == 1
    assert rig.sample("otelguard_turns_total", agent="supervisor", outcome="completed") == 1
    assert rig.sample("otelguard_turns_total", agent="worker", outcome="completed") == 1


def test_the_depth_limit_refuses_only_the_deepest_call(rig: Rig) -> None:
    """With cycles off the agents hand the task down to ``max_depth: 2``: supervisor(2)'s call is
    refused (``delegation_depth``), it answers itself, and the answers go back up."""
    seen: list[str] = []
    supervisor = ping_pong(tree_config(max_depth=2, cycles=False), rig.telemetry(), persist=False, seen=seen)
    assert supervisor.run_sync("go").output == "answer: answer: did it myself"
    assert "delegation_depth" in seen[0]
    assert decisions(rig, "supervisor", "delegation_depth", "ask_worker", "reject") == 1
    assert rig.sample("otelguard_turns_total", agent="supervisor", outcome="completed") == 2


def test_the_tree_cap_holds_across_the_agents_of_the_tree(rig: Rig) -> None:
    """Two ``ask_*`` calls for the whole tree though each agent made at most one: the third is
    refused (``cap_tree``)."""
    config = GuardConfig.from_mapping(
        {
            "signature_key": "tests",
            "mode": "unattended",
            "caps": {"on_hit": "reject", "tree": {"ask_*": 2}},
            "delegation": {"cycles": False},
        }
    )
    seen: list[str] = []
    supervisor = ping_pong(config, rig.telemetry(), persist=False, seen=seen)
    assert supervisor.run_sync("go").output == "answer: answer: did it myself"
    assert "2 of its 2" in seen[0]
    assert decisions(rig, "supervisor", "cap_tree", "ask_worker", "reject") == 1
    assert rig.sample("otelguard_cap_hits_total", agent="supervisor", cap="ask_*", scope="tree") == 1


def test_one_trace_each_agents_turn_under_the_tool_call_that_ran_it(rig: Rig) -> None:
    """Pydantic AI traces each tool call; otelguard's ``invoke_agent`` span of an agent run from a
    tool is a child of that call's span: one trace for the tree."""
    telemetry = Telemetry(tracer_provider=rig.provider, registry=rig.registry, turn_spans=True)
    instrument = Instrumentation(settings=InstrumentationSettings(tracer_provider=rig.provider))
    seen: list[str] = []
    supervisor = ping_pong(
        tree_config(max_depth=2, cycles=False), telemetry, persist=False, seen=seen, instrument=instrument
    )
    supervisor.run_sync("go")
    spans = rig.exporter.get_finished_spans()
    assert len({s.context.trace_id for s in spans}) == 1
    turns = sorted(
        (s for s in spans if "otelguard.delegation.depth" in (s.attributes or {})),
        key=lambda s: (s.attributes or {})["otelguard.delegation.depth"],
    )
    assert [(s.name, (s.attributes or {})["otelguard.delegation.depth"]) for s in turns] == [
        ("invoke_agent supervisor", 0),
        ("invoke_agent worker", 1),
        ("invoke_agent supervisor", 2),
    ]
    by_id = {s.context.span_id: s for s in spans}
    for delegated, tool in ((turns[1], "ask_worker"), (turns[2], "ask_supervisor")):
        assert delegated.parent is not None
        call = by_id[delegated.parent.span_id]  # Pydantic AI's span of the call that ran it
        assert (call.attributes or {}).get("gen_ai.tool.name") == tool
        assert (call.attributes or {}).get("otelguard.decision.code") == "allow"  # annotated by otelguard
