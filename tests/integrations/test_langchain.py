"""GuardMiddleware inside a real ``langchain.agents.create_agent`` loop with a scripted chat model."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import Field

pytest.importorskip("langchain.agents")

from langchain.agents import create_agent
from langchain.agents.middleware import (
    AgentMiddleware,
    ModelRetryMiddleware,
    ToolCallRequest,
    ToolRetryMiddleware,
)
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import ToolException, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command, interrupt

from otelguard import GuardConfig
from otelguard.integrations.langchain import GuardMiddleware
from tests.integrations.conftest import Rig

Script = Callable[[list[BaseMessage]], AIMessage]


class ScriptedChatModel(BaseChatModel):
    """A chat model whose every answer comes from ``script(messages)``; records what it was shown."""

    script: Script
    seen: list[list[BaseMessage]] = Field(default_factory=list)

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        self.seen.append(list(messages))
        return ChatResult(generations=[ChatGeneration(message=self.script(messages))])

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        return self


def model(script: Script) -> ScriptedChatModel:
    return ScriptedChatModel(script=script)


def calls(*specs: tuple[str, dict[str, Any]], prefix: str = "call") -> AIMessage:
    return AIMessage(
        content="",
        tool_calls=[
            {"name": n, "args": a, "id": f"{prefix}_{i}", "type": "tool_call"}
            for i, (n, a) in enumerate(specs)
        ],
    )


def tool_turns(messages: list[BaseMessage]) -> int:
    return sum(isinstance(m, AIMessage) and bool(m.tool_calls) for m in messages)


def forever(name: str, args: dict[str, Any]) -> Script:
    """A model that calls the same tool with the same arguments on every step."""
    return lambda messages: calls((name, args), prefix=f"step{tool_turns(messages)}")


class Counter:
    def __init__(self) -> None:
        self.n = 0
        self.lock = threading.Lock()

    def tick(self) -> int:
        with self.lock:
            self.n += 1
            return self.n


UNATTENDED = GuardConfig(mode="unattended")


def turn_outcomes(rig: Rig, agent: str = "default") -> dict[str, float]:
    return {
        outcome: rig.sample("otelguard_turns_total", agent=agent, outcome=outcome)
        for outcome in ("completed", "halted", "errored")
    }


def test_retry_forever_is_warned_then_refused_and_the_run_ends(rig: Rig) -> None:
    ran = Counter()

    @tool
    def run_tests(path: str) -> str:
        """Run the test suite."""
        ran.tick()
        raise ToolException("1 failed")

    run_tests.handle_tool_error = True  # LangChain's own path: an error ToolMessage

    chat = model(forever("run_tests", {"path": "tests/"}))
    agent = create_agent(
        chat, [run_tests], middleware=[GuardMiddleware(UNATTENDED, telemetry=rig.telemetry())]
    )
    out = agent.invoke({"messages": [HumanMessage("fix the tests")]})

    assert ran.n == 5  # exact_failure rejects the 6th to 12th identical failing calls, blocks the 13th
    tool_messages = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert [m.status for m in tool_messages] == ["error"] * 13
    codes = [json.loads(str(m.content))["otelguard"]["code"] for m in tool_messages[5:-1]]
    assert codes == ["exact_failure_reject"] * 7
    refused = json.loads(str(tool_messages[-1].content))
    assert refused["otelguard"]["code"] == "exact_failure_block"
    assert "[otelguard warn: exact_failure_warn]" in str(
        tool_messages[1].content
    )  # the model saw the warning
    assert any("exact_failure_warn" in str(m.content) for m in chat.seen[-1] if isinstance(m, ToolMessage))
    last = out["messages"][-1]
    assert isinstance(last, AIMessage) and not last.tool_calls
    assert str(last.content).startswith("Stopped by otelguard: ")
    assert len(chat.seen) == 13  # one model call after each reject, none after the block
    assert rig.sample("otelguard_tool_calls_total", agent="default", tool="run_tests", outcome="failed") == 5
    assert (
        rig.sample("otelguard_tool_calls_total", agent="default", tool="run_tests", outcome="rejected") == 7
    )
    assert rig.sample("otelguard_tool_calls_total", agent="default", tool="run_tests", outcome="blocked") == 1
    assert rig.sample("otelguard_turns_total", agent="default", outcome="halted") == 1


def test_sixty_parallel_web_searches_stop_at_the_turn_cap(rig: Rig) -> None:
    ran = Counter()

    @tool
    def web_search(query: str) -> str:
        """Search the web."""
        ran.tick()
        return f"results for {query}"

    def script(messages: list[BaseMessage]) -> AIMessage:
        if tool_turns(messages):
            return AIMessage(content="done")
        return calls(*[("web_search", {"query": f"q{i}"}) for i in range(60)])

    chat = model(script)
    agent = create_agent(
        chat, [web_search], middleware=[GuardMiddleware(UNATTENDED, telemetry=rig.telemetry())]
    )
    out = agent.invoke({"messages": [HumanMessage("research")]})

    assert ran.n == 50  # parallel calls in any order, and the cap never overshoots
    refused = [m for m in out["messages"] if isinstance(m, ToolMessage) and m.status == "error"]
    codes = sorted(json.loads(str(m.content))["otelguard"]["code"] for m in refused)
    assert codes.count("cap_turn") == 1 and len(codes) == 10  # the rest: turn_halted
    assert len(chat.seen) == 1
    assert rig.sample("otelguard_cap_hits_total", agent="default", cap="web_search", scope="turn") == 1


def test_sequential_web_searches_stop_at_the_turn_cap() -> None:
    ran = Counter()

    @tool
    def web_search(query: str) -> str:
        """Search the web."""
        return f"results {ran.tick()}"

    def script(messages: list[BaseMessage]) -> AIMessage:
        n = tool_turns(messages)
        return (
            calls(("web_search", {"query": f"q{n}"}), prefix=f"s{n}") if n < 60 else AIMessage(content="done")
        )

    chat = model(script)
    agent = create_agent(chat, [web_search], middleware=[GuardMiddleware(UNATTENDED)])
    out = agent.invoke({"messages": [HumanMessage("research")]})
    assert ran.n == 50
    assert len(chat.seen) == 51
    assert "web searches" in str(out["messages"][-1].content)


def test_a_batch_of_subagent_spawns_is_charged_by_its_size(rig: Rig) -> None:
    batches: list[int] = []

    @tool
    def delegate_task(tasks: list[str]) -> str:
        """Spawn one subagent per task."""
        batches.append(len(tasks))
        return "spawned"

    def script(messages: list[BaseMessage]) -> AIMessage:
        n = tool_turns(messages)
        return calls(("delegate_task", {"tasks": [f"t{i}" for i in range(30)]}), prefix=f"s{n}")

    agent = create_agent(
        model(script), [delegate_task], middleware=[GuardMiddleware(UNATTENDED, telemetry=rig.telemetry())]
    )
    out = agent.invoke({"messages": [HumanMessage("split the work")]})
    assert batches == [30]  # 30 + 30 > 50: the second batch never ran
    assert json.loads(str(out["messages"][-2].content))["otelguard"]["code"] == "cap_turn"
    assert rig.sample("otelguard_subagent_spawns_total", agent="default") == 30


def test_a_healthy_run_gets_only_allow_and_unchanged_results(rig: Rig) -> None:
    @tool
    def read_file(path: str) -> str:
        """Read a file."""
        return f"contents of {path}"

    @tool
    def write_file(path: str, text: str) -> str:
        """Write a file."""
        return f"wrote {len(text)} bytes to {path}"

    steps = [
        calls(("read_file", {"path": "a.py"}), prefix="r"),
        calls(("write_file", {"path": "a.py", "text": "x = 1"}), prefix="w"),
        AIMessage(content="all done"),
    ]
    agent = create_agent(
        model(lambda messages: steps[tool_turns(messages)]),
        [read_file, write_file],
        middleware=[GuardMiddleware(UNATTENDED, telemetry=rig.telemetry())],
    )
    out = agent.invoke({"messages": [HumanMessage("edit")]})
    contents = [m.content for m in out["messages"] if isinstance(m, ToolMessage)]
    assert contents == ["contents of a.py", "wrote 5 bytes to a.py"]
    assert out["messages"][-1].content == "all done"
    assert not [s for s in rig.registry.collect() if s.name == "otelguard_decisions" and s.samples]
    assert rig.sample("otelguard_turns_total", agent="default", outcome="completed") == 1


def test_threads_do_not_share_counters_and_a_new_turn_clears_per_turn_state() -> None:
    ran = Counter()

    @tool
    def run_tests(path: str) -> str:
        """Run the test suite."""
        ran.tick()
        raise ToolException("1 failed")

    run_tests.handle_tool_error = True  # LangChain's own path: an error ToolMessage

    def three_then_stop(messages: list[BaseMessage]) -> AIMessage:
        since_human = messages[max(i for i, m in enumerate(messages) if isinstance(m, HumanMessage)) :]
        n = tool_turns(since_human)
        return (
            calls(("run_tests", {"path": "t"}), prefix=f"{len(messages)}")
            if n < 4
            else AIMessage(content="gave up")
        )

    middleware = GuardMiddleware(UNATTENDED)
    agent = create_agent(
        model(three_then_stop), [run_tests], middleware=[middleware], checkpointer=InMemorySaver()
    )

    def turn(thread: str) -> list[BaseMessage]:
        out = agent.invoke({"messages": [HumanMessage("again")]}, {"configurable": {"thread_id": thread}})
        return list(out["messages"])

    turn("a")
    turn("b")  # another thread: its own guard, so four failures stay under the block threshold
    assert ran.n == 8
    a = middleware.sessions.peek("a")
    assert a is not None and a is not middleware.sessions.peek("b")
    messages = turn("a")  # a new turn of thread a: the exact-failure count starts again
    assert ran.n == 12
    assert messages[-1].content == "gave up"
    assert len(middleware.sessions) == 2


def test_interrupts_pass_through_untouched_and_are_not_failures(rig: Rig) -> None:
    @tool
    def deploy(target: str) -> str:
        """Deploy after a human says yes."""
        answer = interrupt({"question": "deploy?"})
        return f"deployed: {answer}"

    steps = [calls(("deploy", {"target": "prod"}), prefix="d"), AIMessage(content="ok")]
    agent = create_agent(
        model(lambda messages: steps[tool_turns(messages)]),
        [deploy],
        middleware=[GuardMiddleware(telemetry=rig.telemetry())],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "t"}}
    first = agent.invoke({"messages": [HumanMessage("ship it")]}, config)
    assert "__interrupt__" in first
    assert rig.sample("otelguard_tool_calls_total", agent="default", tool="deploy", outcome="failed") == 0
    out = agent.invoke(Command(resume="yes"), config)
    # The resumed call is the same call: counted once in the turn, which the resumed run ends.
    assert rig.sample("otelguard_turn_tool_calls_sum", agent="default") == 1
    assert out["messages"][-1].content == "ok"
    assert rig.sample("otelguard_tool_calls_total", agent="default", tool="deploy", outcome="ok") == 1
    assert rig.sample("otelguard_tool_calls_total", agent="default", tool="deploy", outcome="failed") == 0
    assert turn_outcomes(rig) == {"completed": 1, "halted": 0, "errored": 0}  # an interrupt is no error


@pytest.mark.parametrize("span_mode", ["auto", "own"])
def test_metrics_and_spans_carry_the_framework_call_ids(rig: Rig, span_mode: str) -> None:
    @tool
    def web_search(query: str) -> str:
        """Search the web."""
        return "results"

    steps = [
        calls(("web_search", {"query": "a"}), ("web_search", {"query": "b"}), prefix="lc"),
        AIMessage(content="done"),
    ]
    agent = create_agent(
        model(lambda messages: steps[tool_turns(messages)]),
        [web_search],
        middleware=[GuardMiddleware(telemetry=rig.telemetry(span_mode), agent="researcher")],
    )
    agent.invoke({"messages": [HumanMessage("look")]})
    assert rig.sample("otelguard_tool_calls_total", agent="researcher", tool="web_search", outcome="ok") == 2
    spans = rig.tool_spans()
    assert sorted(s.attributes["gen_ai.tool.call.id"] for s in spans) == ["lc_0", "lc_1"]  # type: ignore[index]
    assert {s.name for s in spans} == {"execute_tool web_search"}
    assert all(s.attributes["otelguard.decision.code"] == "allow" for s in spans)  # type: ignore[index]


def test_async_agents_are_guarded_too(rig: Rig) -> None:
    ran = Counter()

    @tool
    async def web_search(query: str) -> str:
        """Search the web."""
        ran.tick()
        return f"results for {query}"

    def script(messages: list[BaseMessage]) -> AIMessage:
        return (
            AIMessage(content="done")
            if tool_turns(messages)
            else calls(*[("web_search", {"query": f"q{i}"}) for i in range(60)])
        )

    agent = create_agent(
        model(script), [web_search], middleware=[GuardMiddleware(UNATTENDED, telemetry=rig.telemetry())]
    )
    out = asyncio.run(agent.ainvoke({"messages": [HumanMessage("research")]}))
    assert ran.n == 50
    assert str(out["messages"][-1].content).startswith("Stopped by otelguard: ")


def test_sessions_are_bounded_by_max_sessions() -> None:
    agent = create_agent(
        model(lambda messages: AIMessage(content="hi")),
        [],
        middleware=[middleware := GuardMiddleware(max_sessions=2)],
    )
    for thread in ("a", "b", "c"):
        agent.invoke({"messages": [HumanMessage("hello")]}, {"configurable": {"thread_id": thread}})
    assert len(middleware.sessions) == 2
    assert middleware.sessions.peek("a") is None  # least recently used dropped first


@settings(max_examples=50, deadline=None)
@given(
    name=st.text(max_size=20),
    args=st.one_of(st.none(), st.text(), st.dictionaries(st.text(max_size=5), st.integers() | st.text())),
    call_id=st.one_of(st.none(), st.text(max_size=10)),
    content=st.one_of(st.text(), st.lists(st.dictionaries(st.just("text"), st.text(max_size=5)), max_size=2)),
    status=st.sampled_from(["success", "error"]),
)
def test_wrap_tool_call_never_raises_for_any_call(
    name: str, args: Any, call_id: str | None, content: Any, status: str
) -> None:
    middleware = GuardMiddleware(UNATTENDED)
    request = ToolCallRequest(
        tool_call={"name": name, "args": args, "id": call_id, "type": "tool_call"},
        tool=None,
        state={},
        runtime=None,
    )
    for _ in range(7):  # enough repeats to warn and then refuse
        out = middleware.wrap_tool_call(
            request, lambda r: ToolMessage(content=content, tool_call_id=call_id or "", status=status)
        )
        assert isinstance(out, ToolMessage)


def ask(agent: Any, run: str, text: str, thread: str | None = None) -> dict[str, Any]:
    """One run of ``agent`` on ``thread`` (``None``: no thread id), by ``invoke`` or ``ainvoke``."""
    question = {"messages": [HumanMessage(text)]}
    config: Any = {"configurable": {"thread_id": thread}} if thread is not None else None
    if run == "invoke":
        return dict(agent.invoke(question, config))
    return dict(asyncio.run(agent.ainvoke(question, config)))


class Reraises(AgentMiddleware):  # type: ignore[type-arg]
    """Wraps every tool call and lets a tool's exception go on; says when it has seen one."""

    def __init__(self) -> None:
        super().__init__()
        self.raised = threading.Event()

    def wrap_tool_call(self, request: ToolCallRequest, handler: Callable[..., Any]) -> Any:
        try:
            return handler(request)
        except ValueError:
            self.raised.set()
            raise

    async def awrap_tool_call(self, request: ToolCallRequest, handler: Callable[..., Any]) -> Any:
        try:
            return await handler(request)
        except ValueError:
            self.raised.set()
            raise


