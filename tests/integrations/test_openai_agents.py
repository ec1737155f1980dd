"""guard_agent inside a real OpenAI Agents SDK ``Runner`` loop with the SDK's own scripted model."""

from __future__ import annotations

import asyncio
import gc
import importlib.metadata
import inspect
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("agents")

from agents import (
    Agent,
    FunctionTool,
    Handoff,
    RunConfig,
    Runner,
    WebSearchTool,
    function_tool,
    handoff,
    set_tracing_disabled,
)
from agents.exceptions import UserError
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call
from agents.tool_context import ToolContext
from agents.tool_guardrails import ToolInputGuardrailData, ToolOutputGuardrailData

from otelguard import GuardConfig, GuardHalted
from otelguard.integrations.openai_agents import SUPPORTED_SDK_VERSIONS, guard_agent, unguard_agent
from tests.integrations.conftest import Rig

set_tracing_disabled(True)  # the SDK's own trace exporter would try the network
NO_TRACING = RunConfig(tracing_disabled=True)
UNATTENDED = GuardConfig(mode="unattended")
Respond = Callable[[list[dict[str, Any]]], Sequence[Any]]


def scripted(respond: Respond, steps: int = 200) -> ScriptedModel:
    """A model that answers each call with ``respond(input_items)``."""
    return ScriptedModel([ModelStep.respond(lambda call: respond(_items(call))) for _ in range(steps)])


def _items(call: ModelCall) -> list[dict[str, Any]]:
    return (
        [i if isinstance(i, dict) else i.model_dump() for i in call.input]
        if isinstance(call.input, list)
        else []
    )


def outputs(items: list[dict[str, Any]]) -> list[str]:
    return [str(i.get("output")) for i in items if i.get("type") == "function_call_output"]


def tool_rounds(items: list[dict[str, Any]]) -> int:
    return len({i.get("call_id") for i in items if i.get("type") == "function_call"})


def forever(name: str, args: dict[str, Any]) -> Respond:
    return lambda items: [function_call(name, args, call_id=f"call_{tool_rounds(items)}")]


def calls_then(
    name: str,
    args: Callable[[int], dict[str, Any]],
    *,
    rounds: int,
    answer: str,
    seen: list[list[str]] | None = None,
) -> Respond:
    """A model that calls ``name`` with ``args(round)`` for ``rounds`` rounds, then answers ``answer``;
    ``seen`` gets the call results the model was shown at each call."""

    def respond(items: list[dict[str, Any]]) -> Sequence[Any]:
        if seen is not None:
            seen.append(outputs(items))
        n = tool_rounds(items)
        return [function_call(name, args(n), call_id=f"c{n}")] if n < rounds else [assistant_message(answer)]

    return respond


@dataclass
class Ran:
    n: int = 0


def run(agent: Agent[Any], hooks: Any, text: str = "go", context: Any = None) -> Any:
    return asyncio.run(
        Runner.run(agent, text, hooks=hooks, context=context, run_config=NO_TRACING, max_turns=200)
    )


def test_retry_forever_is_warned_then_refused_and_the_run_raises_guard_halted(rig: Rig) -> None:
    ran = Ran()
    seen: list[list[str]] = []

    @function_tool
    def run_tests(path: str) -> str:
        """Run the test suite."""
        ran.n += 1
        raise RuntimeError("1 failed")

    def respond(items: list[dict[str, Any]]) -> Sequence[Any]:
        seen.append(outputs(items))
        return forever("run_tests", {"path": "tests/"})(items)

    agent = Agent(name="fixer", tools=[run_tests], model=scripted(respond))
    hooks = guard_agent(agent, UNATTENDED, telemetry=rig.telemetry())
    with pytest.raises(GuardHalted) as halted:
        run(agent, hooks)

    assert halted.value.decision.code == "exact_failure_block"
    assert ran.n == 5
    assert len(seen) == 13  # once more after each of the 7 rejects; not again after the block
    # The SDK's own failure message still reaches the model, and the refusal is in the history.
    assert len(seen[-1]) == 12
    assert seen[-1][0] == "An error occurred while running the tool. Please try again."
    assert all(
        "[otelguard warn: exact_failure_warn]" in text for text in seen[-1][1:5]
    )  # warnings reach the model
    assert all("exact_failure_reject" in text for text in seen[-1][5:])  # and so do the rejects
    assert rig.sample("otelguard_tool_calls_total", agent="fixer", tool="run_tests", outcome="failed") == 5
    assert rig.sample("otelguard_tool_calls_total", agent="fixer", tool="run_tests", outcome="rejected") == 7
    assert rig.sample("otelguard_tool_calls_total", agent="fixer", tool="run_tests", outcome="blocked") == 1
    assert (
        rig.sample(
            "otelguard_decisions_total",
            agent="fixer",
            tool="run_tests",
            action="warn",
            code="exact_failure_warn",
        )
        == 4
    )
    assert rig.sample("otelguard_turns_total", agent="fixer", outcome="halted") == 1


