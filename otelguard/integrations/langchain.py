"""LangChain / LangGraph: ``GuardMiddleware``, an ``AgentMiddleware`` for ``create_agent``.

    agent = create_agent(model, tools, middleware=[GuardMiddleware(GuardConfig(mode="unattended"))])

* Every tool call goes through the guard in ``wrap_tool_call``/``awrap_tool_call``. A refused call
  never runs: the model gets ``ToolMessage(status="error")`` holding the synthetic result.
* A tool that raises, or answers with an error ``ToolMessage``, is a failure. The exception is then
  handled exactly as without the middleware. LangGraph interrupts (``GraphBubbleUp``) pass through
  untouched and are not failures.
* Model calls: ``before_model`` in the ``before_model`` hook (a ``block`` ends the run as a halt
  does), ``after_model`` around the model call with the answer's text, ``tool_calls``,
  ``invalid_tool_calls`` and ``usage_metadata``. A model warning from either reaches the model in
  its next request of the turn: a ``HumanMessage`` appended to that request in ``wrap_model_call``,
  for that request only (never in the graph state, so checkpoints and the history a user sees
  keep only what the agent and the user said; a model still stalling is warned again).
* A turn is one agent invocation (``before_agent`` to ``after_agent``). After a ``block``/``halt``
  the run ends before the next model call (``jump_to: "end"``) with an AI message saying why.
* A run that raises never reaches ``after_agent``. An exception leaving the guard's wrap of a model
  or tool call is that call's failure; a middleware listed before the guard may still turn it into
  an answer (an error handler, a model fallback) and the run goes on, so nothing ends the turn
  then: the run is *unsettled*. It went on when its next model call starts, a tool call that is not
  a sibling of the current batch starts (a retry), or ``after_agent`` runs. The exception left the
  run when the thread's next run begins with the turn still open and unsettled, or when the session
  leaves the pool unsettled (eviction, idle expiry): that turn ends as ``errored`` then. Whatever the
  order of the middleware, the same failing call retried is refused after 5 failures. Listed first,
  the middleware sees only what a retry or fallback middleware listed after it gave up on.
* One guard per ``thread_id`` of the run config, else one for the middleware.
* Delegation trees: a tool runs inside its guard's tree (``otelguard.propagation``), so an agent
  invoked from a tool (or a graph invoked there with the agent as a subgraph) is one level down in
  the caller's tree: its guard is the thread's at that place in the tree, one level below the
  calling agent. A tool whose ``metadata`` names the agent it runs (``{DELEGATES_TO: "worker"}``,
  the name that agent's middleware labels it with) is a delegation to it: the depth limit and
  delegation cycles apply to its calls. A delegated agent that is stopped ends its own run with the
  AI message saying why, which the calling tool returns.
* The session caps used so far also live in a private channel of the graph's state
  (``otelguard_session_caps``), so a LangGraph checkpointer carries them to whichever worker runs
  the thread next, or past a restart, without shared state. A worker takes the higher of its own
  count and the checkpoint's; with ``state.url`` Redis holds the counts and the channel is only written.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Annotated, Any, Final

from otelguard.core.decisions import Decision
from otelguard.core.guard import Guard
from otelguard.core.sessions import DEFAULT_SESSION, Session
from otelguard.hosting import SessionHosted
from otelguard.integrations._protocol import (
    DELEGATES_TO,
    CallMemory,
    ModelNotes,
    delegate_of,
    errored,
    guidance,
    halt_of,
    in_tree,
    missing_framework,
    model_stop,
    raised,
    refusal,
    replied,
    tokens,
)
from otelguard.propagation import current_tree

try:
    from langchain.agents.middleware import AgentMiddleware, AgentState, ToolCallRequest, hook_config
    from langchain.agents.middleware.types import (
        ModelCallResult,
        ModelRequest,
        ModelResponse,
        PrivateStateAttr,
    )
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langgraph.config import get_config
    from langgraph.errors import GraphBubbleUp
    from langgraph.runtime import Runtime
    from langgraph.types import Command
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without the framework
    raise missing_framework("langchain", "langchain") from exc

if sys.version_info >= (3, 11):
    from typing import NotRequired
else:  # pragma: no cover
    from typing_extensions import NotRequired

__all__ = ["CAPS_CHANNEL", "DELEGATES_TO", "GuardMiddleware", "GuardState"]

ToolResult = ToolMessage | Command[Any]

_HALT_PREFIX: Final = "Stopped by otelguard: "
CAPS_CHANNEL: Final = "otelguard_session_caps"


class GuardState(AgentState[Any]):
    """The agent state with otelguard's private channel: session cap key -> count used so far."""

    otelguard_session_caps: NotRequired[Annotated[dict[str, int], PrivateStateAttr]]


