"""Every host holds its sessions the same way: one ``SessionHost`` built from the same arguments.

The framework adapters, the Claude Agent SDK hooks, the Claude Code mapping and ``otelguard serve``
each take ``(config, *, telemetry, agent, max_sessions)``; the same arguments give the same sessions
(the same config, observers and agent label, the same bounds), and a ready session host can be
handed to any of them instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry

from otelguard import GuardConfig, Telemetry
from otelguard.coding_agents.claude_code import ClaudeCodeHooks
from otelguard.core.sessions import SessionHost
from otelguard.hosting import session_host
from otelguard.integrations.claude_agent_sdk import guard_hooks
from otelguard.integrations.hermes import HermesGuardPlugin
from otelguard.serving.http_server import Request
from otelguard.serving.sidecar import Sidecar

langchain = pytest.importorskip("otelguard.integrations.langchain")
pydantic_ai = pytest.importorskip("otelguard.integrations.pydantic_ai")
openai_agents = pytest.importorskip("otelguard.integrations.openai_agents")

from agents import Agent, function_tool  # noqa: E402

CONFIG = GuardConfig(mode="unattended", signature_key="hosts")


@function_tool
def web_search(q: str) -> str:
    """Search the web."""
    return f"results for {q}"


def _sdk_agent() -> Agent[Any]:
    return Agent(name="sdk-agent", tools=[web_search])


Host = Callable[..., Any]


def _langchain(**kwargs: Any) -> Any:
    return langchain.GuardMiddleware(CONFIG if "host" not in kwargs else None, **kwargs)


def _pydantic_ai(**kwargs: Any) -> Any:
    return pydantic_ai.GuardCapability(CONFIG if "host" not in kwargs else None, **kwargs)


def _hermes(**kwargs: Any) -> Any:
    return HermesGuardPlugin(CONFIG if "host" not in kwargs else None, **kwargs)


def _openai_agents(**kwargs: Any) -> Any:
    if "agent" in kwargs:
        kwargs["agent_name"] = kwargs.pop("agent")
    return openai_agents.guard_agent(_sdk_agent(), CONFIG if "host" not in kwargs else None, **kwargs)


def _claude_agent_sdk(**kwargs: Any) -> Any:
    return guard_hooks(CONFIG if "host" not in kwargs else None, **kwargs)


def _claude_code(**kwargs: Any) -> Any:
    return ClaudeCodeHooks(CONFIG if "host" not in kwargs else None, **kwargs)


ADAPTERS: dict[str, Host] = {
    "langchain": _langchain,
    "pydantic_ai": _pydantic_ai,
    "hermes": _hermes,
    "openai_agents": _openai_agents,
    "claude_agent_sdk": _claude_agent_sdk,
    "claude_code": _claude_code,
}


def _sessions_of(name: str, host: Any) -> SessionHost:
    """The session host a host holds (``guard_hooks`` keeps it inside its callbacks)."""
    if name == "claude_agent_sdk":
        callback = host["PreToolUse"][0].hooks[0]
        cells = [cell.cell_contents for cell in callback.__closure__ or ()]
        hooks = next(cell for cell in cells if isinstance(cell, ClaudeCodeHooks))
        return hooks.sessions
    return host.sessions  # type: ignore[no-any-return]


def _one_call(name: str, host: Any, session_id: str) -> None:
    """One allowed ``web_search`` call of session ``session_id``, through the host's own entry
    points where it has some that need no framework run."""
    if name == "hermes":
        host.on_pre_tool_call(tool_name="web_search", args={"q": "a"}, session_id=session_id, turn_id="t1")
        host.on_post_tool_call(
            tool_name="web_search", args={"q": "a"}, result="r", session_id=session_id, status="ok"
        )
        return
    if name == "claude_agent_sdk":
        callback = host["PreToolUse"][0].hooks[0]
        base = {"session_id": session_id, "tool_name": "web_search", "tool_input": {"q": "a"}}
        asyncio.run(callback({**base, "hook_event_name": "UserPromptSubmit"}, None, None))
        asyncio.run(callback({**base, "hook_event_name": "PreToolUse"}, "t1", None))
        asyncio.run(callback({**base, "hook_event_name": "PostToolUse", "tool_response": "r"}, "t1", None))
        return
    if name == "claude_code":
        base = {"session_id": session_id, "tool_name": "web_search", "tool_input": {"q": "a"}}
        host.handle({**base, "hook_event_name": "UserPromptSubmit"})
        host.handle({**base, "hook_event_name": "PreToolUse", "tool_use_id": "t1"})
        host.handle({**base, "hook_event_name": "PostToolUse", "tool_use_id": "t1", "tool_response": "r"})
        return
    session = _sessions_of(name, host).session(session_id)
    session.start_turn()
    assert session.main.before_call("web_search", {"q": "a"}).allows_execution
    session.main.after_call("web_search", {"q": "a"}, "r", failed=False)


def _post(sidecar: Sidecar, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = sidecar.handle(Request("POST", path, "", {}, orjson.dumps(body)))
    assert response.status == 200, response.body
    answer: dict[str, Any] = orjson.loads(response.body)
    return answer


def test_every_host_reports_to_the_same_telemetry_with_the_same_agent_label() -> None:
    registry = CollectorRegistry()
    telemetry = Telemetry(registry=registry)
    for name, make in ADAPTERS.items():
        host = make(telemetry=telemetry, agent="bot")
        sessions = _sessions_of(name, host)
        assert isinstance(sessions, SessionHost), name
        assert sessions.agent == "bot", name
        assert sessions.config is CONFIG, name
        _one_call(name, host, f"{name}-session")
        assert sessions.session(f"{name}-session").main.agent == "bot", name
    sidecar = Sidecar(CONFIG, telemetry=telemetry, registry=registry)
    _post(sidecar, "/v1/start_turn", {"session_id": "sidecar", "agent": "bot"})
    _post(
        sidecar, "/v1/before_call", {"session_id": "sidecar", "tool_name": "web_search", "args": {"q": "a"}}
    )
    _post(
        sidecar,
        "/v1/after_call",
        {
            "session_id": "sidecar",
            "tool_name": "web_search",
            "args": {"q": "a"},
            "result": "r",
            "failed": False,
        },
    )
    calls = {"agent": "bot", "tool": "web_search", "outcome": "ok"}
    assert registry.get_sample_value("otelguard_tool_calls_total", calls) == len(ADAPTERS) + 1
    agents = {
        sample.labels["agent"]
        for family in registry.collect()
        if family.name == "otelguard_tool_calls"
        for sample in family.samples
        if sample.value
    }
    assert agents == {"bot"}


@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_each_host_holds_at_most_max_sessions(name: str) -> None:
    host = ADAPTERS[name](max_sessions=2)
    for session_id in ("a", "b", "c"):
        _one_call(name, host, session_id)
    sessions = _sessions_of(name, host)
    assert sessions.max_sessions == 2
    assert len(sessions) == 2
    assert sessions.peek("a") is None  # the least recently used went first
    assert sessions.peek("c") is not None


def test_the_sidecar_holds_at_most_max_sessions() -> None:
    sidecar = Sidecar(CONFIG, registry=CollectorRegistry(), max_sessions=2)
    for session_id in ("a", "b", "c"):
        _post(sidecar, "/v1/start_turn", {"session_id": session_id})
    assert len(sidecar.host) == 2
    assert sidecar.host.peek("a") is None


@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_each_host_takes_a_ready_session_host(name: str) -> None:
    registry = CollectorRegistry()
    shared = session_host(CONFIG, telemetry=Telemetry(registry=registry), agent="shared", max_sessions=5)
    host = ADAPTERS[name](host=shared)
    assert _sessions_of(name, host) is shared
    _one_call(name, host, "s")
    assert shared.peek("s") is not None
    calls = {"agent": "shared", "tool": "web_search", "outcome": "ok"}
    assert registry.get_sample_value("otelguard_tool_calls_total", calls) == 1


@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_a_ready_session_host_comes_alone(name: str) -> None:
    shared = session_host(CONFIG)
    with pytest.raises(TypeError, match="max_sessions"):
        ADAPTERS[name](host=shared, max_sessions=5)
    with pytest.raises(TypeError, match="SessionHost"):
        ADAPTERS[name](host=object())
