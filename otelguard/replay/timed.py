"""A replay that keeps the transcripts' times: every guard event stamped, then read back in time order.

The replay runs file by file and session by session, but a live exporter saw the sessions of every
file interleaved in time. ``TimedReplay`` wraps the ``ReplayRunner``: it follows each session's
latest time (a call's time is its result's line, else its request's; a turn ends at the latest time
of the turn) and points a ``Clock`` at it, so ``TimedEvents`` — the observer every guard of the
replay reports to — stamps each call end, model event, turn end and internal error with its transcript time and
hands it to a ``TimeSortedSpill``. The spill sorts in bounded memory (sorted runs on disk, merged on
the way out), so a history of any size is read back in time order.

A session whose transcript records no time at all is named and left out; an event before its
session's first time is counted and left out.
"""

from __future__ import annotations

import heapq
import os
import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

from otelguard.config import GuardConfig, TelemetrySettings
from otelguard.core.decisions import CAP_SCOPES, Decision, TurnSummary
from otelguard.core.observers import CallEvent, GuardObserver, ModelEvent
from otelguard.readers.events import ModelReply, SessionKey, ToolCall
from otelguard.readers.printable import printable
from otelguard.readers.times import iso_utc
from otelguard.replay.report import MAX_LISTED, ReplayReport
from otelguard.replay.runner import ReplayRunner

__all__ = [
    "CALL",
    "INTERNAL_ERROR",
    "MODEL",
    "TURN",
    "Clock",
    "TimeSortedSpill",
    "TimedEvents",
    "TimedReplay",
    "TimedRun",
    "counted_decisions",
]

CALL: Final = 0
TURN: Final = 1
INTERNAL_ERROR: Final = 2
MODEL: Final = 3
RUN_RECORDS: Final = 20_000
"""Events held in memory before a sorted run goes to disk: the spill's memory bound."""
MAX_PERIOD_SECONDS: Final = 31 * 86400
"""The longest recorded period played without ``--since`` and ``--until``: the work (and an
OpenMetrics file's size) grows with the period, so one line stamped ``0`` would make it 55 years."""
MAX_DAYS_TRACKED: Final = 100_000
"""Distinct days whose first line a timed replay remembers, to name the lines far from the rest."""
_DAY: Final = 86400
_NAMED_OUTLIERS: Final = 5
_BATCH: Final = 1000
_CAP_CODES: Final = frozenset(CAP_SCOPES)


def counted_decisions(call: CallEvent | ModelEvent) -> tuple[Decision, ...]:
    """The non-allow decisions a call reports, as telemetry counts them: a call that ran after a
    non-allow ``before_call`` decision has two; a model event has its one."""
    if isinstance(call, ModelEvent):
        return () if call.decision.action == "allow" else (call.decision,)
    decision, before = call.decision, call.before
    both = before.action != "allow" and before is not decision and before != decision
    found = (before,) if both else ()
    return (*found, decision) if decision.action != "allow" else found


@dataclass(slots=True)
class Clock:
    """The time and session of the event being replayed (``now`` is ``None`` when unknown)."""

    now: float | None = None
    key: SessionKey | None = None


@dataclass(frozen=True, slots=True)
class MarkedCall:
    """A call (or a model event) with a halt or a cap hit: kept with its session, for the backtest's
    report."""

    call: CallEvent | ModelEvent
    key: SessionKey


