"""Every example of docs/integrations.md runs, with a scripted model that searches forever.

The examples take the chat model as ``model``, so they are fenced as ``py`` (the README's test runs
``python`` blocks as they stand). Here ``model`` is a scripted model of the example's framework that
asks for two web searches per step, so each example ends at the turn cap of 50 with a halt.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry

from otelguard import Telemetry
from otelguard.telemetry import core

DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations.md"
BLOCKS = re.findall(r"```py\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.DOTALL)


def framework_of(block: str) -> str:
    for framework in ("langchain", "agents", "pydantic_ai"):
        if re.search(rf"^from {framework}\b", block, flags=re.MULTILINE):
            return framework
    raise AssertionError("an example that imports no framework")


def langchain_model() -> Any:
    from tests.integrations.test_langchain import calls, model, tool_turns

    return model(
        lambda messages: calls(
            *[("web_search", {"query": f"q{tool_turns(messages)}-{i}"}) for i in range(2)],
            prefix=f"s{tool_turns(messages)}",
        )
    )


def agents_model() -> Any:
    from agents.testing import function_call

    from tests.integrations.test_openai_agents import scripted, tool_rounds

    def respond(items: list[dict[str, Any]]) -> list[Any]:
        n = tool_rounds(items)
        return [function_call("web_search", {"query": f"q{n}-{i}"}, call_id=f"c{n}-{i}") for i in range(2)]

    return scripted(respond)


def pydantic_ai_model() -> Any:
    from pydantic_ai.messages import ModelResponse

    from tests.integrations.test_pydantic_ai import call, scripted, tool_rounds

    return scripted(
        lambda messages: ModelResponse(
            parts=[
                call(
                    "web_search", {"query": f"q{tool_rounds(messages)}-{i}"}, f"c{tool_rounds(messages)}-{i}"
                )
                for i in range(2)
            ]
        )
    )


MODELS = {"langchain": langchain_model, "agents": agents_model, "pydantic_ai": pydantic_ai_model}


def test_the_page_has_one_example_per_framework() -> None:
    assert sorted(framework_of(block) for block in BLOCKS) == ["agents", "langchain", "pydantic_ai"]


@pytest.mark.parametrize("block", BLOCKS, ids=[framework_of(b) for b in BLOCKS])
def test_example_runs_and_the_halt_says_why(block: str, monkeypatch: pytest.MonkeyPatch) -> None:
    framework = framework_of(block)
    pytest.importorskip(framework)
    if framework == "agents":
        from agents import set_tracing_disabled

        set_tracing_disabled(True)
    registry = CollectorRegistry()
    # telemetry=True uses the process-wide Telemetry: point it at a registry of this test's own.
    monkeypatch.setattr(core, "_default", Telemetry(tracer_provider=TracerProvider(), registry=registry))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(
            compile(block, f"{DOC.name}:{framework}", "exec"),
            {"model": MODELS[framework](), "__name__": "example"},
        )
    printed = out.getvalue()
    assert "Stopped" in printed and "web searches, the limit is 50" in printed
    assert (
        registry.get_sample_value(
            "otelguard_cap_hits_total", {"agent": _agent(framework), "cap": "web_search", "scope": "turn"}
        )
        == 1
    )


def _agent(framework: str) -> str:
    return "researcher" if framework == "agents" else "default"