def test_the_refusal_reaches_the_model_as_the_call_result() -> None:
    seen: list[list[str]] = []

    @function_tool
    def web_search(query: str) -> str:
        """Search the web."""
        return f"results for {query}"

    respond = calls_then("web_search", lambda n: {"query": f"q{n}"}, rounds=3, answer="done", seen=seen)
    agent = Agent(name="r", tools=[web_search], model=scripted(respond))
    config = GuardConfig(caps={"on_hit": "reject", "turn": {"web_search": 2}})
    result = run(agent, guard_agent(agent, config))
    assert result.final_output == "done"
    refused = json.loads(seen[-1][-1])
    assert (
        refused["otelguard"]["code"] == "cap_turn"
    )  # reject_content put the synthetic result in the history


def test_sixty_parallel_web_searches_stop_at_the_turn_cap(rig: Rig) -> None:
    ran = Ran()

    @function_tool
    def web_search(query: str) -> str:
        """Search the web."""
        ran.n += 1
        return f"results for {query}"

    def respond(items: list[dict[str, Any]]) -> Sequence[Any]:
        if tool_rounds(items):
            return [assistant_message("done")]
        return [function_call("web_search", {"query": f"q{i}"}, call_id=f"c{i}") for i in range(60)]

    agent = Agent(name="researcher", tools=[web_search, WebSearchTool()], model=scripted(respond))
    with pytest.raises(GuardHalted) as halted:
        run(agent, guard_agent(agent, UNATTENDED, telemetry=rig.telemetry()))
    assert halted.value.decision.code == "cap_turn"
    assert ran.n == 50
    assert rig.sample("otelguard_cap_hits_total", agent="researcher", cap="web_search", scope="turn") == 1
    assert rig.sample("otelguard_tool_calls_total", agent="researcher", tool="web_search", outcome="ok") == 50


def test_a_batch_of_subagent_spawns_is_charged_by_its_size(rig: Rig) -> None:
    batches: list[int] = []

    @function_tool
    def delegate_task(tasks: list[str]) -> str:
        """Spawn one subagent per task."""
        batches.append(len(tasks))
        return "spawned"

    agent = Agent(
        name="boss",
        tools=[delegate_task],
        model=scripted(forever("delegate_task", {"tasks": [f"t{i}" for i in range(30)]})),
    )
    with pytest.raises(GuardHalted):
        run(agent, guard_agent(agent, UNATTENDED, telemetry=rig.telemetry()))
    assert batches == [30]
    assert rig.sample("otelguard_subagent_spawns_total", agent="boss") == 30


def test_a_healthy_run_gets_only_allow_and_unchanged_results(rig: Rig) -> None:
    seen: list[list[str]] = []

    @function_tool
    def read_file(path: str) -> str:
        """Read a file."""
        return f"contents of {path}"

    respond = calls_then("read_file", lambda n: {"path": f"f{n}.py"}, rounds=3, answer="ok", seen=seen)
    agent = Agent(name="reader", tools=[read_file], model=scripted(respond))
    result = run(agent, guard_agent(agent, UNATTENDED, telemetry=rig.telemetry()))
    assert result.final_output == "ok"
    assert seen[-1] == ["contents of f0.py", "contents of f1.py", "contents of f2.py"]
    assert rig.sample("otelguard_tool_calls_total", agent="reader", tool="read_file", outcome="ok") == 3
    assert not any(s.samples for s in rig.registry.collect() if s.name == "otelguard_decisions")
    assert rig.sample("otelguard_turns_total", agent="reader", outcome="completed") == 1