class GuardMiddleware(SessionHosted, AgentMiddleware[GuardState, Any, Any]):
    """Guards every tool call of a ``create_agent`` agent; see the module docstring.

    ``GuardMiddleware(config=None, *, telemetry=None, agent=None, max_sessions=10_000, host=None)``
    (``otelguard.hosting.SessionHosted``)."""

    state_schema = GuardState

    def _set_up(self) -> None:
        self._cap_keys = frozenset(
            key for key, limit in self.sessions.config.caps.session.items() if limit > 0
        )
        # (thread id, call id) of calls a LangGraph interrupt paused: they run again on resume
        self._paused: CallMemory[bool] = CallMemory()
        self._notes = ModelNotes()

    # -- turns ---------------------------------------------------------------------------------

    def before_agent(self, state: GuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        session = self._session()
        self._restore_caps(session, state.get(CAPS_CHANNEL))
        # an open turn still unsettled ends as errored first: the exception left that run
        session.enter_run(_Run())
        return None

    async def abefore_agent(self, state: GuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self.before_agent(state, runtime)

    @hook_config(can_jump_to=["end"])
    def before_model(self, state: GuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        session = self._session()
        update = self._caps_update(session, state)
        halt = halt_of(session) or model_stop(session.main, self._notes)
        if halt is None:
            return update
        return {
            **(update or {}),
            "jump_to": "end",
            "messages": [AIMessage(content=_HALT_PREFIX + halt.message)],
        }

    @hook_config(can_jump_to=["end"])
    async def abefore_model(self, state: GuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self.before_model(state, runtime)

    def after_agent(self, state: GuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        session = self._session()
        session.end_turn()
        return self._caps_update(session, state)

    async def aafter_agent(self, state: GuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self.after_agent(state, runtime)

    # -- a run that raises ----------------------------------------------------------------------

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]
    ) -> ModelCallResult[Any]:
        session = self._session()
        with _in_flight(session, model=True) as asked:
            response = handler(self._noted(request, session.main))
            asked[0] = _replied(session.main, response, self._notes)
            return response

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelCallResult[Any]:
        session = self._session()
        with _in_flight(session, model=True) as asked:
            response = await handler(self._noted(request, session.main))
            asked[0] = _replied(session.main, response, self._notes)
            return response

    def _noted(self, request: ModelRequest[Any], guard: Guard) -> ModelRequest[Any]:
        """The request with the model warning the model has not read yet, for this request only."""
        note = self._notes.take(guard)
        if note is None:
            return request
        return request.override(messages=[*request.messages, HumanMessage(content=note)])

    # -- session caps in the graph's state -----------------------------------------------------

    def _restore_caps(self, session: Session, saved: object) -> None:
        """Raise the session's counts to what the checkpoint says (the thread may have run elsewhere)."""
        if not isinstance(saved, Mapping):
            return  # nothing saved yet
        store = session.main.session_caps
        used = store.usage()
        higher = {
            key: count
            for key, count in saved.items()
            if key in self._cap_keys and type(count) is int and count > used.get(key, 0)
        }
        if higher:
            store.restore(higher)  # a shared store keeps its own: it holds every worker's counts

    def _caps_update(self, session: Session, state: GuardState) -> dict[str, Any] | None:
        used = {
            key: count for key, count in session.main.session_caps.usage().items() if key in self._cap_keys
        }
        if not used or used == state.get(CAPS_CHANNEL):
            return None
        return {CAPS_CHANNEL: used}

    # -- tool calls ----------------------------------------------------------------------------

    def wrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], ToolResult]
    ) -> ToolResult:
        session, thread_id = self._session_and_thread()
        with _in_flight(session):
            call, refused = self._start(request, session, thread_id)
            if refused is not None:
                return refused
            with self._running(call), in_tree(call.guard):
                result = handler(request)
            return call.finish(result)

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Awaitable[ToolResult]]
    ) -> ToolResult:
        session, thread_id = self._session_and_thread()
        with _in_flight(session):
            call, refused = self._start(request, session, thread_id)
            if refused is not None:
                return refused
            with self._running(call), in_tree(call.guard):
                result = await handler(request)
            return call.finish(result)

    @contextmanager
    def _running(self, call: _Call) -> Iterator[None]:
        """The tool runs: an exception is the call's failure, and is raised on as without the
        middleware; an interrupt is control flow, not a failure (the call runs again on resume)."""
        try:
            yield
        except GraphBubbleUp:
            self._paused.add(call.paused_key, True)
            raise
        except Exception as error:
            raised(call.guard, call.name, call.args, error, call.call_id)
            raise

    def _session_and_thread(self) -> tuple[Session, str]:
        thread_id = _thread_id()
        return self._session(thread_id), thread_id

    def _start(
        self, request: ToolCallRequest, session: Session, thread_id: str
    ) -> tuple[_Call, ToolMessage | None]:
        """The call's ``before_call``, unless it is an interrupted call running again on resume
        (the guard already counted and allowed it)."""
        call = _Call(session.main, request.tool_call, thread_id)
        if self._paused.take(call.paused_key) is not None:
            return call, None
        tool = request.tool
        delegate_to = delegate_of(tool.metadata) if tool is not None else None
        refused = refusal(call.guard, call.name, call.args, call.call_id, delegate_to)
        return call, None if refused is None else _refused(refused, call.name, call.call_id)

    def _session(self, thread_id: str | None = None) -> Session:
        return self.sessions.session(_session_key(thread_id if thread_id is not None else _thread_id()))


