"""``TurnDetectors``: all detector state of one turn, its ``before_call`` refusals and ``after_call``
verdicts, in the order ``precedence.py`` lists.

Pure and single-threaded: the guard serialises access under its lock. Memory is bounded: state per
signature, per tool, per (tool, refusal category) and per error fingerprint lives in LRU maps of
``max_tracked_signatures`` entries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from otelguard.core import decisions as codes
from otelguard.core.bounded_map import BoundedMap
from otelguard.core.decisions import Decision, Outcome, Signature, ToolClass
from otelguard.core.detectors.messages import (
    SHELL_IDENTICAL_REJECT,
    SHELL_LATER_FAILURE_WARN,
    STAGNATION_LAST_WARN,
    decision,
)
from otelguard.core.detectors.repetition import Cycle
from otelguard.core.detectors.stagnation import ShellCheck, StagnationMemory
from otelguard.core.detectors.state import FailureCounts, SessionMemory, SignatureState, new_state, renewed

if TYPE_CHECKING:
    from otelguard.config import GuardConfig

__all__ = ["TurnDetectors"]


class TurnDetectors:
    """All detector state of one turn. ``start_turn`` replaces the object."""

    def __init__(self, config: GuardConfig, memory: SessionMemory | None = None) -> None:
        self.config = config
        self.memory = memory if memory is not None else SessionMemory(config.max_tracked_signatures)
        self.rejects_before_stop = config.rejects_before_stop
        # a cycle and a failing tool get one reject at most: it refuses a pattern or the whole tool,
        # whatever was sent, not one call the model keeps sending
        self.pattern_rejects = min(config.rejects_before_stop, 1)
        self.hard_stop = config.hard_stop_enabled
        self.warn_after = config.warn_after
        self.stop_after = config.hard_stop_after
        capacity = self._capacity = config.max_tracked_signatures
        self.signatures: BoundedMap[Signature, SignatureState] = BoundedMap(capacity)
        self.tool_failures: BoundedMap[str, int] = BoundedMap(capacity)
        # same_tool_failure: the new errors of the tool's count (None: a failure without an error to
        # compare; a refusal is none), no more than tell whether they are over half of the stop;
        # and, from the failure that reaches the stop until a success of the tool, the rejects its
        # calls have been given
        self.tool_errors: BoundedMap[str, tuple[int | None, ...]] = BoundedMap(capacity)
        self.tool_rejects: BoundedMap[str, int] = BoundedMap(capacity)
        self._new_errors_kept = self.stop_after["same_tool_failure"] // 2 + 1
        # same_tool_failure of shell tools: (failures, the write epoch they were counted in)
        self.shell_failures: BoundedMap[str, tuple[int, int]] = BoundedMap(capacity)
        self.refusals: BoundedMap[tuple[str, str], int] = BoundedMap(capacity)
        # same_error: per error fingerprint since the turn's last successful write or shell call,
        # (failures counted, the one tool they came from; None once a second tool has given it)
        self.errors: BoundedMap[int, tuple[int, str | None]] = BoundedMap(capacity)
        self.write_epoch = 0
        # Below these counts an ok call cannot make any detector fire.
        self._quiet_identical = min(self.warn_after["identical_call"], self.stop_after["identical_call"])
        self._quiet_no_progress = self.warn_after["no_progress"]
        self._quiet_read_streak = self.warn_after["read_only_streak"]
        self._quiet_write_streak = self.warn_after["write_streak"]
        self.identical_sig: Signature | None = None  # of the last ok write/unknown call
        self.identical_count = 0
        self.cycle = Cycle()
        self.cycle_rejects = 0  # rejects given to the current cycle
        self.cycle_rejected: tuple[Signature, int, int] | None = None  # its last: (call, count, period)
        self.read_streak = 0
        self.write_streak = 0
        self.stagnation = StagnationMemory(capacity)
        self._quiet_stagnation = self.warn_after["stagnation"]
        self._quiet_unchanged = self.warn_after["unchanged_check"]
        self.edits = 0  # write calls this turn (the file editors' fix attempts): see StagnationMemory.record
        # the turn's last call that ran (``poll`` calls aside) was an edit: a check sent now may show
        # the edit's fix, so stagnation does not refuse it before it runs (see ``_refuse_stagnation``)
        self.after_edit = False

    def state(self, sig: Signature) -> SignatureState:
        """The signature's state, created if new and marked most recently used.

        ``BoundedMap.touch`` written out, to reuse what it would evict: in a long turn of new calls
        the map is full, and freeing the least recently used state (cold memory) while making a new
        one was most of the instructions and cache misses a late call had over an early one. So the
        dropped state is reset and becomes the new signature's. The results' held queue may still
        refer to it: it only ever releases a slot's current result (see ``ResultMemory._hold``)."""
        signatures = self.signatures
        state = signatures.get(sig)
        if state is not None:
            signatures.move_to_end(sig)
            return state
        if len(signatures) < self._capacity:
            state = new_state(SignatureState)
        else:
            state = signatures.popitem(False)[1]  # positional: no keyword parsing
        signatures[sig] = state = renewed(state)  # the bound is kept above
        return state

    # before_call -----------------------------------------------------------------------------

    def refuse_before(self, sig: Signature, tool_class: ToolClass) -> Decision | None:
        """The hard-stop refusals, in precedence order: exact_failure, cross_turn_failure, no_progress,
        identical_call, cycle, same_tool_failure. A repeated call is first rejected (it does not run,
        the turn goes on) ``rejects_before_stop`` times; the model sending it again after that stops
        the turn. A cycle and a failing tool get one reject (``pattern_rejects``): a cycle going on
        after it stops the turn; the tool's next call runs, and its failure stops the turn.

        A call let through here runs: the rejects its signature was given are spent now, as it is let
        through. Not when it ends: a copy of the call let through before the rejects began and ending
        after some of them (calls in parallel) would hand the signature its rejects afresh."""
        if not self.hard_stop:
            return None
        decision = self._refuse_before(sig, tool_class)
        if decision is None:
            state = self.signatures.get(sig) if self.signatures else None
            if state is not None and state.rejects:
                state.rejects = 0
        return decision

    def _refuse_before(self, sig: Signature, tool_class: ToolClass) -> Decision | None:
        stop = self.stop_after
        state = self.signatures.get(sig)
        if state is not None:
            failures = self._exact_failures(state)
            limit = stop["exact_failure"]
            if failures >= limit:
                return self._refuse(
                    state, codes.EXACT_FAILURE_REJECT, codes.EXACT_FAILURE_BLOCK, sig, failures, limit
                )
        if tool_class != "poll":
            turns = self.memory.turns_failed(sig)
            limit = stop["cross_turn_failure"]
            if turns >= limit:
                state = state if state is not None else self.state(sig)
                return self._refuse(
                    state, codes.CROSS_TURN_FAILURE_REJECT, codes.CROSS_TURN_FAILURE_BLOCK, sig, turns, limit
                )
        if state is not None:
            limit = stop["no_progress"]
            if tool_class == "read" and state.no_progress >= limit:
                return self._refuse(
                    state, codes.NO_PROGRESS_REJECT, codes.NO_PROGRESS_BLOCK, sig, state.no_progress, limit
                )
            refused = self._refuse_identical(sig, state, tool_class)
            if refused is not None:
                return refused
        if tool_class == "shell" and self.stagnation.checks and not self.after_edit:
            refused = self._refuse_stagnation(sig)
            if refused is not None:
                return refused
        if tool_class != "poll":
            refused = self._refuse_cycle(sig)
            if refused is not None:
                return refused
        if self.tool_rejects:
            return self._refuse_tool(sig)
        return None

    def would_refuse(self, sig: Signature, tool_class: ToolClass) -> bool:
        """Whether ``refuse_before`` would refuse the call, without counting a reject or touching any
        state: the guard asks this before charging a session cap, so a refused call never holds one."""
        if not self.hard_stop:
            return False
        stop = self.stop_after
        state = self.signatures.get(sig)
        if state is not None and self._exact_failures(state) >= stop["exact_failure"]:
            return True
        if tool_class != "poll" and self.memory.turns_failed(sig) >= stop["cross_turn_failure"]:
            return True
        if state is not None:
            if tool_class == "read" and state.no_progress >= stop["no_progress"]:
                return True
            limit, count = stop["identical_call"], self.identical_count
            if self.identical_sig == sig and limit - 1 <= count < limit:
                allowed = self.pattern_rejects if tool_class == "shell" else self.rejects_before_stop
                if self._valid_rejects(state) < allowed:
                    return True
        if tool_class == "shell" and self.stagnation.checks and not self.after_edit:
            check = self.stagnation.stale(sig)  # a reject or the block: it refuses from its stop on
            if check is not None and (
                check.stale >= stop["stagnation"] or check.unchanged >= stop["unchanged_check"]
            ):
                return True
        if tool_class != "poll":
            rejected = self.cycle_rejected
            if self.cycle.would_continue(sig, stop["cycle"])[0] or (
                self.cycle_rejects and rejected is not None and rejected[0] == sig
            ):
                return True
        rejects = self.tool_rejects.get(sig.tool_name) if self.tool_rejects else None
        return rejects is not None and rejects < self.pattern_rejects

    def _refuse_tool(self, sig: Signature) -> Decision | None:
        """same_tool_failure: once the tool's failures have reached the stop with rejects to give (see
        ``_tool_rejects_spent``), its next call is rejected with a message (``pattern_rejects``);
        the call after those runs: its failure stops the turn, its success ends the count."""
        tool = sig.tool_name
        rejects = self.tool_rejects.get(tool)
        if rejects is None or rejects >= self.pattern_rejects:
            return None
        self.tool_rejects[tool] = rejects + 1
        limit = self.stop_after["same_tool_failure"]
        count = self.tool_failures.get(tool, limit)
        return decision("reject", codes.SAME_TOOL_FAILURE_REJECT, sig, count, limit)

    def _refuse_stagnation(self, sig: Signature) -> Decision | None:
        """stagnation: a shell command that has returned what it already returned ``hard_stop_after``
        times is rejected, ``rejects_before_stop`` times; sent again after that, it stops the turn.
        Its rejects are its own (an edit between two sends does not renew them: edits that do not
        change the check's result are the loop), and end when the command returns something new.
        A send that directly follows an edit is never refused here (``refuse_before`` does not ask):
        the edit may be the fix, and only the result can say; ``record_after`` judges it once it ran
        (``_judged_after_edit``)."""
        check = self.stagnation.stale(sig)
        if check is None:
            return None
        limit = self.stop_after["stagnation"]
        if check.stale < limit:
            return self._refuse_unchanged(sig, check)
        if check.rejects < self.rejects_before_stop:
            check.rejects += 1
            return decision("reject", codes.STAGNATION_REJECT, sig, check.stale, limit)
        return decision("block", codes.STAGNATION_BLOCK, sig, check.stale, limit)

    def _refuse_unchanged(self, sig: Signature, check: ShellCheck) -> Decision | None:
        """stagnation, a check the edits do not change: a shell command whose successful runs have
        returned what it already returned, with an edit before each, ``hard_stop_after.unchanged_check``
        times, is rejected once (``pattern_rejects``, as a cycle is: the count is already a pattern
        over several fix attempts); sent again after that, it stops the turn. A result new for the
        command ends the count and its reject."""
        limit = self.stop_after["unchanged_check"]
        if check.unchanged < limit:
            return None
        if check.unchanged_rejects < self.pattern_rejects:
            check.unchanged_rejects += 1
            return decision("reject", codes.STAGNATION_REJECT, sig, check.unchanged, limit)
        return decision("block", codes.STAGNATION_BLOCK, sig, check.unchanged, limit)

    def _refuse_cycle(self, sig: Signature) -> Decision | None:
        """cycle: the call continuing the cycle is rejected, and taken as part of the sequence (the model
        asked for it); a call continuing that same cycle after its reject stops the turn. The cycle
        breaking ends its rejects."""
        limit = self.stop_after["cycle"]
        count, period = self.cycle.would_continue(sig, limit)
        rejected = self.cycle_rejected
        if not count and self.cycle_rejects and rejected is not None and rejected[0] == sig:
            _, count, period = rejected  # the very call the cycle's reject refused, sent again
        if not count:
            return None
        if self.cycle_rejects >= self.pattern_rejects:
            return decision("block", codes.CYCLE_BLOCK, sig, count, limit, period=period)
        self.cycle_rejects += 1
        self.cycle_rejected = (sig, count, period)
        self.cycle.push(sig)
        return decision("reject", codes.CYCLE_REJECT, sig, count, limit, period=period)

    def _refuse_identical(
        self, sig: Signature, state: SignatureState, tool_class: ToolClass
    ) -> Decision | None:
        """identical_call: the call that would make the streak reach its stop is rejected first. A model
        that keeps sending it is rejected again, ``rejects_before_stop`` times in all; sent once more,
        it runs, and halts if its result is the same again. A shell is rejected once and never halted
        for it: a check re-run is often how an agent moves on."""
        limit = self.stop_after["identical_call"]
        count = self.identical_count
        if self.identical_sig != sig or not limit - 1 <= count < limit:
            return None
        shell = tool_class == "shell"
        # a shell is never halted for it, so its one reject is a nudge, not a count towards a stop
        if self._valid_rejects(state) >= (self.pattern_rejects if shell else self.rejects_before_stop):
            return None
        self._count_reject(state)
        code = codes.IDENTICAL_CALL_REJECT
        message = SHELL_IDENTICAL_REJECT if shell else None
        return decision("reject", code, sig, count, limit, message=message)

    def _refuse(
        self,
        state: SignatureState,
        reject_code: str,
        stop_code: str,
        sig: Signature,
        count: int,
        limit: int,
        period: int = 0,
    ) -> Decision:
        """A reject while the call has rejects left, else the ``block`` that stops the turn."""
        if self._valid_rejects(state) < self.rejects_before_stop:
            self._count_reject(state)
            return decision("reject", reject_code, sig, count, limit, period=period)
        return decision("block", stop_code, sig, count, limit, period=period)

    def _valid_rejects(self, state: SignatureState) -> int:
        return state.rejects if state.reject_epoch == self.write_epoch else 0

    def _count_reject(self, state: SignatureState) -> None:
        state.rejects = self._valid_rejects(state) + 1
        state.reject_epoch = self.write_epoch

    def _tool_rejects_spent(self, tool: str, failures: int) -> bool:
        """same_tool_failure at its stop: whether the tool's calls have had all their rejects, so that
        this failure halts. The failure that reaches the stop starts the rejects when most of the
        count's failures were new errors (the model is working through them: a linter finding a new
        problem in each attempt); when at most half were, the tool keeps giving the same answers
        whatever it is sent (a usage error, a service down), and it halts at once."""
        rejects = self.tool_rejects.get(tool)
        if rejects is not None:
            return rejects >= self.pattern_rejects
        if self.pattern_rejects == 0 or 2 * len(self.tool_errors.get(tool, ())) <= failures:
            return True
        self.tool_rejects[tool] = 0
        return False

    def _exact_failures(self, state: SignatureState) -> int:
        return state.exact_failures if state.exact_epoch == self.write_epoch else 0

    def _refusal_pending(self, identical: int) -> bool:
        """identical_call, with ``hard_stop``: the streak was warned at ``warn_after`` and its next
        repeat is the one refused (``identical_call_reject`` says why), so the counts in between are
        not warned again. Once the call has been refused and sent again, its repeats warn as before."""
        warn_at, stop = self.warn_after["identical_call"], self.stop_after["identical_call"]
        return self.hard_stop and self.rejects_before_stop > 0 and warn_at < identical < stop

    # after_call ------------------------------------------------------------------------------

    def record_after(
        self,
        sig: Signature,
        state: SignatureState,
        tool_class: ToolClass,
        failure_tolerant: bool,
        outcome: Outcome,
        refusal: str | None,
        same_result: bool,
        error: int | None = None,
        progress: Any = None,
    ) -> Decision | None:
        """Update every detector with the call's outcome; return the first decision that fires, if any.

        ``state`` is ``state(sig)``; ``same_result`` says whether an ok call returned what the
        signature's previous ok call returned; ``error`` is a failed call's error fingerprint
        (``None`` for a failure without a result, which no error count can match); ``progress`` a
        shell call's result, ``None`` for any other call.
        """
        ok = outcome == "ok"
        same_errors = 0
        if tool_class == "poll":
            across = 0
        elif ok:  # what SessionMemory.record does for a success, without the call
            across = 0
            remembered = self.memory.failures
            if remembered:
                remembered.pop(sig, None)
        else:
            across = self.memory.record(sig, outcome, error)
        if ok:
            state.exact_failures = 0
            if tool_class == "write" or tool_class == "shell" or self.tool_failures or self.refusals:
                self._clear_after_success(sig.tool_name, tool_class)
            tool_failures = refusals = 0
        else:
            tool_failures, refusals = self._count_failure(
                sig.tool_name, state, outcome, refusal, tool_class, error
            )
            if outcome == "failed" and error is not None:
                same_errors = self._count_error(error, sig.tool_name)

        identical = self._track_progress(sig, state, tool_class, ok, same_result)
        if tool_class != "poll":
            self.after_edit = tool_class == "write" and outcome != "refused"
        stale = unchanged = 0
        loud = False  # whether a stagnation count is at its warning (it is rare: one test, not two)
        judged: Decision | None = None  # a check its stop would have refused, judged after it ran
        if progress is not None:  # a shell's result: see stagnation.py
            # its raw digest, already made: by ``same_as_previous`` for a success, the error's for a failure
            key = (state.raw if state.raw is not None else state.fingerprint) if ok else error
            first = state.shell_first
            if first is None:  # a command's first run: most run once, its digest is all it leaves
                state.shell_first = -1 if key is None else key
                state.shell_edits = self.edits
            else:
                rerun = self.cycle.second == sig
                memory = self.stagnation
                check = memory.stale(sig)
                before = (check.stale, check.unchanged) if check is not None else (0, 0)
                stale = memory.record(
                    sig, None if first < 0 else first, key, progress, rerun, ok, state.shell_edits, self.edits
                )
                unchanged = memory.unchanged
                loud = stale >= self._quiet_stagnation or unchanged >= self._quiet_unchanged
                if loud and self.hard_stop:
                    judged = self._judged_after_edit(sig, before, stale, unchanged)
        cycle = self.cycle
        if (
            ok
            and identical < self._quiet_identical
            and state.no_progress < self._quiet_no_progress
            and self.read_streak < self._quiet_read_streak
            and self.write_streak < self._quiet_write_streak
            and not (cycle.run2 or cycle.run3 or cycle.run4)  # cycle.runs_any(), on every call
            and not loud
        ):
            return None  # the common case: nothing can fire, skip the ordered checks
        failures = FailureCounts(tool_failures, refusals, same_errors, across)
        return self._verdict(
            sig, state, failure_tolerant, failures, identical, tool_class, stale, unchanged, judged
        )

    def _judged_after_edit(
        self, sig: Signature, before: tuple[int, int], stale: int, unchanged: int
    ) -> Decision | None:
        """stagnation, a send that ran only because it directly followed an edit (``before_call``
        would have refused it: its count was at its stop), judged by its result: counted again, it
        halts the turn. The model was told at the stop (``_verdict``'s warning that the next result
        like this one stops the turn). A result new for the command, or less of what is wrong in it,
        ends the count as ever, and the call goes on."""
        stop = self.stop_after
        if stale > before[0] >= stop["stagnation"]:
            return decision("halt", codes.STAGNATION_HALT, sig, stale, stop["stagnation"])
        if unchanged > before[1] >= stop["unchanged_check"]:
            return decision("halt", codes.STAGNATION_HALT, sig, unchanged, stop["unchanged_check"])
        return None

    def _track_progress(
        self, sig: Signature, state: SignatureState, tool_class: ToolClass, ok: bool, same_result: bool
    ) -> int:
        """Advance no_progress, identical_call, the cycle window and the streaks; the identical count."""
        # no_progress (read tools)
        if tool_class == "read":
            if not ok:
                state.no_progress = 0
            elif same_result and state.no_progress:
                state.no_progress += 1
            else:
                state.no_progress = 1

        # identical_call (write/unknown), cycle and streaks ignore poll tools
        identical = 0
        if tool_class != "poll":
            if ok and tool_class != "read":
                back_to_back = same_result and self.identical_sig == sig
                self.identical_count = self.identical_count + 1 if back_to_back else 1
                self.identical_sig = sig
                identical = self.identical_count
            else:
                self.identical_sig, self.identical_count = None, 0
            cycle = self.cycle
            cycle.push(sig)
            if self.cycle_rejects and not cycle.runs_any():
                self.cycle_rejects = 0
        if tool_class == "read":
            self.read_streak += 1
            if ok:
                self.write_streak = 0
        elif tool_class == "write":
            self.write_streak += 1
            self.read_streak = 0
            self.edits += 1  # a fix attempt, for stagnation's unchanged_check
        elif tool_class == "shell":
            # A shell may have changed something, but its calls are not a run of blind writes (a
            # shell-only agent would be warned on every call after its 30th); a successful one may
            # have read the changes back (the tests run, the file printed).
            self.read_streak = 0
            if ok:
                self.write_streak = 0
        return identical

    def _clear_after_success(self, tool: str, tool_class: ToolClass) -> None:
        """After a success (whose signature's exact_failure streak ``record_after`` ended): any
        successful write or shell call is progress (an edit made with ``sed -i``); same_tool_failure
        and refusal: only a success of the same tool clears them."""
        if tool_class == "write" or tool_class == "shell":
            self.write_epoch += 1
            if self.errors:
                self.errors.clear()
        if self.tool_failures:
            self.tool_failures.pop(tool, None)
            self.tool_errors.pop(tool, None)
            if self.tool_rejects:
                self.tool_rejects.pop(tool, None)
        if self.refusals:
            for key in [k for k in self.refusals if k[0] == tool]:
                del self.refusals[key]

    def _count_failure(
        self,
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
            state.exact_failures = self._exact_failures(state) + 1
            state.exact_epoch = self.write_epoch
        if tool_class == "shell":
            count, epoch = self.shell_failures.touch(tool, lambda: (0, self.write_epoch))
            tool_failures = (count if epoch == self.write_epoch else 0) + 1
            self.shell_failures[tool] = (tool_failures, self.write_epoch)
        elif outcome == "failed" and state.exact_failures > 1:
            # The same call failing again (since it last succeeded or a write or shell call did) is
            # exact_failure's loop, refused before it stops; counted here too, one call resent
            # unchanged would halt the turn with no refusal first.
            tool_failures = 0
        else:
            tool_failures = self.tool_failures.touch(tool, int) + 1
            self.tool_failures[tool] = tool_failures
            seen = self.tool_errors.get(tool, ()) if tool_failures > 1 else ()
            if outcome == "refused":  # a gate saying no: the same answer, whatever was sent
                self.tool_errors[tool] = seen
            elif len(seen) < self._new_errors_kept and (error is None or error not in seen):
                self.tool_errors[tool] = (*seen, error)
        refusals = 0
        if outcome == "refused":
            key = (tool, refusal or "refused")
            refusals = self.refusals.touch(key, int) + 1
            self.refusals[key] = refusals
        return tool_failures, refusals

    def _count_error(self, error: int, tool: str) -> int:
        """Count a failure with this error fingerprint. Returns the count once the error has come from
        two different tools (the failures before the second tool included), else 0: one tool repeating
        one error is exact_failure's and same_tool_failure's to judge."""
        count, only_tool = self.errors.touch(error, lambda: (0, tool))
        if only_tool != tool:
            only_tool = None
        self.errors[error] = (count + 1, only_tool)
        return count + 1 if only_tool is None else 0

    def _verdict(
        self,
        sig: Signature,
        state: SignatureState,
        failure_tolerant: bool,
        failures: FailureCounts,
        identical: int,
        tool_class: ToolClass,
        stale: int = 0,
        unchanged: int = 0,
        judged: Decision | None = None,
    ) -> Decision | None:
        warn, stop, hard = self.warn_after, self.stop_after, self.hard_stop
        tool_failures, refusals, same_errors, turns_failed = failures
        if hard and refusals >= stop["refusal"]:
            return decision("halt", codes.REFUSAL_HALT, sig, refusals, stop["refusal"])
        if (
            hard
            and not failure_tolerant
            and tool_failures >= stop["same_tool_failure"]
            and self._tool_rejects_spent(sig.tool_name, tool_failures)
        ):
            return decision(
                "halt", codes.SAME_TOOL_FAILURE_HALT, sig, tool_failures, stop["same_tool_failure"]
            )
        # failure_tolerant does not exempt: the very same error from tool after tool is a loop
        if hard and same_errors >= stop["same_error"]:
            return decision("halt", codes.SAME_ERROR_HALT, sig, same_errors, stop["same_error"])
        if hard and identical >= stop["identical_call"] and tool_class != "shell":
            return decision("halt", codes.IDENTICAL_CALL_HALT, sig, identical, stop["identical_call"])
        if judged is not None and judged.action == "halt":
            return judged
        if not self.config.warnings:
            return None
        exact = self._exact_failures(state)
        if exact and exact >= warn["exact_failure"]:
            return decision("warn", codes.EXACT_FAILURE_WARN, sig, exact, warn["exact_failure"])
        if turns_failed and turns_failed >= warn["cross_turn_failure"]:
            return decision(
                "warn", codes.CROSS_TURN_FAILURE_WARN, sig, turns_failed, warn["cross_turn_failure"]
            )
        if refusals and refusals >= warn["refusal"]:
            return decision("warn", codes.REFUSAL_WARN, sig, refusals, warn["refusal"])
        tool_warn = warn["same_tool_failure"] + (SHELL_LATER_FAILURE_WARN if tool_class == "shell" else 0)
        if tool_failures and tool_failures >= tool_warn:
            return decision("warn", codes.SAME_TOOL_FAILURE_WARN, sig, tool_failures, tool_warn)
        if same_errors and same_errors >= warn["same_error"]:
            return decision("warn", codes.SAME_ERROR_WARN, sig, same_errors, warn["same_error"])
        if tool_class == "read" and state.no_progress >= warn["no_progress"]:
            return decision("warn", codes.NO_PROGRESS_WARN, sig, state.no_progress, warn["no_progress"])
        if identical and identical >= warn["identical_call"] and not self._refusal_pending(identical):
            return decision("warn", codes.IDENTICAL_CALL_WARN, sig, identical, warn["identical_call"])
        # with hard_stop, the count reaching its stop is warned that the next result like this one
        # stops the turn: a send right after an edit runs and halts then (``_judged_after_edit``),
        # another is refused first; past the stop, the reject (or the halt) says it
        if stale and stale >= warn["stagnation"]:
            last = hard and stale == stop["stagnation"]
            message = STAGNATION_LAST_WARN if last else None
            return decision("warn", codes.STAGNATION_WARN, sig, stale, warn["stagnation"], message=message)
        if unchanged and unchanged >= warn["unchanged_check"]:
            if not hard:
                return decision("warn", codes.STAGNATION_WARN, sig, unchanged, warn["unchanged_check"])
            if unchanged == stop["unchanged_check"]:
                limit = warn["unchanged_check"]
                return decision(
                    "warn", codes.STAGNATION_WARN, sig, unchanged, limit, message=STAGNATION_LAST_WARN
                )
        if tool_class != "poll" and self.cycle.runs_any():
            count, period = self.cycle.best()
            if count >= warn["cycle"]:
                return decision("warn", codes.CYCLE_WARN, sig, count, warn["cycle"], period=period)
        if tool_class == "read" and self.read_streak >= warn["read_only_streak"]:
            return decision(
                "warn", codes.READ_ONLY_STREAK_WARN, sig, self.read_streak, warn["read_only_streak"]
            )
        if tool_class == "write" and self.write_streak >= warn["write_streak"]:
            return decision("warn", codes.WRITE_STREAK_WARN, sig, self.write_streak, warn["write_streak"])
        return None