@dataclass
class Conversation:
    conversation_id: str


def test_sessions_do_not_share_counters_and_a_new_run_is_a_new_turn() -> None:
    ran = Ran()

    @function_tool
    def run_tests(path: str) -> str:
        """Run the test suite."""
        ran.n += 1
        raise RuntimeError("1 failed")

    four_then_stop = calls_then("run_tests", lambda n: {"path": "t"}, rounds=4, answer="gave up")
    agent = Agent(name="fixer", tools=[run_tests], model=scripted(four_then_stop, steps=20))
    hooks = guard_agent(agent, UNATTENDED, session_key=lambda ctx: ctx.context.conversation_id)
    for conversation in ("a", "b", "a"):  # four failures a run stay under the block threshold of five
        assert run(agent, hooks, context=Conversation(conversation)).final_output == "gave up"
    assert ran.n == 12
    a, b = hooks.sessions.peek("a"), hooks.sessions.peek("b")
    assert a is not None and b is not None and a is not b
    assert len(hooks.sessions) == 2


def test_a_custom_failure_function_is_kept() -> None:
    seen: list[list[str]] = []

    def explain(ctx: Any, error: Exception) -> str:
        return f"tool failed: {type(error).__name__}"

    @function_tool(failure_error_function=explain)
    def flaky(x: int) -> str:
        """Always fails."""
        raise KeyError("x")

    respond = calls_then("flaky", lambda n: {"x": 1}, rounds=1, answer="ok", seen=seen)

    agent = Agent(name="a", tools=[flaky], model=scripted(respond))
    hooks = guard_agent(agent)
    run(agent, hooks)
    assert seen[-1] == ["tool failed: KeyError"]
    summary = hooks.sessions.session(None).main.end_turn()
    assert summary.tool_calls == 0  # the run's own turn already ended with the run


def test_a_tool_shared_by_handoff_agents_is_guarded_once(rig: Rig) -> None:
    @function_tool
    def web_search(query: str) -> str:
        """Search the web."""
        return "results"

    specialist = Agent(name="specialist", tools=[web_search])
    triage = Agent(name="triage", tools=[web_search], handoffs=[specialist])
    guard_agent(triage, telemetry=rig.telemetry())
    guard_agent(triage, telemetry=rig.telemetry())
    guarded = triage.tools[0]
    assert specialist.tools[0] is guarded  # one guarded copy for both agents
    assert isinstance(guarded, FunctionTool)
    assert [g.name for g in guarded.tool_input_guardrails or ()] == ["otelguard"]


@pytest.mark.parametrize("span_mode", ["auto", "own"])
def test_metrics_and_spans_carry_the_framework_call_ids(rig: Rig, span_mode: str) -> None:
    @function_tool
    def web_search(query: str) -> str:
        """Search the web."""
        return "results"

    def respond(items: list[dict[str, Any]]) -> Sequence[Any]:
        if tool_rounds(items):
            return [assistant_message("done")]
        return [function_call("web_search", {"query": q}, call_id=f"call_{q}") for q in ("a", "b")]

    agent = Agent(name="researcher", tools=[web_search], model=scripted(respond))
    run(agent, guard_agent(agent, telemetry=rig.telemetry(span_mode)))
    assert rig.sample("otelguard_tool_calls_total", agent="researcher", tool="web_search", outcome="ok") == 2
    spans = rig.tool_spans()
    assert sorted(s.attributes["gen_ai.tool.call.id"] for s in spans) == ["call_a", "call_b"]  # type: ignore[index]
    assert all(s.attributes["otelguard.outcome"] == "ok" for s in spans)  # type: ignore[index]


