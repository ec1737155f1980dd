"""What every detector is to the turn that walks them: an object behind two verbs (see
``precedence.py``, the order they are walked in).

* ``before(turn, sig, state, tool_class, commit)``: may the call run? A refusal, or ``None``. With
  ``commit`` false it changes nothing and only says whether it would refuse (``WOULD_REFUSE``, not
  the decision itself): the guard asks that before charging a cap, so a refused call never holds one.
* ``after(turn, call)``: what does the call that ran make of it? A decision, or ``None``.

A detector's counts live in the turn (``TurnDetectors``), which records every call's outcome before
the ``after`` walk; each detector holds its thresholds' names and reads the counts it needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, NamedTuple, Protocol

from otelguard.core.decisions import Decision

if TYPE_CHECKING:
    from otelguard.core.decisions import Signature, ToolClass
    from otelguard.core.detectors.state import FailureCounts, SignatureState
    from otelguard.core.detectors.turn import TurnDetectors

__all__ = ["WOULD_REFUSE", "AfterRule", "BeforeRule", "Ran"]

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


class BeforeRule(Protocol):
    name: str
    """The detector's name, as ``hard_stop_after`` and the docs' order know it."""

    def before(
        self,
        turn: TurnDetectors,
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

    def after(self, turn: TurnDetectors, call: Ran) -> Decision | None: ...
