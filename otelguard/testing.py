"""Helpers for testing your own agent loops against a guard.

``RecordingObserver`` is a ``GuardObserver`` that keeps everything the guard reports (call events,
turn summaries, internal errors) so a test can assert on outcomes and decisions::

    recorder = RecordingObserver()
    guard = Guard(config, observers=(recorder,))
    ...run your agent loop...
    assert recorder.codes == ["exact_failure_warn"]

``run_script(guard, calls)`` feeds scripted tool calls through ``before_call``/``after_call`` the way
a host does (a refused call is not run, so it gets no ``after_call``) and returns one ``ScriptStep``
per call::

    steps = run_script(guard, [("terminal", {"command": "pytest"}, "1 failed", True)] * 3)
    assert [s.decision.code for s in steps][-1] == "exact_failure_warn"
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from otelguard.decisions import Decision, TurnSummary
from otelguard.observers import CallEvent, GuardObserver, Outcome, StateReport, TurnInfo

if TYPE_CHECKING:
    from otelguard.guard import Guard

__all__ = ["RecordingObserver", "ScriptStep", "ScriptedCall", "codes", "play_call", "run_script"]


class RecordingObserver(GuardObserver):
    """A ``GuardObserver`` that records what the guard reports. Safe to share between threads.

    Every accessor returns a snapshot (a tuple), so a test can keep a reference while the guard goes on.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._turns_started: list[TurnInfo] = []
        self._call_starts: list[CallEvent] = []
        self._call_ends: list[CallEvent] = []
        self._summaries: list[TurnSummary] = []
        self._internal_errors: list[str] = []
        self._state_reports: list[StateReport] = []
        self._unmatched_tokens = 0

    # -- GuardObserver -------------------------------------------------------------------------
    def on_turn_start(self, turn: TurnInfo) -> None:
        with self._lock:
            self._turns_started.append(turn)

    def on_call_start(self, call: CallEvent) -> object:
        with self._lock:
            self._call_starts.append(call)
            # The token is the start event itself: on_call_end can check it got the right one back.
            return call

    def on_call_end(self, call: CallEvent, token: object) -> None:
        with self._lock:
            if not isinstance(token, CallEvent) or token.signature != call.signature:
                self._unmatched_tokens += 1
            self._call_ends.append(call)

    def on_turn_end(self, summary: TurnSummary) -> None:
        with self._lock:
            self._summaries.append(summary)

    def on_internal_error(self, stage: str) -> None:
        with self._lock:
            self._internal_errors.append(stage)

    def on_state(self, report: StateReport) -> None:
        with self._lock:
            self._state_reports.append(report)

    # -- what a test reads ---------------------------------------------------------------------
    @property
    def turns_started(self) -> tuple[TurnInfo, ...]:
        with self._lock:
            return tuple(self._turns_started)

    @property
    def call_starts(self) -> tuple[CallEvent, ...]:
        with self._lock:
            return tuple(self._call_starts)

    @property
    def calls(self) -> tuple[CallEvent, ...]:
        """Finished calls (``on_call_end`` events), in the order they ended."""
        with self._lock:
            return tuple(self._call_ends)

    @property
    def summaries(self) -> tuple[TurnSummary, ...]:
        with self._lock:
            return tuple(self._summaries)

    @property
    def internal_errors(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(self._internal_errors)

    @property
    def state_reports(self) -> tuple[StateReport, ...]:
        """How each use of the shared session-cap store went (only with ``state.url``)."""
        with self._lock:
            return tuple(self._state_reports)

    @property
    def unmatched_tokens(self) -> int:
        """How many ``on_call_end`` calls got back a token that was not their own start event."""
        with self._lock:
            return self._unmatched_tokens

    @property
    def decisions(self) -> tuple[Decision, ...]:
        """The final decision of every finished call."""
        return tuple(event.decision for event in self.calls)

    @property
    def codes(self) -> list[str]:
        """The codes of the non-allow final decisions, in order."""
        return [d.code for d in self.decisions if d.action != "allow"]

    @property
    def outcomes(self) -> list[Outcome | None]:
        return [event.outcome for event in self.calls]

    def clear(self) -> None:
        with self._lock:
            self._turns_started.clear()
            self._call_starts.clear()
            self._call_ends.clear()
            self._summaries.clear()
            self._internal_errors.clear()
            self._state_reports.clear()
            self._unmatched_tokens = 0


class ScriptedCall(NamedTuple):
    """One tool call of a script. ``failed=None`` lets the guard's fallback classifier decide;
    ``cancelled=True`` is a call the host dispatched but never ran."""

    tool_name: str
    args: Any = None
    result: Any = None
    failed: bool | None = None
    refusal: str | None = None
    call_id: str | None = None
    cancelled: bool = False


@dataclass(frozen=True, slots=True)
class ScriptStep:
    """What the guard said about one scripted call. ``after`` is ``None`` when the call was refused."""

    call: ScriptedCall
    before: Decision
    after: Decision | None

    @property
    def decision(self) -> Decision:
        """The call's final decision: ``after_call``'s when it ran, else ``before_call``'s."""
        return self.after if self.after is not None else self.before

    @property
    def ran(self) -> bool:
        return self.after is not None


CallSpec = ScriptedCall | str | Sequence[Any]


def _as_call(spec: CallSpec) -> ScriptedCall:
    if isinstance(spec, ScriptedCall):
        return spec
    if isinstance(spec, str):
        return ScriptedCall(spec)
    if not 1 <= len(spec) <= len(ScriptedCall._fields):
        raise ValueError(f"a scripted call has 1 to {len(ScriptedCall._fields)} fields, got {len(spec)}")
    return ScriptedCall(*spec)


def play_call(guard: Guard, call: ScriptedCall) -> ScriptStep:
    """One call the way a host makes it: ``before_call``; then, unless refused, ``after_call``.

    The one driver of a guard in otelguard: scripts, the demo's agents and replay all call it.
    """
    before = guard.before_call(call.tool_name, call.args, call_id=call.call_id)
    after: Decision | None = None
    if before.allows_execution:
        after = guard.after_call(
            call.tool_name,
            call.args,
            call.result,
            failed=call.failed,
            refusal=call.refusal,
            call_id=call.call_id,
            cancelled=call.cancelled,
        )
    return ScriptStep(call=call, before=before, after=after)


def run_script(guard: Guard, calls: Iterable[CallSpec]) -> list[ScriptStep]:
    """Feed calls through ``guard`` the way a host does and return one ``ScriptStep`` per call.

    Each call is a ``ScriptedCall``, a tool name, or a tuple ``(tool_name, args, result, failed,
    refusal, call_id, cancelled)`` cut after any field (missing ones take ``ScriptedCall``'s defaults).
    A call the guard refuses is not run: it gets no ``after_call``. The script does not start or end
    turns.
    """
    return [play_call(guard, _as_call(spec)) for spec in calls]


def codes(steps: Iterable[ScriptStep]) -> list[str]:
    """The codes of the steps' final decisions, allow included, in order."""
    return [step.decision.code for step in steps]
