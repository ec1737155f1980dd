"""Per-turn and per-session caps on runaway-prone tools (docs/configuration.md, "Caps").

Turn counters belong to one guard. Session counters belong to the session: a ``SessionCapStore``
shared by the session's main guard and every subagent guard, which checks and charges atomically
(one lock for all of them), so guards running in parallel threads never overshoot a session cap.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Final, Literal, NamedTuple, Protocol, runtime_checkable

from otelguard import decisions as codes
from otelguard.decisions import Decision, Signature
from otelguard.signatures import resolve_signature_key

if TYPE_CHECKING:
    from otelguard.config import GuardConfig
    from otelguard.observers import StateReport

__all__ = [
    "CapLedger",
    "CapRefusal",
    "Charge",
    "LocalSessionCaps",
    "SessionCapStore",
    "SharedSessionCaps",
    "session_cap_store",
]

Scope = Literal["turn", "session"]
Charge = tuple[Scope, str, int]

_NOUNS: Final = {
    "web_search": ("made", "web search", "web searches"),
    "subagents": ("started", "subagent", "subagents"),
}


class CapRefusal(NamedTuple):
    """The session cap a charge would overshoot: the first such key in the order given."""

    key: str
    used: int  # usage before the call
    limit: int


class SessionCapStore(Protocol):
    """The session-scope cap counters of one session, shared by its main guard and every subagent
    guard. Thread-safe; ``try_charge`` checks and charges in one atomic step."""

    def try_charge(self, caps: Sequence[tuple[str, int]], amount: int) -> CapRefusal | None:
        """All or nothing: when ``used + amount > limit`` for any ``(key, limit)``, charge nothing and
        return the first such key; else add ``amount`` to every key and return ``None``."""
        ...

    def refund(self, keys: Sequence[str], amount: int) -> None:
        """Give ``amount`` back to each key, floored at 0 (a charged call that was refused or cancelled)."""
        ...

    def usage(self) -> Mapping[str, int]:
        """The current counts, one per key charged so far."""
        ...


@runtime_checkable
class SharedSessionCaps(SessionCapStore, Protocol):
    """A store outside the process (``state.url``): besides deciding, it reports how each use of the
    shared store went, for the guard to pass on to its observers (metrics, the span attribute)."""

    def charge(self, caps: Sequence[tuple[str, int]], amount: int) -> tuple[CapRefusal | None, StateReport]:
        """``try_charge``, and how the shared store took part (``fell_back``: decided without it)."""
        ...

    def give_back(self, keys: Sequence[str], amount: int) -> StateReport | None:
        """``refund``, and how the shared store took part (``None``: it was not asked)."""
        ...


class LocalSessionCaps:
    """The in-process ``SessionCapStore``: a dict under its own lock."""

    __slots__ = ("_counts", "_lock")

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def try_charge(self, caps: Sequence[tuple[str, int]], amount: int) -> CapRefusal | None:
        counts = self._counts
        with self._lock:
            for key, limit in caps:
                used = counts.get(key, 0)
                if used + amount > limit:
                    return CapRefusal(key, used, limit)
            for key, _limit in caps:
                counts[key] = counts.get(key, 0) + amount
        return None

    def refund(self, keys: Sequence[str], amount: int) -> None:
        counts = self._counts
        with self._lock:
            for key in keys:
                counts[key] = max(0, counts.get(key, 0) - amount)

    def usage(self) -> Mapping[str, int]:
        with self._lock:
            return dict(self._counts)

    def set_counts(self, counts: Iterable[tuple[str, int]]) -> None:
        """Set these keys' counts as given (what a shared store answered: every process's charges)."""
        with self._lock:
            self._counts.update(counts)


def session_cap_store(config: GuardConfig, session_id: str | None) -> SessionCapStore:
    """The store a guard of session ``session_id`` keeps its session caps in: in process, unless a
    shared state URL is set (``state.url`` or ``OTELGUARD_STATE_URL``) and the session is known."""
    if session_id is None:
        return LocalSessionCaps()
    state = config.effective_state()
    if state.url is None:
        return LocalSessionCaps()
    # Imported here so that only a process with a state URL loads the redis client.
    from otelguard.state.redis_caps import open_session_caps

    return open_session_caps(state, resolve_signature_key(config.signature_key), session_id)


class CapLedger:
    """Usage counters: turn counters reset by ``start_turn``; session counters in the session's store."""

    def __init__(self, on_hit: str, session: SessionCapStore) -> None:
        self.action: codes.Action = "block" if on_hit == "block" else "reject"
        self.turn: dict[str, int] = {}
        self.session = session
        self._shared = session if isinstance(session, SharedSessionCaps) else None
        self.reports: list[StateReport] = []
        """How the shared store took part in this ledger's last uses; the guard takes them (under
        its lock) with ``take_reports``. Always empty with an in-process store."""
        self.turn_peak_ratio: dict[str, float] = {}

    def start_turn(self) -> None:
        self.turn = {}
        self.turn_peak_ratio = {}

    def check(
        self,
        sig: Signature,
        turn_caps: Sequence[tuple[str, int]],
        session_caps: Sequence[tuple[str, int]],
        requested: int,
    ) -> Decision | None:
        """The first cap this call would exceed (turn caps before session caps, config order).

        When it exceeds none, the session caps are charged already (atomically with their check:
        another guard of the session may charge them at the same moment); the turn caps are charged
        by ``charge`` once the call is allowed, and a call refused in between gets ``refund_session``.
        """
        turn = self.turn
        for key, limit in turn_caps:
            used = turn.get(key, 0)
            if used + requested > limit:
                return self._hit(sig, "turn", key, used, limit, requested)
        if session_caps:
            shared = self._shared
            if shared is None:
                refusal = self.session.try_charge(session_caps, requested)
            else:
                refusal, report = shared.charge(session_caps, requested)
                self.reports.append(report)
            if refusal is not None:
                return self._hit(sig, "session", refusal.key, refusal.used, refusal.limit, requested)
        return None

    def charge(
        self, turn_caps: Sequence[tuple[str, int]], session_caps: Sequence[tuple[str, int]], amount: int
    ) -> tuple[Charge, ...]:
        """Charge the turn caps of an allowed call; the charges of both scopes, for a later refund."""
        charges: list[Charge] = []
        for key, limit in turn_caps:
            used = self.turn.get(key, 0) + amount
            self.turn[key] = used
            if used / limit > self.turn_peak_ratio.get(key, 0.0):
                self.turn_peak_ratio[key] = used / limit
            charges.append(("turn", key, amount))
        for key, _limit in session_caps:
            charges.append(("session", key, amount))
        return tuple(charges)

    def refund_session(self, session_caps: Sequence[tuple[str, int]], amount: int) -> None:
        """Give back what ``check`` charged to a call that was then refused all the same."""
        self._refund_session([key for key, _limit in session_caps], amount)

    def _refund_session(self, keys: list[str], amount: int) -> None:
        shared = self._shared
        if shared is None:
            self.session.refund(keys, amount)
            return
        report = shared.give_back(keys, amount)
        if report is not None:
            self.reports.append(report)

    def take_reports(self) -> list[StateReport]:
        reports, self.reports = self.reports, []
        return reports

    def refund(self, charges: Sequence[Charge], same_turn: bool) -> None:
        session_keys: list[str] = []
        session_amount = 0
        for scope, key, amount in charges:
            if scope == "session":
                session_keys.append(key)
                session_amount = amount  # one call charges every key the same amount
            elif same_turn:
                self.turn[key] = max(0, self.turn.get(key, 0) - amount)
        if session_keys:
            self._refund_session(session_keys, session_amount)

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