def test_a_tool_without_failure_function_still_raises_and_the_failure_is_recorded(rig: Rig) -> None:
    @function_tool(failure_error_function=None)
    def strict(x: int) -> str:
        """Always fails."""
        raise KeyError("x")

    agent = Agent(name="a", tools=[strict], model=scripted(forever("strict", {"x": 1})))
    with pytest.raises(UserError, match="Error running tool strict"):  # as without the adapter
        run(agent, guard_agent(agent, telemetry=rig.telemetry()))
    assert rig.sample("otelguard_tool_calls_total", agent="a", tool="strict", outcome="failed") == 1


@settings(max_examples=50, deadline=None)
@given(
    name=st.text(max_size=20),
    arguments=st.one_of(
        st.text(max_size=30), st.builds(json.dumps, st.dictionaries(st.text(max_size=5), st.integers()))
    ),
    call_id=st.text(max_size=10),
    output=st.one_of(st.none(), st.text(max_size=20), st.integers()),
)
def test_the_guardrails_never_raise_for_any_call(
    name: str, arguments: str, call_id: str, output: Any
) -> None:
    @function_tool
    def web_search(query: str) -> str:
        """Search the web."""
        return "results"

    agent = Agent(name="a", tools=[web_search])
    hooks = guard_agent(agent, UNATTENDED)
    guarded = agent.tools[0]
    assert isinstance(guarded, FunctionTool)
    (check,) = guarded.tool_input_guardrails or ()
    (check_output,) = guarded.tool_output_guardrails or ()
    for _ in range(7):
        context = ToolContext(context=None, tool_name=name, tool_call_id=call_id, tool_arguments=arguments)
        allowed = asyncio.run(check.run(ToolInputGuardrailData(context=context, agent=agent)))
        if allowed.behavior["type"] == "allow":
            asyncio.run(
                check_output.run(ToolOutputGuardrailData(context=context, agent=agent, output=output))
            )
    assert len(hooks.sessions) == 1


def test_the_run_configs_tool_error_formatter_still_writes_the_failure_message() -> None:
    seen: list[list[str]] = []

    @function_tool
    def flaky(x: int) -> str:
        """Always fails."""
        raise KeyError("x")

    respond = calls_then("flaky", lambda n: {"x": 1}, rounds=1, answer="ok", seen=seen)

    agent = Agent(name="a", tools=[flaky], model=scripted(respond))
    config = RunConfig(tracing_disabled=True, tool_error_formatter=lambda args: f"formatted {args.kind}")
    asyncio.run(Runner.run(agent, "go", hooks=guard_agent(agent), run_config=config))
    assert seen[-1] == ["formatted tool_exception"]


def turn_outcomes(rig: Rig, agent: str) -> dict[str, float]:
    return {
        outcome: rig.sample("otelguard_turns_total", agent=agent, outcome=outcome)
        for outcome in ("completed", "halted", "errored")
    }


def test_a_tool_exception_raised_out_of_the_run_is_an_errored_turn_at_once(rig: Rig) -> None:
    """The SDK raises the tool's exception to the caller: the failure function saw it, and the turn
    ends as errored before ``Runner.run`` returns to the caller, with no later run needed."""

    @function_tool(failure_error_function=None)
    def strict(x: int) -> str:
        """Always fails."""
        raise KeyError("x")

    agent = Agent(name="a", tools=[strict], model=scripted(forever("strict", {"x": 1})))
    with pytest.raises(UserError):
        run(agent, guard_agent(agent, telemetry=rig.telemetry()))
    assert turn_outcomes(rig, "a") == {"completed": 0, "halted": 0, "errored": 1}


