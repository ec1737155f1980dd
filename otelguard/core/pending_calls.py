"""Calls between ``before_call`` and ``after_call``, and the turn they belong to.

``after_call`` finds its call by call id, or, without one, by the tool name and the identity of the
args object (``call_key``). The common host runs one call at a time, so the latest call waits in a
single slot and only overlapping calls go into the queues. The table holds at most ``limit`` calls:
calls that never get an ``after_call`` (timeouts, cancellations) are forgotten oldest first. All
methods run under the guard's lock.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from typing import TYPE_CHECKING, Any, NamedTuple

from otelguard.core.decisions import Decision, Signature
from otelguard.core.signatures import MAX_NAME_CHARS, ArgsHasher, bounded_name

if TYPE_CHECKING:
    from otelguard.core.caps import Charge
    from otelguard.core.detectors.replies import ReplyCounts
    from otelguard.core.detectors.turn import TurnDetectors
    from otelguard.core.tree_identity import DelegationTree

__all__ = ["PendingCall", "PendingCalls", "TurnState", "call_key", "unrecorded"]


class TurnState:
    """One turn: its detectors, its counts and the decision that halted it (if any)."""

    __slots__ = ("agent", "decisions", "detectors", "halt", "model", "tool_calls", "turn_id")

    def __init__(self, turn_id: str | None, agent: str, detectors: TurnDetectors) -> None:
        self.turn_id = turn_id
        self.agent = agent
        self.detectors = detectors
        self.tool_calls = 0
        self.halt: Decision | None = None
        self.decisions: Counter[str] = Counter()
        self.model: ReplyCounts | None = None  # made by the turn's first model event

    def record(self, decision: Decision) -> None:
        """Count a decision other than the plain allow; the first block/halt halts the turn."""
        self.decisions[decision.code] += 1
        if decision.should_halt and self.halt is None:
            self.halt = decision


class PendingCall(NamedTuple):
    """A call between ``before_call`` and ``after_call``: what must not be computed twice.

    The args are never kept, not even for calls without a call id (found by the args' identity): a
    host may drop a call without its ``after_call``, and big args would pile up. ``tokens`` holds
    the observers' ``on_call_start`` tokens once they are known (filled in place).
    """

    sig: Signature
    turn: TurnState
    charges: tuple[Charge, ...]
    spawn_count: int
    before: Decision
    start_time_ns: int
    tokens: list[object]
    state_fallback: bool = False
    """Its session caps were decided without the shared store (see ``CallEvent.state_fallback``)."""
    delegation: DelegationTree | None = None
    """The place of the agent this call delegates to (see ``CallEvent.delegation``)."""


def unrecorded(sig: Signature, turn: TurnState, before: Decision) -> PendingCall:
    """What stands for the record of a call with no ``before_call`` on record: spawn count and start
    time unknown, and ``before`` for its ``before_call`` decision."""
    return PendingCall(sig, turn, (), 0, before, 0, [])


def call_key(tool_name: str, args: Any, call_id: Any) -> object:
    """The key a pending call is kept under: its call id (a str), else ``(tool, id(args))`` (a tuple)."""
    if call_id is None:
        return (tool_name, id(args))
    if type(call_id) is str and len(call_id) <= MAX_NAME_CHARS:
        return call_id  # the common id: no call to bound it
    return bounded_name(call_id if isinstance(call_id, str) else str(call_id))


class PendingCalls:
    """The bounded table of calls that are allowed and not yet ended."""

    __slots__ = ("_count", "_last", "_last_key", "_limit", "_queues")

    def __init__(self, limit: int) -> None:
        self._limit = limit
        # Not a BoundedMap: the bound counts calls, not keys (one args-identity key may hold several
        # overlapping calls), and the oldest call is dropped first, not the least recently used key.
        self._queues: OrderedDict[object, list[PendingCall]] = OrderedDict()
        self._count = 0
        self._last_key: object = None
        self._last: PendingCall | None = None

    def __len__(self) -> int:
        return self._count + (self._last is not None)

    def clear(self) -> None:
        self._queues.clear()
        self._count = 0
        self._last_key, self._last = None, None

    def add(self, key: object, pending: PendingCall) -> None:
        if self._last is not None:
            self._queue(self._last_key, self._last)
        self._last_key, self._last = key, pending

    def take(self, key: object) -> PendingCall | None:
        """The call kept under ``key``. Under an args-identity key the newest call is taken: an older
        one belongs to an args object freed without its ``after_call``, whose id was reused."""
        last = self._last
        if last is not None and self._last_key == key:
            self._last_key, self._last = None, None
            return last
        queue = self._queues.get(key)
        if not queue:
            return None
        return self._unqueue(key, queue, len(queue) - 1 if isinstance(key, tuple) else 0)

    def find(
        self, name: str, args: Any, call_id: str | None, hasher: ArgsHasher, ignored: frozenset[str]
    ) -> tuple[Signature, PendingCall | None]:
        """The call's signature and, when ``take`` found nothing under its key and it has no call id
        (the host passed an equal but not identical ``args`` object), its record by signature."""
        sig = Signature(name, hasher.args_hash(args, ignored))
        return sig, self.take_by_signature(sig) if call_id is None else None

    def take_by_signature(self, sig: Signature) -> PendingCall | None:
        """The host passed an equal but not identical ``args`` object: match on the signature."""
        last = self._last
        if last is not None and last.sig == sig:
            self._last_key, self._last = None, None
            return last
        for key, queue in self._queues.items():
            if isinstance(key, tuple):
                for i, pending in enumerate(queue):
                    if pending.sig == sig:
                        return self._unqueue(key, queue, i)
        return None

    def _queue(self, key: object, pending: PendingCall) -> None:
        queue = self._queues.get(key)
        if queue is None:
            self._queues[key] = [pending]
        else:
            queue.append(pending)
        self._count += 1
        while self._count > self._limit:
            oldest = next(iter(self._queues.values()))
            del oldest[0]
            self._count -= 1
            if not oldest:
                self._queues.popitem(last=False)

    def _unqueue(self, key: object, queue: list[PendingCall], index: int) -> PendingCall:
        pending = queue.pop(index)
        self._count -= 1
        if not queue:
            del self._queues[key]
        return pending