def stack(order: str, guard: GuardMiddleware, other: AgentMiddleware) -> list[AgentMiddleware]:  # type: ignore[type-arg]
    """The middleware in the order named: ``"guard"`` alone, ``"other, guard"`` or ``"guard, other"``."""
    return {"guard": [guard], "other, guard": [other, guard], "guard, other": [guard, other]}[order]


@pytest.mark.parametrize("run", ["invoke", "ainvoke"])
@pytest.mark.parametrize("order", ["guard", "other, guard", "guard, other"])
@pytest.mark.parametrize("known_at", ["the next run", "eviction"])
def test_a_run_a_tool_exception_left_is_errored_at_the_threads_next_run_or_at_eviction(
    rig: Rig, run: str, order: str, known_at: str
) -> None:
    """The tool's exception is the call's failure and leaves the run as without the middleware.
    Leaving the guard it ends nothing (a middleware listed before the guard could let the run go
    on): the turn ends as errored when the thread's next run begins, or when the session is dropped
    from the pool, and never as completed."""

    @tool
    def explode(x: int) -> str:
        """Always raises."""
        raise ValueError("boom")

    def script(messages: list[BaseMessage]) -> AIMessage:
        return calls(("explode", {"x": 1})) if messages[-1].content == "go" else AIMessage(content="done")

    guard = GuardMiddleware(telemetry=rig.telemetry(), max_sessions=1)
    agent = create_agent(model(script), [explode], middleware=stack(order, guard, Reraises()))
    with pytest.raises(ValueError, match="boom"):
        ask(agent, run, "go", "a")
    assert rig.sample("otelguard_tool_calls_total", agent="default", tool="explode", outcome="failed") == 1
    assert turn_outcomes(rig) == {"completed": 0, "halted": 0, "errored": 0}  # not known yet
    session = guard.sessions.peek("a")
    assert session is not None and session.unsettled

    ask(agent, run, "hello", "a" if known_at == "the next run" else "b")
    if known_at == "eviction":
        assert guard.sessions.peek("a") is None  # thread b's session took a's place
    assert turn_outcomes(rig) == {"completed": 1, "halted": 0, "errored": 1}
    assert rig.sample("otelguard_turn_tool_calls_sum", agent="default") == 1


