"""How the guard reports what it decided to whoever observes it (telemetry, tests, hosts).

Observers run in registration order from an immutable tuple (an ``ObserverGroup``), outside the
guard's lock. An error in one is logged once and never reaches the tool loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from otelguard.core.decisions import (
    Decision,
    ModelOutcome,
    Outcome,
    Signature,
    ToolClass,
    TurnSummary,
    slotted_twin,
)

if TYPE_CHECKING:
    from otelguard.core.pending_calls import PendingCall, TurnState
    from otelguard.core.tree_identity import DelegationTree

__all__ = [
    "CallEvent",
    "GuardObserver",
    "ModelEvent",
    "ObserverGroup",
    "Outcome",
    "ToolClass",
    "TurnInfo",
    "call_event",
]

logger = logging.getLogger("otelguard")


@dataclass(frozen=True, slots=True)
class TurnInfo:
    turn_id: str | None
    agent: str
    tree: DelegationTree | None = None
    """The agent's place in a delegation tree (``None``: in none); telemetry parents a delegated
    agent's turn span under the delegating call's span with it. Never exported as such."""


@dataclass(frozen=True, slots=True)
class CallEvent:
    """One guarded call as observers see it. Holds no argument values, results or error texts.

    At ``on_call_start``: ``decision`` is the ``before_call`` decision and ``outcome`` is ``None``
    for an allowed call, ``blocked``/``rejected`` for a refused one (then ``on_call_end`` follows at
    once). At ``on_call_end``: ``decision`` is the call's final decision (``after_call``'s for a call
    that ran), ``before`` the ``before_call`` decision; ``outcome`` ``cancelled`` is a call the host
    dispatched but never ran (its decision is the ``before_call`` allow).
    """

    tool_name: str
    tool_class: ToolClass
    signature: Signature
    call_id: str | None
    agent: str
    turn_id: str | None
    decision: Decision
    before: Decision
    outcome: Outcome | None = None
    refusal: str | None = None
    spawn_count: int = 0
    """Subagents this call spawns (spawn tools only; 0 for every other tool)."""
    start_time_ns: int = 0
    """Wall-clock time of the call's ``before_call`` (``time.time_ns()``); 0 when unknown."""
    state_fallback: bool = False
    """The session caps of this call were decided without the shared store (``state.url``), which
    did not answer: from the process's own counts."""
    delegation: DelegationTree | None = None
    """For a delegation by a guard in a delegation tree (a spawn tool, or a call with ``delegate_to``),
    the place of the agent it starts, whether or not it was refused (its depth: the delegating
    agent's + 1; its path ends with the agent's digest, or ``""`` when the call does not name it);
    ``None`` for any other call."""


@dataclass(frozen=True, slots=True)
class ModelEvent:
    """One model event as observers see it: ``before_model`` (``outcome`` ``None``: the model is about
    to be called, or not, as ``decision`` says) or ``after_model`` (a reply came back). Holds no reply
    text: what the reply asked for, the tokens the provider reported (``None``: not reported) and the
    guard's decision (``tool_name`` ``"model"``)."""

    agent: str
    turn_id: str | None
    decision: Decision
    outcome: ModelOutcome | None = None
    tool_calls: int = 0
    invalid_tool_calls: int = 0
    input_tokens: int | None = None
    output_tokens: int | None = None
    tree: DelegationTree | None = None
    """The agent's place in a delegation tree (``None``: in none)."""


class GuardObserver:
    """What the guard calls; subclass it and override the hooks you need (each is a no-op here).

    ``wants_call_start = False`` says the observer has no use for the start of an allowed call: the
    guard then skips ``on_call_start`` for it and passes ``None`` as that call's token. An object
    that does not subclass ``GuardObserver`` but has these five methods is accepted too, and gets
    every call start.
    """

    wants_call_start: bool = True

    def on_turn_start(self, turn: TurnInfo) -> None:
        """A turn began."""

    def on_call_start(self, call: CallEvent) -> object:
        """Return a token; the guard hands it back to ``on_call_end`` for the same call."""
        return None

    def on_call_end(self, call: CallEvent, token: object) -> None:
        """A call ended (at once, for a refused call)."""

    def on_turn_end(self, summary: TurnSummary) -> None:
        """A turn ended."""

    def on_model_call(self, event: ModelEvent) -> None:
        """A model event (``before_model`` or ``after_model``). Observers written before model events
        existed need not have this method."""

    def on_internal_error(self, stage: str) -> None:
        """The guard (or another observer) hit an internal error in ``stage``; the call was allowed."""


