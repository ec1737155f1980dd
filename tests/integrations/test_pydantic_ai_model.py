"""GuardCapability at Pydantic AI's model-request hooks: a stalled model and a model burning tokens,
in a real agent run with ``FunctionModel`` as the scripted model."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from pydantic import BaseModel
from pydantic_ai import Agent, capture_run_messages
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.usage import RequestUsage

from otelguard import GuardConfig, GuardHalted
from otelguard.integrations.pydantic_ai import GuardCapability
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
from tests.integrations.test_pydantic_ai import scripted

WARNED = (
    "[otelguard warn: no_action_warn] {} model replies in a row made no tool call that could run (an invalid "
    "call, or none at all). Call one of the available tools with valid arguments, or give your final answer."
)
MUSINGS = (
    "Let me think about where the configuration lives.",
    "Perhaps the answer is in the project's documentation.",
    "I should consider what the user asked for first.",
    "There are several ways this could be approached here.",
    "Maybe the tests describe the expected behaviour better.",
    "I wonder whether the build scripts matter for this.",
)


class Answer(BaseModel):
    path: str


def usage() -> RequestUsage:
    return RequestUsage(input_tokens=INPUT_TOKENS, output_tokens=OUTPUT_TOKENS)


def replies(messages: list[ModelMessage]) -> int:
    return sum(isinstance(m, ModelResponse) for m in messages)


def musing(messages: list[ModelMessage]) -> ModelResponse:
    """Text where a tool call is due: Pydantic AI asks again for the output tool."""
    return ModelResponse(parts=[TextPart(MUSINGS[replies(messages) % len(MUSINGS)])], usage=usage())


def unknown_tool(messages: list[ModelMessage]) -> ModelResponse:
    """A call of a tool the agent does not have: Pydantic AI answers with a retry prompt."""
    n = replies(messages)
    call = ToolCallPart(tool_name="read_fiel", args={"path": "a"}, tool_call_id=f"bad{n}")
    return ModelResponse(parts=[call], usage=usage())


def reads(messages: list[ModelMessage]) -> ModelResponse:
    n = replies(messages)
    call = ToolCallPart(tool_name="read_file", args={"path": f"f{n}.txt"}, tool_call_id=f"c{n}")
    return ModelResponse(parts=[call], usage=usage())


def read_then_answer(messages: list[ModelMessage]) -> ModelResponse:
    last = messages[-1].parts if messages else []
    if not any(isinstance(part, ToolReturnPart) for part in last):
        return reads(messages)
    return ModelResponse(parts=[TextPart("It says hello.")], usage=usage())


def agent_with(
    capability: GuardCapability, script: Any, **options: Any
) -> tuple[Agent[Any, Any], list[list[ModelMessage]]]:
    """The agent, and what its model was sent, one list of messages per request."""
    asked: list[list[ModelMessage]] = []

    def counted(messages: list[ModelMessage]) -> ModelResponse:
        asked.append(list(messages))
        response: ModelResponse = script(messages)
        return response

    agent: Agent[Any, Any] = Agent(scripted(counted), capabilities=[capability], **options)

    @agent.tool_plain
    def read_file(path: str) -> str:
        """Read a file."""
        return f"contents of {path}"

    return agent, asked


@pytest.mark.parametrize("script", [musing, unknown_tool], ids=["no call", "invalid calls"])
def test_a_stalled_model_retried_by_pydantic_ai_is_warned_then_stopped(script: Any) -> None:
    host, watch = watched(stalls())
    agent, asked = agent_with(GuardCapability(host=host), script, output_type=Answer, retries=12)

    with pytest.raises(GuardHalted) as stopped:
        agent.run_sync("find the config")

    assert stopped.value.decision.code == "no_action_halt"
    assert len(asked) == NO_ACTION_HALT  # the halt keeps the model from being asked again
    assert watch.model_codes() == {"no_action_warn": NO_ACTION_HALT - NO_ACTION_WARN, "no_action_halt": 1}
    assert watch.turn_outcomes() == ["halted"]


def notes(messages: list[ModelMessage]) -> list[str]:
    return [
        str(part.content)
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, UserPromptPart) and "[otelguard warn:" in str(part.content)
    ]


@pytest.mark.parametrize("script", [musing, unknown_tool], ids=["no call", "invalid calls"])
def test_a_stalled_model_reads_the_warning_in_its_next_request_then_is_stopped(script: Any) -> None:
    host, _watch = watched(stalls())
    agent, seen = agent_with(GuardCapability(host=host), script, output_type=Answer, retries=12)
    with pytest.raises(GuardHalted) as stopped:
        agent.run_sync("find the config")

    # warned from the 2nd stalled reply on: the 3rd and 4th requests end with the warning, for that
    # request only; the 4th reply is stopped
    assert [notes(messages) for messages in seen] == [[], [], [WARNED.format(2)], [WARNED.format(3)]]
    assert all(notes(messages[-1:]) for messages in seen[2:])
    assert stopped.value.decision.code == "no_action_halt"
    # never a word of a reply in a note
    assert not any(part in note for messages in seen for note in notes(messages) for part in MUSINGS)


def test_the_warning_stays_out_of_the_message_history() -> None:
    host, _watch = watched(stalls())
    agent, _asked = agent_with(GuardCapability(host=host), musing, output_type=Answer, retries=12)
    with capture_run_messages() as messages, pytest.raises(GuardHalted):
        agent.run_sync("find the config")

    assert len([m for m in messages if isinstance(m, ModelResponse)]) == NO_ACTION_HALT
    assert notes(messages) == []


def test_a_model_burning_tokens_is_stopped_by_the_turn_cap() -> None:
    host, watch = watched(token_caps(turn=3 * REPLY_TOKENS))
    agent, asked = agent_with(GuardCapability(host=host), reads)

    with pytest.raises(GuardHalted) as stopped:
        agent.run_sync("read everything")

    assert stopped.value.decision.code == "cap_turn"
    assert stopped.value.decision.cap == "tokens"
    assert len(asked) == 3  # no model request once the cap is spent
    assert set(watch.model_codes()) == {"cap_turn"}
    assert watch.turn_outcomes() == ["halted"]


def test_the_session_token_cap_spans_the_runs_of_a_conversation() -> None:
    host, watch = watched(token_caps(session=3 * REPLY_TOKENS))
    agent, asked = agent_with(GuardCapability(host=host), read_then_answer)

    first = agent.run_sync("read one file")
    assert first.output == "It says hello."
    with pytest.raises(GuardHalted):  # the second run crosses the cap
        agent.run_sync("read another", message_history=first.all_messages())
    before = len(asked)
    with pytest.raises(GuardHalted) as stopped:
        agent.run_sync("and one more", message_history=first.all_messages())

    assert len(asked) == before  # blocked before any model request
    assert stopped.value.decision.code == "cap_session"
    assert watch.turn_outcomes() == ["completed", "halted", "halted"]


def test_a_normal_run_gets_no_decision_and_its_replies_are_reported() -> None:
    host, watch = watched(GuardConfig())
    agent, asked = agent_with(GuardCapability(host=host), read_then_answer)

    result = agent.run_sync("read a file")

    assert result.output == "It says hello."
    assert len(asked) == 2
    # nothing added to a request: the prompt, then the prompt, the call and its result
    assert [[type(m).__name__ for m in messages] for messages in asked] == [
        ["ModelRequest"],
        ["ModelRequest", "ModelResponse", "ModelRequest"],
    ]
    assert not any(isinstance(p, UserPromptPart) for p in asked[1][-1].parts)
    assert watch.model_codes() == {} and watch.codes == []
    assert watch.replies() == {"tool_calls": 1, "no_tool_call": 1}
    assert watch.input_tokens() == 2 * INPUT_TOKENS
    assert watch.turn_outcomes() == ["completed"]
