"""LangChain / LangGraph: ``GuardMiddleware``, an ``AgentMiddleware`` for ``create_agent``.

    agent = create_agent(model, tools, middleware=[GuardMiddleware(GuardConfig(mode="unattended"))])

* Every tool call goes through the guard in ``wrap_tool_call``/``awrap_tool_call``. A refused call
  never runs: the model gets ``ToolMessage(status="error")`` holding the synthetic result.
* A tool that raises, or answers with an error ``ToolMessage``, is a failure. The exception is then
  handled exactly as without the middleware. LangGraph interrupts (``GraphBubbleUp``) pass through
  untouched and are not failures.
* A turn is one agent invocation (``before_agent`` to ``after_agent``). After a ``block``/``halt``
  the run ends before the next model call (``jump_to: "end"``) with an AI message saying why.
* A run that raises never reaches ``after_agent``: an exception leaving the run ends its turn as
  ``errored``. An exception leaving the guard's wrap is that call's failure; whether it also leaves
  the run depends on the middleware listed before the guard. With none (the guard listed first),
  the exception leaves the run: the turn ends as ``errored`` once the run's last call in flight is
  over (the siblings of a parallel batch finish first). With one (an error handler that turns the
  exception into an error ``ToolMessage``, a model fallback), the run may go on: it went on when its
  next call starts or it ends normally; it raised when the thread's next run begins with the turn
  still open, which then ends as ``errored``. Listed first, the middleware sees only what a retry or
  fallback middleware listed after it gave up on.
* One guard per ``thread_id`` of the run config, else one for the middleware.
* The session caps used so far also live in a private channel of the graph's state
  (``otelguard_session_caps``), so a LangGraph checkpointer carries them to whichever worker runs
  the thread next, or past a restart, without shared state. A worker takes the higher of its own
  count and the checkpoint's; with ``state.url`` Redis holds the counts and the channel is only written.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from itertools import islice
from types import FrameType
from typing import Annotated, Any, Final

from otelguard.caps import SharedSessionCaps
from otelguard.config import GuardConfig
from otelguard.decisions import Decision
from otelguard.guard import Guard
from otelguard.integrations._protocol import (
    CallMemory,
    errored,
    guidance,
    halt_of,
    missing_framework,
    raised,
    refusal,
)
from otelguard.sessions import DEFAULT_MAX_SESSIONS, DEFAULT_SESSION, Session, SessionHost

try:
    from langchain.agents.middleware import AgentMiddleware, AgentState, ToolCallRequest, hook_config
    from langchain.agents.middleware.types import (
        ModelCallResult,
        ModelRequest,
        ModelResponse,
        PrivateStateAttr,
    )
    from langchain_core.messages import AIMessage, ToolMessage
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

__all__ = ["CAPS_CHANNEL", "GuardMiddleware", "GuardState"]

ToolResult = ToolMessage | Command[Any]

_HALT_PREFIX: Final = "Stopped by otelguard: "
CAPS_CHANNEL: Final = "otelguard_session_caps"


class GuardState(AgentState[Any]):
    """The agent state with otelguard's private channel: session cap key -> count used so far."""

    otelguard_session_caps: NotRequired[Annotated[dict[str, int], PrivateStateAttr]]


