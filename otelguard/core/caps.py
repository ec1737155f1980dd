"""Per-turn and per-session caps on runaway-prone tools (docs/configuration.md, "Caps").

Turn counters belong to one guard. Session counters belong to the session: a ``SessionCapStore``
shared by the session's main guard and every subagent guard, which checks and charges atomically
(one lock for all of them), so guards running in parallel threads never overshoot a session cap.
``SessionCapStore`` is the one protocol of a session-cap backend; the core ships the in-process one
(``LocalSessionCaps``) and is handed any other by its host (``otelguard.hosting`` picks the shared
one for a config with a state URL).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Final, Literal, NamedTuple, Protocol

from otelguard.core import decisions as codes
from otelguard.core.decisions import Decision, Signature, ToolClass

if TYPE_CHECKING:
    from otelguard.core.classify import ToolFacts
    from otelguard.core.tree_identity import DelegationTree

__all__ = [
    "Asked",
    "CapLedger",
    "CapRefusal",
    "Charge",
    "ChargeAnswer",
    "Detectors",
    "Gate",
    "LocalSessionCaps",
    "SessionCapStore",
    "TreeCaps",
]

Scope = Literal["turn", "session", "tree"]
Charge = tuple[Scope, Sequence[tuple[str, int]], int]
"""What one gate charged a call: its scope, the caps (key, limit) charged, and the amount charged to each."""

_NOUNS: Final = {
    "web_search": ("made", "web search", "web searches"),
    "subagents": ("started", "subagent", "subagents"),
}


class CapRefusal(NamedTuple):
    """The session cap a charge would overshoot: the first such key in the order given."""

    key: str
    used: int  # usage before the call
    limit: int


class ChargeAnswer(NamedTuple):
    """What a session-cap store answered to a charge."""

    refusal: CapRefusal | None
    """The cap the charge would overshoot (nothing charged), or ``None`` (every cap charged)."""
    fell_back: bool = False
    """A store outside the process did not take part: decided from the process's own counts."""


_CHARGED: Final = ChargeAnswer(None)


class SessionCapStore(Protocol):
    """The session-scope cap counters of one session, shared by its main guard and every subagent
    guard: the one protocol of a session-cap backend, one verb per operation. Thread-safe; ``charge``
    checks and charges in one atomic step. A backend that reports its own health (a shared store's
    link) does so to a listener its host hands it, never through the guard."""

    def charge(self, caps: Sequence[tuple[str, int]], amount: int) -> ChargeAnswer:
        """All or nothing: when ``used + amount > limit`` for any ``(key, limit)``, charge nothing and
        answer the first such key; else add ``amount`` to every key."""
        ...

    def add(self, key: str, amount: int) -> int:
        """Add ``amount`` to ``key`` whatever its limit and answer the count after, in one atomic step
        (what was used is charged: the model's tokens, reported once spent; ``amount`` 0 reads it)."""
        ...

    def refund(self, keys: Sequence[str], amount: int) -> None:
        """Give ``amount`` back to each key, floored at 0 (a charged call that was refused or cancelled)."""
        ...

    def restore(self, counts: Mapping[str, int]) -> None:
        """Set these keys' counts as given: counts the session reached elsewhere (a framework's
        checkpoint). A store that already holds every process's counts may keep its own."""
        ...

    def usage(self) -> Mapping[str, int]:
        """The current counts, one per key charged so far."""
        ...


class LocalSessionCaps:
    """The in-process ``SessionCapStore``: a dict under its own lock."""

    __slots__ = ("__weakref__", "_counts", "_lock")  # weakly referenced: a tree's table of counters

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def charge(self, caps: Sequence[tuple[str, int]], amount: int) -> ChargeAnswer:
        counts = self._counts
        with self._lock:
            for key, limit in caps:
                used = counts.get(key, 0)
                if used + amount > limit:
                    return ChargeAnswer(CapRefusal(key, used, limit))
            for key, _limit in caps:
                counts[key] = counts.get(key, 0) + amount
        return _CHARGED

    def add(self, key: str, amount: int) -> int:
        counts = self._counts
        with self._lock:
            used = counts[key] = counts.get(key, 0) + amount
        return used

    def refund(self, keys: Sequence[str], amount: int) -> None:
        counts = self._counts
        with self._lock:
            for key in keys:
                counts[key] = max(0, counts.get(key, 0) - amount)

    def restore(self, counts: Mapping[str, int]) -> None:
        with self._lock:
            self._counts.update(counts)

    def usage(self) -> Mapping[str, int]:
        with self._lock:
            return dict(self._counts)


