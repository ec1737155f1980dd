"""The progress detectors: ``no_progress``, ``identical_call`` and the read and write streaks
(docs/detectors.md). Their counts are the turn's (``TurnDetectors``); these objects judge them,
walked in the order ``precedence.py`` gives."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from otelguard.core import decisions as codes

if TYPE_CHECKING:
    from otelguard.core.decisions import Decision, Signature, ToolClass
    from otelguard.core.detectors.rule import Ran, TurnCounts
    from otelguard.core.detectors.state import SignatureState

__all__ = [
    "IDENTICAL_CALL",
    "IDENTICAL_CALL_HALT",
    "NO_PROGRESS",
    "READ_ONLY_STREAK",
    "WRITE_STREAK",
    "track_progress",
]


class NoProgress:
    """no_progress: a read returning what it returned before."""

    __slots__ = ()
    after_classes = ("read",)
    before_classes = ("read",)
    name = "no_progress"
    code = codes.NO_PROGRESS_WARN
    warns = True

    def before(
        self,
        turn: TurnCounts,
        sig: Signature,
        state: SignatureState | None,
        tool_class: ToolClass,
        commit: bool,
    ) -> Decision | None:
        limit = turn.stop_after["no_progress"]
        if state is None or tool_class != "read" or state.no_progress < limit:
            return None
        if not commit:
            return turn.WOULD_REFUSE
        return turn.refuse(
            state, codes.NO_PROGRESS_REJECT, codes.NO_PROGRESS_BLOCK, sig, state.no_progress, limit
        )

    def after(self, turn: TurnCounts, call: Ran) -> Decision | None:
        warn = turn.warn_after["no_progress"]
        if call.tool_class == "read" and call.state.no_progress >= warn:
            return turn.decide("warn", codes.NO_PROGRESS_WARN, call.sig, call.state.no_progress, warn)
        return None


class IdenticalCall:
    """identical_call: the call that would make the streak reach its stop is rejected first. A model
    that keeps sending it is rejected again, ``rejects_before_stop`` times in all; sent once more,
    it runs, and halts if its result is the same again. A shell is rejected once and never halted
    for it: a check re-run is often how an agent moves on."""

    __slots__ = ()
    name = "identical_call"
    code = codes.IDENTICAL_CALL_WARN
    warns = True

    def before(
        self,
        turn: TurnCounts,
        sig: Signature,
        state: SignatureState | None,
        tool_class: ToolClass,
        commit: bool,
    ) -> Decision | None:
        if state is None:
            return None
        limit = turn.stop_after["identical_call"]
        count = turn.identical_count
        if turn.identical_sig != sig or not limit - 1 <= count < limit:
            return None
        shell = tool_class == "shell"
        # a shell is never halted for it, so its one reject is a nudge, not a count towards a stop
        if turn.valid_rejects(state) >= (turn.pattern_rejects if shell else turn.rejects_before_stop):
            return None
        if not commit:
            return turn.WOULD_REFUSE
        turn.count_reject(state)
        message = turn.SHELL_IDENTICAL_REJECT if shell else None
        return turn.decide("reject", codes.IDENTICAL_CALL_REJECT, sig, count, limit, message=message)

    def after(self, turn: TurnCounts, call: Ran) -> Decision | None:
        identical = call.identical
        warn = turn.warn_after["identical_call"]
        if identical and identical >= warn and not _refusal_pending(turn, identical):
            return turn.decide("warn", codes.IDENTICAL_CALL_WARN, call.sig, identical, warn)
        return None


def _refusal_pending(turn: TurnCounts, identical: int) -> bool:
    """identical_call, with ``hard_stop``: the streak was warned at ``warn_after`` and its next
    repeat is the one refused (``identical_call_reject`` says why), so the counts in between are
    not warned again. Once the call has been refused and sent again, its repeats warn as before."""
    warn_at, stop = turn.warn_after["identical_call"], turn.stop_after["identical_call"]
    return turn.hard_stop and turn.rejects_before_stop > 0 and warn_at < identical < stop


class IdenticalCallHalt:
    __slots__ = ()
    after_classes = ("read", "write", "poll", "unknown")
    code = codes.IDENTICAL_CALL_HALT
    warns = False

    def after(self, turn: TurnCounts, call: Ran) -> Decision | None:
        stop = turn.stop_after["identical_call"]
        if call.identical >= stop and call.tool_class != "shell":
            return turn.decide("halt", codes.IDENTICAL_CALL_HALT, call.sig, call.identical, stop)
        return None


class ReadOnlyStreak:
    __slots__ = ()
    after_classes = ("read",)
    code = codes.READ_ONLY_STREAK_WARN
    warns = True

    def after(self, turn: TurnCounts, call: Ran) -> Decision | None:
        warn = turn.warn_after["read_only_streak"]
        if call.tool_class == "read" and turn.read_streak >= warn:
            return turn.decide("warn", codes.READ_ONLY_STREAK_WARN, call.sig, turn.read_streak, warn)
        return None


class WriteStreak:
    __slots__ = ()
    after_classes = ("write",)
    code = codes.WRITE_STREAK_WARN
    warns = True

    def after(self, turn: TurnCounts, call: Ran) -> Decision | None:
        warn = turn.warn_after["write_streak"]
        if call.tool_class == "write" and turn.write_streak >= warn:
            return turn.decide("warn", codes.WRITE_STREAK_WARN, call.sig, turn.write_streak, warn)
        return None


def track_progress(
    turn: TurnCounts,
    sig: Signature,
    state: SignatureState,
    tool_class: ToolClass,
    ok: bool,
    same_result: bool,
) -> int:
    """Advance no_progress, identical_call, the cycle window and the streaks; the identical count."""
    # no_progress (read tools): a failure ends the count, a different result starts it again
    if tool_class == "read":
        state.no_progress = (state.no_progress + 1 if same_result and state.no_progress else 1) if ok else 0

    # identical_call (write/unknown), cycle and streaks ignore poll tools
    identical = 0
    if tool_class != "poll":
        if ok and tool_class != "read":
            back_to_back = same_result and turn.identical_sig == sig
            turn.identical_count = turn.identical_count + 1 if back_to_back else 1
            turn.identical_sig = sig
            identical = turn.identical_count
        else:
            turn.identical_sig, turn.identical_count = None, 0
        cycle = turn.cycle
        cycle.push(sig)
        if turn.cycle_rejects and not cycle.runs_any():
            turn.cycle_rejects = 0
    if tool_class == "write":
        turn.write_streak += 1
        turn.read_streak = 0
        turn.edits += 1  # a fix attempt, for stagnation's unchanged_check
    elif tool_class == "read" or tool_class == "shell":
        # A shell may have changed something, but its calls are not a run of blind writes (a
        # shell-only agent would be warned on every call after its 30th); a successful one may
        # have read the changes back (the tests run, the file printed).
        turn.read_streak = turn.read_streak + 1 if tool_class == "read" else 0
        if ok:
            turn.write_streak = 0
    return identical


NO_PROGRESS: Final = NoProgress()
IDENTICAL_CALL: Final = IdenticalCall()
IDENTICAL_CALL_HALT: Final = IdenticalCallHalt()
READ_ONLY_STREAK: Final = ReadOnlyStreak()
WRITE_STREAK: Final = WriteStreak()
