"""Per-tool-call cost each framework adapter adds, against the same scripted run without it.

    python -m benchmarks.integrations_overhead [--calls 100] [--rounds 7] [--json]

Each framework runs a scripted agent (no network) that makes ``--calls`` sequential tool calls to a
read tool with distinct arguments, then answers. Runs with and without the adapter are interleaved
(plain, guarded, plain, …) so drift hits both alike, and timed in process CPU time; the figure is the median over ``--rounds`` of
``(guarded - plain) / calls`` and the ratio of the medians. Two guarded variants: the guard alone
(``telemetry=None``) and the guard with metrics and spans (a fresh registry, the global no-op tracer).

hermes-agent runs in its own virtualenv (``tests/side_venvs.py``; ``python -m tests.side_venvs``
builds it): ``benchmarks/hermes_loop.py`` runs there, a real ``AIAgent`` loop whose model is a
scripted OpenAI-compatible server on 127.0.0.1 (a process of its own, outside the timed CPU), with
the plugin's hooks switched on and off in hermes' hook table between conversations; the guard with
metrics and spans is the plugin as hermes loads it by its entry point. Without that venv hermes is
reported as skipped, with the reason.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
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


HERMES = "hermes"
HERMES_LOOP = Path(__file__).resolve().parent / "hermes_loop.py"
ARMS = ("plain", "guard", "guard_metrics_spans")


def hermes_python() -> Path | str:
    """The hermes-agent side venv's interpreter, or why there is none."""
    from tests.side_venvs import hermes_venv

    venv = hermes_venv()
    python = venv / "bin" / "python"
    if not (venv / ".complete").exists() or not python.exists():
        return f"no hermes-agent side venv at {venv} (python -m tests.side_venvs builds it)"
    return python


def measure_hermes(calls: int, rounds: int) -> dict[str, Any]:
    """The figure of a hermes ``AIAgent`` loop with and without the plugin, run in the side venv;
    ``{"framework": "hermes", "skipped": reason}`` when that venv is missing. ``runs`` holds what each
    arm's conversations did: the tool results hermes handed the model, their final answers, and the
    calls and model requests the plugin's guards saw (none in ``plain``)."""
    python = hermes_python()
    if isinstance(python, str):
        return {"framework": HERMES, "skipped": python}
    checkout = str(HERMES_LOOP.parent.parent)
    # The checkout under test, whatever the venv last installed; the plugin's own settings left at
    # their defaults (an inherited metrics port would open a server in the timed process).
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTELGUARD_")}
    env["PYTHONPATH"] = checkout
    with tempfile.TemporaryDirectory(prefix="otelguard-hermes-") as work:
        done = subprocess.run(
            [str(python), str(HERMES_LOOP), work, "--calls", str(calls), "--rounds", str(rounds)],
            env=env,
            cwd=work,
            capture_output=True,
            text=True,
            timeout=600 + 120 * rounds,
        )
    if done.returncode != 0:
        raise RuntimeError(f"the hermes loop failed ({done.returncode}): {done.stderr[-3000:]}")
    document: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if "skipped" in document:
        return {"framework": HERMES, "skipped": document["skipped"]}
    arms = document["arms"]
    figure = _figure(HERMES, calls, {arm: arms[arm]["seconds"] for arm in ARMS})
    figure["runs"] = {arm: {k: v for k, v in arms[arm].items() if k != "seconds"} for arm in ARMS}
    return figure


def _figure(framework: str, calls: int, times: dict[str, list[float]]) -> dict[str, Any]:
    plain = statistics.median(times["plain"])
    figure: dict[str, Any] = {
        "framework": framework,
        "calls": calls,
        "plain_per_call_us": round(plain / calls * 1e6, 1),
    }
    for name in ARMS[1:]:
        guarded = statistics.median(times[name])
        figure[f"{name}_added_per_call_us"] = round((guarded - plain) / calls * 1e6, 1)
        figure[f"{name}_ratio"] = round(guarded / plain, 3)
    return figure


def _seconds(run: Callable[[], None]) -> float:
    """CPU seconds of this process (worker threads included): other processes on a shared machine
    slow a run's wall clock, not its CPU time."""
    start = time.process_time()
    run()
    return time.process_time() - start


def measure(framework: str, calls: int, rounds: int) -> dict[str, Any]:
    if framework == HERMES:
        return measure_hermes(calls, rounds)
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
    return _figure(framework, calls, times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--framework", choices=sorted([*FRAMEWORKS, HERMES]), action="append")
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args(argv)
    names = options.framework or sorted([*FRAMEWORKS, HERMES])
    figures = [measure(name, options.calls, options.rounds) for name in names]
    if options.json:
        print(json.dumps(figures))
    else:
        for figure in figures:
            print({k: v for k, v in figure.items() if k != "runs"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