class TreeCaps(Protocol):
    """A guard's part of a delegation tree, as its caps use it (``otelguard.core.tree.TreeLedger``):
    its place, the depth limit, delegation cycles and the tree's counters. A protocol, so that the
    ledger of the session's caps needs nothing of the tree's module."""

    tree: DelegationTree
    max_depth: int

    def start_turn(self) -> None: ...

    def subagent(self, agent: str) -> DelegationTree: ...

    def cycle(self, sig: Signature, agent: str, hard_stop: bool) -> Decision | None: ...

    def took(self, decision: Decision | None) -> None: ...

    def depth_refusal(self, sig: Signature) -> Decision | None: ...

    def charge(
        self, sig: Signature, caps: Sequence[tuple[str, int]], amount: int
    ) -> tuple[Decision | None, bool]: ...

    def hit(self, sig: Signature, caps: Sequence[tuple[str, int]], amount: int) -> Decision | None: ...

    def refund(self, keys: Sequence[str], amount: int) -> None: ...

    def add(self, key: str, amount: int) -> int: ...


class CapLedger:
    """Usage counters: turn counters reset by ``start_turn``; session counters in the session's store."""

    def __init__(self, on_hit: str, session: SessionCapStore) -> None:
        self.action: codes.Action = "block" if on_hit == "block" else "reject"
        self.turn: dict[str, int] = {}
        self.session = session
        self.fell_back = False
        """The last ``check`` was decided without the shared store; the guard takes it (under its
        lock) with ``take_fell_back``. Never set with an in-process store."""
        self.turn_peak_ratio: dict[str, float] = {}
        self.tree: TreeCaps | None = None
        """The delegation tree's caps and depth limit, for a guard in a tree (``otelguard.core.tree``)."""

    def start_turn(self) -> None:
        self.turn = {}
        self.turn_peak_ratio = {}
        if self.tree is not None:
            self.tree.start_turn()

    def charge_session(
        self, sig: Signature, session_caps: Sequence[tuple[str, int]], requested: int
    ) -> Decision | None:
        """Charge the session caps in one atomic step with their check; the cap refusing, if any."""
        refusal, fell_back = self.session.charge(session_caps, requested)
        if fell_back:
            self.fell_back = True
        if refusal is not None:
            return self._hit(sig, "session", refusal.key, refusal.used, refusal.limit, requested)
        return None

    def charge_turn(
        self, sig: Signature, turn_caps: Sequence[tuple[str, int]], requested: int, commit: bool
    ) -> Decision | None:
        """The first turn cap this call would exceed; else, with ``commit``, charge every one (the
        turn is the guard's alone: checking and charging need no lock of their own)."""
        turn = self.turn
        for key, limit in turn_caps:
            used = turn.get(key, 0)
            if used + requested > limit:
                return self._hit(sig, "turn", key, used, limit, requested)
        if commit:
            for key, _limit in turn_caps:
                turn[key] = turn.get(key, 0) + requested
        return None

    def session_hit(
        self, sig: Signature, session_caps: Sequence[tuple[str, int]], requested: int
    ) -> Decision | None:
        """The first session cap this call would exceed, read from the store's usage and charging
        nothing: for a call refused anyway, whether the cap is what to report. (A store outside the
        process answers with the counts this process last saw.)"""
        usage = self.session.usage() if session_caps else {}
        for key, limit in session_caps:
            used = usage.get(key, 0)
            if used + requested > limit:
                return self._hit(sig, "session", key, used, limit, requested)
        return None

    def refund_turn(self, keys: Sequence[str], amount: int) -> None:
        """Give ``amount`` back to each of the turn's ``keys``, floored at 0, as the stores refund."""
        turn = self.turn
        for key in keys:
            turn[key] = max(0, turn.get(key, 0) - amount)

    def note_turn_peak(self, turn_caps: Sequence[tuple[str, int]]) -> None:
        """Record how full the turn caps are, now that a call charged to them runs."""
        peaks = self.turn_peak_ratio
        for key, limit in turn_caps:
            ratio = self.turn.get(key, 0) / limit
            if ratio > peaks.get(key, 0.0):
                peaks[key] = ratio

    def take_fell_back(self) -> bool:
        fell_back, self.fell_back = self.fell_back, False
        return fell_back

    def usage_ratios(self, turn_limits: Sequence[tuple[str, int]]) -> MappingProxyType[str, float]:
        return MappingProxyType({key: self.turn_peak_ratio.get(key, 0.0) for key, _ in turn_limits})

    def _hit(self, sig: Signature, scope: Scope, key: str, used: int, limit: int, requested: int) -> Decision:
        verb, one, many = _NOUNS.get(key, ("made", f"call to {key}", f"calls to {key}"))
        message = (
            f"Not run: this {scope} already {verb} {used} {one if used == 1 else many}, the limit is {limit}."
        )
        if requested > 1:
            message += f" This call would add {requested} more."
        message += " Work with what you have, or tell the user the limit was reached."
        return Decision(
            action=self.action,
            code=codes.CAP_TURN if scope == "turn" else codes.CAP_SESSION,
            message=message,
            tool_name=sig.tool_name,
            count=used,
            limit=limit,
            signature=sig,
            cap=key,
        )


