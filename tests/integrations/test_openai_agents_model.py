"""guard_agent at the Agents SDK's ``on_llm_start``/``on_llm_end``: a stalled model and a model
burning tokens, in a real ``Runner`` loop with the SDK's own scripted model."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, RunConfig, RunContextWrapper, Runner, Usage, function_tool, set_tracing_disabled
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from pydantic import BaseModel

from otelguard import GuardConfig, GuardHalted
from otelguard.integrations.openai_agents import guard_agent
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

set_tracing_disabled(True)  # the SDK's own trace exporter would try the network
NO_TRACING = RunConfig(tracing_disabled=True)
ERRORS_TO_MODEL = RunConfig(tracing_disabled=True, tool_not_found_behavior="return_error_to_model")
USAGE = Usage(requests=1, input_tokens=INPUT_TOKENS, output_tokens=OUTPUT_TOKENS, total_tokens=REPLY_TOKENS)


class Answer(BaseModel):
    path: str


@function_tool
def read_file(path: str) -> str:
    """Read a file."""
    return f"contents of {path}"


def scripted(respond: Any, steps: int = 40) -> ScriptedModel:
    """A model answering each call with ``respond(n)`` (``n``: the calls before it), reporting its usage."""
    counter = iter(range(steps))
    return ScriptedModel(
        [ModelStep.respond(lambda call: respond(next(counter))) for _ in range(steps)], default_usage=USAGE
    )


def nothing(n: int) -> Sequence[Any]:
    """An empty reply where structured output is due: the SDK asks the model again."""
    return []


def unknown_tool(n: int) -> Sequence[Any]:
    """A call of a tool the agent does not have: the SDK answers it with an error (as configured)."""
    return [function_call("read_fiel", {"path": "a"}, call_id=f"bad{n}")]


def reads(n: int) -> Sequence[Any]:
    return [function_call("read_file", {"path": f"f{n}.txt"}, call_id=f"c{n}")]


def read_then_answer(n: int) -> Sequence[Any]:
    return reads(n) if n % 2 == 0 else [assistant_message("It says hello.")]


def run(agent: Agent[Any], hooks: Any, text: str, config: RunConfig = NO_TRACING, context: Any = None) -> Any:
    return asyncio.run(Runner.run(agent, text, hooks=hooks, run_config=config, context=context, max_turns=40))


@pytest.mark.parametrize(
    ("script", "config"),
    [(nothing, NO_TRACING), (unknown_tool, ERRORS_TO_MODEL)],
    ids=["no call", "invalid calls"],
)
def test_a_stalled_model_asked_again_by_the_sdk_is_warned_then_stopped(
    script: Any, config: RunConfig
) -> None:
    host, watch = watched(stalls())
    model = scripted(script)
    agent: Agent[Any] = Agent(name="finder", model=model, tools=[read_file], output_type=Answer)
    hooks = guard_agent(agent, host=host)

    with pytest.raises(GuardHalted) as stopped:
        run(agent, hooks, "find the config", config)

    assert stopped.value.decision.code == "no_action_halt"
    assert len(model.calls) == NO_ACTION_HALT  # the halt keeps the model from being asked again
    assert watch.model_codes() == {"no_action_warn": NO_ACTION_HALT - NO_ACTION_WARN, "no_action_halt": 1}
    assert watch.turn_outcomes() == ["halted"]


def test_a_model_burning_tokens_is_stopped_by_the_turn_cap() -> None:
    host, watch = watched(token_caps(turn=3 * REPLY_TOKENS))
    model = scripted(reads)
    agent: Agent[Any] = Agent(name="reader", model=model, tools=[read_file])
    hooks = guard_agent(agent, host=host)

    with pytest.raises(GuardHalted) as stopped:
        run(agent, hooks, "read everything")

    assert stopped.value.decision.code == "cap_turn"
    assert stopped.value.decision.cap == "tokens"
    assert len(model.calls) == 3  # no model request once the cap is spent
    assert set(watch.model_codes()) == {"cap_turn"}
    assert watch.turn_outcomes() == ["halted"]


def test_the_session_token_cap_spans_the_runs_of_a_session() -> None:
    host, watch = watched(token_caps(session=3 * REPLY_TOKENS))
    model = scripted(read_then_answer)
    agent: Agent[Any] = Agent(name="reader", model=model, tools=[read_file])
    hooks = guard_agent(agent, host=host, session_key=lambda context: "s1")

    first = run(agent, hooks, "read one file")
    assert first.final_output == "It says hello."
    with pytest.raises(GuardHalted):  # the second run crosses the cap
        run(agent, hooks, "read another")
    before = len(model.calls)
    with pytest.raises(GuardHalted) as stopped:
        run(agent, hooks, "and one more")

    assert len(model.calls) == before  # blocked before any model request
    assert stopped.value.decision.code == "cap_session"
    assert watch.turn_outcomes() == ["completed", "halted", "halted"]


def test_a_normal_run_gets_no_decision_and_its_replies_are_reported() -> None:
    host, watch = watched(GuardConfig())
    model = scripted(read_then_answer)
    agent: Agent[Any] = Agent(name="reader", model=model, tools=[read_file])
    hooks = guard_agent(agent, host=host)

    result = run(agent, hooks, "read a file")

    assert result.final_output == "It says hello."
    assert len(model.calls) == 2
    assert watch.model_codes() == {} and watch.codes == []
    assert watch.replies() == {"tool_calls": 1, "no_tool_call": 1}
    assert watch.input_tokens() == 2 * INPUT_TOKENS
    assert watch.turn_outcomes() == ["completed"]


def test_responses_of_any_shape_are_read_without_raising() -> None:
    """A hook that raised would end the run: odd output items and usage are read as far as they make
    sense, the rest as invalid calls or usage not reported."""
    host, watch = watched(GuardConfig())
    agent: Agent[Any] = Agent(name="reader", model=scripted(reads), tools=[read_file])
    hooks = guard_agent(agent, host=host)
    context: RunContextWrapper[Any] = RunContextWrapper(context=None)
    odd = [
        SimpleNamespace(type="message", content=[SimpleNamespace(text=3), object()]),
        SimpleNamespace(type="function_call", name=None, arguments=b"\xff"),
        SimpleNamespace(type="function_call", name="read_file", arguments=5),
        SimpleNamespace(type="function_call", name="read_file", arguments='{"path": "a"}'),
    ]
    for response in [SimpleNamespace(), SimpleNamespace(output=odd, usage=SimpleNamespace(input_tokens="x"))]:
        asyncio.run(hooks.on_llm_end(context, agent, response))  # type: ignore[arg-type]

    assert watch.internal_errors == ()
    last = watch.model_events[-1]
    assert (last.tool_calls, last.invalid_tool_calls, last.input_tokens) == (1, 2, None)
