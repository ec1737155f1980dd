"""The failure detectors: ``exact_failure``, ``cross_turn_failure``, ``same_tool_failure``,
``same_error`` and ``refusal`` (docs/detectors.md). Their counts are the turn's (``TurnDetectors``
records every outcome); these objects judge them, walked in the order ``precedence.py`` gives."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Literal

from otelguard.core import decisions as codes

if TYPE_CHECKING:
    from otelguard.core.decisions import Decision, Outcome, Signature, ToolClass
    from otelguard.core.detectors.rule import Ran, TurnCounts
    from otelguard.core.detectors.state import SignatureState

__all__ = [
    "CROSS_TURN_FAILURE",
    "EXACT_FAILURE",
    "REFUSAL_HALT",
    "REFUSAL_WARN",
    "SAME_ERROR_HALT",
    "SAME_ERROR_WARN",
    "SAME_TOOL_FAILURE",
    "SAME_TOOL_FAILURE_HALT",
    "clear_after_success",
    "count_error",
    "count_failure",
]


class ExactFailure:
    """exact_failure: the same call failing with the turn's writes unchanged."""

    __slots__ = ()
    judges_successes = False  # its counts are all 0 after a success (thresholds are 1 or more)
    name = "exact_failure"
    code = codes.EXACT_FAILURE_WARN
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
        failures = turn.exact_failures(state)
        limit = turn.stop_after["exact_failure"]
        if failures < limit:
            return None
        if not commit:
            return turn.WOULD_REFUSE
        return turn.refuse(state, codes.EXACT_FAILURE_REJECT, codes.EXACT_FAILURE_BLOCK, sig, failures, limit)

    def after(self, turn: TurnCounts, call: Ran) -> Decision | None:
        exact = turn.exact_failures(call.state)
        warn = turn.warn_after["exact_failure"]
        if exact and exact >= warn:
            return turn.decide("warn", codes.EXACT_FAILURE_WARN, call.sig, exact, warn)
        return None


class CrossTurnFailure:
    """cross_turn_failure: the same call failing the same way turn after turn (``SessionMemory``)."""

    __slots__ = ()
    judges_successes = False  # its counts are all 0 after a success (thresholds are 1 or more)
    before_classes = ("read", "write", "shell", "unknown")
    name = "cross_turn_failure"
    code = codes.CROSS_TURN_FAILURE_WARN
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
        turns = turn.memory.turns_failed(sig)
        limit = turn.stop_after["cross_turn_failure"]
        if turns < limit:
            return None
        if not commit:
            return turn.WOULD_REFUSE
        state = state if state is not None else turn.state(sig)
        return turn.refuse(
            state, codes.CROSS_TURN_FAILURE_REJECT, codes.CROSS_TURN_FAILURE_BLOCK, sig, turns, limit
        )

    def after(self, turn: TurnCounts, call: Ran) -> Decision | None:
        turns_failed = call.failures.turns_failed
        warn = turn.warn_after["cross_turn_failure"]
        if turns_failed and turns_failed >= warn:
            return turn.decide("warn", codes.CROSS_TURN_FAILURE_WARN, call.sig, turns_failed, warn)
        return None


class SameToolFailure:
    """same_tool_failure, before a call and as a warning: once the tool's failures have reached the
    stop with rejects to give (see ``TurnDetectors.tool_rejects_spent``), its next call is rejected
    with a message (``pattern_rejects``); the call after those runs: its failure stops the turn, its
    success ends the count."""

    __slots__ = ()
    judges_successes = False  # its counts are all 0 after a success (thresholds are 1 or more)
    name = "same_tool_failure"
    code = codes.SAME_TOOL_FAILURE_WARN
    warns = True

    def before(
        self,
        turn: TurnCounts,
        sig: Signature,
        state: SignatureState | None,
        tool_class: ToolClass,
        commit: bool,
    ) -> Decision | None:
        if not turn.tool_rejects:
            return None
        tool = sig.tool_name
        rejects = turn.tool_rejects.get(tool)
        if rejects is None or rejects >= turn.pattern_rejects:
            return None
        if not commit:
            return turn.WOULD_REFUSE
        turn.tool_rejects[tool] = rejects + 1
        limit = turn.stop_after["same_tool_failure"]
        count = turn.tool_failures.get(tool, limit)
        return turn.decide("reject", codes.SAME_TOOL_FAILURE_REJECT, sig, count, limit)

    def after(self, turn: TurnCounts, call: Ran) -> Decision | None:
        tool_failures = call.failures.tool_failures
        tool_warn = turn.warn_after["same_tool_failure"] + (
            turn.SHELL_LATER_FAILURE_WARN if call.tool_class == "shell" else 0
        )
        if tool_failures and tool_failures >= tool_warn:
            return turn.decide("warn", codes.SAME_TOOL_FAILURE_WARN, call.sig, tool_failures, tool_warn)
        return None


class SameToolFailureHalt:
    __slots__ = ()
    judges_successes = False  # its counts are all 0 after a success (thresholds are 1 or more)
    code = codes.SAME_TOOL_FAILURE_HALT
    warns = False

    def after(self, turn: TurnCounts, call: Ran) -> Decision | None:
        tool_failures = call.failures.tool_failures
        stop = turn.stop_after["same_tool_failure"]
        if (
            not call.failure_tolerant
            and tool_failures >= stop
            and turn.tool_rejects_spent(call.sig.tool_name, tool_failures)
        ):
            return turn.decide("halt", codes.SAME_TOOL_FAILURE_HALT, call.sig, tool_failures, stop)
        return None