# The gates of ``before_call`` -------------------------------------------------------------------
#
# Each cap, the depth limit, the delegation cycle and the hard-stop detectors are a gate behind one
# verb: ``before(asked, commit)``, the refusal of the call or ``None``. A gate that ``charges`` (a
# cap) checks and charges in one step with ``commit``, and only reads its counts without: what it
# charged it adds to ``asked.charged``, the call's charges, and ``give_back`` returns its part of a
# call's charges (a later gate refused the call; or the host refused or cancelled it). Any other gate
# changes nothing without ``commit``; one that ``counts`` its refusals (the detectors: a reject
# counted towards the stop) counts with it. Every gate is told with ``passed`` that the call goes
# ahead, once all of them let it. The guard walks them in the order ``detectors/precedence.py``
# declares (``GATES``), less those that do not ``ask`` about the call: what it is is a mask of the
# bits below.

HAS_TREE: Final = 1
"""The guard is in a delegation tree."""
HARD_STOP: Final = 2
"""The guard's config has ``hard_stop``."""
TURN_CAPS: Final = 4
SESSION_CAPS: Final = 8
TREE_CAPS: Final = 16
SPAWNS: Final = 32
"""A delegation by a guard in a tree: a spawn tool, or a call naming the agent it delegates to."""
DELEGATES: Final = 64
"""A call naming the agent it delegates to, by a guard in a tree."""


class Detectors(Protocol):
    """The turn's detectors as their gate asks them (``TurnDetectors`` is it: declared here, the
    gates never import the turn, which imports them)."""

    hard_stop: bool

    def refuse_before(self, sig: Signature, tool_class: ToolClass) -> Decision | None: ...

    def would_refuse(self, sig: Signature, tool_class: ToolClass) -> bool: ...

    def let_through(self, sig: Signature) -> None: ...


class Asked(NamedTuple):
    """A call as the gates read it."""

    ledger: CapLedger
    detectors: Detectors
    sig: Signature
    facts: ToolFacts
    units: int
    delegate_to: str | None
    spawning: bool
    tree_caps: tuple[tuple[str, int], ...]
    charged: list[Charge]
    """What the gates that charge charged for the call, in their order: the call's charges."""


class Gate(Protocol):
    """One gate of ``before_call`` (see above)."""

    name: str
    charges: bool
    counts: bool

    def asks(self, call: int) -> bool:
        """Whether it may have something to say about a call of this mask: the walk skips it if not."""
        ...

    def before(self, asked: Asked, commit: bool) -> Decision | None: ...

    def give_back(self, ledger: CapLedger, charges: Sequence[Charge], same_turn: bool) -> None:
        """Return this gate's part of ``charges`` (``same_turn``: charged in the turn still going)."""
        ...

    def passed(self, asked: Asked) -> None: ...


class _Gate:
    """What a gate that charges nothing and counts nothing does by default: nothing."""

    __slots__ = ()
    charges = counts = False

    def give_back(self, ledger: CapLedger, charges: Sequence[Charge], same_turn: bool) -> None:
        return None

    def passed(self, asked: Asked) -> None:
        return None


def _keys(charges: Sequence[Charge], scope: Scope) -> tuple[list[str], int]:
    """The keys ``charges`` holds in ``scope``, and the amount (a call charges each key the same)."""
    for charged_in, caps, amount in charges:
        if charged_in == scope:
            return [key for key, _limit in caps], amount
    return [], 0


class TurnCap(_Gate):
    """``cap_turn``: the turn's counters, the guard's alone; how full they got is recorded once the
    call passes every gate (a call refused after its charge never counts towards the peak)."""

    __slots__ = ()
    name = "cap_turn"
    charges = True

    def asks(self, call: int) -> bool:
        return bool(call & TURN_CAPS)

    def before(self, asked: Asked, commit: bool) -> Decision | None:
        caps, units = asked.facts.caps_turn, asked.units
        refusal = asked.ledger.charge_turn(asked.sig, caps, units, commit)
        if refusal is None and commit:
            asked.charged.append(("turn", caps, units))
        return refusal

    def give_back(self, ledger: CapLedger, charges: Sequence[Charge], same_turn: bool) -> None:
        if not same_turn:
            return  # that turn's counters are gone
        keys, amount = _keys(charges, "turn")
        ledger.refund_turn(keys, amount)

    def passed(self, asked: Asked) -> None:
        asked.ledger.note_turn_peak(asked.facts.caps_turn)


