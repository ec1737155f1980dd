"""The cycle detector's judgements (its window is ``repetition.py``'s): a sequence of calls
repeating, walked in the order ``precedence.py`` gives."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from otelguard.core import decisions as codes

if TYPE_CHECKING:
    from otelguard.core.decisions import Decision, Signature, ToolClass
    from otelguard.core.detectors.rule import Ran, TurnCounts
    from otelguard.core.detectors.state import SignatureState

__all__ = ["CYCLE"]


class Cycle:
    """cycle: the call continuing the cycle is rejected, and taken as part of the sequence (the model
    asked for it); a call continuing that same cycle after its reject stops the turn. The cycle
    breaking ends its rejects."""

    __slots__ = ()
    after_classes = ("read", "write", "shell", "unknown")
    before_classes = ("read", "write", "shell", "unknown")
    name = "cycle"
    code = codes.CYCLE_WARN
    warns = True

    def before(
        self,
        turn: TurnCounts,
        sig: Signature,
        state: SignatureState | None,
        tool_class: ToolClass,
        commit: bool,
    ) -> Decision | None:
        if tool_class == "poll":
            return None
        limit = turn.stop_after["cycle"]
        count, period = turn.cycle.would_continue(sig, limit)
        rejected = turn.cycle_rejected
        if not count and turn.cycle_rejects and rejected is not None and rejected[0] == sig:
            _, count, period = rejected  # the very call the cycle's reject refused, sent again
        if not count:
            return None
        if not commit:
            return turn.WOULD_REFUSE
        if turn.cycle_rejects >= turn.pattern_rejects:
            return turn.decide("block", codes.CYCLE_BLOCK, sig, count, limit, period=period)
        turn.cycle_rejects += 1
        turn.cycle_rejected = (sig, count, period)
        turn.cycle.push(sig)
        return turn.decide("reject", codes.CYCLE_REJECT, sig, count, limit, period=period)

    def after(self, turn: TurnCounts, call: Ran) -> Decision | None:
        if call.tool_class == "poll" or not turn.cycle.runs_any():
            return None
        count, period = turn.cycle.best()
        warn = turn.warn_after["cycle"]
        if count >= warn:
            return turn.decide("warn", codes.CYCLE_WARN, call.sig, count, warn, period=period)
        return None


CYCLE: Final = Cycle()
