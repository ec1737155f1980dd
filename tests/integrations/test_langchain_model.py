"""GuardMiddleware at LangChain's own model hooks: a stalled model and a model burning tokens, in a
real ``create_agent`` loop with a scripted chat model."""

from __future__ import annotations

import asyncio
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
from tests.integrations.model_turns import (
    INPUT_TOKENS,
    NO_ACTION_HALT,
    NO_ACTION_WARN,
    OUTPUT_TOKENS,
    REPLY_TOKENS,
    stalls,
    token_caps,
    watched,
)
from tests.integrations.test_langchain import model

WARNED = (
    "[otelguard warn: no_action_warn] {} model replies in a row made no tool call that could run (an invalid "
    "call, or none at all). Call one of the available tools with valid arguments, or give your final answer."
)
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
def test_a_stalled_model_re_prompted_by_the_harness_is_warned_then_stopped(script: Any) -> None:
    host, watch = watched(stalls())
    chat = model(script)
    agent = create_agent(chat, [read_file], middleware=[GuardMiddleware(host=host), Nudge()])
    out = agent.invoke({"messages": [HumanMessage("find the config")]})

    assert len(chat.seen) == NO_ACTION_HALT  # the halt keeps the model from being asked again
    last = out["messages"][-1]
    assert isinstance(last, AIMessage) and str(last.content).startswith("Stopped by otelguard: ")
    assert watch.model_codes() == {"no_action_warn": NO_ACTION_HALT - NO_ACTION_WARN, "no_action_halt": 1}
    assert watch.turn_outcomes() == ["halted"]


def notes(messages: list[BaseMessage]) -> list[str]:
    return [str(m.content) for m in messages if "[otelguard warn:" in str(m.content)]


@pytest.mark.parametrize("script", [musing, malformed], ids=["no call", "invalid calls"])
def test_a_stalled_model_reads_the_warning_in_its_next_request_then_is_stopped(script: Any) -> None:
    host, _watch = watched(stalls())
    chat = model(script)
    agent = create_agent(
        chat, [read_file], middleware=[GuardMiddleware(host=host), Nudge()], checkpointer=InMemorySaver()
    )
    out = agent.invoke({"messages": [HumanMessage("find the config")]}, {"configurable": {"thread_id": "t"}})

    # warned from the 2nd stalled reply on: the 3rd and 4th requests end with the warning, for that
    # request only; the 4th reply is stopped
    assert [notes(seen) for seen in chat.seen] == [[], [], [WARNED.format(2)], [WARNED.format(3)]]
    assert all(isinstance(seen[-1], HumanMessage) for seen in chat.seen[2:])
    assert str(out["messages"][-1].content).startswith("Stopped by otelguard: ")
    # nothing of the note in the graph state (the checkpoint), and never a word of a reply in it
    assert notes(out["messages"]) == []
    assert not any(part in note for seen in chat.seen for note in notes(seen) for part in MUSINGS)


def test_the_async_run_delivers_the_warning_too() -> None:
    host, _watch = watched(stalls())
    chat = model(musing)
    agent = create_agent(chat, [read_file], middleware=[GuardMiddleware(host=host), Nudge()])
    asyncio.run(agent.ainvoke({"messages": [HumanMessage("find the config")]}))

    assert [notes(seen) for seen in chat.seen] == [[], [], [WARNED.format(2)], [WARNED.format(3)]]


def test_a_warning_left_unread_when_the_run_ended_is_not_sent_in_the_next_run() -> None:
    host, _watch = watched(stalls())
    chat = model(malformed)
    agent = create_agent(
        chat,
        [read_file],
        middleware=[GuardMiddleware(host=host), Nudge(limit=2)],
        checkpointer=InMemorySaver(),
    )
    thread = {"configurable": {"thread_id": "t"}}
    agent.invoke({"messages": [HumanMessage("find the config")]}, thread)
    assert len(chat.seen) == 3  # the harness gave up after the 3rd reply, which was warned

    agent.invoke({"messages": [HumanMessage("try again")]}, thread)
    assert notes(chat.seen[3]) == []  # a new turn: the last run's warning is not carried over


def test_a_model_repeating_itself_reads_the_repeated_reply_warning() -> None:
    host, watch = watched(stalls())
    chat = model(lambda messages: AIMessage(content=MUSINGS[0], usage_metadata=USAGE))
    agent = create_agent(chat, [read_file], middleware=[GuardMiddleware(host=host), Nudge()])
    agent.invoke({"messages": [HumanMessage("find the config")]})

    sent = [notes(seen) for seen in chat.seen]
    assert sent[:2] == [[], []] and sent[2:] and all(len(n) == 1 for n in sent[2:])
    assert all(n[0].startswith("[otelguard warn: repeated_reply_warn] ") for n in sent[2:])
    assert MUSINGS[0] not in "".join(n[0] for n in sent[2:])
    assert watch.turn_outcomes() == ["halted"]


def test_a_model_burning_tokens_is_stopped_by_the_turn_cap() -> None:
    host, watch = watched(token_caps(turn=3 * REPLY_TOKENS))  # spent by the third reply
    chat = model(reads)
    agent = create_agent(chat, [read_file], middleware=[GuardMiddleware(host=host)])
    out = agent.invoke({"messages": [HumanMessage("read everything")]})

    assert len(chat.seen) == 3  # no model request once the cap is spent
    last = out["messages"][-1]
    assert isinstance(last, AIMessage) and str(last.content).startswith("Stopped by otelguard: ")
    assert set(watch.model_codes()) == {"cap_turn"}
    assert watch.turn_outcomes() == ["halted"]


def test_the_session_token_cap_spans_the_runs_of_a_thread() -> None:
    host, watch = watched(token_caps(session=3 * REPLY_TOKENS))  # two replies per run: spent in the second
    chat = model(read_then_answer)
    agent = create_agent(
        chat, [read_file], middleware=[GuardMiddleware(host=host)], checkpointer=InMemorySaver()
    )
    thread = {"configurable": {"thread_id": "t1"}}
    first = agent.invoke({"messages": [HumanMessage("read one file")]}, thread)
    assert str(first["messages"][-1].content) == "It says hello."
    agent.invoke({"messages": [HumanMessage("read another")]}, thread)
    asked = len(chat.seen)
    third = agent.invoke({"messages": [HumanMessage("and one more")]}, thread)

    assert len(chat.seen) == asked  # the spent session cap blocks before any model request
    assert str(third["messages"][-1].content).startswith("Stopped by otelguard: ")
    assert watch.model_codes()["cap_session"] >= 1
    assert watch.turn_outcomes() == ["completed", "halted", "halted"]


def test_a_normal_run_gets_no_decision_and_its_replies_are_reported() -> None:
    host, watch = watched(GuardConfig())
    chat = model(read_then_answer)
    agent = create_agent(chat, [read_file], middleware=[GuardMiddleware(host=host)])
    out = agent.invoke({"messages": [HumanMessage("read a file")]})

    assert str(out["messages"][-1].content) == "It says hello."
    assert len(chat.seen) == 2
    assert [[type(m).__name__ for m in seen] for seen in chat.seen] == [
        ["HumanMessage"],
        ["HumanMessage", "AIMessage", "ToolMessage"],
    ]  # nothing added to a request
    assert watch.model_codes() == {} and watch.codes == []
    assert watch.replies() == {"tool_calls": 1, "no_tool_call": 1}
    assert watch.input_tokens() == 2 * INPUT_TOKENS
    assert watch.turn_outcomes() == ["completed"]