class TimeSortedSpill:
    """``(time, item)`` pairs in, the same pairs out in time order (ties in the order they came).

    At most ``run_records`` pairs are held in memory; each full batch is sorted and pickled to a run
    file in ``directory``, and ``drain`` merges the runs. The files are private temporary data; only
    ``close`` (or the directory's removal) deletes them.
    """

    def __init__(self, directory: str | Path, run_records: int = RUN_RECORDS) -> None:
        self._directory = Path(directory)
        self._run_records = run_records
        self._buffer: list[tuple[float, int, Any]] = []
        self._runs: list[Path] = []
        self._files = 0
        self._seq = 0
        self.first: float | None = None
        self.last: float | None = None

    def __len__(self) -> int:
        return self._seq

    def add(self, time: float, item: Any) -> None:
        self._buffer.append((time, self._seq, item))
        self._seq += 1
        if self.first is None or time < self.first:
            self.first = time
        if self.last is None or time > self.last:
            self.last = time
        if len(self._buffer) >= self._run_records:
            self._write_run()

    def drain(self) -> Iterator[tuple[float, Any]]:
        """Every pair, oldest first. Call once."""
        self._buffer.sort(key=_time_and_seq)
        sources: list[Iterator[tuple[float, int, Any]]] = [_read_run(path) for path in self._runs]
        sources.append(iter(self._buffer))
        for time, _seq, item in heapq.merge(*sources, key=_time_and_seq):
            yield time, item

    def close(self) -> None:
        for path in self._runs:
            path.unlink(missing_ok=True)
        self._runs.clear()
        self._buffer.clear()

    def _write_run(self) -> None:
        self._buffer.sort(key=_time_and_seq)
        self._files += 1
        path = self._directory / f"events-{self._files:05d}.run"
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as stream:
            for start in range(0, len(self._buffer), _BATCH):
                pickle.dump(self._buffer[start : start + _BATCH], stream, protocol=pickle.HIGHEST_PROTOCOL)
        self._runs.append(path)
        self._buffer = []


def _time_and_seq(record: tuple[float, int, Any]) -> tuple[float, int]:
    return record[0], record[1]


def _read_run(path: Path) -> Iterator[tuple[float, int, Any]]:
    with path.open("rb") as stream:
        yield from _batches(stream)


def _batches(stream: IO[bytes]) -> Iterator[tuple[float, int, Any]]:
    while True:
        try:
            batch = pickle.load(stream)  # our own run file, written above: never outside data
        except EOFError:
            return
        yield from batch


class TimedEvents(GuardObserver):
    """The observer every guard of a timed replay reports to (one of the runner's ``observers``;
    ``settings``: the replayed config's ``telemetry`` section, which the metrics are played back with). Each event goes to the spill at the clock's time. A replay's guards
    have no session id, so they never use a shared state store and make no state reports."""

    wants_call_start = False

    def __init__(
        self, clock: Clock, spill: TimeSortedSpill, since: float | None = None, until: float | None = None
    ) -> None:
        self.clock = clock
        self.spill = spill
        self.since = since
        self.until = until
        self.outside_events = 0
        """Events left out because they happened before ``since`` or after ``until``."""
        self.settings = TelemetrySettings()
        self.untimed_events = 0
        """Events left out because their session had shown no time yet."""
        self.failure: Exception | None = None
        """Why events could not be kept (a full disk, ...): the metrics are then incomplete."""

    def on_call_end(self, call: CallEvent, token: object) -> None:
        now, key = self.clock.now, self.clock.key
        if now is None or key is None:
            self.untimed_events += 1
            return
        marked = any(d.should_halt or d.code in _CAP_CODES for d in counted_decisions(call))
        self._keep(now, (CALL, MarkedCall(call, key) if marked else call))

    def on_model_call(self, event: ModelEvent) -> None:
        now, key = self.clock.now, self.clock.key
        if now is None or key is None:
            self.untimed_events += 1
            return
        decision = event.decision
        marked = decision.should_halt or decision.code in _CAP_CODES
        self._keep(now, (MODEL, MarkedCall(event, key) if marked else event))

    def on_turn_end(self, summary: TurnSummary) -> None:
        now = self.clock.now
        if now is None:
            self.untimed_events += 1
            return
        # a TurnSummary holds read-only mappings, which do not pickle: keep what telemetry reads
        slim = TurnSummary(
            summary.turn_id,
            summary.agent,
            summary.tool_calls,
            summary.halted,
            summary.halt_decision,
            cap_usage={},
            cap_usage_ratio=dict(summary.cap_usage_ratio),
            session_cap_usage={},
            decisions={},
        )
        self._keep(now, (TURN, slim))

    def on_internal_error(self, stage: str) -> None:
        if self.clock.now is None:
            self.untimed_events += 1
            return
        self._keep(self.clock.now, (INTERNAL_ERROR, stage))

    def _keep(self, now: float, item: tuple[int, Any]) -> None:
        """Spill one event. The guard isolates an observer's errors (it logs them and goes on), but a
        lost event would silently falsify the metrics: the first failure is kept for ``failure``."""
        if self.failure is not None:
            return
        if (self.since is not None and now < self.since) or (self.until is not None and now > self.until):
            self.outside_events += 1
            return
        try:
            self.spill.add(now, item)
        except Exception as exc:
            self.failure = exc


