"""OpenAI Agents SDK: ``guard_agent(agent)`` returns the ``RunHooks`` to pass to ``Runner.run``.

    hooks = guard_agent(agent, GuardConfig(mode="unattended"), telemetry=True)
    result = await Runner.run(agent, "question", hooks=hooks)

* The agent and its handoff agents get guarded copies of their function tools: ``agent.tools`` is
  given a new list, the tools you made stay as they were (and stay unguarded in any agent you did
  not guard). ``unguard_agent(agent)`` gives each agent back the list it had.
* Each guarded copy has a tool input guardrail: a refused call never runs, and ``reject_content``
  puts the synthetic result in the model's history.
* Results come from a tool output guardrail, which appends warnings to a text result the model
  reads (``on_tool_end`` when another output guardrail rejected the result first); the failure flag
  from the copy's failure function (the SDK otherwise turns the exception into a generic string
  before any hook sees it), which hands the error to the original tool's own failure handling, so
  the model gets the message it would get without otelguard.
* After a ``block``/``halt`` the SDK would call the model again: the next ``on_llm_start`` raises
  ``otelguard.GuardHalted`` instead, and ``Runner.run`` raises it to the caller.
* Model calls: ``before_model`` in ``on_llm_start`` (a ``block`` raises ``GuardHalted``),
  ``after_model`` in ``on_llm_end`` with the response's text, its calls (a function call naming no
  tool or handoff of the agent, or whose arguments are not JSON, is invalid) and its usage. A model
  warning is recorded only: run hooks cannot change the model's input, and the SDK's filter that can
  (``RunConfig.call_model_input_filter``) runs before ``on_llm_start`` with the run's user context,
  not the ``RunContextWrapper`` the hooks tell runs apart by.
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
* Only the SDK's public API, but for two functions of ``agents.tool`` that the package root does
  not re-export and the agent behind a ``handoff(...)`` object, all three in one shim,
  ``_openai_agents_sdk`` (``SUPPORTED_SDK_VERSIONS`` names the versions they are pinned for).
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Final

from otelguard.config import GuardConfig
from otelguard.core.bounded_map import BoundedMap
from otelguard.core.decisions import Decision
from otelguard.core.guard import Guard
from otelguard.core.sessions import DEFAULT_MAX_SESSIONS, Session, SessionHost
from otelguard.errors import GuardHalted
from otelguard.hosting import TelemetryOption, session_host
from otelguard.integrations._protocol import (
    CallMemory,
    end_run,
    error_result,
    guidance,
    missing_framework,
    model_stop,
    raised,
    replied,
    stop_if_halted,
    tokens,
)
from otelguard.propagation import use_tree

try:
    from agents import (
        Agent,
        FunctionTool,
        Handoff,
        ModelResponse,
        RunContextWrapper,
        RunHooks,
        Tool,
        ToolGuardrailFunctionOutput,
        ToolInputGuardrail,
        ToolInputGuardrailData,
        ToolOutputGuardrail,
        ToolOutputGuardrailData,
        handoff,
    )
    from agents.tool_context import ToolContext

    # what the SDK's public API does not offer, named in one shim pinned by a test per version
    from otelguard.integrations._openai_agents_sdk import (
        SUPPORTED_SDK_VERSIONS,
        handoff_agent,
        invoke_failure_function,
        set_failure_function,
    )
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without the framework
    raise missing_framework("openai-agents", "openai-agents") from exc

__all__ = [
    "SUPPORTED_SDK_VERSIONS",
    "GuardRunHooks",
    "agent_of_tool",
    "agent_tool",
    "guard_agent",
    "unguard_agent",
]

SessionKey = Callable[[RunContextWrapper[Any]], object]
_GUARDRAIL_NAME: Final = "otelguard"


def guard_agent(
    agent: Agent[Any],
    config: GuardConfig | None = None,
    *,
    telemetry: TelemetryOption = None,
    agent_name: str | None = None,
    session_key: SessionKey | None = None,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    host: SessionHost | None = None,
) -> GuardRunHooks:
    """Guard every function tool of ``agent`` and of its handoff agents; return the run hooks.
    ``host``: a ready session host to use instead of one made from the other arguments."""
    sessions = session_host(
        config,
        telemetry=telemetry,
        agent=agent_name,
        max_sessions=max_sessions,
        host=host,
        default_agent=agent.name,
    )
    hooks = GuardRunHooks(sessions, session_key=session_key)
    installation = _Installation.of(agent)
    for each in _handoff_agents(agent):
        installation.guard(each, hooks)
    return hooks


def unguard_agent(agent: Agent[Any]) -> Agent[Any]:
    """Give ``agent`` (as given to ``guard_agent``) and its handoff agents back the tools they had
    before; the hooks of earlier ``guard_agent`` calls see no more tool calls of it. Returns ``agent``."""
    installation = _Installation.take(agent)
    if installation is not None:
        installation.restore()
    return agent


def _handoff_agents(root: Agent[Any]) -> Iterator[Agent[Any]]:
    """``root`` and the agents of its handoffs, transitively. A handoff's agent is guarded here,
    not at its handoff: changing its tools then, while other runs may use it, is what the SDK
    refuses with a ``UserError``."""
    seen: set[int] = set()
    pending: list[Agent[Any]] = [root]
    while pending:
        agent = pending.pop()
        if id(agent) in seen:
            continue
        seen.add(id(agent))
        yield agent
        for entry in agent.handoffs:
            target = handoff_agent(entry) if isinstance(entry, Handoff) else entry
            if isinstance(target, Agent):
                pending.append(target)
        for tool in agent.tools:
            called = agent_of_tool(tool)
            if called is not None:
                pending.append(called)


def agent_tool(
    agent: Agent[Any], tool_name: str | None = None, tool_description: str | None = None, **as_tool: Any
) -> FunctionTool:
    """``agent.as_tool(tool_name, tool_description, **as_tool)``, known to otelguard as a delegation:
    a guarded agent's call of it is a delegation to ``agent`` (asked with ``delegate_to``), and the
    run it starts is a run of its own, one level down in the delegation tree, whose halts end it
    (the SDK's ``as_tool`` marks its tools in no public attribute, so ``guard_agent`` cannot tell an
    agent tool made by ``as_tool`` alone from any other function tool)."""
    if "hooks" in as_tool:
        raise TypeError("agent_tool: the nested run's hooks are otelguard's; guard its agent instead")
    tool = agent.as_tool(tool_name, tool_description, hooks=_NESTED_HOOKS, **as_tool)
    with _AGENT_TOOLS_LOCK:
        _AGENT_TOOLS[id(tool)] = (weakref.ref(tool), agent)
    weakref.finalize(tool, _forget_agent_tool, id(tool)).atexit = False
    return tool


def agent_of_tool(tool: object) -> Agent[Any] | None:
    """The agent an ``agent_tool`` (or its guarded copy) runs; ``None`` for any other tool."""
    if isinstance(tool, FunctionTool):
        tool = _original_of(tool)
    with _AGENT_TOOLS_LOCK:
        known = _AGENT_TOOLS.get(id(tool))
    return known[1] if known is not None and known[0]() is tool else None


_AGENT_TOOLS: dict[int, tuple[weakref.ref[FunctionTool], Agent[Any]]] = {}
_AGENT_TOOLS_LOCK: Final = threading.Lock()


def _forget_agent_tool(key: int) -> None:
    with _AGENT_TOOLS_LOCK:
        known = _AGENT_TOOLS.get(key)
        if known is not None and known[0]() is None:
            del _AGENT_TOOLS[key]


@dataclass(eq=False)
class _Guarded:
    """One agent ``guard_agent`` gave guarded tools: the list it had, and the list it was given."""

    agent: weakref.ref[Agent[Any]]
    original: list[Tool]
    guarded: list[Tool]
    given: tuple[Tool, ...]  # what ``guarded`` held then
    handoffs: list[Any] = field(default_factory=list)  # the handoff list it had
    guarded_handoffs: list[Any] = field(default_factory=list)  # the one it was given

    def unchanged(self, agent: Agent[Any]) -> bool:
        return (
            agent.tools is self.guarded
            and len(self.guarded) == len(self.given)
            and all(now is then for now, then in zip(self.guarded, self.given, strict=True))
        )


@dataclass(eq=False)
class _Installation:
    """What ``guard_agent`` did to one agent and its handoff agents, for ``unguard_agent`` to undo."""

    agents: dict[int, _Guarded] = field(default_factory=dict)
    copies: dict[int, FunctionTool] = field(default_factory=dict)  # id of the original -> its copy
    handoff_copies: dict[int, Handoff[Any, Any]] = field(default_factory=dict)
    closed: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    @staticmethod
    def of(root: Agent[Any]) -> _Installation:
        """The installation of ``root``: the one an earlier ``guard_agent(root)`` made, or a new one."""
        with _INSTALLATIONS_LOCK:
            known = _INSTALLATIONS.get(id(root))
            if known is not None and known[0]() is root:
                return known[1]
            installation = _Installation()
            _INSTALLATIONS[id(root)] = (weakref.ref(root), installation)
        weakref.finalize(root, _forget, id(root), installation).atexit = False
        return installation

    @staticmethod
    def take(root: Agent[Any]) -> _Installation | None:
        with _INSTALLATIONS_LOCK:
            known = _INSTALLATIONS.get(id(root))
            if known is None or known[0]() is not root:
                return None
            del _INSTALLATIONS[id(root)]
            return known[1]

    def guard(self, agent: Agent[Any], hooks: GuardRunHooks) -> None:
        """Give ``agent`` guarded copies of its function tools (once); ``hooks`` owns their calls."""
        with self.lock:
            if self.closed:
                return
            done = self.agents.get(id(agent))
            if done is not None and done.agent() is agent:
                tools = done.guarded
            else:
                tools = [self._copy(tool) if isinstance(tool, FunctionTool) else tool for tool in agent.tools]
                handoffs = [self._copy_handoff(entry) for entry in agent.handoffs]
                self.agents[id(agent)] = _Guarded(
                    weakref.ref(agent), agent.tools, tools, tuple(tools), agent.handoffs, handoffs
                )
                agent.tools = tools
                agent.handoffs = handoffs
            handoffs = self.agents[id(agent)].guarded_handoffs
        for tool in tools:
            tool_guard = _guard_of(tool)
            if tool_guard is not None:
                tool_guard.add_owner(hooks)
        for entry in handoffs:
            if isinstance(entry, _GuardedHandoff):
                entry.guard.add_owner(hooks)

    def _copy_handoff(self, entry: Any) -> Any:
        """A handoff (or an agent, as the SDK's ``handoff(agent)`` would make it) that asks the
        guard first: its copy, made once per handoff."""
        if isinstance(entry, _GuardedHandoff):
            return entry
        if isinstance(entry, Agent):
            entry = handoff(entry)
        if not isinstance(entry, Handoff):
            return entry
        copied = self.handoff_copies.get(id(entry))
        if copied is None:
            copied = self.handoff_copies[id(entry)] = _HandoffGuard(entry).handoff
        return copied

    def _copy(self, tool: FunctionTool) -> FunctionTool:
        if _guard_of(tool) is not None:  # already a guarded copy
            return tool
        copied = self.copies.get(id(tool))
        if copied is None:
            copied = self.copies[id(tool)] = _ToolGuard(tool).tool
        return copied

    def knows(self, agent: Agent[Any]) -> bool:
        with self.lock:
            done = self.agents.get(id(agent))
            return done is not None and done.agent() is agent

    def restore(self) -> None:
        with self.lock:
            self.closed = True
            guarded, self.agents = list(self.agents.values()), {}
            self.copies.clear()
            self.handoff_copies.clear()
        for each in guarded:
            agent = each.agent()
            if agent is None:
                continue
            if agent.handoffs is each.guarded_handoffs:
                agent.handoffs = each.handoffs
            if each.unchanged(agent):
                agent.tools = each.original
            else:  # the list was changed or replaced since: keep the change, drop the copies
                agent.tools = [_original_of(tool) for tool in agent.tools]


_INSTALLATIONS: dict[int, tuple[weakref.ref[Agent[Any]], _Installation]] = {}
"""Root agent id -> its installation, while the root agent lives (``unguard_agent`` finds it here)."""
_INSTALLATIONS_LOCK: Final = threading.Lock()


def _forget(key: int, installation: _Installation) -> None:
    with _INSTALLATIONS_LOCK:
        known = _INSTALLATIONS.get(key)
        if known is not None and known[1] is installation:
            del _INSTALLATIONS[key]


class _Run:
    """One live run: its session, its turn token, and the guard of the agent running now (the
    session's main guard, or, in a delegation tree, the guard one level down per handoff)."""

    __slots__ = ("agent", "guard", "session", "token")

    def __init__(self, session: Session, token: object) -> None:
        self.session = session
        self.token = token
        self.guard: Guard = session.main
        self.agent: Any = None  # the SDK agent running now (told by ``on_agent_start``)

    def hand_off(self, agent: Any) -> None:
        """A handoff to ``agent`` ran: in a delegation tree its calls go to a guard one level below
        the agent that handed off (a turn of its own); outside a tree they stay with the main guard."""
        self.agent = agent
        previous = self.guard
        if previous.delegation_tree is None:
            return
        self.guard = previous.subagent_guard(getattr(agent, "name", None) or previous.agent)
        self.guard.start_turn()
        if previous is not self.session.main:
            previous.end_turn()

    def end_delegated(self) -> None:
        """End the turn of the agent the run was handed to, if any (the main turn ends with the run)."""
        guard, self.guard = self.guard, self.session.main
        if guard is not self.session.main:
            guard.end_turn()


class GuardRunHooks(RunHooks[Any]):
    """The ``RunHooks`` that ``guard_agent`` returns: turns, results and halts of guarded runs."""

    def __init__(self, sessions: SessionHost, *, session_key: SessionKey | None = None) -> None:
        self.sessions = sessions
        self._session_key = session_key
        self._lock = threading.Lock()
        # One entry per live run, keyed by its usage object (shared by every context of one run,
        # tool contexts included); dropped when the run's usage is garbage collected.
        self._runs: BoundedMap[int, _Run] = BoundedMap(sessions.max_sessions)
        # Runs whose usage was freed, for the next event to settle: a finalizer runs inside the
        # garbage collector, maybe in a thread holding a lock it would need, so it only appends.
        self._freed: deque[tuple[int, _Run]] = deque()

    def knows_run(self, context: RunContextWrapper[Any]) -> bool:
        if self._freed:
            self._settle_freed()
        with self._lock:
            return id(context.usage) in self._runs

    def session_for(self, context: RunContextWrapper[Any]) -> Session:
        """The session of the run ``context`` belongs to; the first call of a run starts its turn."""
        return self.run_of(context).session

    def guard_for(self, context: RunContextWrapper[Any]) -> Guard:
        """The guard of the agent running now in the run ``context`` belongs to."""
        return self.run_of(context).guard

    def run_of(self, context: RunContextWrapper[Any]) -> _Run:
        nested = _NESTED.get()
        if nested is not None and nested.hooks is self and context is not nested.call:
            return nested.run()  # a run an agent tool started: one of its own, one level down
        if self._freed:
            self._settle_freed()
        usage = context.usage
        key = id(usage)
        with self._lock:
            run = self._runs.get(key)
        if run is not None:
            return run
        session_id = self._session_key(context) if self._session_key is not None else None
        run = _Run(self.sessions.session(session_id), object())
        with self._lock:
            self._runs.put(key, run)
        weakref.finalize(usage, self._freed.append, (key, run)).atexit = False
        run.session.enter_run(run.token)
        return run

    def _settle_freed(self) -> None:
        """Forget the runs the SDK has let go of; a turn still open there never reached
        ``on_agent_end``, so its run ended in an exception (``leave_run`` is a no-op otherwise)."""
        while self._freed:
            try:
                key, run = self._freed.popleft()
            except IndexError:  # another thread settled it
                return
            with self._lock:
                if self._runs.get(key) is run:
                    del self._runs[key]
            run.end_delegated()
            run.session.leave_run(run.token, errored=True)

    def end_failed_run(self, context: RunContextWrapper[Any], error: Exception) -> None:
        """A tool's exception is leaving the run (the SDK raises it to the caller): the turn is over."""
        run = self.run_of(context)
        run.end_delegated()
        end_run(run.session, run.token, error)

    async def on_agent_start(self, context: Any, agent: Any) -> None:
        self.run_of(context).agent = agent

    async def on_llm_start(
        self, context: RunContextWrapper[Any], agent: Any, system_prompt: str | None, input_items: list[Any]
    ) -> None:
        run = self.run_of(context)
        halt = run.guard.halt_decision
        if halt is not None and run.guard is not run.session.main:
            run.end_delegated()
            run.session.leave_run(run.token)
            raise GuardHalted(halt)
        stop_if_halted(run.session, run.token)
        stop = model_stop(run.guard)
        if stop is not None:
            run.end_delegated()
            run.session.leave_run(run.token)
            raise GuardHalted(stop)

    async def on_llm_end(self, context: RunContextWrapper[Any], agent: Any, response: ModelResponse) -> None:
        text, calls, invalid = _reply_of(response, agent)
        usage = getattr(response, "usage", None)
        input_tokens = tokens(getattr(usage, "input_tokens", None))
        output_tokens = tokens(getattr(usage, "output_tokens", None))
        if not (input_tokens or output_tokens or tokens(getattr(usage, "requests", None))):
            input_tokens = output_tokens = None  # the SDK's zeros for a response that reported none
        replied(
            self.run_of(context).guard,
            text,
            tool_calls=calls,
            invalid_tool_calls=invalid,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
        )

    async def on_agent_end(self, context: Any, agent: Any, output: Any) -> None:
        run = self.run_of(context)
        run.end_delegated()
        run.session.leave_run(run.token)

    async def on_tool_end(
        self, context: RunContextWrapper[Any], agent: Any, tool: Tool, result: object
    ) -> None:
        """The result of a call whose output guardrails stopped before otelguard's (one rejected it)."""
        tool_guard = _guard_of(tool)
        if tool_guard is None or tool_guard.owner_for(context) is not self:
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
            self.guard_for(context),
            tool_guard.tool_name,
            getattr(context, "tool_arguments", None),
            result if error is None else error,  # the real error, not the SDK's generic message
            failed=error is not None,
            call_id=call_id,
        )


_LOCAL_CALLS: Final = frozenset(
    {"computer_call", "local_shell_call", "shell_call", "apply_patch_call", "custom_tool_call"}
)
"""Output items of calls the SDK runs here, besides function calls (hosted tools run at the provider)."""


def _reply_of(response: Any, agent: Any) -> tuple[str, int, int]:
    """A response's text, the calls the SDK will run, and the function calls it cannot."""
    texts: list[str] = []
    calls = invalid = 0
    known = _tool_names(agent)
    for item in getattr(response, "output", None) or ():
        kind = getattr(item, "type", None)
        if kind == "message":
            for part in getattr(item, "content", None) or ():
                text = getattr(part, "text", None)
                if isinstance(text, str):
                    texts.append(text)
        elif kind == "function_call":
            if _valid_call(item, known):
                calls += 1
            else:
                invalid += 1
        elif kind in _LOCAL_CALLS:
            calls += 1
    return "\n".join(texts), calls, invalid


def _tool_names(agent: Any) -> frozenset[str] | None:
    """The function tool and handoff names the SDK resolves a call against; ``None`` when they
    cannot be known here (MCP servers list their tools when the run asks them)."""
    if getattr(agent, "mcp_servers", None):
        return None
    names = {tool.name for tool in getattr(agent, "tools", ()) if isinstance(tool, FunctionTool)}
    for entry in getattr(agent, "handoffs", ()):
        names.add(entry.tool_name if isinstance(entry, Handoff) else Handoff.default_tool_name(entry))
    return frozenset(names)


def _valid_call(item: Any, known: frozenset[str] | None) -> bool:
    """A function call the SDK can run: a tool it knows, and arguments that parse as JSON (the SDK
    answers any other with an error, or raises)."""
    if (
        known is not None
        and not getattr(item, "namespace", None)
        and getattr(item, "name", None) not in known
    ):
        return False
    arguments = getattr(item, "arguments", None) or "{}"
    try:
        json.loads(arguments)
    except (TypeError, ValueError):
        return False
    return True


class _Owned:
    """A guarded copy shared by several ``guard_agent`` results of one agent: the hooks of each (held
    weakly), so that each call goes to the hooks of its run."""

    _owners: list[weakref.ref[GuardRunHooks]]
    _owners_lock: threading.Lock

    def add_owner(self, hooks: GuardRunHooks) -> None:
        with self._owners_lock:
            self._owners = [ref for ref in self._owners if ref() is not None]
            if all(ref() is not hooks for ref in self._owners):
                self._owners.append(weakref.ref(hooks))

    def owner_for(self, context: RunContextWrapper[Any]) -> GuardRunHooks | None:
        """The hooks whose run this is; the first owner when no owner has seen the run yet."""
        with self._owners_lock:
            owners = [hooks for ref in self._owners if (hooks := ref()) is not None]
        for hooks in owners:
            if hooks.knows_run(context):
                return hooks
        return owners[0] if owners else None


class _ToolGuard(_Owned):
    """The guarded copy of one ``FunctionTool`` (``tool``): its input and output guardrails and its
    failure function. Several ``guard_agent`` results of one agent share it; each call goes to the
    hooks of its run.
    """

    def __init__(self, original: FunctionTool) -> None:
        self.original = original
        self.tool_name = original.name
        self._owners: list[weakref.ref[GuardRunHooks]] = []
        self._owners_lock = threading.Lock()
        self.failed: CallMemory[str] = CallMemory()  # call id -> the error, from the failure function
        self.finished: CallMemory[bool] = CallMemory()  # after_call made by the output guardrail
        # The SDK's own copy (its ``__copy__`` binds the copy's invoker to the copy), given
        # otelguard's guardrails after the tool's own and otelguard's failure function.
        tool = copy.copy(original)
        tool.tool_input_guardrails = [
            *(original.tool_input_guardrails or ()),
            ToolInputGuardrail(guardrail_function=self.check, name=_GUARDRAIL_NAME),
        ]
        tool.tool_output_guardrails = [
            *(original.tool_output_guardrails or ()),
            ToolOutputGuardrail(guardrail_function=self.check_output, name=_GUARDRAIL_NAME),
        ]
        self.tool = set_failure_function(tool, self.failure)
        called = agent_of_tool(original)
        self.delegates_to: str | None = None if called is None else called.name
        if called is not None:
            self._invoke = tool.on_invoke_tool
            self.tool.on_invoke_tool = self.invoke_agent

    async def check(self, data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        hooks = self.owner_for(data.context)
        if hooks is None:
            return ToolGuardrailFunctionOutput.allow()
        context = data.context
        guard = hooks.guard_for(context)
        refused = guard.before_call(
            context.tool_name, context.tool_arguments, context.tool_call_id, delegate_to=self.delegates_to
        )
        if refused.allows_execution:
            return ToolGuardrailFunctionOutput.allow()
        return ToolGuardrailFunctionOutput.reject_content(
            refused.synthetic_result(), output_info=refused.to_metadata()
        )

    async def invoke_agent(self, context: ToolContext[Any], input_json: str) -> Any:
        """Run the agent tool's nested run as a run of its own: in a delegation tree, the agent it
        runs gets a guard one level below the caller's (its turn, its halts), and the tree is current
        while it runs."""
        hooks = self.owner_for(context)
        caller = hooks.run_of(context) if hooks is not None else None
        if hooks is None or caller is None or caller.guard.delegation_tree is None:
            return await self._invoke(context, input_json)
        delegator = caller.guard
        nested = _Nested(hooks, context, caller.session, delegator, self.delegates_to or delegator.agent)
        token = _NESTED.set(nested)
        try:
            with use_tree(delegator.delegation_tree):
                return await self._invoke(context, input_json)
        finally:
            _NESTED.reset(token)
            nested.close()

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
        # The original tool is untouched: the SDK's handling of it is what the model would get
        # without otelguard (the default message and the run config's ``tool_error_formatter``,
        # a failure function the tool had, or ``None`` to re-raise).
        result = await invoke_failure_function(function_tool=self.original, context=context, error=error)
        if result is None:
            # No message for the model: the SDK re-raises as before and no later hook of this call
            # or of its run follows, so the failure, and the run's end, are recorded here.
            hooks = self.owner_for(context)
            if hooks is not None:
                hooks.after_call(context, self, None)
                hooks.end_failed_run(context, error)
        return result


class _HandoffGuard(_Owned):
    """The guarded copy of one ``Handoff`` (``handoff``): a handoff is a delegation to its agent
    (``delegate_to``), asked of the guard of the agent handing off before the SDK runs it. A refused
    handoff does not happen: the agent handing off stays, and the refusal is the handoff call's result
    the model reads. One that runs is recorded at once (a cycle's warning goes into its result), and
    in a delegation tree the agent it reaches gets a guard one level down."""

    def __init__(self, original: Handoff[Any, Any]) -> None:
        self.original = original
        self._owners: list[weakref.ref[GuardRunHooks]] = []
        self._owners_lock = threading.Lock()
        values = {each.name: getattr(original, each.name) for each in dataclasses.fields(original)}
        inits = {each.name for each in dataclasses.fields(original) if each.init}
        self.handoff = _GuardedHandoff(**{k: v for k, v in values.items() if k in inits})
        for name, value in values.items():  # the SDK's own bookkeeping fields (the agent's weak ref)
            if name not in inits:
                object.__setattr__(self.handoff, name, value)
        self.handoff.guard = self
        self.handoff.on_invoke_handoff = self.invoke

    async def invoke(self, context: RunContextWrapper[Any], input_json: str) -> Any:
        hooks = self.owner_for(context)
        if hooks is None:
            return await self.original.on_invoke_handoff(context, input_json)
        run = hooks.run_of(context)
        guard, name = run.guard, self.original.tool_name
        args = input_json or "{}"
        call_id = f"handoff-{next(_HANDOFF_CALLS)}"  # the SDK gives the handoff hook no call id
        decision = guard.before_call(name, args, call_id=call_id, delegate_to=self.original.agent_name)
        if not decision.allows_execution:
            if run.agent is None:  # hooks not passed to this run: no agent to stay with, as before
                return await self.original.on_invoke_handoff(context, input_json)
            _TRANSFER.set(decision.synthetic_result())
            return run.agent  # the agent handing off stays; the model reads why
        try:
            target = await self.original.on_invoke_handoff(context, input_json)
        except Exception as error:
            raised(guard, name, args, error, call_id)
            raise
        message = self.original.get_transfer_message(target)
        note = guidance(guard, name, args, message, failed=False, call_id=call_id)
        _TRANSFER.set(message if note is None else note.annotate(message))
        run.hand_off(target)
        return target


@dataclasses.dataclass
class _GuardedHandoff(Handoff[Any, Any]):
    """A ``Handoff`` whose call result is the guard's word: the refusal, or the transfer message
    with a cycle's warning appended."""

    guard: Any = dataclasses.field(default=None, repr=False, compare=False)

    def get_transfer_message(self, agent: Any) -> str:
        told = _TRANSFER.get()
        if told is not None:
            _TRANSFER.set(None)
            return told
        return super().get_transfer_message(agent)


class _Nested:
    """One call of an agent tool by a guarded run in a delegation tree: the nested run it starts
    (sharing the caller's usage object, so not told apart by it) is a run of its own, whose guard
    is one level below the calling agent's."""

    __slots__ = ("_run", "agent", "call", "delegator", "hooks", "session")

    def __init__(
        self, hooks: GuardRunHooks, call: object, session: Session, delegator: Guard, agent: str
    ) -> None:
        self.hooks = hooks
        self.call = call
        """The calling run's context of the agent tool's call: the tool's own failure handling,
        which runs inside the call, is the caller's (the nested run's contexts are others)."""
        self.session = session
        self.delegator = delegator
        self.agent = agent
        self._run: _Run | None = None

    def run(self) -> _Run:
        if self._run is None:
            run = _Run(self.session, object())
            run.guard = self.delegator.subagent_guard(self.agent)
            run.guard.start_turn()
            self._run = run
        return self._run

    def close(self) -> None:
        if self._run is not None:
            self._run.end_delegated()


class _NestedRunHooks(RunHooks[Any]):
    """The hooks of every ``agent_tool``'s nested run: they hand its events to the guarded run
    that called the tool (none when it was called by a run otelguard does not guard)."""

    async def on_agent_start(self, context: Any, agent: Any) -> None:
        nested = _NESTED.get()
        if nested is not None:
            await nested.hooks.on_agent_start(context, agent)

    async def on_llm_start(
        self, context: RunContextWrapper[Any], agent: Any, system_prompt: str | None, input_items: list[Any]
    ) -> None:
        nested = _NESTED.get()
        if nested is not None:
            await nested.hooks.on_llm_start(context, agent, system_prompt, input_items)

    async def on_llm_end(self, context: RunContextWrapper[Any], agent: Any, response: ModelResponse) -> None:
        nested = _NESTED.get()
        if nested is not None:
            await nested.hooks.on_llm_end(context, agent, response)

    async def on_agent_end(self, context: Any, agent: Any, output: Any) -> None:
        nested = _NESTED.get()
        if nested is not None:
            await nested.hooks.on_agent_end(context, agent, output)

    async def on_tool_end(
        self, context: RunContextWrapper[Any], agent: Any, tool: Tool, result: object
    ) -> None:
        nested = _NESTED.get()
        if nested is not None:
            await nested.hooks.on_tool_end(context, agent, tool, result)


_NESTED: ContextVar[_Nested | None] = ContextVar("otelguard_agent_tool_run", default=None)
"""The agent tool call whose nested run is running here (set around the tool's invocation)."""
_NESTED_HOOKS: Final = _NestedRunHooks()

_TRANSFER: ContextVar[str | None] = ContextVar("otelguard_handoff_result", default=None)
"""What the handoff that just ran (or was refused) answers the model: set by ``invoke``, read by the
SDK's ``get_transfer_message`` right after it in the same task."""
_HANDOFF_CALLS: Final = itertools.count()


def _guard_of(tool: Tool) -> _ToolGuard | None:
    """The ``_ToolGuard`` of a guarded copy, found by its input guardrail; ``None`` for other tools."""
    if not isinstance(tool, FunctionTool):
        return None
    for guardrail in tool.tool_input_guardrails or ():
        tool_guard = getattr(guardrail.guardrail_function, "__self__", None)
        if isinstance(tool_guard, _ToolGuard) and tool_guard.tool is tool:
            return tool_guard
    return None


def _original_of(tool: Tool) -> Tool:
    tool_guard = _guard_of(tool)
    return tool if tool_guard is None else tool_guard.original


def _call_id(context: object) -> str | None:
    call_id = getattr(context, "tool_call_id", None)
    return call_id if isinstance(call_id, str) else None