@pytest.mark.parametrize("run", ["invoke", "ainvoke"])
def test_a_run_whose_model_raises_is_errored_at_the_threads_next_run(rig: Rig, run: str) -> None:
    """``after_agent`` never runs when the model call raises: the turn is open and unsettled until
    the thread's next run, which ends it as errored (not as completed)."""

    @tool
    def read_file(path: str) -> str:
        """Read a file."""
        return "contents"

    def script(messages: list[BaseMessage]) -> AIMessage:
        if messages[-1].content == "again":
            return AIMessage(content="done")
        if tool_turns(messages):
            raise ConnectionError("the provider went away")
        return calls(("read_file", {"path": "a"}))

    agent = create_agent(model(script), [read_file], middleware=[GuardMiddleware(telemetry=rig.telemetry())])
    with pytest.raises(ConnectionError):
        ask(agent, run, "read")
    assert turn_outcomes(rig) == {"completed": 0, "halted": 0, "errored": 0}
    assert ask(agent, run, "again")["messages"][-1].content == "done"
    assert turn_outcomes(rig) == {"completed": 1, "halted": 0, "errored": 1}
    assert rig.sample("otelguard_tool_calls_total", agent="default", tool="read_file", outcome="ok") == 1


@pytest.mark.parametrize("order", ["other, guard", "guard, other"])
def test_a_sibling_finishing_after_the_exception_counts_in_the_errored_turn(rig: Rig, order: str) -> None:
    """One call of a parallel batch raises; its sibling ends only after that exception has left the
    guard. A sibling settles nothing: the sibling's result is the errored turn's, which ends as
    errored when the thread's next run begins, and no second turn appears for it."""
    spy = Reraises()

    @tool
    def explode(x: int) -> str:
        """Always raises."""
        raise ValueError("boom")

    @tool
    def slow_read(path: str) -> str:
        """Reads after the other call has failed."""
        assert spy.raised.wait(10)
        return "contents"

    def script(messages: list[BaseMessage]) -> AIMessage:
        if messages[-1].content == "go":
            return calls(("explode", {"x": 1}), ("slow_read", {"path": "a"}))
        return AIMessage(content="done")

    agent = create_agent(
        model(script),
        [explode, slow_read],
        middleware=stack(order, GuardMiddleware(telemetry=rig.telemetry()), spy),
    )
    with pytest.raises(ValueError, match="boom"):
        agent.invoke({"messages": [HumanMessage("go")]})
    assert rig.sample("otelguard_tool_calls_total", agent="default", tool="slow_read", outcome="ok") == 1
    assert turn_outcomes(rig) == {"completed": 0, "halted": 0, "errored": 0}
    agent.invoke({"messages": [HumanMessage("again")]})
    assert rig.sample("otelguard_turn_tool_calls_sum", agent="default") == 2  # both calls, one turn
    assert turn_outcomes(rig) == {"completed": 1, "halted": 0, "errored": 1}


