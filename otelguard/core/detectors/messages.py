"""The messages the model reads for each detector code, and the one place a ``Decision`` is made."""

from __future__ import annotations

from typing import Final

from otelguard.core import decisions as codes
from otelguard.core.decisions import Decision, Signature

__all__ = [
    "MESSAGES",
    "SHELL_IDENTICAL_REJECT",
    "SHELL_LATER_FAILURE_WARN",
    "STAGNATION_LAST_WARN",
    "decision",
]

# A shell's failure is an exit status: grep finding nothing, a failing test, a probe of the
# environment. A few different commands failing in a row is how an agent explores, so a shell's
# same_tool_failure warns one failure later than another tool's (measured on real runs of shell agents).
SHELL_LATER_FAILURE_WARN: Final = 1

MESSAGES: Final = {
    codes.EXACT_FAILURE_WARN: "{tool} failed {count} times in a row with the same arguments. Do not retry it "
    "unchanged: read the error, change the arguments or the approach, or report the problem.",
    codes.EXACT_FAILURE_BLOCK: "Not run: {tool} already failed {count} times in a row with these same "
    "arguments. Change the arguments or the approach, or stop and report the problem.",
    codes.EXACT_FAILURE_REJECT: "Not run: {tool} already failed {count} times in a row with these same "
    "arguments. Change the arguments or the approach; if you keep sending this same call, the turn stops.",
    codes.CROSS_TURN_FAILURE_WARN: "{tool} has failed the same way with the same arguments in {count} "
    "turns. Retrying it unchanged will not help: change the arguments or the approach, or tell the user "
    "what the error is.",
    codes.CROSS_TURN_FAILURE_REJECT: "Not run: {tool} failed the same way with these same arguments in "
    "{count} turns. Change the arguments or the approach, or tell the user what the error is; if you "
    "keep sending this same call, the turn stops.",
    codes.CROSS_TURN_FAILURE_BLOCK: "Not run: {tool} failed the same way with these same arguments in "
    "{count} turns and was sent again after being refused. Tell the user what the error is.",
    codes.SAME_TOOL_FAILURE_WARN: "{tool} has failed {count} times this turn, with different arguments or "
    "errors. Diagnose the cause before calling it again.",
    codes.SAME_TOOL_FAILURE_REJECT: "Not run: {tool} already failed {count} times this turn (limit "
    "{limit}), with different arguments or errors. Find the cause before using it again: read the "
    "errors, check the inputs, or change the approach; if its next call fails too, the turn stops.",
    codes.SAME_TOOL_FAILURE_HALT: "Stopping this turn: {tool} failed {count} times (limit {limit}). "
    "Tell the user what went wrong instead of calling more tools.",
    codes.REFUSAL_WARN: "{tool} was refused {count} times by a policy or permission gate. Retrying will not "
    "help: ask the user for permission or take another approach.",
    codes.REFUSAL_HALT: "Stopping this turn: {tool} was refused {count} times (limit {limit}). Ask the user "
    "for permission instead of retrying.",
    codes.NO_PROGRESS_WARN: "{tool} returned the same result {count} times for the same arguments. You "
    "already have this result: use it instead of calling again.",
    codes.NO_PROGRESS_BLOCK: "Not run: {tool} already returned the same result {count} times for these "
    "arguments. Use the result you have.",
    codes.NO_PROGRESS_REJECT: "Not run: {tool} already returned the same result {count} times for these "
    "arguments. Use the result you have; if you keep sending this same call, the turn stops.",
    codes.IDENTICAL_CALL_REJECT: "Not run: {tool} was called {count} times in a row with the same "
    "arguments and got the same result each time. Use the result you have or try something different; "
    "if you keep sending it, the turn stops.",
    codes.IDENTICAL_CALL_WARN: "{tool} was called {count} times in a row with the same arguments and got the "
    "same result. Stop repeating it.",
    codes.IDENTICAL_CALL_HALT: "Stopping this turn: {tool} was repeated {count} times in a row with the same "
    "result (limit {limit}).",
    codes.CYCLE_WARN: "Your last calls repeat the same cycle of {period} calls ({count} times in a row, "
    "ending with {tool}). Break the cycle: try something different or report back.",
    codes.CYCLE_BLOCK: "Not run: this call to {tool} would continue a cycle of {period} calls already "
    "repeated {count} times. Try something different or report back.",
    codes.CYCLE_REJECT: "Not run: this call to {tool} would continue a cycle of {period} calls already "
    "repeated {count} times. Try something different or report back; continuing the cycle stops the turn.",
    codes.SAME_ERROR_WARN: "{count} calls failed with the very same error since the last successful "
    "change (the last: {tool}). Changing the tool or the arguments does not fix it: read the error "
    "and fix its cause first.",
    codes.SAME_ERROR_HALT: "Stopping this turn: {count} calls failed with the very same error (limit "
    "{limit}, the last: {tool}). Tell the user what the error is instead of calling more tools.",
    codes.STAGNATION_WARN: "{tool} ran this same command {count} more times and got back what it had "
    "already returned (the same output, or the same failure in other words). Your changes are not "
    "changing its result: read the output, find the cause, or try another approach.",
    codes.STAGNATION_REJECT: "Not run: {tool} already ran this same command {count} more times and got "
    "back what it had already returned. Running it again will not tell you anything new: change the "
    "approach; if you keep sending this same command, the turn stops.",
    codes.STAGNATION_BLOCK: "Not run: {tool} ran this same command {count} more times with nothing new in "
    "its result, and it was sent again after being refused. Report what is blocking you.",
    codes.STAGNATION_HALT: "Stopping this turn: {tool} ran this same command {count} more times, with "
    "changes made between the runs, and got back what it had already returned each time (limit "
    "{limit}). Report what is blocking you.",
    codes.READ_ONLY_STREAK_WARN: "{count} read-only calls in a row (the last: {tool}) without changing "
    "anything. Act on what you found or report back.",
    codes.WRITE_STREAK_WARN: "{count} changing calls in a row (the last: {tool}) without reading anything "
    "back. Check the results of your changes.",
}


STAGNATION_LAST_WARN: Final = (
    "{tool} ran this same command {count} more times and got back what it had already returned, "
    "changes made between the runs or not. Your changes are not changing its result: find the cause "
    "or try another approach; if it returns this again after your next change, the turn stops."
)
"""stagnation's warning in place of a reject, for a check run right after an edit (never refused)."""

SHELL_IDENTICAL_REJECT: Final = (
    "Not run: {tool} ran this same command {count} times in a row with the same output. Use the output "
    "you have, or change something before running it again."
)


def decision(
    action: codes.Action,
    code: str,
    sig: Signature,
    count: int,
    limit: int,
    *,
    period: int = 0,
    message: str | None = None,
) -> Decision:
    template = MESSAGES[code] if message is None else message
    message = template.format(tool=sig.tool_name, count=count, limit=limit, period=period)
    return Decision(
        action=action,
        code=code,
        message=message,
        tool_name=sig.tool_name,
        count=count,
        limit=limit,
        signature=sig,
    )