class CountRule:
    """A rule that judges one failure count of the call against one threshold: ``same_error`` (the
    very same error from tool after tool: ``failure_tolerant`` does not exempt a tool from it) and
    ``refusal`` (one tool refused for one reason again and again), each a warning and a halt."""

    __slots__ = ("action", "code", "count", "detector", "warns")
    judges_successes = False  # its counts are all 0 after a success (thresholds are 1 or more)

    def __init__(self, detector: str, count: str, action: Literal["warn", "halt"], code: str) -> None:
        self.detector = detector  # the key of its thresholds
        self.count = count  # the field of ``FailureCounts`` it reads
        self.action: Literal["warn", "halt"] = action
        self.code = code
        self.warns = action == "warn"

    def after(self, turn: TurnCounts, call: Ran) -> Decision | None:
        count: int = getattr(call.failures, self.count)
        limit = (turn.warn_after if self.warns else turn.stop_after)[self.detector]
        if count and count >= limit:
            return turn.decide(self.action, self.code, call.sig, count, limit)
        return None


def count_failure(
    turn: TurnCounts,
    sig: Signature,
    state: SignatureState,
    tool_class: ToolClass,
    outcome: Outcome,
    refusal: str | None,
    error: int | None,
) -> tuple[int, int, int, int]:
    """Count a failed or refused call in the failure detectors: the counts of ``FailureCounts``
    (a success's are all 0: ``TurnDetectors.record_after`` ends them itself)."""
    across = 0 if tool_class == "poll" else turn.memory.record(sig, outcome, error)
    tool_failures, refusals = _count_failure(turn, sig.tool_name, state, outcome, refusal, tool_class, error)
    same_errors = count_error(turn, error, sig.tool_name) if outcome == "failed" and error is not None else 0
    return tool_failures, refusals, same_errors, across


def clear_after_success(turn: TurnCounts, tool: str, tool_class: ToolClass) -> None:
    """After a success (whose signature's exact_failure streak ``record_after`` ended): any
    successful write or shell call is progress (an edit made with ``sed -i``); same_tool_failure
    and refusal: only a success of the same tool clears them."""
    if tool_class == "write" or tool_class == "shell":
        turn.write_epoch += 1
        if turn.errors:
            turn.errors.clear()
    if turn.tool_failures:
        turn.tool_failures.pop(tool, None)
        turn.tool_errors.pop(tool, None)
        if turn.tool_rejects:
            turn.tool_rejects.pop(tool, None)
    if turn.refusals:
        for key in [k for k in turn.refusals if k[0] == tool]:
            del turn.refusals[key]


def _count_failure(
    turn: TurnCounts,
    tool: str,
    state: SignatureState,
    outcome: Outcome,
    refusal: str | None,
    tool_class: ToolClass,
    error: int | None,
) -> tuple[int, int]:
    """Count a failed or refused call; returns the tool's (failures and refusals, refusals of the
    category). A refusal counts for the content-blind bound but not for exact_failure. A shell's
    count starts again after any successful write or shell call: the tests failing between two
    edits are how a fix is made, not a tool breaking down."""
    if outcome == "failed":
        state.exact_failures = turn.exact_failures(state) + 1
        state.exact_epoch = turn.write_epoch
    if tool_class == "shell":
        count, epoch = turn.shell_failures.touch(tool, lambda: (0, turn.write_epoch))
        tool_failures = (count if epoch == turn.write_epoch else 0) + 1
        turn.shell_failures[tool] = (tool_failures, turn.write_epoch)
    elif outcome == "failed" and state.exact_failures > 1:
        # The same call failing again (since it last succeeded or a write or shell call did) is
        # exact_failure's loop, refused before it stops; counted here too, one call resent
        # unchanged would halt the turn with no refusal first.
        tool_failures = 0
    else:
        tool_failures = turn.tool_failures.touch(tool, int) + 1
        turn.tool_failures[tool] = tool_failures
        seen = turn.tool_errors.get(tool, ()) if tool_failures > 1 else ()
        if outcome == "refused":  # a gate saying no: the same answer, whatever was sent
            turn.tool_errors[tool] = seen
        elif len(seen) < turn.new_errors_kept and (error is None or error not in seen):
            turn.tool_errors[tool] = (*seen, error)
    refusals = 0
    if outcome == "refused":
        key = (tool, refusal or "refused")
        refusals = turn.refusals.touch(key, int) + 1
        turn.refusals[key] = refusals
    return tool_failures, refusals


def count_error(turn: TurnCounts, error: int, tool: str) -> int:
    """Count a failure with this error fingerprint. Returns the count once the error has come from
    two different tools (the failures before the second tool included), else 0: one tool repeating
    one error is exact_failure's and same_tool_failure's to judge."""
    count, only_tool = turn.errors.touch(error, lambda: (0, tool))
    if only_tool != tool:
        only_tool = None
    turn.errors[error] = (count + 1, only_tool)
    return count + 1 if only_tool is None else 0


EXACT_FAILURE: Final = ExactFailure()
CROSS_TURN_FAILURE: Final = CrossTurnFailure()
SAME_TOOL_FAILURE: Final = SameToolFailure()
SAME_TOOL_FAILURE_HALT: Final = SameToolFailureHalt()
SAME_ERROR_HALT: Final = CountRule("same_error", "same_errors", "halt", codes.SAME_ERROR_HALT)
SAME_ERROR_WARN: Final = CountRule("same_error", "same_errors", "warn", codes.SAME_ERROR_WARN)
REFUSAL_HALT: Final = CountRule("refusal", "refusals", "halt", codes.REFUSAL_HALT)
REFUSAL_WARN: Final = CountRule("refusal", "refusals", "warn", codes.REFUSAL_WARN)