def test_a_refused_call_of_a_failing_batch_settles_nothing(rig: Rig) -> None:
    """The cap refuses one call of the batch (it never reaches the tool) and another raises: the
    refused call is a sibling of the failing one, not a sign that the run went on, so the turn still
    ends as errored at the thread's next run."""

    @tool
    def web_search(query: str) -> str:
        """Search the web."""
        return "results"

    @tool
    def explode(x: int) -> str:
        """Always raises."""
        raise ValueError("boom")

    config = GuardConfig(caps={"on_hit": "reject", "turn": {"web_search": 1}})
    batch = calls(("explode", {"x": 1}), ("web_search", {"query": "a"}), ("web_search", {"query": "b"}))

    def script(messages: list[BaseMessage]) -> AIMessage:
        return batch if messages[-1].content == "go" else AIMessage(content="done")

    agent = create_agent(
        model(script), [web_search, explode], middleware=[GuardMiddleware(config, telemetry=rig.telemetry())]
    )
    with pytest.raises(ValueError, match="boom"):
        agent.invoke({"messages": [HumanMessage("go")]})
    assert (
        rig.sample("otelguard_tool_calls_total", agent="default", tool="web_search", outcome="rejected") == 1
    )
    agent.invoke({"messages": [HumanMessage("again")]})
    assert turn_outcomes(rig) == {"completed": 1, "halted": 0, "errored": 1}


