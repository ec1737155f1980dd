"""How the guard reports what it decided to whoever observes it (telemetry, tests, hosts).

Observers run in registration order from an immutable tuple, outside the guard's lock. An error in
one is logged once and never reaches the tool loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from otelguard._slots import positional_factory
from otelguard.decisions import Decision, Outcome, Signature, ToolClass, TurnSummary

__all__ = ["CallEvent", "GuardObserver", "Outcome", "ToolClass", "TurnInfo"]


@dataclass(frozen=True, slots=True)
class TurnInfo:
    turn_id: str | None
    agent: str


@dataclass(frozen=True, slots=True)
class CallEvent:
    """One guarded call as observers see it. Holds no argument values, results or error texts.

    At ``on_call_start``: ``decision`` is the ``before_call`` decision and ``outcome`` is ``None``
    for an allowed call, ``blocked``/``rejected`` for a refused one (then ``on_call_end`` follows at
    once). At ``on_call_end``: ``decision`` is the call's final decision (``after_call``'s for a call
    that ran), ``before`` the ``before_call`` decision.
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


@runtime_checkable
class GuardObserver(Protocol):
    """What the guard calls. An observer may also set ``wants_call_start = False``: the guard then
    skips ``on_call_start`` for allowed calls and passes ``None`` as their token."""

    def on_turn_start(self, turn: TurnInfo) -> None: ...

    def on_call_start(self, call: CallEvent) -> object:
        """Return a token; the guard hands it back to ``on_call_end`` for the same call."""
        ...

    def on_call_end(self, call: CallEvent, token: object) -> None: ...

    def on_turn_end(self, summary: TurnSummary) -> None: ...

    def on_internal_error(self, stage: str) -> None: ...


new_call_event = positional_factory(CallEvent)
"""``new_call_event(tool_name, tool_class, signature, call_id, agent, turn_id, decision, before, outcome,
refusal, spawn_count, start_time_ns)``: a ``CallEvent`` built for the hot path."""
