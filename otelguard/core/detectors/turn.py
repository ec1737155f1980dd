"""``TurnDetectors``: all detector state of one turn, its ``before_call`` refusals and ``after_call``
verdicts, in the order ``precedence.py`` lists.

Pure and single-threaded: the guard serialises access under its lock. Memory is bounded: state per
signature, per tool, per (tool, refusal category) and per error fingerprint lives in LRU maps of
``max_tracked_signatures`` entries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from otelguard.core import decisions as codes
from otelguard.core.bounded_map import BoundedMap
from otelguard.core.decisions import Decision, Outcome, Signature, ToolClass
from otelguard.core.detectors import messages
from otelguard.core.detectors.messages import decision
from otelguard.core.detectors.precedence import BEFORE_CALL, after_rules
from otelguard.core.detectors.repetition import Cycle
from otelguard.core.detectors.rule import WOULD_REFUSE, Ran
from otelguard.core.detectors.stagnation import StagnationMemory
from otelguard.core.detectors.state import FailureCounts, SessionMemory, SignatureState, new_state, renewed

if TYPE_CHECKING:
    from otelguard.config import GuardConfig

# A check rerun right after each edit and returning what it already returned halts the turn only at
# this many times ``hard_stop_after.unchanged_check`` (20 by default): on real runs every lower count
# stopped a solved run before the edit that fixed it (one reran its script after 15 edits with the
# same output, then passed at its last call), while a loop of edits that change nothing stays bounded.
UNCHANGED_AFTER_EDITS_FACTOR: Final = 4

__all__ = ["TurnDetectors"]

_NO_FAILURES: Final = FailureCounts(0, 0, 0, 0)


class TurnDetectors:
    """All detector state of one turn. ``start_turn`` replaces the object."""

    # what the detectors (``precedence.py``) answer with, handed to them here: a detector module
    # imports no other at run time, so the import chains from the guard stay short
    decide: Final = staticmethod(decision)
    WOULD_REFUSE: Final = WOULD_REFUSE
    SHELL_IDENTICAL_REJECT: Final = messages.SHELL_IDENTICAL_REJECT
    SHELL_LATER_FAILURE_WARN: Final = messages.SHELL_LATER_FAILURE_WARN
    STAGNATION_LAST_WARN: Final = messages.STAGNATION_LAST_WARN

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
        self._after = after_rules(config.warnings, self.hard_stop)  # AFTER_CALL, less what cannot fire
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
        """The hard-stop refusals, the first of ``BEFORE_CALL`` (``precedence.py``) that refuses. A
        repeated call is first rejected (it does not run, the turn goes on) ``rejects_before_stop``
        times; the model sending it again after that stops the turn. A cycle and a failing tool get
        one reject (``pattern_rejects``): a cycle going on after it stops the turn; the tool's next
        call runs, and its failure stops the turn.

        A call let through here runs: the rejects its signature was given are spent now, as it is let
        through. Not when it ends: a copy of the call let through before the rejects began and ending
        after some of them (calls in parallel) would hand the signature its rejects afresh."""
        if not self.hard_stop:
            return None
        state = self.signatures.get(sig)
        for rule in BEFORE_CALL:
            refused = rule.before(self, sig, state, tool_class, True)
            if refused is not None:
                return refused
        if state is not None and state.rejects:
            state.rejects = 0
        return None

    def would_refuse(self, sig: Signature, tool_class: ToolClass) -> bool:
        """Whether ``refuse_before`` would refuse the call, without counting a reject or touching any
        state: the guard asks this before charging a session cap, so a refused call never holds one."""
        if not self.hard_stop:
            return False
        state = self.signatures.get(sig)
        return any(rule.before(self, sig, state, tool_class, False) is not None for rule in BEFORE_CALL)

    def refuse(
        self,
        state: SignatureState,
        reject_code: str,
        stop_code: str,
        sig: Signature,
        count: int,
        limit: int,
    ) -> Decision:
        """A reject while the call has rejects left, else the ``block`` that stops the turn."""
        if self.valid_rejects(state) < self.rejects_before_stop:
            self.count_reject(state)
            return decision("reject", reject_code, sig, count, limit)
        return decision("block", stop_code, sig, count, limit)

    def valid_rejects(self, state: SignatureState) -> int:
        return state.rejects if state.reject_epoch == self.write_epoch else 0

    def count_reject(self, state: SignatureState) -> None:
        state.rejects = self.valid_rejects(state) + 1
        state.reject_epoch = self.write_epoch

    def tool_rejects_spent(self, tool: str, failures: int) -> bool:
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

    def exact_failures(self, state: SignatureState) -> int:
        return state.exact_failures if state.exact_epoch == self.write_epoch else 0

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
        """Update every detector with the call's outcome; return the first decision of ``AFTER_CALL``
        (``precedence.py``) that fires, if any.

        ``state`` is ``state(sig)``; ``same_result`` says whether an ok call returned what the
        signature's previous ok call returned; ``error`` is a failed call's error fingerprint
        (``None`` for a failure without a result, which no error count can match); ``progress`` a
        shell call's result, ``None`` for any other call.
        """
        ok = outcome == "ok"
        failures = self._count_outcome(sig, state, tool_class, outcome, refusal, error)
        identical = self._track_progress(sig, state, tool_class, ok, same_result)
        if tool_class != "poll":
            self.after_edit = tool_class == "write" and outcome != "refused"
        stale = unchanged = 0
        loud = False  # whether a stagnation count is at its warning (it is rare: one test, not two)
        judged: Decision | None = None  # a check its stop would have refused, judged after it ran
        if progress is not None:  # a shell's result: see stagnation.py
            stale, unchanged, loud, judged = self._record_shell(sig, state, ok, error, progress)
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
        ran = Ran(sig, state, tool_class, failure_tolerant, failures, identical, stale, unchanged, judged)
        for rule in self._after:
            verdict = rule.after(self, ran)
            if verdict is not None:
                return verdict
        return None

    def _count_outcome(
        self,
        sig: Signature,
        state: SignatureState,
        tool_class: ToolClass,
        outcome: Outcome,
        refusal: str | None,
        error: int | None,
    ) -> FailureCounts:
        """Count the call's outcome in the failure detectors: a success ends its counts."""
        ok = outcome == "ok"
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
            return _NO_FAILURES
        tool_failures, refusals = self._count_failure(
            sig.tool_name, state, outcome, refusal, tool_class, error
        )
        same_errors = (
            self._count_error(error, sig.tool_name) if outcome == "failed" and error is not None else 0
        )
        return FailureCounts(tool_failures, refusals, same_errors, across)

    def _record_shell(
        self, sig: Signature, state: SignatureState, ok: bool, error: int | None, progress: Any
    ) -> tuple[int, int, bool, Decision | None]:
        """stagnation: count a shell's result; its (stale, unchanged) counts, whether one is at its
        warning, and the judgement of a send that followed an edit (``_judged_after_edit``)."""
        # its raw digest, already made: by ``same_as_previous`` for a success, the error's for a failure
        key = (state.raw if state.raw is not None else state.fingerprint) if ok else error
        first = state.shell_first
        if first is None:  # a command's first run: most run once, its digest is all it leaves
            state.shell_first = -1 if key is None else key
            state.shell_edits = self.edits
            return 0, 0, False, None
        rerun = self.cycle.second == sig
        memory = self.stagnation
        check = memory.stale(sig)
        before = (check.stale, check.unchanged) if check is not None else (0, 0)
        stale = memory.record(
            sig, None if first < 0 else first, key, progress, rerun, ok, state.shell_edits, self.edits
        )
        unchanged = memory.unchanged
        loud = stale >= self._quiet_stagnation or unchanged >= self._quiet_unchanged
        judged = self._judged_after_edit(sig, before, stale, unchanged) if loud and self.hard_stop else None
        return stale, unchanged, loud, judged

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
        limit = stop["unchanged_check"] * UNCHANGED_AFTER_EDITS_FACTOR
        if unchanged > before[1] >= limit:
            return decision("halt", codes.STAGNATION_HALT, sig, unchanged, limit)
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
        self._track_streaks(tool_class, ok)
        return identical

    def _track_streaks(self, tool_class: ToolClass, ok: bool) -> None:
        """The read and write streaks, and the edits stagnation counts."""
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
            state.exact_failures = self.exact_failures(state) + 1
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
