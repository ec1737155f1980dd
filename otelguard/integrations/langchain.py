"""LangChain / LangGraph: ``GuardMiddleware``, an ``AgentMiddleware`` for ``create_agent``.

    agent = create_agent(model, tools, middleware=[GuardMiddleware(GuardConfig(mode="unattended"))])

* Every tool call goes through the guard in ``wrap_tool_call``/``awrap_tool_call``. A refused call
  never runs: the model gets ``ToolMessage(status="error")`` holding the synthetic result.
* A tool that raises, or answers with an error ``ToolMessage``, is a failure. The exception is then
  handled exactly as without the middleware. LangGraph interrupts (``GraphBubbleUp``) pass through
  untouched and are not failures.
* A turn is one agent invocation (``before_agent`` to ``after_agent``). After a ``block``/``halt``
  the run ends before the next model call (``jump_to: "end"``) with an AI message saying why.
* One guard per ``thread_id`` of the run config, else one for the middleware.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

from otelguard.config import GuardConfig
from otelguard.decisions import Decision
from otelguard.integrations._sessions import (
    DEFAULT_SESSION,
    GuardSessions,
    Session,
    error_result,
    missing_framework,
)
from otelguard.sessions import DEFAULT_MAX_SESSIONS

try:
    from langchain.agents.middleware import AgentMiddleware, AgentState, ToolCallRequest, hook_config
    from langchain_core.messages import AIMessage, ToolMessage
    from langgraph.config import get_config
    from langgraph.errors import GraphBubbleUp
    from langgraph.runtime import Runtime
    from langgraph.types import Command
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without the framework
    raise missing_framework("langchain", "langchain") from exc

__all__ = ["GuardMiddleware"]

ToolResult = ToolMessage | Command[Any]

_HALT_PREFIX: Final = "Stopped by otelguard: "


class GuardMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Guards every tool call of a ``create_agent`` agent; see the module docstring."""

    def __init__(
        self,
        config: GuardConfig | None = None,
        *,
        telemetry: Any = None,
        agent: str | None = None,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
    ) -> None:
        super().__init__()
        self.sessions = GuardSessions(config, telemetry=telemetry, agent=agent, max_sessions=max_sessions)

    # -- turns ---------------------------------------------------------------------------------

    def before_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        self._session().enter_run(object())
        return None

    async def abefore_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self.before_agent(state, runtime)

    @hook_config(can_jump_to=["end"])
    def before_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        halt = self._session().guard.halt_decision
        if halt is None:
            return None
        return {"jump_to": "end", "messages": [AIMessage(content=_HALT_PREFIX + halt.message)]}

    @hook_config(can_jump_to=["end"])
    async def abefore_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self.before_model(state, runtime)

    def after_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        session = self._session()
        session.leave_run(session.run)
        return None

    async def aafter_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self.after_agent(state, runtime)

    # -- tool calls ----------------------------------------------------------------------------

    def wrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], ToolResult]
    ) -> ToolResult:
        session, name, args, call_id, refused = self._start(request)
        if refused is not None:
            return refused
        try:
            result = handler(request)
        except GraphBubbleUp:
            session.paused.add(call_id)  # an interrupt: control flow, not a failure
            raise
        except Exception as error:
            session.guard.after_call(name, args, error_result(error), failed=True, call_id=call_id)
            raise
        return _finish(session, name, args, call_id, result)

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Awaitable[ToolResult]]
    ) -> ToolResult:
        session, name, args, call_id, refused = self._start(request)
        if refused is not None:
            return refused
        try:
            result = await handler(request)
        except GraphBubbleUp:
            session.paused.add(call_id)
            raise
        except Exception as error:
            session.guard.after_call(name, args, error_result(error), failed=True, call_id=call_id)
            raise
        return _finish(session, name, args, call_id, result)

    def _start(self, request: ToolCallRequest) -> tuple[Session, str, Any, str | None, ToolMessage | None]:
        """The call's ``before_call``, unless it is an interrupted call running again on resume
        (the guard already counted and allowed it)."""
        session, name, args, call_id = self._call(request)
        if session.paused.take(call_id) is not None:
            return session, name, args, call_id, None
        decision = session.guard.before_call(name, args, call_id=call_id)
        refused = None if decision.allows_execution else _refused(decision, name, call_id)
        return session, name, args, call_id, refused

    def _call(self, request: ToolCallRequest) -> tuple[Session, str, Any, str | None]:
        call = request.tool_call
        call_id = call.get("id")
        return self._session(), call["name"], call.get("args"), call_id if isinstance(call_id, str) else None

    def _session(self) -> Session:
        return self.sessions.session(_thread_id())


def _thread_id() -> str:
    """The run config's ``thread_id`` (the runtime object does not carry it), else the default."""
    try:
        configurable = get_config().get("configurable") or {}
    except RuntimeError:  # outside a runnable context
        return DEFAULT_SESSION
    thread_id = configurable.get("thread_id")
    return DEFAULT_SESSION if thread_id is None else str(thread_id)


def _refused(decision: Decision, name: str, call_id: str | None) -> ToolMessage:
    return ToolMessage(
        content=decision.synthetic_result(), tool_call_id=call_id or "", name=name, status="error"
    )


def _finish(session: Session, name: str, args: Any, call_id: str | None, result: ToolResult) -> ToolResult:
    if not isinstance(result, ToolMessage):  # a Command: the tool ran and changed the graph state
        session.guard.after_call(name, args, None, failed=False, call_id=call_id)
        return result
    content = result.content
    decision = session.guard.after_call(name, args, content, failed=result.status == "error", call_id=call_id)
    if decision.action not in ("warn", "halt"):
        return result
    if isinstance(content, str):
        return result.model_copy(update={"content": decision.annotate(content)})
    note = decision.annotate("").lstrip()
    return result.model_copy(update={"content": [*content, {"type": "text", "text": note}]})