class _Run:
    """One invocation of the agent on a thread (the session's ``run``): how many tool calls of its
    last model answer have not started yet (the current batch)."""

    __slots__ = ("_lock", "expected")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.expected = 0

    def enter(self, model: bool) -> bool:
        """A model or tool call starts; ``True`` when it shows the run went on: a model call, or a
        tool call that is not a sibling of the current batch (a retry)."""
        with self._lock:
            went_on = model or self.expected == 0
            # a model call: the tools node of the previous answer is over, whatever did not start
            self.expected = 0 if model else max(self.expected - 1, 0)
            return went_on

    def asked(self, tool_calls: int) -> None:
        """A model answer asked for ``tool_calls`` tool calls: the next batch."""
        if tool_calls:
            with self._lock:
                self.expected += tool_calls


@contextmanager
def _in_flight(session: Session, model: bool = False) -> Iterator[list[int]]:
    """A model or tool call of the session's run. An exception leaving it (an interrupt is control
    flow, not one) unsettles the run: a middleware listed before the guard may let the run go on.
    A model call, or a tool call that is not a sibling of the current batch, settles it. A model
    call puts the number of tool calls its answer asks for in the list it yields."""
    asked = [0]
    run = session.run
    if not isinstance(run, _Run):  # a run resumed in this process without its before_agent
        yield asked
        return
    if run.enter(model) and session.unsettled:
        session.settle(run)
    try:
        yield asked
    except GraphBubbleUp:
        raise
    except BaseException as exc:
        if errored(exc):
            session.unsettle(run)
        raise
    run.asked(asked[0])


def _replied(guard: Guard, response: Any, notes: ModelNotes) -> int:
    """Record a model answer (a ``ModelResponse``, or a bare ``AIMessage``) as LangChain reports it:
    its text, ``tool_calls``, ``invalid_tool_calls`` and ``usage_metadata``. Returns how many tool
    calls it asks for."""
    messages = getattr(response, "result", None)
    if messages is None:
        messages = getattr(getattr(response, "model_response", None), "result", [response])
    answers = [m for m in messages if isinstance(m, AIMessage)]
    asked = sum(len(m.tool_calls) for m in answers)
    usages = [m.usage_metadata for m in answers if m.usage_metadata is not None]
    replied(
        guard,
        "\n".join(m.text for m in answers),
        tool_calls=asked,
        invalid_tool_calls=sum(len(m.invalid_tool_calls) for m in answers),
        input_tokens=_usage(usages, "input_tokens"),
        output_tokens=_usage(usages, "output_tokens"),
        notes=notes,
    )
    return asked


def _usage(usages: list[Any], kind: str) -> int | None:
    counts = [count for usage in usages if (count := tokens(usage.get(kind))) is not None]
    return sum(counts) if counts else None


class _Call:
    """One tool call of the model, as the guard sees it."""

    __slots__ = ("args", "call_id", "guard", "name", "paused_key")

    def __init__(self, guard: Guard, tool_call: Any, thread_id: str) -> None:
        call_id = tool_call.get("id")
        self.guard = guard
        self.name: str = tool_call["name"]
        self.args = tool_call.get("args")
        self.call_id = call_id if isinstance(call_id, str) else None
        self.paused_key = (thread_id, self.call_id) if self.call_id is not None else None

    def finish(self, result: ToolResult) -> ToolResult:
        """Record the tool's answer; a warning or halt is appended to the content the model reads."""
        if not isinstance(result, ToolMessage):  # a Command: the tool ran and changed the graph state
            self.guard.after_call(self.name, self.args, None, failed=False, call_id=self.call_id)
            return result
        content = result.content
        note = guidance(
            self.guard, self.name, self.args, content, failed=result.status == "error", call_id=self.call_id
        )
        if note is None:
            return result
        if isinstance(content, str):
            return result.model_copy(update={"content": note.annotate(content)})
        block = {"type": "text", "text": note.annotate("").lstrip()}
        return result.model_copy(update={"content": [*content, block]})


def _session_key(thread_id: str) -> str:
    """The session of a run on ``thread_id``: the thread's, or, for an agent run inside a tool of a
    guarded agent (its delegation tree current here), the thread's at that place in the tree. A run
    delegated from a tool inherits the caller's run config, ``thread_id`` included; keyed by the
    place, its guard is made there, one level below the caller, and the same place gets the same
    guard (a new turn per run). Digests only: no agent name in the key."""
    tree = current_tree()
    if tree is None:
        return thread_id
    return f"{thread_id}#{tree.root}.{tree.depth}.{'.'.join(tree.path)}"


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