class ToolErrorsAsMessages(AgentMiddleware):  # type: ignore[type-arg]
    """An error handler: a tool's exception becomes an error ``ToolMessage``, and the run goes on."""

    @staticmethod
    def answer(request: ToolCallRequest, error: Exception) -> ToolMessage:
        call = request.tool_call
        return ToolMessage(
            content=f"error: {error}", tool_call_id=call["id"], name=call["name"], status="error"
        )

    def wrap_tool_call(self, request: ToolCallRequest, handler: Callable[..., Any]) -> Any:
        try:
            return handler(request)
        except ValueError as error:
            return self.answer(request, error)

    async def awrap_tool_call(self, request: ToolCallRequest, handler: Callable[..., Any]) -> Any:
        try:
            return await handler(request)
        except ValueError as error:
            return self.answer(request, error)


@pytest.mark.parametrize("run", ["invoke", "ainvoke"])
@pytest.mark.parametrize("order", ["other, guard", "guard, other"])
def test_an_exception_a_middleware_turns_into_an_answer_is_the_calls_failure_only(
    rig: Rig, order: str, run: str
) -> None:
    """Whichever of the two is listed first, the run goes on after each failure: the turn stays
    the same open one, never errored, the same failing call is refused at its 6th to 12th
    ``before_call`` (it ran 5 times; rejects, the turn goes on), stopped when the model sends it a
    13th time, and the turn is halted."""
    ran = Counter()
    seen: list[tuple[int, float]] = []  # (turns begun, errored turns) as each run of the tool begins

    @tool
    def run_tests(path: str) -> str:
        """Run the test suite."""
        ran.tick()
        session = guard.sessions.peek()
        seen.append((session.turns if session is not None else 0, turn_outcomes(rig)["errored"]))
        raise ValueError("1 failed")

    guard = GuardMiddleware(UNATTENDED, telemetry=rig.telemetry())
    middleware = stack(order, guard, ToolErrorsAsMessages())
    agent = create_agent(model(forever("run_tests", {"path": "tests/"})), [run_tests], middleware=middleware)
    out = ask(agent, run, "fix the tests")

    assert ran.n == 5
    assert seen == [(1, 0)] * 5
    tool_messages = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert [m.status for m in tool_messages] == ["error"] * 13
    codes = [json.loads(str(m.content))["otelguard"]["code"] for m in tool_messages[5:]]
    assert codes == ["exact_failure_reject"] * 7 + ["exact_failure_block"]
    assert rig.sample("otelguard_tool_calls_total", agent="default", tool="run_tests", outcome="failed") == 5
    assert (
        rig.sample("otelguard_tool_calls_total", agent="default", tool="run_tests", outcome="rejected") == 7
    )
    assert rig.sample("otelguard_tool_calls_total", agent="default", tool="run_tests", outcome="blocked") == 1
    assert turn_outcomes(rig) == {"completed": 0, "halted": 1, "errored": 0}
    guard.sessions.end_session()  # the session leaves the host: that turn is counted once, halted
    assert turn_outcomes(rig) == {"completed": 0, "halted": 1, "errored": 0}