def test_a_run_whose_model_raises_is_an_errored_turn_once_the_sdk_lets_go_of_it(rig: Rig) -> None:
    """No hook sees a model error: the run never reaches ``on_agent_end``, and once Python frees the
    run the hooks' next event counts its turn as errored (never as completed)."""

    @function_tool
    def read_file(path: str) -> str:
        """Read a file."""
        return "contents"

    def respond(items: list[dict[str, Any]]) -> Sequence[Any]:
        if tool_rounds(items) and "again" not in json.dumps(items):
            raise ConnectionError("the provider went away")
        if tool_rounds(items):
            return [assistant_message("done")]
        return [function_call("read_file", {"path": "a"}, call_id="c0")]

    agent = Agent(name="reader", tools=[read_file], model=scripted(respond))
    hooks = guard_agent(agent, telemetry=rig.telemetry(), session_key=lambda run: run.context["id"])
    with pytest.raises(ConnectionError):
        run(agent, hooks, context={"id": "first"})
    assert turn_outcomes(rig, "reader") == {"completed": 0, "halted": 0, "errored": 0}  # still open
    gc.collect()  # the exception and its traceback held the run
    run(agent, hooks, "read it again", context={"id": "second"})  # another conversation's run
    assert turn_outcomes(rig, "reader") == {"completed": 1, "halted": 0, "errored": 1}


def test_the_guards_own_halt_is_a_halted_turn_even_after_the_sdk_lets_go(rig: Rig) -> None:
    @function_tool
    def web_search(query: str) -> str:
        """Search the web."""
        return "nothing new"

    agent = Agent(name="searcher", tools=[web_search], model=scripted(forever("web_search", {"q": "x"})))
    hooks = guard_agent(agent, UNATTENDED, telemetry=rig.telemetry())
    with pytest.raises(GuardHalted):
        run(agent, hooks)
    gc.collect()
    with pytest.raises(GuardHalted):
        run(agent, hooks)
    assert turn_outcomes(rig, "searcher") == {"completed": 0, "halted": 2, "errored": 0}


CAP_ONE_SEARCH = GuardConfig(mode="unattended", caps={"on_hit": "reject", "turn": {"web_search": 1}})


three_searches = calls_then("web_search", lambda n: {"query": f"q{n}"}, rounds=3, answer="done")


def counted_search(ran: Ran) -> FunctionTool:
    @function_tool
    def web_search(query: str) -> str:
        """Search the web."""
        ran.n += 1
        return f"results for {query}"

    return web_search


def test_guard_agent_leaves_the_tools_and_lists_it_was_given_untouched() -> None:
    """The agent is given a new list of guarded copies: the caller's tool objects and lists keep every
    field they had, through a guarded run that refuses a call."""
    ran = Ran()
    web_search = counted_search(ran)
    fields = dict(vars(web_search))
    tools: list[Any] = [web_search]
    specialist_tools: list[Any] = [web_search]
    specialist = Agent(name="specialist", tools=specialist_tools)
    agent = Agent(name="r", tools=tools, handoffs=[specialist], model=scripted(three_searches))
    hooks = guard_agent(agent, CAP_ONE_SEARCH)
    assert run(agent, hooks).final_output == "done"
    assert ran.n == 1  # the guarded copy refused the second and third search
    assert tools == [web_search] and specialist_tools == [web_search]
    assert vars(web_search).keys() == fields.keys()
    assert all(vars(web_search)[name] is value for name, value in fields.items())
    assert web_search.tool_input_guardrails is None and web_search.tool_output_guardrails is None


def test_a_tool_shared_with_an_agent_that_is_not_guarded_stays_unguarded_there() -> None:
    ran = Ran()
    web_search = counted_search(ran)
    guarded = Agent(name="guarded", tools=[web_search])
    hooks = guard_agent(guarded, CAP_ONE_SEARCH)
    plain = Agent(name="plain", tools=[web_search], model=scripted(three_searches))
    assert run(plain, None).final_output == "done"
    assert ran.n == 3
    assert len(hooks.sessions) == 0  # the guarded agent's hooks saw nothing of it


def test_unguard_agent_gives_each_agent_back_its_list_and_the_hooks_see_no_more_calls(rig: Rig) -> None:
    ran = Ran()
    web_search = counted_search(ran)
    tools: list[Any] = [web_search]
    specialist_tools: list[Any] = [web_search]
    specialist = Agent(name="specialist", tools=specialist_tools)
    agent = Agent(name="r", tools=tools, handoffs=[specialist], model=scripted(three_searches))
    hooks = guard_agent(agent, CAP_ONE_SEARCH, telemetry=rig.telemetry())
    assert agent.tools is not tools and specialist.tools is not specialist_tools
    assert unguard_agent(agent) is agent
    assert agent.tools is tools and specialist.tools is specialist_tools
    assert unguard_agent(agent) is agent  # a second time changes nothing
    run(agent, hooks)
    assert ran.n == 3
    assert rig.sample("otelguard_tool_calls_total", agent="r", tool="web_search", outcome="ok") == 0
    assert rig.sample("otelguard_turns_total", agent="r", outcome="completed") == 1  # still its hooks

    run(agent, guard_agent(agent, CAP_ONE_SEARCH))  # and it can be guarded again
    assert ran.n == 4