class SessionCap(_Gate):
    """``cap_session``: charged atomically with its check, in the session's store."""

    __slots__ = ()
    name = "cap_session"
    charges = True

    def asks(self, call: int) -> bool:
        return bool(call & SESSION_CAPS)

    def before(self, asked: Asked, commit: bool) -> Decision | None:
        ledger, caps, units = asked.ledger, asked.facts.caps_session, asked.units
        if not commit:
            return ledger.session_hit(asked.sig, caps, units)
        refusal = ledger.charge_session(asked.sig, caps, units)
        if refusal is None:
            asked.charged.append(("session", caps, units))
        return refusal

    def give_back(self, ledger: CapLedger, charges: Sequence[Charge], same_turn: bool) -> None:
        keys, amount = _keys(charges, "session")
        if keys:
            ledger.session.refund(keys, amount)


class DelegationDepth(_Gate):
    """``delegation_depth``: a spawn by an agent at the tree's depth limit. Asked among the caps
    that charge, in its place (it has nothing to give back)."""

    __slots__ = ()
    name = "delegation_depth"
    charges = True

    def asks(self, call: int) -> bool:
        return bool(call & SPAWNS)

    def before(self, asked: Asked, commit: bool) -> Decision | None:
        tree = asked.ledger.tree
        return tree.depth_refusal(asked.sig) if tree is not None else None


class TreeCap(_Gate):
    """``cap_tree``: the tree's counters, charged as the session's are."""

    __slots__ = ()
    name = "cap_tree"
    charges = True

    def asks(self, call: int) -> bool:
        return bool(call & TREE_CAPS)

    def before(self, asked: Asked, commit: bool) -> Decision | None:
        ledger, caps = asked.ledger, asked.tree_caps
        tree = ledger.tree
        if tree is None:
            return None
        if not commit:
            return tree.hit(asked.sig, caps, asked.units)
        decision, fell_back = tree.charge(asked.sig, caps, asked.units)
        ledger.fell_back = ledger.fell_back or fell_back
        if decision is None:
            asked.charged.append(("tree", caps, asked.units))
        return decision

    def give_back(self, ledger: CapLedger, charges: Sequence[Charge], same_turn: bool) -> None:
        keys, amount = _keys(charges, "tree")
        if keys and ledger.tree is not None:
            ledger.tree.refund(keys, amount)


class DelegationCycle(_Gate):
    """``delegation_cycle``: a delegation back to an agent already on its path; its warning lets the
    call run (the walk returns it when nothing refuses)."""

    __slots__ = ()
    name = "delegation_cycle"

    def asks(self, call: int) -> bool:
        return bool(call & DELEGATES)

    def before(self, asked: Asked, commit: bool) -> Decision | None:
        tree, agent = asked.ledger.tree, asked.delegate_to
        if tree is None or agent is None:
            return None
        return tree.cycle(asked.sig, agent, asked.detectors.hard_stop)


class HardStops(_Gate):
    """The hard-stop detectors, walked by the turn in the order ``precedence.BEFORE_CALL`` gives:
    without ``commit`` whether one would refuse; with it the refusal, its reject counted. A call let
    through spends the rejects its signature was given (``passed``)."""

    __slots__ = ()
    name = "hard_stop"
    counts = True

    def asks(self, call: int) -> bool:
        return bool(call & HARD_STOP)

    def before(self, asked: Asked, commit: bool) -> Decision | None:
        detectors, tool_class = asked.detectors, asked.facts.tool_class
        if commit:
            return detectors.refuse_before(asked.sig, tool_class)
        return WOULD_REFUSE if detectors.would_refuse(asked.sig, tool_class) else None

    def passed(self, asked: Asked) -> None:
        asked.detectors.let_through(asked.sig)


WOULD_REFUSE: Final = Decision(action="reject", code="would_refuse")
"""What a gate asked without ``commit`` may answer when it would refuse, without the decision."""

TURN_CAP: Final = TurnCap()
SESSION_CAP: Final = SessionCap()
DELEGATION_DEPTH: Final = DelegationDepth()
TREE_CAP: Final = TreeCap()
DELEGATION_CYCLE: Final = DelegationCycle()
HARD_STOPS: Final = HardStops()
