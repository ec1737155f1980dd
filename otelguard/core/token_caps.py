"""Caps on the model's tokens: ``caps.turn.tokens``, ``caps.session.tokens``, ``caps.tree.tokens``
(docs/model-turns.md).

Tokens are known only once the model has answered, so they are charged at ``after_model`` (input +
output as the provider reports them; unknown usage charges nothing), whatever the limit: what was
used was used. A cap is spent when the tokens used reach its limit: ``before_model`` then answers
``block`` (the model is not called), and the ``after_model`` of the reply that spent it (or of any
later reply) ``halt``. The turn's counter is the guard's ``CapLedger.turn``; the session's and the
tree's are their stores', charged with ``add`` (the count after comes from the same atomic step, so
guards charging at once, in several processes sharing one store, each see their own count). No
tool is ever charged to the key ``tokens``, and no refund touches it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from otelguard.config.names import TOKENS
from otelguard.core import decisions as codes
from otelguard.core.decisions import MODEL_TOOL, Decision

if TYPE_CHECKING:
    from otelguard.config import GuardConfig
    from otelguard.core.caps import CapLedger

__all__ = ["SESSION_TOKENS", "TOKENS", "TREE_TOKENS", "TURN_TOKENS", "TokenCap"]

_WHOSE: Final = {"turn": "this turn", "session": "this session", "tree": "this delegation tree"}


class TokenCap:
    """The token cap of one scope: its limit in a config, and its counter (``used``)."""

    __slots__ = ("code", "scope")

    def __init__(self, scope: str, code: str) -> None:
        self.scope = scope
        self.code = code

    def limit(self, config: GuardConfig) -> int:
        """The scope's token limit (0: none)."""
        return int(getattr(config.caps, self.scope).get(TOKENS, 0))

    def used(self, ledger: CapLedger, amount: int, limit: int) -> int:
        """Charge ``amount`` tokens (0: read the count) and answer the count after."""
        if self.scope == "turn":
            turn = ledger.turn
            used = turn[TOKENS] = turn.get(TOKENS, 0) + amount
            if used / limit > ledger.turn_peak_ratio.get(TOKENS, 0.0):
                ledger.turn_peak_ratio[TOKENS] = used / limit
            return used
        if self.scope == "session":
            return ledger.session.add(TOKENS, amount)
        tree = ledger.tree
        return tree.add(TOKENS, amount) if tree is not None else 0

    def spent(self, used: int, limit: int, action: codes.Action) -> Decision:
        """The decision of a spent cap: ``block`` before the model is called, ``halt`` after a reply."""
        whose = _WHOSE[self.scope]
        if action == "block":
            message = (
                f"Not called: {whose} already used {used} model tokens, the limit is {limit}. "
                "Stop here and tell the user the token limit was reached."
            )
        else:
            message = (
                f"Stopping: with this reply {whose} has used {used} model tokens, the limit is {limit}. "
                "Do not call the model or tools again; tell the user the token limit was reached."
            )
        return Decision(
            action=action,
            code=self.code,
            message=message,
            tool_name=MODEL_TOOL,
            count=used,
            limit=limit,
            cap=TOKENS,
        )


TURN_TOKENS: Final = TokenCap("turn", codes.CAP_TURN)
SESSION_TOKENS: Final = TokenCap("session", codes.CAP_SESSION)
TREE_TOKENS: Final = TokenCap("tree", codes.CAP_TREE)
