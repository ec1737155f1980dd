"""GuardCapability inside a real Pydantic AI agent run with ``FunctionModel`` as the scripted model."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent, DeferredToolRequests, ModelRetry, RunContext, capture_run_messages
from pydantic_ai.capabilities import AbstractCapability, Instrumentation
from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.run import AgentRunResult

from otelguard import GuardConfig, GuardHalted
from otelguard.integrations.pydantic_ai import GuardCapability
from tests.integrations.conftest import Rig

UNATTENDED = GuardConfig(mode="unattended")
Script = Callable[[list[ModelMessage]], ModelResponse]


def scripted(script: Script) -> FunctionModel:
    return FunctionModel(lambda messages, info: script(messages))


def tool_rounds(messages: list[ModelMessage]) -> int:
    return sum(
        isinstance(m, ModelResponse) and any(isinstance(p, ToolCallPart) for p in m.parts) for m in messages
    )


def returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    return [
        p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)
    ]


def call(name: str, args: dict[str, Any], call_id: str) -> ToolCallPart:
    return ToolCallPart(tool_name=name, args=args, tool_call_id=call_id)


def forever(name: str, args: dict[str, Any]) -> Script:
    return lambda messages: ModelResponse(parts=[call(name, args, f"call_{tool_rounds(messages)}")])


def answer(text: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(text)])


def turn_outcomes(rig: Rig, agent: str = "default") -> dict[str, float]:
    return {
        outcome: rig.sample("otelguard_turns_total", agent=agent, outcome=outcome)
        for outcome in ("completed", "halted", "errored")
    }


def test_retry_forever_is_warned_then_refused_and_the_run_raises_guard_halted(rig: Rig) -> None:
    ran = 0
    seen: list[list[ModelMessage]] = []

    def script(messages: list[ModelMessage]) -> ModelResponse:
        seen.append(list(messages))
        return forever("run_tests", {"path": "tests/"})(messages)

    agent = Agent(
        scripted(script), capabilities=[GuardCapability(UNATTENDED, telemetry=rig.telemetry(), agent="fixer")]
    )

    @agent.tool_plain
    def run_tests(path: str) -> str:
        """Run the test suite."""
        nonlocal ran
        ran += 1
        raise ToolFailed("1 failed")  # the unbounded loop: ToolFailed does not use up retries

    with capture_run_messages() as messages, pytest.raises(GuardHalted) as halted:
        agent.run_sync("fix the tests")

    assert halted.value.decision.code == "exact_failure_block"
    assert ran == 5
    assert len(seen) == 13  # once more after each of the 7 rejects
    shown = [str(r.content) for r in returns(seen[-1])]
    assert len(shown) == 12
    assert "[otelguard warn" not in shown[0]
    assert all(
        "[otelguard warn: exact_failure_warn]" in text for text in shown[1:5]
    )  # the model saw each warning
    assert all("exact_failure_reject" in text for text in shown[5:])  # and each reject
    last = returns(messages)[-1]
    assert json.loads(str(last.content))["otelguard"]["code"] == "exact_failure_block"  # in the history
    assert rig.sample("otelguard_tool_calls_total", agent="fixer", tool="run_tests", outcome="failed") == 5
    assert rig.sample("otelguard_tool_calls_total", agent="fixer", tool="run_tests", outcome="rejected") == 7
    assert rig.sample("otelguard_tool_calls_total", agent="fixer", tool="run_tests", outcome="blocked") == 1
    assert rig.sample("otelguard_turns_total", agent="fixer", outcome="halted") == 1


def test_model_retry_and_plain_exceptions_are_failures(rig: Rig) -> None:
    agent = Agent(
        scripted(forever("flaky", {"x": 1})), capabilities=[GuardCapability(telemetry=rig.telemetry())]
    )
    attempts = 0

    @agent.tool_plain(retries=1)
    def flaky(x: int) -> str:
        """Asks for a retry, then breaks."""
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise ModelRetry("try again")
        raise KeyError("x")

    with pytest.raises(KeyError):
        agent.run_sync("go")
    assert rig.sample("otelguard_tool_calls_total", agent="default", tool="flaky", outcome="failed") == 2
    assert turn_outcomes(rig) == {"completed": 0, "halted": 0, "errored": 1}  # the KeyError ended the run


def test_warnings_reach_the_model_in_the_result() -> None:
    seen: list[list[ModelMessage]] = []

    def script(messages: list[ModelMessage]) -> ModelResponse:
        seen.append(list(messages))
        n = tool_rounds(messages)
        return ModelResponse(parts=[call("read_file", {"path": "a"}, f"c{n}")]) if n < 2 else answer("done")

    agent = Agent(scripted(script), capabilities=[GuardCapability()])

    @agent.tool_plain
    def read_file(path: str) -> str:
        """Read a file."""
        return "same contents"

    assert agent.run_sync("read").output == "done"
    contents = [str(r.content) for r in returns(seen[-1])]
    assert contents[0] == "same contents"
    assert contents[1].startswith("same contents\n\n[otelguard warn: no_progress_warn]")


def test_sixty_parallel_web_searches_stop_at_the_turn_cap(rig: Rig) -> None:
    ran = 0

    def script(messages: list[ModelMessage]) -> ModelResponse:
        if tool_rounds(messages):
            return answer("done")
        return ModelResponse(parts=[call("web_search", {"query": f"q{i}"}, f"c{i}") for i in range(60)])

    agent = Agent(scripted(script), capabilities=[GuardCapability(UNATTENDED, telemetry=rig.telemetry())])

    @agent.tool_plain
    async def web_search(query: str) -> str:
        """Search the web."""
        nonlocal ran
        ran += 1
        return f"results for {query}"

    with pytest.raises(GuardHalted) as halted:
        agent.run_sync("research")
    assert halted.value.decision.code == "cap_turn"
    assert ran == 50
    assert rig.sample("otelguard_cap_hits_total", agent="default", cap="web_search", scope="turn") == 1


def test_a_batch_of_subagent_spawns_is_charged_by_its_size(rig: Rig) -> None:
    batches: list[int] = []
    agent = Agent(
        scripted(forever("delegate_task", {"tasks": [f"t{i}" for i in range(30)]})),
        capabilities=[GuardCapability(UNATTENDED, telemetry=rig.telemetry())],
    )

    @agent.tool_plain
    def delegate_task(tasks: list[str]) -> str:
        """Spawn one subagent per task."""
        batches.append(len(tasks))
        return "spawned"

    with pytest.raises(GuardHalted):
        agent.run_sync("split")
    assert batches == [30]
    assert rig.sample("otelguard_subagent_spawns_total", agent="default") == 30


def test_a_healthy_run_gets_only_allow_and_unchanged_results(rig: Rig) -> None:
    seen: list[list[ModelMessage]] = []

    def script(messages: list[ModelMessage]) -> ModelResponse:
        seen.append(list(messages))
        n = tool_rounds(messages)
        return ModelResponse(parts=[call("read_file", {"path": f"f{n}"}, f"c{n}")]) if n < 3 else answer("ok")

    agent = Agent(scripted(script), capabilities=[GuardCapability(UNATTENDED, telemetry=rig.telemetry())])

    @agent.tool_plain
    def read_file(path: str) -> dict[str, str]:
        """Read a file."""
        return {"path": path, "text": f"contents of {path}"}

    assert agent.run_sync("read").output == "ok"
    assert [r.content for r in returns(seen[-1])] == [
        {"path": f"f{i}", "text": f"contents of f{i}"} for i in range(3)
    ]
    assert not any(s.samples for s in rig.registry.collect() if s.name == "otelguard_decisions")
    assert rig.sample("otelguard_turns_total", agent="default", outcome="completed") == 1


def test_conversations_do_not_share_counters_and_a_new_run_is_a_new_turn() -> None:
    ran = 0

    def three_then_stop(messages: list[ModelMessage]) -> ModelResponse:
        last_prompt = max(
            i
            for i, m in enumerate(messages)
            if isinstance(m, ModelRequest) and any(p.part_kind == "user-prompt" for p in m.parts)
        )
        n = tool_rounds(messages[last_prompt:])
        return (
            ModelResponse(parts=[call("run_tests", {"path": "t"}, f"c{len(messages)}")])
            if n < 4
            else answer("gave up")
        )

    capability = GuardCapability(UNATTENDED)
    agent = Agent(scripted(three_then_stop), capabilities=[capability])

    @agent.tool_plain
    def run_tests(path: str) -> str:
        """Run the test suite."""
        nonlocal ran
        ran += 1
        raise ToolFailed("1 failed")

    first = agent.run_sync("fix", conversation_id="a")
    agent.run_sync("fix", conversation_id="b")
    again = agent.run_sync("again", message_history=first.all_messages())  # inherits conversation a
    assert again.output == "gave up"
    assert ran == 12  # four failures a run: under the block threshold of five, since each run is a turn
    a, b = capability.sessions.peek("a"), capability.sessions.peek("b")
    assert a is not None and b is not None and a is not b
    assert len(capability.sessions) == 2


def test_span_mode_auto_annotates_pydantic_ai_execute_tool_span(rig: Rig) -> None:
    steps = [ModelResponse(parts=[call("web_search", {"query": "a"}, "pyd_1")]), answer("done")]
    agent = Agent(
        scripted(lambda messages: steps[tool_rounds(messages)]),
        capabilities=[
            GuardCapability(telemetry=rig.telemetry("auto"), agent="researcher"),
            Instrumentation(settings=InstrumentationSettings(tracer_provider=rig.provider)),
        ],
    )

    @agent.tool_plain
    def web_search(query: str) -> str:
        """Search the web."""
        return "results"

    agent.run_sync("look")
    tool_spans = [
        s
        for s in rig.exporter.get_finished_spans()
        if (s.attributes or {}).get("gen_ai.operation.name") == "execute_tool"
    ]
    assert len(tool_spans) == 1  # Pydantic AI's own span, not a second one
    attributes = tool_spans[0].attributes or {}
    assert attributes["gen_ai.tool.call.id"] == "pyd_1"
    assert attributes["otelguard.decision.code"] == "allow"
    assert attributes["otelguard.outcome"] == "ok"
    assert attributes["logfire.msg"] == "running tool: web_search"  # set by Pydantic AI itself


def test_span_mode_own_opens_otelguards_span_under_pydantic_ai_span(rig: Rig) -> None:
    steps = [ModelResponse(parts=[call("web_search", {"query": "a"}, "pyd_1")]), answer("done")]
    agent = Agent(
        scripted(lambda messages: steps[tool_rounds(messages)]),
        capabilities=[
            GuardCapability(telemetry=rig.telemetry("own")),
            Instrumentation(settings=InstrumentationSettings(tracer_provider=rig.provider)),
        ],
    )

    @agent.tool_plain
    def web_search(query: str) -> str:
        """Search the web."""
        return "results"

    agent.run_sync("look")
    ours = rig.tool_spans()
    assert len(ours) == 1 and (ours[0].attributes or {})["gen_ai.tool.call.id"] == "pyd_1"
    theirs = [
        s
        for s in rig.exporter.get_finished_spans()
        if (s.attributes or {}).get("logfire.msg") == "running tool: web_search"
    ]
    assert ours[0] is not theirs[0] and ours[0].parent is not None
    assert ours[0].parent.span_id == theirs[0].context.span_id
    assert rig.sample("otelguard_tool_calls_total", agent="default", tool="web_search", outcome="ok") == 1


def test_a_deferred_call_is_recorded_as_cancelled_not_failed(rig: Rig) -> None:
    from pydantic_ai.exceptions import ApprovalRequired

    steps = [ModelResponse(parts=[call("web_search", {"query": "a"}, "d1")]), answer("done")]
    capability = GuardCapability(telemetry=rig.telemetry())
    agent = Agent(
        scripted(lambda messages: steps[tool_rounds(messages)]),
        capabilities=[capability],
        output_type=[str, DeferredToolRequests],
    )

    @agent.tool_plain
    def web_search(query: str) -> str:
        """Search the web, after approval."""
        raise ApprovalRequired()

    result = agent.run_sync("look", conversation_id="c")
    assert isinstance(result.output, DeferredToolRequests)
    assert (
        rig.sample("otelguard_tool_calls_total", agent="default", tool="web_search", outcome="cancelled") == 1
    )
    assert rig.sample("otelguard_tool_calls_total", agent="default", tool="web_search", outcome="failed") == 0


def test_a_run_whose_model_raises_is_an_errored_turn(rig: Rig) -> None:
    """The model call raises (an API error): the run's turn is counted errored when the run ends,
    not completed."""

    def script(messages: list[ModelMessage]) -> ModelResponse:
        if tool_rounds(messages):
            raise ConnectionError("the provider went away")
        return ModelResponse(parts=[call("read_file", {"path": "a"}, "c0")])

    agent = Agent(scripted(script), capabilities=[GuardCapability(UNATTENDED, telemetry=rig.telemetry())])

    @agent.tool_plain
    def read_file(path: str) -> str:
        """Read a file."""
        return "contents"

    with pytest.raises(ConnectionError):
        agent.run_sync("read")
    assert turn_outcomes(rig) == {"completed": 0, "halted": 0, "errored": 1}
    assert rig.sample("otelguard_tool_calls_total", agent="default", tool="read_file", outcome="ok") == 1


def test_the_guards_own_halt_is_a_halted_turn_not_an_errored_one(rig: Rig) -> None:
    agent = Agent(
        scripted(forever("web_search", {"query": "same"})),
        capabilities=[GuardCapability(UNATTENDED, telemetry=rig.telemetry())],
    )

    @agent.tool_plain
    def web_search(query: str) -> str:
        """Search the web."""
        return "nothing new"

    with pytest.raises(GuardHalted):
        agent.run_sync("research")
    assert turn_outcomes(rig) == {"completed": 0, "halted": 1, "errored": 0}


class Recover(AbstractCapability[Any]):
    """Another capability that recovers a failed run with a result of its own."""

    async def on_run_error(self, ctx: RunContext[Any], *, error: BaseException) -> AgentRunResult[Any]:
        return AgentRunResult(output="recovered")


def test_a_run_another_capability_recovers_is_a_completed_turn(rig: Rig) -> None:
    """The turn's outcome is what the run came to: an error recovered by ``on_run_error`` is not one."""

    def script(messages: list[ModelMessage]) -> ModelResponse:
        raise ConnectionError("the provider went away")

    agent = Agent(
        scripted(script), capabilities=[GuardCapability(UNATTENDED, telemetry=rig.telemetry()), Recover()]
    )
    assert agent.run_sync("read").output == "recovered"
    assert turn_outcomes(rig) == {"completed": 1, "halted": 0, "errored": 0}
