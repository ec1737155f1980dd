"""The stagnation detector's judgements (its memory is ``stagnation.py``'s): a shell check returning
what it already returned (``stagnation``), and a check the edits do not change (``unchanged_check``),
walked in the order ``precedence.py`` gives."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from otelguard.core import decisions as codes

if TYPE_CHECKING:
    from otelguard.core.decisions import Decision, Signature, ToolClass
    from otelguard.core.detectors.rule import Ran
    from otelguard.core.detectors.stagnation import ShellCheck
    from otelguard.core.detectors.state import SignatureState
    from otelguard.core.detectors.turn import TurnDetectors

__all__ = ["STAGNATION", "STAGNATION_HALT", "UNCHANGED_CHECK"]


def _check(turn: TurnDetectors, sig: Signature, tool_class: ToolClass) -> ShellCheck | None:
    """The command's counts when ``before_call`` may refuse it: a shell check not sent directly
    after an edit (the edit may be the fix, and only the result can say: ``record_after`` judges it
    once it ran, see ``TurnDetectors.judged_after_edit``)."""
    if tool_class != "shell" or not turn.stagnation.checks or turn.after_edit:
        return None
    return turn.stagnation.stale(sig)


class Stagnation:
    """stagnation: a shell command that has returned what it already returned ``hard_stop_after``
    times is rejected, ``rejects_before_stop`` times; sent again after that, it stops the turn. Its
    rejects are its own (an edit between two sends does not renew them: edits that do not change the
    check's result are the loop), and end when the command returns something new."""

    __slots__ = ()
    name = "stagnation"
    code = codes.STAGNATION_WARN
    warns = True

    def before(
        self,
        turn: TurnDetectors,
        sig: Signature,
        state: SignatureState | None,
        tool_class: ToolClass,
        commit: bool,
    ) -> Decision | None:
        check = _check(turn, sig, tool_class)
        limit = turn.stop_after["stagnation"]
        if check is None or check.stale < limit:
            return None
        if not commit:
            return turn.WOULD_REFUSE
        if check.rejects < turn.rejects_before_stop:
            check.rejects += 1
            return turn.decide("reject", codes.STAGNATION_REJECT, sig, check.stale, limit)
        return turn.decide("block", codes.STAGNATION_BLOCK, sig, check.stale, limit)

    def after(self, turn: TurnDetectors, call: Ran) -> Decision | None:
        """With hard_stop, the count reaching its stop is warned that the next result like this one
        stops the turn: a send right after an edit runs and halts then (``judged_after_edit``),
        another is refused first; past the stop, the reject (or the halt) says it. Then
        ``unchanged_check``'s count, warned only without hard_stop."""
        stale, unchanged, hard = call.stale, call.unchanged, turn.hard_stop
        warn = turn.warn_after
        if stale and stale >= warn["stagnation"]:
            last = hard and stale == turn.stop_after["stagnation"]
            message = turn.STAGNATION_LAST_WARN if last else None
            return turn.decide(
                "warn", codes.STAGNATION_WARN, call.sig, stale, warn["stagnation"], message=message
            )
        if unchanged and unchanged >= warn["unchanged_check"] and not hard:
            return turn.decide("warn", codes.STAGNATION_WARN, call.sig, unchanged, warn["unchanged_check"])
        return None


class UnchangedCheck:
    """stagnation, a check the edits do not change: a shell command whose successful runs have
    returned what it already returned, with an edit before each, ``hard_stop_after.unchanged_check``
    times, is rejected once (``pattern_rejects``, as a cycle is: the count is already a pattern over
    several fix attempts); sent again after that, it stops the turn. A result new for the command
    ends the count and its reject. (Its warning is ``Stagnation``'s, after the stale count's.)"""

    __slots__ = ()
    name = "unchanged_check"

    def before(
        self,
        turn: TurnDetectors,
        sig: Signature,
        state: SignatureState | None,
        tool_class: ToolClass,
        commit: bool,
    ) -> Decision | None:
        check = _check(turn, sig, tool_class)
        limit = turn.stop_after["unchanged_check"]
        if check is None or check.unchanged < limit:
            return None
        if not commit:
            return turn.WOULD_REFUSE
        if check.unchanged_rejects < turn.pattern_rejects:
            check.unchanged_rejects += 1
            return turn.decide("reject", codes.STAGNATION_REJECT, sig, check.unchanged, limit)
        return turn.decide("block", codes.STAGNATION_BLOCK, sig, check.unchanged, limit)


class StagnationHalt:
    """A send that ran only because it directly followed an edit, judged by its result
    (``TurnDetectors.judged_after_edit``)."""

    __slots__ = ()
    code = codes.STAGNATION_HALT
    warns = False

    def after(self, turn: TurnDetectors, call: Ran) -> Decision | None:
        judged = call.judged
        return judged if judged is not None and judged.action == "halt" else None


STAGNATION: Final = Stagnation()
UNCHANGED_CHECK: Final = UnchangedCheck()
STAGNATION_HALT: Final = StagnationHalt()
