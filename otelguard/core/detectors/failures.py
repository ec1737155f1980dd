"""The failure detectors: ``exact_failure``, ``cross_turn_failure``, ``same_tool_failure``,
``same_error`` and ``refusal`` (docs/detectors.md). Their counts are the turn's (``TurnDetectors``
records every outcome); these objects judge them, walked in the order ``precedence.py`` gives."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from otelguard.core import decisions as codes

if TYPE_CHECKING:
    from otelguard.core.decisions import Decision, Signature, ToolClass
    from otelguard.core.detectors.rule import Ran
    from otelguard.core.detectors.state import SignatureState
    from otelguard.core.detectors.turn import TurnDetectors

__all__ = [
    "CROSS_TURN_FAILURE",
    "EXACT_FAILURE",
    "REFUSAL_HALT",
    "REFUSAL_WARN",
    "SAME_ERROR_HALT",
    "SAME_ERROR_WARN",
    "SAME_TOOL_FAILURE",
    "SAME_TOOL_FAILURE_HALT",
]


class ExactFailure:
    """exact_failure: the same call failing with the turn's writes unchanged."""

    __slots__ = ()
    name = "exact_failure"
    code = codes.EXACT_FAILURE_WARN
    warns = True

    def before(
        self,
        turn: TurnDetectors,
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

    def after(self, turn: TurnDetectors, call: Ran) -> Decision | None:
        exact = turn.exact_failures(call.state)
        warn = turn.warn_after["exact_failure"]
        if exact and exact >= warn:
            return turn.decide("warn", codes.EXACT_FAILURE_WARN, call.sig, exact, warn)
        return None


class CrossTurnFailure:
    """cross_turn_failure: the same call failing the same way turn after turn (``SessionMemory``)."""

    __slots__ = ()
    name = "cross_turn_failure"
    code = codes.CROSS_TURN_FAILURE_WARN
    warns = True

    def before(
        self,
        turn: TurnDetectors,
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

    def after(self, turn: TurnDetectors, call: Ran) -> Decision | None:
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
    name = "same_tool_failure"
    code = codes.SAME_TOOL_FAILURE_WARN
    warns = True

    def before(
        self,
        turn: TurnDetectors,
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

    def after(self, turn: TurnDetectors, call: Ran) -> Decision | None:
        tool_failures = call.failures.tool_failures
        tool_warn = turn.warn_after["same_tool_failure"] + (
            turn.SHELL_LATER_FAILURE_WARN if call.tool_class == "shell" else 0
        )
        if tool_failures and tool_failures >= tool_warn:
            return turn.decide("warn", codes.SAME_TOOL_FAILURE_WARN, call.sig, tool_failures, tool_warn)
        return None


class SameToolFailureHalt:
    __slots__ = ()
    code = codes.SAME_TOOL_FAILURE_HALT
    warns = False

    def after(self, turn: TurnDetectors, call: Ran) -> Decision | None:
        tool_failures = call.failures.tool_failures
        stop = turn.stop_after["same_tool_failure"]
        if (
            not call.failure_tolerant
            and tool_failures >= stop
            and turn.tool_rejects_spent(call.sig.tool_name, tool_failures)
        ):
            return turn.decide("halt", codes.SAME_TOOL_FAILURE_HALT, call.sig, tool_failures, stop)
        return None


class SameErrorHalt:
    """same_error: the very same error from tool after tool is a loop (``failure_tolerant`` does not
    exempt a tool from it)."""

    __slots__ = ()
    code = codes.SAME_ERROR_HALT
    warns = False

    def after(self, turn: TurnDetectors, call: Ran) -> Decision | None:
        same_errors = call.failures.same_errors
        stop = turn.stop_after["same_error"]
        if same_errors >= stop:
            return turn.decide("halt", codes.SAME_ERROR_HALT, call.sig, same_errors, stop)
        return None


class SameErrorWarn:
    __slots__ = ()
    code = codes.SAME_ERROR_WARN
    warns = True

    def after(self, turn: TurnDetectors, call: Ran) -> Decision | None:
        same_errors = call.failures.same_errors
        warn = turn.warn_after["same_error"]
        if same_errors and same_errors >= warn:
            return turn.decide("warn", codes.SAME_ERROR_WARN, call.sig, same_errors, warn)
        return None


class RefusalHalt:
    """refusal: one tool refused for one reason again and again."""

    __slots__ = ()
    code = codes.REFUSAL_HALT
    warns = False

    def after(self, turn: TurnDetectors, call: Ran) -> Decision | None:
        refusals = call.failures.refusals
        stop = turn.stop_after["refusal"]
        if refusals >= stop:
            return turn.decide("halt", codes.REFUSAL_HALT, call.sig, refusals, stop)
        return None


class RefusalWarn:
    __slots__ = ()
    code = codes.REFUSAL_WARN
    warns = True

    def after(self, turn: TurnDetectors, call: Ran) -> Decision | None:
        refusals = call.failures.refusals
        warn = turn.warn_after["refusal"]
        if refusals and refusals >= warn:
            return turn.decide("warn", codes.REFUSAL_WARN, call.sig, refusals, warn)
        return None


EXACT_FAILURE: Final = ExactFailure()
CROSS_TURN_FAILURE: Final = CrossTurnFailure()
SAME_TOOL_FAILURE: Final = SameToolFailure()
SAME_TOOL_FAILURE_HALT: Final = SameToolFailureHalt()
SAME_ERROR_HALT: Final = SameErrorHalt()
SAME_ERROR_WARN: Final = SameErrorWarn()
REFUSAL_HALT: Final = RefusalHalt()
REFUSAL_WARN: Final = RefusalWarn()
