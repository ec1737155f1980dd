"""``TurnDetectors``: all detector state of one turn, its ``before_call`` refusals and ``after_call``
verdicts, in the order ``precedence.py`` lists.

Pure and single-threaded: the guard serialises access under its lock. Memory is bounded: state per
signature, per tool, per (tool, refusal category) and per error fingerprint lives in LRU maps of
``max_tracked_signatures`` entries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from otelguard.core.bounded_map import BoundedMap
from otelguard.core.decisions import Decision, Outcome, Signature, ToolClass
from otelguard.core.detectors import messages
from otelguard.core.detectors.checks import record_shell
from otelguard.core.detectors.failures import clear_after_success, count_failure
from otelguard.core.detectors.messages import decision
from otelguard.core.detectors.precedence import BEFORE_CALL, BEFORE_WALKS, UNQUERIED_WALKS, after_rules
from otelguard.core.detectors.progress import track_progress
from otelguard.core.detectors.repetition import Cycle
from otelguard.core.detectors.rule import WOULD_REFUSE, Ran
from otelguard.core.detectors.searches import Query, Searched, SearchMemory
from otelguard.core.detectors.stagnation import StagnationMemory
from otelguard.core.detectors.state import FailureCounts, SessionMemory, SignatureState, new_state, renewed

if TYPE_CHECKING:
    from otelguard.config import GuardConfig


__all__ = ["TurnDetectors"]

_NO_FAILURES: Final = (0, 0, 0, 0)


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
        self.new_errors_kept = self.stop_after["same_tool_failure"] // 2 + 1
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
        self.quiet_stagnation = self.warn_after["stagnation"]
        self.quiet_unchanged = self.warn_after["unchanged_check"]
        self.edits = 0  # write calls this turn (the file editors' fix attempts): see StagnationMemory.record
        # the turn's last call that ran (``poll`` calls aside) was an edit: a check sent now may show
        # the edit's fix, so stagnation does not refuse it before it runs (see ``_refuse_stagnation``)
        self.after_edit = False
        # reworded_query: the turn's search tools, and the query of the call ``before_call`` is
        # judging (the guard puts it here under its lock, ``None`` for a call that is no search)
        self.searches = SearchMemory()
        self.query: Query | None = None
        self._quiet_reworded = self.warn_after["reworded_query"]

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

    def reads_query(self, tool: str) -> bool:
        """Whether reworded_query's ``before`` reads the query of a call of ``tool`` now (the guard
        puts it in ``query`` only then): with ``hard_stop``, once the tool's streak is at the stop.
        Before it, the rule answers without the query, and reading one costs as much as the rest
        of the call."""
        if not self.hard_stop:
            return False
        searches = self.searches.tools.get(tool)
        return searches is not None and searches.streak >= self.stop_after["reworded_query"]

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
        for rule in (BEFORE_WALKS if self.query is not None else UNQUERIED_WALKS).get(
            tool_class, BEFORE_CALL
        ):
            refused = rule.before(self, sig, state, tool_class, True)
            if refused is not None:
                return refused
        if state is not None and state.rejects:
            state.rejects = 0
        return None

    def let_through(self, sig: Signature) -> None:
        """What ``refuse_before`` does to a call it lets through, for one ``would_refuse`` said no
        detector refuses: the rejects its signature was given are spent."""
        state = self.signatures.get(sig) if self.signatures else None
        if state is not None and state.rejects:
            state.rejects = 0

    def would_refuse(self, sig: Signature, tool_class: ToolClass) -> bool:
        """Whether ``refuse_before`` would refuse the call, without counting a reject or touching any
        state: the guard asks this before charging a session cap, so a refused call never holds one."""
        if not self.hard_stop:
            return False
        state = self.signatures.get(sig)
        walk = (BEFORE_WALKS if self.query is not None else UNQUERIED_WALKS).get(tool_class, BEFORE_CALL)
        return any(rule.before(self, sig, state, tool_class, False) is not None for rule in walk)

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
        search: Searched | None = None,
    ) -> Decision | None:
        """Update every detector with the call's outcome; return the first decision of ``AFTER_CALL``
        (``precedence.py``) that fires, if any.

        ``state`` is ``state(sig)``; ``same_result`` says whether an ok call returned what the
        signature's previous ok call returned; ``error`` is a failed call's error fingerprint
        (``None`` for a failure without a result, which no error count can match); ``progress`` a
        shell call's result, ``None`` for any other call; ``search`` a successful search call's query
        and result as ``reworded.searched`` reads them.
        """
        ok = outcome == "ok"
        if ok:  # a success ends the failure counts of the call (and with a write or shell, more)
            state.exact_failures = 0
            remembered = self.memory.failures  # what SessionMemory.record does, without the call
            if remembered and tool_class != "poll":
                remembered.pop(sig, None)
            if tool_class == "write" or tool_class == "shell" or self.tool_failures or self.refusals:
                clear_after_success(self, sig.tool_name, tool_class)
            failures = _NO_FAILURES
        else:
            failures = count_failure(self, sig, state, tool_class, outcome, refusal, error)
        identical = track_progress(self, sig, state, tool_class, ok, same_result)
        if tool_class != "poll":
            self.after_edit = tool_class == "write" and outcome != "refused"
        stale = unchanged = 0
        loud = False  # whether a stagnation count is at its warning (it is rare: one test, not two)
        judged: Decision | None = None  # a check its stop would have refused, judged after it ran
        if progress is not None:  # a shell's result: see stagnation.py
            stale, unchanged, loud, judged = record_shell(self, sig, state, ok, error, progress)
        searching = self.searches.record(sig, search) if search is not None else 0
        cycle = self.cycle
        if (
            ok
            and identical < self._quiet_identical
            and state.no_progress < self._quiet_no_progress
            and self.read_streak < self._quiet_read_streak
            and self.write_streak < self._quiet_write_streak
            and not (cycle.run2 or cycle.run3 or cycle.run4)  # cycle.runs_any(), on every call
            and not loud
            and searching < self._quiet_reworded
        ):
            return None  # the common case: nothing can fire, skip the ordered checks
        counts = FailureCounts(*failures)
        ran = Ran(sig, state, tool_class, failure_tolerant, counts, identical, stale, unchanged, judged)
        walk = self._after.get((tool_class, ok))
        for rule in walk if walk is not None else self._after[None, ok]:
            verdict = rule.after(self, ran)
            if verdict is not None:
                return verdict
        return None
