"""LangChain agents invoked from tools, in a delegation tree: real ``create_agent`` loops with a
scripted chat model, a supervisor and a worker each asking the other through a tool."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

pytest.importorskip("langchain.agents")

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.graph import END, START, MessagesState, StateGraph

from otelguard import GuardConfig, Telemetry
from otelguard.integrations.langchain import DELEGATES_TO, GuardMiddleware
from tests.integrations.conftest import Rig


class AsksThrough(BaseChatModel):
    """With no tool result yet it asks through ``tool``; told its delegation was refused as a cycle
    it asks again (``persist``); told ``Not run`` otherwise it answers itself; any other result it
    answers with. ``seen`` gets the last result it was shown at each step."""

    tool: str
    persist: bool
    seen: Any = None  # the caller's list, not a copy

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        shown = [str(m.content) for m in messages if isinstance(m, ToolMessage)]
        if shown:
            self.seen.append(shown[-1])
        if not shown or (self.persist and "delegation_cycle_reject" in shown[-1]):
            call = {
                "name": self.tool,
                "args": {"task": "dig"},
                "id": f"{self.tool}{len(shown)}",
                "type": "tool_call",
            }
            message = AIMessage(content="", tool_calls=[call])
        elif "Not run" in shown[-1]:
            message = AIMessage(content="did it myself")
        else:
            message = AIMessage(content=f"answer: {shown[-1][:300]}")
        return ChatResult(generations=[ChatGeneration(message=message)])

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> AsksThrough:
        return self


def tree_config(**delegation: Any) -> GuardConfig:
    return GuardConfig.from_mapping(
        {
            "signature_key": "tests",
            "mode": "unattended",
            "caps": {"on_hit": "reject", "tree": {"ask_*": 100}},
            "delegation": {"max_depth": 8, **delegation},
        }
    )


def delegating_tool(name: str, agent: str, run: Any, arun: Any) -> BaseTool:
    """A tool that runs another agent; its metadata names that agent."""
    return StructuredTool.from_function(
        func=run,
        coroutine=arun,
        name=name,
        description=f"Hand the task to the {agent}.",
        metadata={DELEGATES_TO: agent},
    )


def ping_pong(
    config: GuardConfig, telemetry: Any, *, persist: bool, seen: list[str], subgraph: bool = False
) -> Any:
    """A supervisor whose tool invokes the worker agent, whose tool invokes the supervisor agent;
    each agent's ``GuardMiddleware`` labels it with its name. ``subgraph``: the supervisor's tool
    invokes a graph that holds the worker agent as a subgraph node."""
    agents: dict[str, Any] = {}

    def last(state: dict[str, Any]) -> str:
        return str(state["messages"][-1].content)

    def to(agent: str) -> tuple[Any, Any]:
        def run(task: str) -> str:
            return last(agents[agent].invoke({"messages": [HumanMessage(task)]}))

        async def arun(task: str) -> str:
            return last(await agents[agent].ainvoke({"messages": [HumanMessage(task)]}))

        return run, arun

    for name, other in (("supervisor", "worker"), ("worker", "supervisor")):
        agents[name] = create_agent(
            AsksThrough(tool=f"ask_{other}", persist=persist, seen=seen),
            tools=[delegating_tool(f"ask_{other}", other, *to(other))],
            middleware=[GuardMiddleware(config, telemetry=telemetry, agent=name)],
            name=name,
        )
    if subgraph:
        team = StateGraph(MessagesState)
        team.add_node("worker", agents["worker"])
        team.add_edge(START, "worker")
        team.add_edge("worker", END)
        agents["worker"] = team.compile()
    return agents["supervisor"]


def decisions(rig: Rig, agent: str, code: str, tool: str, action: str) -> float:
    return rig.sample("otelguard_decisions_total", agent=agent, tool=tool, action=action, code=code)


@pytest.mark.parametrize("mode", ["sync", "async", "subgraph"])
def test_tools_handing_a_task_back_and_forth_are_warned_then_refused_then_stopped(
    rig: Rig, mode: str
) -> None:
    """supervisor(0) -> worker(1) runs; worker -> supervisor goes back to an agent on the path
    (warned: it runs); supervisor(2) -> worker would go back a second time (refused, the model reads
    why); its next try stops supervisor(2)'s run, whose last message says why: the worker reads it
    as its tool's result, with the cycle warning, and the root supervisor goes on."""
    seen: list[str] = []
    supervisor = ping_pong(
        tree_config(), rig.telemetry(), persist=True, seen=seen, subgraph=mode == "subgraph"
    )
    go = {"messages": [HumanMessage("go")]}
    state = asyncio.run(supervisor.ainvoke(go)) if mode == "async" else supervisor.invoke(go)
    assert decisions(rig, "worker", "delegation_cycle_warn", "ask_supervisor", "warn") == 1
    assert decisions(rig, "supervisor", "delegation_cycle_reject", "ask_worker", "reject") == 1
    assert decisions(rig, "supervisor", "delegation_cycle_block", "ask_worker", "block") == 1
    assert "Not run" in seen[0] and "delegation_cycle_reject" in seen[0]  # supervisor(2) read why
    assert seen[1].startswith("Stopped by otelguard: ")  # the worker read that supervisor(2) stopped
    assert "delegation_cycle_warn" in seen[1]  # and its own call's warning
    assert state["messages"][-1].content == "answer: did it myself"
    assert rig.sample("otelguard_turns_total", agent="supervisor", outcome="halted") == 1
    assert rig.sample("otelguard_turns_total", agent="supervisor", outcome="completed") == 1
    assert rig.sample("otelguard_turns_total", agent="worker", outcome="completed") == 1


def test_the_depth_limit_refuses_only_the_deepest_call(rig: Rig) -> None:
    """With cycles off the agents hand the task down to ``max_depth: 2``: supervisor(2)'s call is
    refused (``delegation_depth``), it answers itself, and the answers go back up."""
    seen: list[str] = []
    supervisor = ping_pong(tree_config(max_depth=2, cycles=False), rig.telemetry(), persist=False, seen=seen)
    state = supervisor.invoke({"messages": [HumanMessage("go")]})
    assert state["messages"][-1].content == "answer: answer: did it myself"
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
    state = supervisor.invoke({"messages": [HumanMessage("go")]})
    assert state["messages"][-1].content == "answer: answer: did it myself"
    assert "2 of its 2" in seen[0]
    assert decisions(rig, "supervisor", "cap_tree", "ask_worker", "reject") == 1
    assert rig.sample("otelguard_cap_hits_total", agent="supervisor", cap="ask_*", scope="tree") == 1


def test_one_trace_each_agents_turn_under_the_tool_call_that_ran_it(rig: Rig) -> None:
    """An agent invoked from a tool has its ``invoke_agent`` span, with its depth, under the span of
    the tool call that ran it (otelguard's own: LangChain makes no OpenTelemetry spans): one trace."""
    telemetry = Telemetry(
        tracer_provider=rig.provider, registry=rig.registry, span_mode="own", turn_spans=True
    )
    seen: list[str] = []
    supervisor = ping_pong(tree_config(max_depth=2, cycles=False), telemetry, persist=False, seen=seen)
    supervisor.invoke({"messages": [HumanMessage("go")]})
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
    by_id = {s.context.span_id: s for s in spans}
    for delegated, delegator, tool in (
        (turns[1], turns[0], "ask_worker"),
        (turns[2], turns[1], "ask_supervisor"),
    ):
        assert delegated.parent is not None
        call = by_id[delegated.parent.span_id]
        assert call.name == f"execute_tool {tool}"
        assert call.parent is not None and call.parent.span_id == delegator.context.span_id
