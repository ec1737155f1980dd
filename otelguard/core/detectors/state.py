"""Per-call and per-session detector state: a signature's counts (``SignatureState``), the counts a
failed call adds (``FailureCounts``) and the memory that outlives a turn (``SessionMemory``)."""

from __future__ import annotations

from typing import Final, NamedTuple

from otelguard.core._slots import ResultSlot
from otelguard.core.bounded_map import BoundedMap
from otelguard.core.decisions import Outcome, Signature

__all__ = ["FailureCounts", "SessionMemory", "SignatureState", "new_state", "renewed"]


class FailureCounts(NamedTuple):
    """How many failures the call just recorded has counted, per failure detector."""

    tool_failures: int  # same_tool_failure: failures and refusals of the tool
    refusals: int  # refusal: refusals of the (tool, category)
    same_errors: int  # same_error: failures with this call's error fingerprint
    turns_failed: int  # cross_turn_failure: turns in which this call failed with this same error


class SignatureState(ResultSlot):
    """What a turn remembers about one signature (its previous result: see ``ResultSlot``)."""

    __slots__ = (
        "exact_epoch",
        "exact_failures",
        "no_progress",
        "reject_epoch",
        "rejects",
        "shell_edits",
        "shell_first",
    )
    exact_failures: int
    exact_epoch: int
    no_progress: int
    rejects: int
    reject_epoch: int
    # stagnation: the raw digest of a shell command's first result this turn (-1: it had none), None
    # before its first run; its later runs are counted in ``StagnationMemory``
    shell_first: int | None
    shell_edits: int  # the turn's edit count at the command's first run (see StagnationMemory.record)

    def __init__(self) -> None:
        renewed(self)


new_state: Final = object.__new__


def renewed(state: SignatureState) -> SignatureState:
    """``state`` with every field as a new state has it: one made without the call to its
    ``__init__`` (a new signature on most calls), or the one a full map drops, reused. ``rejects``:
    those given to this call since it last ran; they lapse when a write or shell succeeds."""
    state.raw = state.fingerprint = state.held = None  # ResultSlot's, set here directly
    state.exact_failures = state.exact_epoch = state.no_progress = state.rejects = state.reject_epoch = 0
    state.shell_first = None
    state.shell_edits = 0
    return state


_TURN_BITS: Final = 32
_TURN_MASK: Final = (1 << _TURN_BITS) - 1


class SessionMemory:
    """What a session (one ``Guard``) remembers across its turns: the calls that keep failing the same
    way, turn after turn (``cross_turn_failure``). Bounded by ``max_tracked_signatures`` entries, least
    recently used dropped first; ``start_turn`` only advances the turn number.

    Each entry is one int: the call's error fingerprint, the turns it failed in with that error and
    the last of them (``error << 64 | turns << 32 | last turn``), a third of the bytes of an object
    holding the three (a session keeps thousands)."""

    __slots__ = ("failures", "turn")

    def __init__(self, capacity: int) -> None:
        self.failures: BoundedMap[Signature, int] = BoundedMap(capacity)
        self.turn = 0

    def next_turn(self) -> None:
        self.turn += 1

    def turns_failed(self, sig: Signature) -> int:
        """The turns in which ``sig`` has failed with one same error (0 when it is not failing)."""
        entry = self.failures.get(sig) if self.failures else None
        return (entry >> _TURN_BITS) & _TURN_MASK if entry is not None else 0

    def record(self, sig: Signature, outcome: Outcome, error: int | None) -> int:
        """Count a call's outcome; returns the turns it has now failed in with this same error (0 for
        anything but a failure). A success of the call, or a failure with another error or with no
        error to compare (an exception, a bare exit status), ends its record; a refusal leaves it."""
        if outcome == "ok" or (outcome == "failed" and error is None):
            if self.failures:
                self.failures.pop(sig, None)
            return 0
        if outcome != "failed" or error is None:
            return 0
        turn = self.turn & _TURN_MASK
        entry = self.failures.get(sig)
        if entry is None or entry >> (2 * _TURN_BITS) != error:
            turns = 1
        elif entry & _TURN_MASK != turn:  # several failures in one turn count as one turn
            turns = ((entry >> _TURN_BITS) & _TURN_MASK) + 1
        else:
            turns = (entry >> _TURN_BITS) & _TURN_MASK
        self.failures.put(sig, (error << (2 * _TURN_BITS)) | (min(turns, _TURN_MASK) << _TURN_BITS) | turn)
        return turns
