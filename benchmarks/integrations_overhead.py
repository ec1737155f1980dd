"""Per-tool-call cost each framework adapter adds, against the same scripted run without it.

    python -m benchmarks.integrations_overhead [--calls 100] [--rounds 7] [--json]

Each framework runs a scripted agent (no network) that makes ``--calls`` sequential tool calls to a
read tool with distinct arguments, then answers. Runs with and without the adapter are interleaved
(plain, guarded, plain, …) so drift hits both alike, and timed in process CPU time; the figure is the median over ``--rounds`` of
``(guarded - plain) / calls`` and the ratio of the medians. Two guarded variants: the guard alone
(``telemetry=None``) and the guard with metrics and spans (a fresh registry, the global no-op tracer).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry

from otelguard import GuardConfig, Telemetry

Build = Callable[[Any], Callable[[], None]]  # adapter factory (or None) -> one run


def _langchain(calls: int) -> Build:
    from langchain.agents import create_agent
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import tool

    from otelguard.integrations.langchain import GuardMiddleware

    class Scripted(BaseChatModel):
        def _generate(
            self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
        ) -> ChatResult:
            n = sum(isinstance(m, AIMessage) for m in messages)
            reply = (
                AIMessage(
                    content="", tool_calls=[{"name": "read_file", "args": {"path": f"f{n}"}, "id": f"c{n}"}]
                )
                if n < calls
                else AIMessage(content="done")
            )
            return ChatResult(generations=[ChatGeneration(message=reply)])

        @property
        def _llm_type(self) -> str:
            return "scripted"

        def bind_tools(self, tools: Any, **kw: Any) -> Scripted:
            return self

    @tool
    def read_file(path: str) -> str:
        """Read a file."""
        return f"contents of {path}"

    def build(telemetry: Any) -> Callable[[], None]:
        middleware = [] if telemetry is False else [GuardMiddleware(GuardConfig(), telemetry=telemetry)]
        agent = create_agent(Scripted(), [read_file], middleware=middleware)
        return lambda: agent.invoke({"messages": [HumanMessage("go")]}, {"recursion_limit": 10 * calls + 10})

    return build


def _openai_agents(calls: int) -> Build:
    from agents import Agent, RunConfig, Runner, function_tool, set_tracing_disabled
    from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

    from otelguard.integrations.openai_agents import guard_agent

    set_tracing_disabled(True)

    def build(telemetry: Any) -> Callable[[], None]:
        @function_tool
        def read_file(path: str) -> str:
            """Read a file."""
            return f"contents of {path}"

        steps = [
            ModelStep(output=[function_call("read_file", {"path": f"f{n}"}, call_id=f"c{n}")])
            for n in range(calls)
        ]

        def run() -> None:
            agent = Agent(
                name="bench",
                tools=[read_file],
                model=ScriptedModel([*steps, ModelStep(output=[assistant_message("done")])]),
            )
            hooks = None if telemetry is False else guard_agent(agent, telemetry=telemetry)
            asyncio.run(
                Runner.run(
                    agent, "go", hooks=hooks, max_turns=calls + 5, run_config=RunConfig(tracing_disabled=True)
                )
            )

        return run

    return build


def _pydantic_ai(calls: int) -> Build:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.usage import UsageLimits

    from otelguard.integrations.pydantic_ai import GuardCapability

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = sum(isinstance(m, ModelResponse) for m in messages)
        if n < calls:
            return ModelResponse(parts=[ToolCallPart("read_file", {"path": f"f{n}"}, f"c{n}")])
        return ModelResponse(parts=[TextPart("done")])

    def build(telemetry: Any) -> Callable[[], None]:
        capabilities = [] if telemetry is False else [GuardCapability(telemetry=telemetry)]
        agent = Agent(FunctionModel(script), capabilities=capabilities)

        @agent.tool_plain
        def read_file(path: str) -> str:
            """Read a file."""
            return f"contents of {path}"

        return lambda: agent.run_sync("go", usage_limits=UsageLimits(request_limit=None))

    return build


FRAMEWORKS: dict[str, Callable[[int], Build]] = {
    "langchain": _langchain,
    "openai_agents": _openai_agents,
    "pydantic_ai": _pydantic_ai,
}


def _seconds(run: Callable[[], None]) -> float:
    """CPU seconds of this process (worker threads included): other processes on a shared machine
    slow a run's wall clock, not its CPU time."""
    start = time.process_time()
    run()
    return time.process_time() - start


def measure(framework: str, calls: int, rounds: int) -> dict[str, Any]:
    build = FRAMEWORKS[framework](calls)
    variants: dict[str, Callable[[], None]] = {
        "plain": build(False),
        "guard": build(None),
        "guard_metrics_spans": build(Telemetry(registry=CollectorRegistry())),
    }
    for run in variants.values():  # warm up imports and caches
        run()
    times: dict[str, list[float]] = {name: [] for name in variants}
    for i in range(rounds):
        order = list(variants) if i % 2 == 0 else list(reversed(variants))
        for name in order:
            times[name].append(_seconds(variants[name]))
    plain = statistics.median(times["plain"])
    figure: dict[str, Any] = {
        "framework": framework,
        "calls": calls,
        "plain_per_call_us": round(plain / calls * 1e6, 1),
    }
    for name in ("guard", "guard_metrics_spans"):
        guarded = statistics.median(times[name])
        figure[f"{name}_added_per_call_us"] = round((guarded - plain) / calls * 1e6, 1)
        figure[f"{name}_ratio"] = round(guarded / plain, 3)
    return figure


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--framework", choices=sorted(FRAMEWORKS), action="append")
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args(argv)
    names = options.framework or sorted(FRAMEWORKS)
    figures = [measure(name, options.calls, options.rounds) for name in names]
    if options.json:
        print(json.dumps(figures))
    else:
        for figure in figures:
            print(figure)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