@pytest.mark.parametrize("run", ["invoke", "ainvoke"])
@pytest.mark.parametrize("order", ["other, guard", "guard, other"])
def test_a_tool_retry_middleware_retrying_a_failing_call_is_refused_after_5_failures(
    rig: Rig, order: str, run: str
) -> None:
    """LangChain's own ``ToolRetryMiddleware``. Listed before the guard, each retry is a call of the
    guard's: the 6th identical failing call is refused (a reject: the retry middleware hands it to
    the model), the model's next six tries of it are refused too, the one after is stopped and the
    run ends halted, not errored. Listed after it, the retries are one call of the guard's, which
    fails once per model step."""
    ran = Counter()

    @tool
    def run_tests(path: str) -> str:
        """Run the test suite."""
        ran.tick()
        raise ValueError("1 failed")

    guard = GuardMiddleware(UNATTENDED, telemetry=rig.telemetry())
    retry = ToolRetryMiddleware(max_retries=9, initial_delay=0, jitter=False)
    chat = model(forever("run_tests", {"path": "tests/"}))
    agent = create_agent(chat, [run_tests], middleware=stack(order, guard, retry))
    out = ask(agent, run, "fix the tests")

    if order == "other, guard":
        assert ran.n == 5  # one model step: 1 call + 4 retries ran, the 5th retry refused
        assert len(chat.seen) == 8  # the model saw each refusal and sent the call again: 6 more, stopped
    else:
        assert ran.n == 50  # 5 model steps of 10 tries each; the 6th to 12th steps' calls refused
        assert len(chat.seen) == 13  # and the 13th step's stopped
    assert json.loads(str(out["messages"][-2].content))["otelguard"]["code"] == "exact_failure_block"
    assert str(out["messages"][-1].content).startswith("Stopped by otelguard: ")
    assert (
        rig.sample("otelguard_tool_calls_total", agent="default", tool="run_tests", outcome="rejected") == 7
    )
    assert rig.sample("otelguard_tool_calls_total", agent="default", tool="run_tests", outcome="blocked") == 1
    assert turn_outcomes(rig) == {"completed": 0, "halted": 1, "errored": 0}


