"""What every detector is to the turn that walks them: an object behind two verbs (see
``precedence.py``, the order they are walked in).

* ``before(turn, sig, state, tool_class, commit)``: may the call run? A refusal, or ``None``. With
  ``commit`` false it changes nothing and only says whether it would refuse (``WOULD_REFUSE``, not
  the decision itself): the guard asks that before charging a cap, so a refused call never holds one.
* ``after(turn, call)``: what does the call that ran make of it? A decision, or ``None``.

A detector's counts live in the turn (``TurnDetectors``), which records every call's outcome before
the ``after`` walk; each detector holds its thresholds' names and reads the counts it needs, through
``TurnCounts``: what a detector sees of the turn, declared here so that the detectors, which the turn
imports, never import the turn back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, NamedTuple, Protocol

from otelguard.core.decisions import Decision

if TYPE_CHECKING:
    from collections.abc import Mapping

    from otelguard.core.bounded_map import BoundedMap
    from otelguard.core.decisions import Action, Signature, ToolClass
    from otelguard.core.detectors.repetition import Cycle
    from otelguard.core.detectors.searches import Query, SearchMemory
    from otelguard.core.detectors.stagnation import StagnationMemory
    from otelguard.core.detectors.state import FailureCounts, SessionMemory, SignatureState

__all__ = ["WOULD_REFUSE", "AfterRule", "BeforeRule", "Ran", "TurnCounts"]

WOULD_REFUSE: Final = Decision(action="reject", code="would_refuse")
"""What a detector asked without ``commit`` answers when it would refuse the call."""


class Ran(NamedTuple):
    """A call that ran, as the ``after`` walk reads it (its counts already recorded)."""

    sig: Signature
    state: SignatureState
    tool_class: ToolClass
    failure_tolerant: bool
    failures: FailureCounts
    identical: int
    stale: int
    unchanged: int
    judged: Decision | None


class TurnCounts(Protocol):
    """One turn's detector state as the detectors read and count it (``TurnDetectors`` is it)."""

    # the constants the turn hands on (``messages``), read only
    @property
    def WOULD_REFUSE(self) -> Decision: ...
    @property
    def SHELL_IDENTICAL_REJECT(self) -> str: ...
    @property
    def SHELL_LATER_FAILURE_WARN(self) -> int: ...
    @property
    def STAGNATION_LAST_WARN(self) -> str: ...

    memory: SessionMemory
    hard_stop: bool
    warn_after: Mapping[str, int]
    stop_after: Mapping[str, int]
    rejects_before_stop: int
    pattern_rejects: int
    tool_failures: BoundedMap[str, int]
    tool_errors: BoundedMap[str, tuple[int | None, ...]]
    tool_rejects: BoundedMap[str, int]
    new_errors_kept: int
    shell_failures: BoundedMap[str, tuple[int, int]]
    refusals: BoundedMap[tuple[str, str], int]
    errors: BoundedMap[int, tuple[int, str | None]]
    write_epoch: int
    identical_sig: Signature | None
    identical_count: int
    cycle: Cycle
    cycle_rejects: int
    cycle_rejected: tuple[Signature, int, int] | None
    read_streak: int
    write_streak: int
    stagnation: StagnationMemory
    quiet_stagnation: int
    quiet_unchanged: int
    edits: int
    after_edit: bool
    searches: SearchMemory
    query: Query | None

    def decide(
        self,
        action: Action,
        code: str,
        sig: Signature,
        count: int,
        limit: int,
        *,
        period: int = 0,
        message: str | None = None,
    ) -> Decision: ...

    def state(self, sig: Signature) -> SignatureState: ...

    def refuse(
        self, state: SignatureState, reject_code: str, stop_code: str, sig: Signature, count: int, limit: int
    ) -> Decision: ...

    def valid_rejects(self, state: SignatureState) -> int: ...

    def count_reject(self, state: SignatureState) -> None: ...

    def tool_rejects_spent(self, tool: str, failures: int) -> bool: ...

    def exact_failures(self, state: SignatureState) -> int: ...


class BeforeRule(Protocol):
    name: str
    """The detector's name, as ``hard_stop_after`` and the docs' order know it."""

    def before(
        self,
        turn: TurnCounts,
        sig: Signature,
        state: SignatureState | None,
        tool_class: ToolClass,
        commit: bool,
    ) -> Decision | None: ...


class AfterRule(Protocol):
    code: str
    """The decision code it answers with (the docs' ``after_call`` order lists these)."""
    warns: bool
    """A warning (never given with ``warnings`` off); else a halt (only ever given with ``hard_stop``)."""

    def after(self, turn: TurnCounts, call: Ran) -> Decision | None: ...
