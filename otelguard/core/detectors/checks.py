"""The stagnation detector's judgements (its memory is ``stagnation.py``'s): a shell check returning
what it already returned (``stagnation``), and a check the edits do not change (``unchanged_check``),
walked in the order ``precedence.py`` gives."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from otelguard.core import decisions as codes

if TYPE_CHECKING:
    from otelguard.core.decisions import Decision, Signature, ToolClass
    from otelguard.core.detectors.rule import Ran, TurnCounts
    from otelguard.core.detectors.stagnation import ShellCheck
    from otelguard.core.detectors.state import SignatureState

__all__ = ["STAGNATION", "STAGNATION_HALT", "UNCHANGED_AFTER_EDITS_FACTOR", "UNCHANGED_CHECK", "record_shell"]

# A check rerun right after each edit and returning what it already returned halts the turn only at
# this many times ``hard_stop_after.unchanged_check`` (20 by default): on real runs every lower count
# stopped a solved run before the edit that fixed it (one reran its script after 15 edits with the
# same output, then passed at its last call), while a loop of edits that change nothing stays bounded.
UNCHANGED_AFTER_EDITS_FACTOR: Final = 4


def _check(turn: TurnCounts, sig: Signature, tool_class: ToolClass) -> ShellCheck | None:
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
    before_classes = ("shell",)
    name = "stagnation"
    code = codes.STAGNATION_WARN
    warns = True

    def before(
        self,
        turn: TurnCounts,
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

    def after(self, turn: TurnCounts, call: Ran) -> Decision | None:
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
    before_classes = ("shell",)
    name = "unchanged_check"

    def before(
        self,
        turn: TurnCounts,
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

    def after(self, turn: TurnCounts, call: Ran) -> Decision | None:
        judged = call.judged
        return judged if judged is not None and judged.action == "halt" else None


def record_shell(
    turn: TurnCounts, sig: Signature, state: SignatureState, ok: bool, error: int | None, progress: Any
) -> tuple[int, int, bool, Decision | None]:
    """stagnation: count a shell's result; its (stale, unchanged) counts, whether one is at its
    warning, and the judgement of a send that followed an edit (``_judged_after_edit``)."""
    # its raw digest, already made: by ``same_as_previous`` for a success, the error's for a failure
    key = (state.raw if state.raw is not None else state.fingerprint) if ok else error
    first = state.shell_first
    if first is None:  # a command's first run: most run once, its digest is all it leaves
        state.shell_first = -1 if key is None else key
        state.shell_edits = turn.edits
        return 0, 0, False, None
    rerun = turn.cycle.second == sig
    memory = turn.stagnation
    check = memory.stale(sig)
    before = (check.stale, check.unchanged) if check is not None else (0, 0)
    stale = memory.record(
        sig, None if first < 0 else first, key, progress, rerun, ok, state.shell_edits, turn.edits
    )
    unchanged = memory.unchanged
    loud = stale >= turn.quiet_stagnation or unchanged >= turn.quiet_unchanged
    judged = _judged_after_edit(turn, sig, before, stale, unchanged) if loud and turn.hard_stop else None
    return stale, unchanged, loud, judged


def _judged_after_edit(
    turn: TurnCounts, sig: Signature, before: tuple[int, int], stale: int, unchanged: int
) -> Decision | None:
    """stagnation, a send that ran only because it directly followed an edit (``before_call``
    would have refused it: its count was at its stop), judged by its result: counted again, it
    halts the turn. The model was told at the stop (``Stagnation.after``'s warning that the next result
    like this one stops the turn). A result new for the command, or less of what is wrong in it,
    ends the count as ever, and the call goes on."""
    stop = turn.stop_after
    if stale > before[0] >= stop["stagnation"]:
        return turn.decide("halt", codes.STAGNATION_HALT, sig, stale, stop["stagnation"])
    limit = stop["unchanged_check"] * UNCHANGED_AFTER_EDITS_FACTOR
    if unchanged > before[1] >= limit:
        return turn.decide("halt", codes.STAGNATION_HALT, sig, unchanged, limit)
    return None


STAGNATION: Final = Stagnation()
UNCHANGED_CHECK: Final = UnchangedCheck()
STAGNATION_HALT: Final = StagnationHalt()