def test_unguard_agent_keeps_a_change_made_to_the_list_after_guard_agent() -> None:
    ran = Ran()
    web_search = counted_search(ran)

    @function_tool
    def read_file(path: str) -> str:
        """Read a file."""
        return "contents"

    agent = Agent(name="r", tools=[web_search])
    guard_agent(agent)
    agent.tools.append(read_file)
    unguard_agent(agent)
    assert agent.tools == [web_search, read_file]
    assert all(a is b for a, b in zip(agent.tools, [web_search, read_file], strict=True))


def test_an_agent_behind_a_handoff_object_is_guarded_and_unguarded_with_its_root(rig: Rig) -> None:
    ran = Ran()
    web_search = counted_search(ran)
    specialist_tools: list[Any] = [web_search]
    specialist = Agent(name="specialist", tools=specialist_tools, model=scripted(three_searches))
    triage = Agent(
        name="triage",
        handoffs=[handoff(specialist)],
        model=scripted(lambda items: [function_call("transfer_to_specialist", {}, call_id="h0")]),
    )
    hooks = guard_agent(triage, CAP_ONE_SEARCH, telemetry=rig.telemetry())
    assert specialist.tools is not specialist_tools  # before any run: no tool list changes mid-run
    assert run(triage, hooks).final_output == "done"
    assert ran.n == 1  # the handoff was the first of three rounds: two searches, one refused
    assert (
        rig.sample("otelguard_tool_calls_total", agent="triage", tool="web_search", outcome="rejected") == 1
    )
    unguard_agent(triage)
    assert specialist.tools is specialist_tools


def test_the_installed_sdk_is_a_version_the_adapter_is_pinned_for() -> None:
    """What the SDK's public API does not offer is named in one shim (``_openai_agents_sdk``): two
    functions of ``agents.tool`` that the package root does not re-export (they give a guarded copy
    its failure function and run the original tool's failure handling), and the agent behind a
    ``handoff(agent)``. Pinned here, with the shape the shim uses, for each version in
    ``SUPPORTED_SDK_VERSIONS``, which are the versions the ``openai-agents`` extra allows."""
    import agents.tool

    from otelguard.integrations import _openai_agents_sdk as shim

    specialist = Agent(name="specialist")
    assert shim.handoff_agent(handoff(specialist)) is specialist
    made_by_hand = Handoff(
        tool_name="t", tool_description="d", input_json_schema={}, on_invoke_handoff=_never, agent_name="x"
    )
    assert shim.handoff_agent(made_by_hand) is None

    installed = importlib.metadata.version("openai-agents")
    assert installed in SUPPORTED_SDK_VERSIONS
    extra = next(
        line
        for line in (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text().splitlines()
        if line.startswith("openai-agents =")
    )
    assert '"openai-agents>=0.24,<0.25"' in extra
    assert all(version.startswith("0.24.") for version in SUPPORTED_SDK_VERSIONS)
    assert shim.set_failure_function is agents.tool.set_function_tool_failure_error_function
    assert shim.invoke_failure_function is agents.tool.maybe_invoke_function_tool_failure_error_function
    set_failure = inspect.signature(shim.set_failure_function)
    assert list(set_failure.parameters) == ["function_tool", "failure_error_function"]
    invoke_failure = inspect.signature(shim.invoke_failure_function)
    assert list(invoke_failure.parameters) == ["function_tool", "context", "error"]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in invoke_failure.parameters.values())


async def _never(context: Any, arguments: str) -> Agent[Any]:
    raise AssertionError("a handoff is never invoked here")
