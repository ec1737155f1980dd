"""OpenAI Agents SDK: ``guard_agent(agent)`` returns the ``RunHooks`` to pass to ``Runner.run``.

    hooks = guard_agent(agent, GuardConfig(mode="unattended"), telemetry=True)
    result = await Runner.run(agent, "question", hooks=hooks)

* Every function tool of the agent and of its handoff agents gets a tool input guardrail: a
  refused call never runs, and ``reject_content`` puts the synthetic result in the model's history.
* Results come from a tool output guardrail, which appends warnings to a text result the model
  reads (``on_tool_end`` when another output guardrail rejected the result first); the failure flag
  from wrapping each tool's failure function (the SDK otherwise turns the exception into a generic
  string before any hook sees it). A failure function the tool already had still produces the
  message the model gets.
* After a ``block``/``halt`` the SDK would call the model again: the next ``on_llm_start`` raises
  ``otelguard.GuardHalted`` instead, and ``Runner.run`` raises it to the caller.
* A turn is one ``Runner.run``. Sessions: ``session_key(run_context)`` when given (the hooks cannot
  see the SDK ``Session``; the run's ``context`` object can carry a conversation id), else one
  session per ``guard_agent`` result.
* Run hooks see no exception of a run. A tool exception the SDK raises out of the run (a failure
  function that gives no message) ends the turn as ``errored`` at once; a run that ends any other
  way without ``on_agent_end`` (a model error, ``MaxTurnsExceeded``, a guardrail tripwire, a
  cancellation) is ``errored`` once the SDK has let go of it: when Python frees the run's usage
  object, at the hooks' next event.
* Hosted tools (``WebSearchTool``, ``FileSearchTool``, ``CodeInterpreterTool``, …) run at the
  provider, so they cannot be guarded.
"""

from __future__ import annotations

import copy
import inspect
import threading
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Final

from otelguard.config import GuardConfig
from otelguard.core.bounded_map import BoundedMap
from otelguard.core.decisions import Decision
from otelguard.core.sessions import DEFAULT_MAX_SESSIONS, Session, SessionHost
from otelguard.integrations._protocol import (
    CallMemory,
    end_run,
    error_result,
    guidance,
    missing_framework,
    refusal,
    stop_if_halted,
)

try:
    from agents import (
        Agent,
        FunctionTool,
        RunContextWrapper,
        RunHooks,
        ToolGuardrailFunctionOutput,
        ToolInputGuardrail,
        ToolOutputGuardrail,
    )
    from agents.handoffs import Handoff
    from agents.tool import (
        Tool,
        maybe_invoke_function_tool_failure_error_function,
        set_function_tool_failure_error_function,
    )
    from agents.tool_guardrails import ToolInputGuardrailData, ToolOutputGuardrailData
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without the framework
    raise missing_framework("openai-agents", "openai-agents") from exc

__all__ = ["GuardRunHooks", "guard_agent"]

SessionKey = Callable[[RunContextWrapper[Any]], object]
_GUARDRAIL_NAME: Final = "otelguard"
_TOOL_GUARD_ATTR: Final = "_otelguard_tool_guard"


def guard_agent(
    agent: Agent[Any],
    config: GuardConfig | None = None,
    *,
    telemetry: Any = None,
    agent_name: str | None = None,
    session_key: SessionKey | None = None,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
) -> GuardRunHooks:
    """Guard every function tool of ``agent`` and of its handoff agents; return the run hooks."""
    hooks = GuardRunHooks(
        SessionHost(config, telemetry=telemetry, agent=agent_name or agent.name, max_sessions=max_sessions),
        session_key=session_key,
    )
    for tool in _function_tools(agent):
        _ToolGuard.install(tool).add_owner(hooks)
    return hooks


def _function_tools(root: Agent[Any]) -> Iterator[FunctionTool]:
    seen_agents: set[int] = set()
    seen_tools: set[int] = set()
    pending: list[Agent[Any]] = [root]
    while pending:
        agent = pending.pop()
        if id(agent) in seen_agents:
            continue
        seen_agents.add(id(agent))
        for tool in agent.tools:
            if isinstance(tool, FunctionTool) and id(tool) not in seen_tools:
                seen_tools.add(id(tool))
                yield tool
        for handoff in agent.handoffs:
            target = handoff._agent_ref() if isinstance(handoff, Handoff) and handoff._agent_ref else handoff
            if isinstance(target, Agent):
                pending.append(target)


