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


def _halt_table() -> dict[str, tuple[str, str]]:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## How a halt reaches the user", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| ([^|]+?) \| (.+?) \| (.+?) \|$", section, flags=re.MULTILINE)
    return {host: (halt, failed) for host, halt, failed in rows[1:]}  # past the header


def test_the_halt_table_has_a_row_for_every_host() -> None:
    assert list(_halt_table()) == [
        "LangChain / LangGraph",
        "OpenAI Agents SDK",
        "Pydantic AI",
        "Claude Code (`otelguard hook`, http hooks)",
        "Claude Agent SDK (`guard_hooks`)",
        "`otelguard serve` (`/v1/`)",
        "hermes-agent",
        "your own loop (`Guard`)",
    ]


def test_the_halt_table_quotes_what_the_hosts_get() -> None:
    """Each row names what the adapter really hands over: LangChain's last message, Claude Code's
    output fields and stop reason, hermes' directive, and the events behind an errored turn."""
    from otelguard import Decision, GuardConfig
    from otelguard.coding_agents.claude_code import HOOK_EVENTS, hook_output, stop_reason
    from otelguard.integrations.claude_agent_sdk import SDK_EVENTS, sdk_output
    from otelguard.integrations.hermes import HermesGuardPlugin

    table = _halt_table()
    langchain = pytest.importorskip("otelguard.integrations.langchain")
    assert f"`{langchain._HALT_PREFIX}<message>`" in table["LangChain / LangGraph"][0]

    halt = Decision(action="block", code="<code>", message="<message>")
    claude_code, failed = table["Claude Code (`otelguard hook`, http hooks)"]
    output = hook_output("PreToolUse", halt)
    assert output is not None and output["continue"] is False
    assert output["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert f"`stopReason` `{stop_reason(halt)}`" in claude_code and output["stopReason"] == stop_reason(halt)
    assert '`permissionDecision: "deny"`' in claude_code and "`continue: false`" in claude_code
    assert "`continue_: False`" in table["Claude Agent SDK (`guard_hooks`)"][0]
    assert sdk_output(output)["continue_"] is False
    assert "`StopFailure`" in failed and "StopFailure" in HOOK_EVENTS and "StopFailure" not in SDK_EVENTS

    plugin = HermesGuardPlugin(GuardConfig(mode="unattended", caps={"turn": {"web_search": 1}}))
    assert plugin.on_pre_tool_call(tool_name="web_search", args={"q": 1}, session_id="s") is None
    directive = plugin.on_pre_tool_call(tool_name="web_search", args={"q": 2}, session_id="s")
    assert directive is not None and set(directive) == {"action", "message"}
    assert directive["action"] == "block"
    hermes, hermes_failed = table["hermes-agent"]
    assert '`{"action": "block", "message": <synthetic result>}`' in hermes
    assert "`completed: false`" in hermes_failed