class ObserverGroup:
    """All of one guard's observers as one, the way OpenTelemetry's ``SynchronousMultiSpanProcessor``
    owns its span processors: it calls each in registration order, keeps the call-start tokens in
    step with the observers, and turns an observer's error into one log line (per place and error
    type) and an ``on_internal_error("observer")`` for every observer, the failing one included (a
    telemetry observer whose call counting failed can still count that it failed). It never raises.
    """

    __slots__ = ("_observers", "_reported", "_starters", "any", "wants_call_start")

    def __init__(self, observers: Iterable[GuardObserver]) -> None:
        self._observers = tuple(observers)
        self._starters = tuple(_wants_call_start(o) for o in self._observers)
        self._reported: set[tuple[str, str]] = set()
        self.any = bool(self._observers)
        """Whether there is anyone to tell: the guard builds no events otherwise."""
        self.wants_call_start = any(self._starters)
        """Whether some observer wants the start of an allowed call."""

    def turn_started(self, turn: TurnInfo) -> None:
        for observer in self._observers:
            try:
                observer.on_turn_start(turn)
            except Exception as exc:
                self._observer_failed(observer, "on_turn_start", exc)

    def call_started(self, event: CallEvent) -> tuple[object, ...]:
        """Each observer's token for this call, in observer order (``None`` for those not asked)."""
        tokens: list[object] = []
        for observer, wants in zip(self._observers, self._starters, strict=True):
            token = None
            if wants:
                try:
                    token = observer.on_call_start(event)
                except Exception as exc:
                    self._observer_failed(observer, "on_call_start", exc)
            tokens.append(token)
        return tuple(tokens)

    def call_ended(self, event: CallEvent, tokens: Sequence[object] | None) -> None:
        """``tokens``: ``call_started``'s (``None`` or short: ``None`` for the observers past them)."""
        if tokens is None:
            tokens = ()
        for i, observer in enumerate(self._observers):
            try:
                observer.on_call_end(event, tokens[i] if i < len(tokens) else None)
            except Exception as exc:
                self._observer_failed(observer, "on_call_end", exc)

    def turn_ended(self, summary: TurnSummary) -> None:
        for observer in self._observers:
            try:
                observer.on_turn_end(summary)
            except Exception as exc:
                self._observer_failed(observer, "on_turn_end", exc)

    def model_called(self, event: ModelEvent) -> None:
        for observer in self._observers:
            hook = getattr(observer, "on_model_call", None)
            if hook is None:
                continue
            try:
                hook(event)
            except Exception as exc:
                self._observer_failed(observer, "on_model_call", exc)

    def internal_error(self, stage: str, exc: BaseException) -> None:
        """The guard itself failed in ``stage``: log it once and tell every observer."""
        self._log_once(stage, exc)
        self._report(stage)

    def report(self, stage: str) -> None:
        """Tell every observer of an internal error in ``stage`` that was logged where it was caught
        (a group that is itself one observer of a guard's group hears of it so)."""
        self._report(stage)

    def _observer_failed(self, observer: GuardObserver, method: str, exc: Exception) -> None:
        self._log_once(f"observer {type(observer).__name__}.{method}", exc)
        self._report("observer")

    def _report(self, stage: str) -> None:
        for observer in self._observers:
            try:
                observer.on_internal_error(stage)
            except Exception as exc:
                self._log_once(f"observer {type(observer).__name__}.on_internal_error", exc)

    def _log_once(self, where: str, exc: BaseException) -> None:
        # Only the exception type: its message may quote argument values or results.
        key = (where, type(exc).__name__)
        if key in self._reported:
            return
        self._reported.add(key)
        logger.error(
            "otelguard internal error in %s (%s); the call was allowed and the agent loop goes on",
            where,
            type(exc).__name__,
        )


def _wants_call_start(observer: object) -> bool:
    return observer.wants_call_start if isinstance(observer, GuardObserver) else True


_EventTwin: Final[Any] = slotted_twin(CallEvent)  # a class, or None


def _event_by_twin(
    tool_name: str,
    tool_class: ToolClass,
    signature: Signature,
    call_id: str | None,
    agent: str,
    turn_id: str | None,
    decision: Decision,
    before: Decision,
    outcome: Outcome | None,
    refusal: str | None,
    spawn_count: int,
    start_time_ns: int,
    state_fallback: bool,
    delegation: DelegationTree | None,
) -> CallEvent:
    event = _EventTwin()  # see ``decisions.slotted_twin``: every slot set, then the class swapped
    event.tool_name = tool_name
    event.tool_class = tool_class
    event.signature = signature
    event.call_id = call_id
    event.agent = agent
    event.turn_id = turn_id
    event.decision = decision
    event.before = before
    event.outcome = outcome
    event.refusal = refusal
    event.spawn_count = spawn_count
    event.start_time_ns = start_time_ns
    event.state_fallback = state_fallback
    event.delegation = delegation
    event.__class__ = CallEvent
    return event  # type: ignore[no-any-return]


new_call_event: Callable[..., CallEvent] = CallEvent if _EventTwin is None else _event_by_twin
"""``new_call_event(tool_name, tool_class, signature, call_id, agent, turn_id, decision, before, outcome,
refusal, spawn_count, start_time_ns, state_fallback, delegation)``: a ``CallEvent`` built for the hot path."""


def call_event(
    name: str,
    tool_class: ToolClass,
    call_id: str | None,
    turn: TurnState,
    decision: Decision,
    outcome: Outcome | None,
    refusal: str | None,
    record: PendingCall,
) -> CallEvent:
    """The event of a call of ``turn``. Its ``before_call`` record gives the signature, the
    ``before_call`` decision, the spawn count, the start time and the state fallback."""
    return new_call_event(
        name,
        tool_class,
        record.sig,
        call_id,
        turn.agent,
        turn.turn_id,
        decision,
        record.before,
        outcome,
        refusal,
        record.spawn_count,
        record.start_time_ns,
        record.state_fallback,
        record.delegation,
    )