class GuardRunHooks(RunHooks[Any]):
    """The ``RunHooks`` that ``guard_agent`` returns: turns, results and halts of guarded runs."""

    def __init__(self, sessions: SessionHost, *, session_key: SessionKey | None = None) -> None:
        self.sessions = sessions
        self._session_key = session_key
        self._lock = threading.Lock()
        # One entry per live run, keyed by its usage object (shared by every context of one run,
        # tool contexts included); dropped when the run's usage is garbage collected.
        self._runs: BoundedMap[int, tuple[Session, object]] = BoundedMap(sessions.max_sessions)
        # Runs whose usage was freed, for the next event to settle: a finalizer runs inside the
        # garbage collector, maybe in a thread holding a lock it would need, so it only appends.
        self._freed: deque[tuple[int, Session, object]] = deque()

    def knows_run(self, context: RunContextWrapper[Any]) -> bool:
        if self._freed:
            self._settle_freed()
        with self._lock:
            return id(context.usage) in self._runs

    def session_for(self, context: RunContextWrapper[Any]) -> Session:
        """The session of the run ``context`` belongs to; the first call of a run starts its turn."""
        return self._run(context)[0]

    def _run(self, context: RunContextWrapper[Any]) -> tuple[Session, object]:
        if self._freed:
            self._settle_freed()
        usage = context.usage
        key = id(usage)
        with self._lock:
            run = self._runs.get(key)
        if run is not None:
            return run
        session_id = self._session_key(context) if self._session_key is not None else None
        run = (self.sessions.session(session_id), object())
        with self._lock:
            self._runs.put(key, run)
        weakref.finalize(usage, self._freed.append, (key, *run)).atexit = False
        run[0].enter_run(run[1])
        return run

    def _settle_freed(self) -> None:
        """Forget the runs the SDK has let go of; a turn still open there never reached
        ``on_agent_end``, so its run ended in an exception (``leave_run`` is a no-op otherwise)."""
        while self._freed:
            try:
                key, session, token = self._freed.popleft()
            except IndexError:  # another thread settled it
                return
            with self._lock:
                run = self._runs.get(key)
                if run is not None and run[1] is token:
                    del self._runs[key]
            session.leave_run(token, errored=True)

    def end_failed_run(self, context: RunContextWrapper[Any], error: Exception) -> None:
        """A tool's exception is leaving the run (the SDK raises it to the caller): the turn is over."""
        session, token = self._run(context)
        end_run(session, token, error)

    async def on_agent_start(self, context: Any, agent: Any) -> None:
        self._run(context)

    async def on_llm_start(
        self, context: RunContextWrapper[Any], agent: Any, system_prompt: str | None, input_items: list[Any]
    ) -> None:
        session, token = self._run(context)
        stop_if_halted(session, token)

    async def on_agent_end(self, context: Any, agent: Any, output: Any) -> None:
        session, token = self._run(context)
        session.leave_run(token)

    async def on_tool_end(
        self, context: RunContextWrapper[Any], agent: Any, tool: Tool, result: object
    ) -> None:
        """The result of a call whose output guardrails stopped before otelguard's (one rejected it)."""
        tool_guard = getattr(tool, _TOOL_GUARD_ATTR, None)
        if not isinstance(tool_guard, _ToolGuard) or tool_guard.owner_for(context) is not self:
            return
        if tool_guard.finished.take(_call_id(context)) is None:
            self.after_call(context, tool_guard, result)

    def after_call(
        self, context: RunContextWrapper[Any], tool_guard: _ToolGuard, result: object
    ) -> Decision | None:
        """Record how a call ended; the warning or halt to append to its result, if any."""
        call_id = _call_id(context)
        error = tool_guard.failed.take(call_id)
        return guidance(
            self.session_for(context).main,
            tool_guard.tool_name,
            getattr(context, "tool_arguments", None),
            result if error is None else error,  # the real error, not the SDK's generic message
            failed=error is not None,
            call_id=call_id,
        )