@pytest.mark.parametrize("run", ["invoke", "ainvoke"])
@pytest.mark.parametrize("retry_first", [True, False], ids=["retry_before_guard", "retry_after_guard"])
def test_a_model_error_a_retry_middleware_recovers_is_no_error(rig: Rig, run: str, retry_first: bool) -> None:
    """Listed before or after the guard, a retry middleware that recovers from a model error leaves a
    completed turn."""
    failures = Counter()

    def script(messages: list[BaseMessage]) -> AIMessage:
        if failures.tick() == 1:
            raise ConnectionError("a blip")
        return AIMessage(content="done")

    retry = ModelRetryMiddleware(max_retries=1, initial_delay=0, jitter=False)
    guard = GuardMiddleware(telemetry=rig.telemetry())
    agent = create_agent(model(script), [], middleware=[retry, guard] if retry_first else [guard, retry])
    assert ask(agent, run, "hi")["messages"][-1].content == "done"
    assert turn_outcomes(rig) == {"completed": 1, "halted": 0, "errored": 0}


@pytest.mark.parametrize("run", ["invoke", "ainvoke"])
def test_a_run_that_went_on_after_the_exception_is_not_errored_at_eviction(rig: Rig, run: str) -> None:
    """An error handler listed before the guard answers for the failing tool; the run's next model
    call shows it went on. The run then waits on an interrupt when its session leaves the pool: that
    turn is completed, not errored."""

    @tool
    def flaky(x: int) -> str:
        """Raises."""
        raise ValueError("boom")

    @tool
    def deploy(target: str) -> str:
        """Deploy after a human says yes."""
        return f"deployed: {interrupt({'question': 'deploy?'})}"

    def script(messages: list[BaseMessage]) -> AIMessage:
        if messages[-1].content == "ship it":
            return calls(("flaky", {"x": 1}), prefix="f")
        if isinstance(messages[-1], ToolMessage):
            return calls(("deploy", {"target": "prod"}), prefix="d")
        return AIMessage(content="hi")

    guard = GuardMiddleware(telemetry=rig.telemetry(), max_sessions=1)
    agent = create_agent(
        model(script),
        [flaky, deploy],
        middleware=[ToolErrorsAsMessages(), guard],
        checkpointer=InMemorySaver(),
    )
    assert "__interrupt__" in ask(agent, run, "ship it", "a")
    assert rig.sample("otelguard_tool_calls_total", agent="default", tool="flaky", outcome="failed") == 1
    assert turn_outcomes(rig) == {"completed": 0, "halted": 0, "errored": 0}  # a's run is paused
    ask(agent, run, "hello", "b")  # a's session leaves the pool
    assert guard.sessions.peek("a") is None
    assert turn_outcomes(rig) == {"completed": 2, "halted": 0, "errored": 0}
