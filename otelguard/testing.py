"""Helpers for testing your own agent loops against a guard.

``RecordingObserver`` is a ``GuardObserver`` that keeps everything the guard reports (call events,
turn summaries, internal errors) so a test can assert on outcomes and decisions::

    recorder = RecordingObserver()
    guard = Guard(config, observers=(recorder,))
    ...run your agent loop...
    assert recorder.codes == ["exact_failure_warn"]

``run_script(guard, calls)`` feeds scripted tool calls through ``before_call``/``after_call`` the way
a host does (a refused call is not run, so it gets no ``after_call``) and returns one ``ScriptStep``
per call (the driver is ``otelguard.core.scripted.play_call``; ``ScriptedCall``, ``ScriptStep`` and
``play_call`` are importable from here too)::

    steps = run_script(guard, [("terminal", {"command": "pytest"}, "1 failed", True)] * 3)
    assert [s.decision.code for s in steps][-1] == "exact_failure_warn"
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import Any

from otelguard.core.decisions import Decision, TurnSummary
from otelguard.core.observers import CallEvent, GuardObserver, Outcome, TurnInfo
from otelguard.core.scripted import ScriptedCall, ScriptStep, play_call
from otelguard.core.tool_calls import CallGuard
from otelguard.state.reports import StateReport

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
        """A shared store's listener: hand ``recorder.on_state`` to the backend
        (``otelguard.hosting.session_cap_store(..., listener=recorder.on_state)``)."""
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


CallSpec = ScriptedCall | str | Sequence[Any]


def _as_call(spec: CallSpec) -> ScriptedCall:
    if isinstance(spec, ScriptedCall):
        return spec
    if isinstance(spec, str):
        return ScriptedCall(spec)
    if not 1 <= len(spec) <= len(ScriptedCall._fields):
        raise ValueError(f"a scripted call has 1 to {len(ScriptedCall._fields)} fields, got {len(spec)}")
    return ScriptedCall(*spec)


def run_script(guard: CallGuard, calls: Iterable[CallSpec]) -> list[ScriptStep]:
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