class _ToolGuard:
    """Installed once on a ``FunctionTool``: its input and output guardrails and its failure-function
    wrapper. Several ``guard_agent`` results may share a tool; each call goes to the hooks of its run.
    """

    def __init__(self, tool: FunctionTool) -> None:
        self.tool_name = tool.name
        self._owners: list[weakref.ref[GuardRunHooks]] = []
        self._lock = threading.Lock()
        self.failed: CallMemory[str] = CallMemory()  # call id -> the error, from the failure function
        self.finished: CallMemory[bool] = CallMemory()  # after_call made by the output guardrail
        self._original_failure: Callable[..., Any] | None = (
            _sdk_default_failure(tool)
            if tool._use_default_failure_error_function
            else tool._failure_error_function
        )

    @classmethod
    def install(cls, tool: FunctionTool) -> _ToolGuard:
        existing = getattr(tool, _TOOL_GUARD_ATTR, None)
        if isinstance(existing, _ToolGuard):
            return existing
        tool_guard = cls(tool)
        tool.tool_input_guardrails = [
            *(tool.tool_input_guardrails or ()),
            ToolInputGuardrail(guardrail_function=tool_guard.check, name=_GUARDRAIL_NAME),
        ]
        tool.tool_output_guardrails = [
            *(tool.tool_output_guardrails or ()),
            ToolOutputGuardrail(guardrail_function=tool_guard.check_output, name=_GUARDRAIL_NAME),
        ]
        set_function_tool_failure_error_function(tool, tool_guard.failure)
        setattr(tool, _TOOL_GUARD_ATTR, tool_guard)
        return tool_guard

    def add_owner(self, hooks: GuardRunHooks) -> None:
        with self._lock:
            self._owners = [ref for ref in self._owners if ref() is not None]
            if all(ref() is not hooks for ref in self._owners):
                self._owners.append(weakref.ref(hooks))

    def owner_for(self, context: RunContextWrapper[Any]) -> GuardRunHooks | None:
        """The hooks whose run this is; the first owner when no owner has seen the run yet."""
        with self._lock:
            owners = [hooks for ref in self._owners if (hooks := ref()) is not None]
        for hooks in owners:
            if hooks.knows_run(context):
                return hooks
        return owners[0] if owners else None

    async def check(self, data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        hooks = self.owner_for(data.context)
        if hooks is None:
            return ToolGuardrailFunctionOutput.allow()
        context = data.context
        guard = hooks.session_for(context).main
        refused = refusal(guard, context.tool_name, context.tool_arguments, context.tool_call_id)
        if refused is None:
            return ToolGuardrailFunctionOutput.allow()
        return ToolGuardrailFunctionOutput.reject_content(
            refused.synthetic_result(), output_info=refused.to_metadata()
        )

    async def check_output(self, data: ToolOutputGuardrailData) -> ToolGuardrailFunctionOutput:
        """Record how the call ended; a warning is appended to a text result (the model reads it)."""
        hooks = self.owner_for(data.context)
        if hooks is None:
            return ToolGuardrailFunctionOutput.allow()
        note = hooks.after_call(data.context, self, data.output)
        self.finished.add(_call_id(data.context), True)
        output = data.output
        if note is not None and isinstance(output, str):
            return ToolGuardrailFunctionOutput.reject_content(
                note.annotate(output), output_info=note.to_metadata()
            )
        return ToolGuardrailFunctionOutput.allow()

    async def failure(self, context: RunContextWrapper[Any], error: Exception) -> str | None:
        self.failed.add(_call_id(context), error_result(error))
        original = self._original_failure
        result = original(context, error) if original is not None else None
        if inspect.isawaitable(result):
            result = await result
        if result is None:
            # No message for the model: the SDK re-raises as before and no later hook of this call
            # or of its run follows, so the failure, and the run's end, are recorded here.
            hooks = self.owner_for(context)
            if hooks is not None:
                hooks.after_call(context, self, None)
                hooks.end_failed_run(context, error)
            return None
        return str(result)


def _call_id(context: object) -> str | None:
    call_id = getattr(context, "tool_call_id", None)
    return call_id if isinstance(call_id, str) else None


def _sdk_default_failure(
    tool: FunctionTool,
) -> Callable[[RunContextWrapper[Any], Exception], Awaitable[str | None]]:
    """The SDK's own handling of a tool that uses the default failure function, kept whole (its
    message, the run config's ``tool_error_formatter``, re-raising for programmatic callers), run on
    a copy of the tool taken before otelguard replaced its failure function."""
    original = copy.copy(tool)

    async def failure(context: RunContextWrapper[Any], error: Exception) -> str | None:
        return await maybe_invoke_function_tool_failure_error_function(
            function_tool=original, context=context, error=error
        )

    return failure