class GuardMiddleware(AgentMiddleware[GuardState, Any, Any]):
    """Guards every tool call of a ``create_agent`` agent; see the module docstring."""

    state_schema = GuardState

    def __init__(
        self,
        config: GuardConfig | None = None,
        *,
        telemetry: Any = None,
        agent: str | None = None,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
    ) -> None:
        super().__init__()
        self.sessions = SessionHost(config, telemetry=telemetry, agent=agent, max_sessions=max_sessions)
        self._cap_keys = frozenset(
            key for key, limit in self.sessions.config.caps.session.items() if limit > 0
        )
        # (thread id, call id) of calls a LangGraph interrupt paused: they run again on resume
        self._paused: CallMemory[bool] = CallMemory()

    # -- turns ---------------------------------------------------------------------------------

    def before_agent(self, state: GuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        session = self._session()
        self._restore_caps(session, state.get(CAPS_CHANNEL))
        previous = session.run
        if isinstance(previous, _Run) and previous.raised:  # an exception that left the run
            session.leave_run(previous, errored=True)
        session.enter_run(_Run())
        return None

    async def abefore_agent(self, state: GuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self.before_agent(state, runtime)

    @hook_config(can_jump_to=["end"])
    def before_model(self, state: GuardState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        session = self._session()
        update = self._caps_update(session, state)
        halt = halt_of(session)
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
        with _in_flight(self._session(), self, model=True) as asked:
            response = handler(request)
            asked[0] = _tool_calls(response)
            return response

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelCallResult[Any]:
        with _in_flight(self._session(), self, model=True) as asked:
            response = await handler(request)
            asked[0] = _tool_calls(response)
            return response

    # -- session caps in the graph's state -----------------------------------------------------

    def _restore_caps(self, session: Session, saved: object) -> None:
        """Raise the session's counts to what the checkpoint says (the thread may have run elsewhere)."""
        store = session.main.session_caps
        if not isinstance(saved, Mapping) or isinstance(store, SharedSessionCaps):
            return  # nothing saved yet, or Redis holds the counts of every worker already
        used = store.usage()
        for key, count in saved.items():
            if key in self._cap_keys and type(count) is int and count > used.get(key, 0):
                store.try_charge([(key, sys.maxsize)], count - used.get(key, 0))

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
        with _in_flight(session, self):
            call, refused = self._start(request, session, thread_id)
            if refused is not None:
                return refused
            with self._running(call):
                result = handler(request)
            return call.finish(result)

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Awaitable[ToolResult]]
    ) -> ToolResult:
        session, thread_id = self._session_and_thread()
        with _in_flight(session, self):
            call, refused = self._start(request, session, thread_id)
            if refused is not None:
                return refused
            with self._running(call):
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
        refused = refusal(call.guard, call.name, call.args, call.call_id)
        return call, None if refused is None else _refused(refused, call.name, call.call_id)

    def _session(self, thread_id: str | None = None) -> Session:
        return self.sessions.session(thread_id if thread_id is not None else _thread_id())


class _Run:
    """One invocation of the agent on a thread (the session's ``run``): its model and tool calls in
    flight, the tool calls its last model answer asked for that have not started yet, and what the
    exceptions that left its calls mean: ``failed``, one left the run (no middleware listed before
    the guard could catch it); ``unsettled``, one went on to such a middleware, which may have let
    the run go on."""

    __slots__ = ("_lock", "calls", "expected", "failed", "unsettled")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls = 0
        self.expected = 0
        self.failed = False
        self.unsettled = False

    @property
    def raised(self) -> bool:
        """Whether an exception may have ended the run (its turn still open at the next run: it did)."""
        return self.failed or self.unsettled

    def enter(self, model: bool) -> None:
        with self._lock:
            self.calls += 1
            if model or self.expected == 0:  # not a sibling of the batch: the run went on
                self.unsettled = False
            # a model call: the tools node of the previous answer is over, whatever did not start
            self.expected = 0 if model else max(self.expected - 1, 0)

    def leave(self, error: BaseException | None, tool_calls: int = 0, caught_outside: bool = False) -> bool:
        """A call is over (a model answer asking for ``tool_calls``); ``True`` when the run is over
        too: an exception left one of its calls and the run, and none is in flight or still to start.
        ``caught_outside``: a middleware listed before the guard may catch ``error``."""
        with self._lock:
            self.calls -= 1
            self.expected += tool_calls
            if errored(error):
                if caught_outside:
                    self.unsettled = True
                else:
                    self.failed = True
            return self.failed and self.calls == 0 and self.expected == 0


@contextmanager
def _in_flight(session: Session, guard: GuardMiddleware, model: bool = False) -> Iterator[list[int]]:
    """A model or tool call of the session's run. An exception leaving it (an interrupt is control
    flow, not one) that leaves the run too ends the run's turn as ``errored`` once no call of the run
    is in flight or still to start (the siblings of a parallel batch come first). A model call puts
    the number of tool calls its answer asks for in the list it yields."""
    asked = [0]
    run = session.run
    if not isinstance(run, _Run):  # a run resumed in this process without its before_agent
        yield asked
        return
    run.enter(model)
    error: BaseException | None = None
    caught_outside = False
    try:
        yield asked
    except GraphBubbleUp:
        raise
    except BaseException as exc:
        error = exc
        caught_outside = _wrapped_from_outside(guard, _MODEL_WRAPS if model else _TOOL_WRAPS)
        raise
    finally:
        if run.leave(error, asked[0], caught_outside):
            session.leave_run(run, errored=True)


_TOOL_WRAPS: Final = frozenset({"wrap_tool_call", "awrap_tool_call"})
_MODEL_WRAPS: Final = frozenset({"wrap_model_call", "awrap_model_call"})
_NODE_FRAMES: Final = frozenset({"_run_one", "_arun_one", "model_node", "amodel_node"})
"""Where a call's chain of middleware begins: the tools node runs one tool call, the model node one
model call (LangChain's ``ToolNode`` and ``create_agent``); an agent run as a tool of another lies
beyond it."""
_MAX_FRAMES: Final = 256


def _wrapped_from_outside(guard: GuardMiddleware, wraps: frozenset[str]) -> bool:
    """Whether another middleware's wrap of this call is on the stack above the guard's: listed
    before the guard, it sees the exception next and may turn it into an answer. Read from the
    running frames (LangChain tells a middleware nothing of the ones around it), only when an
    exception leaves a call."""
    for frame in islice(_frames_above(sys._getframe(2)), _MAX_FRAMES):
        name = frame.f_code.co_name
        if name in _NODE_FRAMES:
            return False
        if name in wraps:
            owner = frame.f_locals.get("self")
            if isinstance(owner, AgentMiddleware) and owner is not guard:
                return True
    return False


def _frames_above(frame: FrameType | None) -> Iterator[FrameType]:
    """The frames that called ``frame``, innermost first, and in async code those of the tasks
    awaiting the current one (LangSmith's tracing runs each async wrap in a task of its own)."""
    while frame is not None:
        yield frame
        frame = frame.f_back
    try:
        task: asyncio.Task[Any] | None = asyncio.current_task()
    except RuntimeError:  # no event loop in this thread
        return
    for _ in range(_MAX_FRAMES):
        task = _awaiting(task) if task is not None else None
        if task is None:
            return
        chain: list[FrameType] = []
        awaited: Any = task.get_coro()
        while awaited is not None and len(chain) < _MAX_FRAMES:
            if isinstance(getattr(awaited, "cr_frame", None), FrameType):
                chain.append(awaited.cr_frame)
            awaited = getattr(awaited, "cr_await", None)
        yield from reversed(chain)


def _awaiting(task: asyncio.Task[Any]) -> asyncio.Task[Any] | None:
    """The task that awaits ``task`` (its wake-up is ``task``'s done callback), if any."""
    for callback in getattr(task, "_callbacks", None) or ():
        function = callback[0] if isinstance(callback, tuple) else callback
        owner = getattr(function, "__self__", None)
        if isinstance(owner, asyncio.Task):
            return owner
    return None


def _tool_calls(response: Any) -> int:
    """How many tool calls a model answer asks for (a ``ModelResponse``, or a bare ``AIMessage``)."""
    messages = getattr(response, "result", None)
    if messages is None:
        messages = getattr(getattr(response, "model_response", None), "result", [response])
    return sum(len(m.tool_calls) for m in messages if isinstance(m, AIMessage))


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
