"""GuardMiddleware at LangChain's own model hooks: a stalled model and a model burning tokens, in a
real ``create_agent`` loop with a scripted chat model."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("langchain.agents")

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, hook_config
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.messages.tool import invalid_tool_call
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from otelguard import GuardConfig
from otelguard.integrations.langchain import GuardMiddleware
from tests.integrations.conftest import Rig
from tests.integrations.model_turns import (
    INPUT_TOKENS,
    NO_ACTION_HALT,
    OUTPUT_TOKENS,
    REPLY_TOKENS,
    decisions,
    model_calls,
    stalls,
    token_caps,
)
from tests.integrations.test_langchain import model

USAGE = {
    "input_tokens": INPUT_TOKENS,
    "output_tokens": OUTPUT_TOKENS,
    "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS,
}
MUSINGS = (
    "Let me think about where the configuration lives.",
    "Perhaps the answer is in the project's documentation.",
    "I should consider what the user asked for first.",
    "There are several ways this could be approached here.",
    "Maybe the tests describe the expected behaviour better.",
    "I wonder whether the build scripts matter for this.",
)


@tool
def read_file(path: str) -> str:
    """Read a file."""
    return f"contents of {path}"


class Nudge(AgentMiddleware[Any, Any, Any]):
    """The harness: a reply without a valid tool call is answered with a fixed text and the model
    is asked again, as many harnesses do (at most ``limit`` times, so a broken guard cannot hang
    the test)."""

    def __init__(self, limit: int = 12) -> None:
        self.limit = limit
        self.sent = 0

    @hook_config(can_jump_to=["model"])
    def after_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        last = state["messages"][-1]
        if isinstance(last, AIMessage) and not last.tool_calls and self.sent < self.limit:
            self.sent += 1
            return {"messages": [HumanMessage("Call a tool.")], "jump_to": "model"}
        return None


def musing(messages: list[BaseMessage]) -> AIMessage:
    asked = sum(isinstance(m, AIMessage) for m in messages)
    return AIMessage(content=MUSINGS[asked % len(MUSINGS)], usage_metadata=USAGE)


def malformed(messages: list[BaseMessage]) -> AIMessage:
    asked = sum(isinstance(m, AIMessage) for m in messages)
    bad = invalid_tool_call(name="read_file", args='{"path": ', id=f"bad{asked}", error="bad JSON")
    return AIMessage(content="", invalid_tool_calls=[bad], usage_metadata=USAGE)


def reads(messages: list[BaseMessage]) -> AIMessage:
    """Reads a new file on every reply, reporting its usage: tokens burn, no loop repeats."""
    asked = sum(isinstance(m, AIMessage) for m in messages)
    call = {"name": "read_file", "args": {"path": f"f{asked}.txt"}, "id": f"c{asked}", "type": "tool_call"}
    return AIMessage(content="", tool_calls=[call], usage_metadata=USAGE)


def read_then_answer(messages: list[BaseMessage]) -> AIMessage:
    if not any(isinstance(m, ToolMessage) for m in messages[-1:]):
        return reads(messages)
    return AIMessage(content="It says hello.", usage_metadata=USAGE)


@pytest.mark.parametrize("script", [musing, malformed], ids=["no call", "invalid calls"])
def test_a_stalled_model_re_prompted_by_the_harness_is_warned_then_stopped(rig: Rig, script: Any) -> None:
    chat = model(script)
    agent = create_agent(
        chat, [read_file], middleware=[GuardMiddleware(stalls(), telemetry=rig.telemetry()), Nudge()]
    )
    out = agent.invoke({"messages": [HumanMessage("find the config")]})

    assert len(chat.seen) == NO_ACTION_HALT  # the halt keeps the model from being asked again
    last = out["messages"][-1]
    assert isinstance(last, AIMessage) and str(last.content).startswith("Stopped by otelguard: ")
    assert decisions(rig, tool="model") == {"no_action_warn": 1, "no_action_halt": 1}
    assert rig.sample("otelguard_turns_total", agent="default", outcome="halted") == 1


def test_a_model_burning_tokens_is_stopped_by_the_turn_cap(rig: Rig) -> None:
    chat = model(reads)
    limit = 3 * REPLY_TOKENS  # spent by the third reply
    agent = create_agent(
        chat, [read_file], middleware=[GuardMiddleware(token_caps(turn=limit), telemetry=rig.telemetry())]
    )
    out = agent.invoke({"messages": [HumanMessage("read everything")]})

    assert len(chat.seen) == 3  # no model request once the cap is spent
    last = out["messages"][-1]
    assert isinstance(last, AIMessage) and str(last.content).startswith("Stopped by otelguard: ")
    assert set(decisions(rig, tool="model")) == {"cap_turn"}
    assert rig.sample("otelguard_cap_hits_total", agent="default", cap="tokens", scope="turn") >= 1


def test_the_session_token_cap_spans_the_runs_of_a_thread(rig: Rig) -> None:
    chat = model(read_then_answer)
    limit = 3 * REPLY_TOKENS  # two replies per run: spent in the second run
    agent = create_agent(
        chat,
        [read_file],
        middleware=[GuardMiddleware(token_caps(session=limit), telemetry=rig.telemetry())],
        checkpointer=InMemorySaver(),
    )
    thread = {"configurable": {"thread_id": "t1"}}
    first = agent.invoke({"messages": [HumanMessage("read one file")]}, thread)
    assert str(first["messages"][-1].content) == "It says hello."
    agent.invoke({"messages": [HumanMessage("read another")]}, thread)
    asked = len(chat.seen)
    third = agent.invoke({"messages": [HumanMessage("and one more")]}, thread)

    assert len(chat.seen) == asked  # the spent session cap blocks before any model request
    assert str(third["messages"][-1].content).startswith("Stopped by otelguard: ")
    assert decisions(rig, tool="model")["cap_session"] >= 1


def test_a_normal_run_gets_no_decision_and_its_replies_are_counted(rig: Rig) -> None:
    chat = model(read_then_answer)
    agent = create_agent(
        chat, [read_file], middleware=[GuardMiddleware(GuardConfig(), telemetry=rig.telemetry())]
    )
    out = agent.invoke({"messages": [HumanMessage("read a file")]})

    assert str(out["messages"][-1].content) == "It says hello."
    assert len(chat.seen) == 2
    assert decisions(rig) == {}
    assert model_calls(rig) == {"tool_calls": 1, "invalid_tool_call": 0, "no_tool_call": 1}
    assert rig.sample("otelguard_model_tokens_total", agent="default", kind="input") == 2 * INPUT_TOKENS
    assert rig.sample("otelguard_turns_total", agent="default", outcome="completed") == 1
