"""Per-turn and per-session caps on runaway-prone tools (docs/configuration.md, "Caps")."""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType
from typing import Final, Literal, NamedTuple

from otelguard import decisions as codes
from otelguard.decisions import Decision, Signature

__all__ = ["CapLedger", "CapRefusal", "Charge"]

Scope = Literal["turn", "session"]
Charge = tuple[Scope, str, int]

class CapRefusal(NamedTuple):
    key: str
    used: int
    limit: int


_NOUNS: Final = {
    "web_search": ("made", "web search", "web searches"),
    "subagents": ("started", "subagent", "subagents"),
}


class CapLedger:
    """Usage counters: turn counters reset by ``start_turn``, session counters live with the guard."""

    def __init__(self, on_hit: str) -> None:
        self.action: codes.Action = "block" if on_hit == "block" else "reject"
        self.turn: dict[str, int] = {}
        self.session: dict[str, int] = {}
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
        """The first cap this call would exceed (turn caps before session caps, config order)."""
        for scope, caps, used_by_key in (
            ("turn", turn_caps, self.turn),
            ("session", session_caps, self.session),
        ):
            for key, limit in caps:
                used = used_by_key.get(key, 0)
                if used + requested > limit:
                    return self._hit(sig, scope, key, used, limit, requested)  # type: ignore[arg-type]
        return None

    def charge(
        self, turn_caps: Sequence[tuple[str, int]], session_caps: Sequence[tuple[str, int]], amount: int
    ) -> tuple[Charge, ...]:
        charges: list[Charge] = []
        for key, limit in turn_caps:
            used = self.turn.get(key, 0) + amount
            self.turn[key] = used
            if used / limit > self.turn_peak_ratio.get(key, 0.0):
                self.turn_peak_ratio[key] = used / limit
            charges.append(("turn", key, amount))
        for key, _limit in session_caps:
            self.session[key] = self.session.get(key, 0) + amount
            charges.append(("session", key, amount))
        return tuple(charges)

    def refund(self, charges: Sequence[Charge], same_turn: bool) -> None:
        for scope, key, amount in charges:
            if scope == "turn" and not same_turn:
                continue
            counters = self.turn if scope == "turn" else self.session
            counters[key] = max(0, counters.get(key, 0) - amount)

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