@dataclass(slots=True)
class _Times:
    last: float | None = None
    events: int = 0


@dataclass(slots=True)
class _Day:
    """The events of one day (UTC) of a timed replay, and where its first time was read."""

    events: int
    first: float
    where: str


def _where(key: SessionKey, line: int | None) -> str:
    return key.path if line is None else f"{key.path}:{line}"


class TimedReplay:
    """The event sink of a timed replay: follows each session's latest time, points the clock at the
    right one before the runner (and so the guard and ``TimedEvents``) sees an event, and forwards
    everything to the runner."""

    def __init__(self, runner: ReplayRunner, clock: Clock) -> None:
        self.runner = runner
        self.clock = clock
        self._times: dict[SessionKey, _Times] = {}
        self.untimed_sessions: list[SessionKey] = []
        self.untimed_sessions_total = 0
        self.days: dict[int, _Day] = {}
        """Events per day (``time // 86400``), each with the place its first time was read."""

    def describe_input(self, path: str, fmt: str) -> None:
        self.runner.describe_input(path, fmt)

    def begin_session(self, key: SessionKey) -> None:
        if key in self._times:  # the runner closes the earlier session of that id first
            self.end_session(key)
        self._times[key] = _Times()
        self.runner.begin_session(key)

    def start_turn(self, key: SessionKey, time: float | None = None) -> None:
        times = self._at(key)  # the turn that ends now ends at its latest time
        self.runner.start_turn(key, time)
        times.events += 1
        if time is not None:
            self._count_day(time, key, None)
            if times.last is None or time > times.last:
                times.last = time

    def tool_call(self, key: SessionKey, call: ToolCall) -> None:
        times = self._at(key)
        times.events += 1
        if call.time is not None:
            self.clock.now = call.time
            self._count_day(call.time, key, call.line)
            if times.last is None or call.time > times.last:
                times.last = call.time
        self.runner.tool_call(key, call)

    def model_reply(self, key: SessionKey, reply: ModelReply) -> None:
        times = self._at(key)
        times.events += 1
        if reply.time is not None:
            self.clock.now = reply.time
            self._count_day(reply.time, key, reply.line)
            if times.last is None or reply.time > times.last:
                times.last = reply.time
        self.runner.model_reply(key, reply)

    def _count_day(self, time: float, key: SessionKey, line: int | None) -> None:
        number = int(time // _DAY)
        day = self.days.get(number)
        if day is not None:
            day.events += 1
            if time < day.first:
                day.first, day.where = time, _where(key, line)
        elif len(self.days) < MAX_DAYS_TRACKED:
            self.days[number] = _Day(1, time, _where(key, line))

    def end_session(self, key: SessionKey) -> None:
        times = self._at(key)
        self.runner.end_session(key)
        self._times.pop(key, None)
        if times.last is None and times.events:
            self.untimed_sessions_total += 1
            if len(self.untimed_sessions) < MAX_LISTED:
                self.untimed_sessions.append(key)

    def error(self, path: str, line: int | None, reason: str) -> None:
        self.runner.error(path, line, reason)

    def finish(self) -> ReplayReport:
        for key in list(self._times):
            self.end_session(key)
        return self.runner.finish()

    def _at(self, key: SessionKey) -> _Times:
        times = self._times.get(key)
        if times is None:
            times = self._times[key] = _Times()
        self.clock.now, self.clock.key = times.last, key
        return times


class TimedRun:
    """A replay that keeps times: the runner, the sink to feed, and the spill the events go to.

    ``directory`` holds the spill's run files (a private temporary directory the caller removes).
    Events before ``since`` or after ``until`` are left out (the guard still sees every call, so
    its state at ``since`` is what it would have been).
    """

    def __init__(
        self,
        config: GuardConfig,
        directory: str | Path,
        since: float | None = None,
        until: float | None = None,
        **runner_options: Any,
    ) -> None:
        self.clock = Clock()
        self.spill = TimeSortedSpill(directory)
        self.events = TimedEvents(self.clock, self.spill, since, until)
        self.events.settings = config.telemetry
        self.runner = ReplayRunner(config, observers=(self.events,), **runner_options)
        self.sink = TimedReplay(self.runner, self.clock)

    def finish(self) -> ReplayReport:
        return self.sink.finish()

    def period_problem(self, max_period: float = MAX_PERIOD_SECONDS) -> str | None:
        """Why the recorded period is not played, before any work is spent on it: longer than
        ``max_period`` without both ``since`` and ``until``. Names the places of the times far from
        the rest (``file:line``: outside the ``max_period`` holding the most events)."""
        first, last = self.spill.first, self.spill.last
        if first is None or last is None or last - first <= max_period:
            return None
        if self.events.since is not None and self.events.until is not None:
            return None  # the period asked for, however long
        days = sorted(
            (number, day)
            for number, day in self.sink.days.items()
            if (self.events.since is None or (number + 1) * _DAY > self.events.since)
            and (self.events.until is None or number * _DAY <= self.events.until)
        )
        outliers = _outside_busiest_window(days, max_period)
        named = "; ".join(
            f"{printable(day.where)}: stamped {iso_utc(day.first)} ({day.events} event(s) that day)"
            for _n, day in outliers[:_NAMED_OUTLIERS]
        )
        more = len(outliers) - _NAMED_OUTLIERS
        far = f"; timestamps far from the rest: {named}" if named else ""
        if more > 0:
            far += f" and {more} more day(s)"
        return (
            f"the transcripts' timestamps span {_days(last - first)}, from {iso_utc(first)} to "
            f"{iso_utc(last)}, more than the {_days(max_period)} played without --since and "
            f"--until{far}; pass --since and --until to choose the period"
        )

    def untimed_names(self, limit: int = 20) -> str:
        """The sessions without timestamps, for one line on stderr."""
        names = [
            f"{printable(key.path)} ({printable(key.session_id)})"
            for key in self.sink.untimed_sessions[:limit]
        ]
        more = self.sink.untimed_sessions_total - len(names)
        return ", ".join(names) + (f" and {more} more" if more > 0 else "")


def _outside_busiest_window(days: list[tuple[int, _Day]], max_period: float) -> list[tuple[int, _Day]]:
    """The days outside the ``max_period`` window that holds the most events, farthest first."""
    if not days:
        return []
    width = int(max_period // _DAY)
    best = (0, 0, -1)  # events, first index, last index
    events, low = 0, 0
    for high, (number, day) in enumerate(days):
        events += day.events
        while number - days[low][0] > width:
            events -= days[low][1].events
            low += 1
        if events > best[0]:
            best = (events, low, high)
    _count, low, high = best
    centre = (days[low][0] + days[high][0]) / 2
    outside = days[:low] + days[high + 1 :]
    return sorted(outside, key=lambda item: -abs(item[0] - centre))


def _days(seconds: float) -> str:
    days = seconds / _DAY
    return f"{days:,.0f} days" if days >= 10 else f"{days:,.1f} days"
