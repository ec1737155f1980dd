"""``otelguard backtest``, start to end: which alerts would have fired on recorded transcripts.

1. Replay with timestamps (``replay.timed``): every guard event stamped with its transcript time.
2. Play the events, oldest first, into a real ``Telemetry`` on a scrape grid (``replay.openmetrics``)
   and write the samples one TSDB block window (2 h) at a time; ``promtool`` turns each into a block.
   One window per file keeps promtool linear: it reads its whole input once per block.
3. Start ``prometheus`` over the blocks and backfill the recording rules level by level, restarting
   the server after each level so the next one reads it.
4. Evaluate every alert's ``expr`` with range queries at its group's interval and offset, over the
   recorded period (first event to last event + 5 min), and apply ``for``/``keep_firing_for``.
5. List the halts and cap hits inside each interval it would have fired.

Backfilled series carry no staleness markers, so a series that stops would linger for Prometheus's
lookback (5 min by default) and an alert reading it would resolve late. The server runs with a
lookback of the longest scrape or evaluation interval instead: every series is still found between
two of its samples, and one that stops is gone one interval later, as a staleness marker would make it.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final

import orjson

from otelguard.backtest.alerts import FiredInterval, Mark, firing_intervals, longest_hold
from otelguard.backtest.engine import BacktestError, Binaries, Engine
from otelguard.backtest.report import AlertOutcome, BacktestReport
from otelguard.backtest.rules import RULE_FILE_NAME, AlertRule, RuleSet, eval_offset
from otelguard.config import GuardConfig
from otelguard.core.decisions import CAP_SCOPES, MODEL_TOOL
from otelguard.core.observers import ModelEvent
from otelguard.readers.sources import replay_inputs
from otelguard.replay.openmetrics import AFTER_LAST_EVENT, Playback, ScrapeGrid
from otelguard.replay.timed import MarkedCall, TimedRun, counted_decisions
from otelguard.replay.timeline import Timelines

__all__ = ["BacktestOptions", "run_backtest"]

BLOCK_SECONDS: Final = 7200
"""promtool's block length: samples are written one such window (aligned to the epoch) per file."""


@dataclass(frozen=True, slots=True)
class BacktestOptions:
    files: list[str]
    fmt: str
    config: GuardConfig
    rules: RuleSet
    scrape_interval: float
    job: str
    instance: str
    agent: str = "replay"
    max_line_bytes: int | None = None
    since: float | None = None
    until: float | None = None


def run_backtest(
    options: BacktestOptions,
    binaries: Binaries,
    workdir: Path,
    progress: Callable[[str], None],
    stop: threading.Event | None = None,
    timelines: Timelines | None = None,
) -> BacktestReport:
    """The whole backtest in ``workdir`` (a private directory the caller creates and removes)."""
    spill_dir = workdir / "events"
    spill_dir.mkdir()
    # without the HTML report no session's detail is shown: keep none (the totals count them all)
    detail = {} if timelines is not None else {"max_detailed_sessions": 0}
    timed = TimedRun(
        options.config,
        spill_dir,
        options.since,
        options.until,
        agent=options.agent,
        timelines=timelines,
        **detail,
    )
    extra = {} if options.max_line_bytes is None else {"max_line_bytes": options.max_line_bytes}
    replay_inputs(options.files, options.fmt, timed.sink, None, stop, **extra)
    report = BacktestReport(
        timed.finish(),
        options.rules.path,
        options.scrape_interval,
        alerts=[AlertOutcome(rule) for rule in options.rules.alerts],
        untimed_sessions=list(timed.sink.untimed_sessions),
        untimed_sessions_total=timed.sink.untimed_sessions_total,
        untimed_events=timed.events.untimed_events,
        outside_events=timed.events.outside_events,
    )
    spill = timed.spill
    if timed.events.failure is not None:
        raise BacktestError(f"the replay's events could not be kept: {timed.events.failure}")
    if spill.first is None or spill.last is None:
        progress("no timed events: nothing to backtest")
        return report
    problem = timed.period_problem()
    if problem is not None:  # before a block is written
        raise BacktestError(problem)
    report.period_start, report.period_end = spill.first, spill.last + AFTER_LAST_EVENT
    progress(f"replayed {report.replay.totals()['sessions']} session(s); {len(spill)} timed events")
    lookback = max([options.scrape_interval, *options.rules.intervals])
    retention_days = math.ceil((report.period_end - report.period_start) / 86400) + 2
    with Engine(binaries, workdir, lookback=lookback, retention_days=retention_days) as engine:
        marks = workdir / "marks.jsonl"
        _build_blocks(options, report, timed, engine, marks)
        spill.close()
        engine.start()
        levels = options.rules.levels()
        for number, document in enumerate(levels, start=1):
            progress(f"backfilling recording rules, level {number} of {len(levels)}")
            default_interval = options.rules.default_interval
            engine.backfill_rules(document, report.period_start, report.period_end, default_interval)
            engine.start()
        progress(f"evaluating {len(report.alerts)} alert(s) over the recorded period")
        for outcome in report.alerts:
            outcome.intervals, outcome.longest_hold = _evaluate(
                engine, outcome.rule, report.period_start, report.period_end
            )
    _attribute(report, marks)
    return report


def _build_blocks(
    options: BacktestOptions, report: BacktestReport, timed: TimedRun, engine: Engine, marks_path: Path
) -> None:
    spill = timed.spill
    assert spill.first is not None and spill.last is not None
    grid = ScrapeGrid.covering(spill.first, spill.last, options.scrape_interval)
    with marks_path.open("wb") as marks:
        playback = Playback.start(
            grid,
            timed.events.settings,
            options.job,
            options.instance,
            on_marked=lambda time, call: _write_marks(marks, time, call),
        )
        samples = engine.workdir / "samples.om"

        def window(first: int, last: int) -> None:
            with samples.open("w", encoding="utf-8", errors="replace") as stream:
                report.samples += playback.history.write(stream, grid, first, last)
                stream.write("# EOF\n")
            engine.create_blocks(samples)
            report.blocks += 1
            playback.history.forget_before(last + 1)

        playback.play(spill.drain(), block_window_ends(grid), window)
        samples.unlink(missing_ok=True)
    report.series = playback.history.series_count()


def block_window_ends(grid: ScrapeGrid) -> Iterator[int]:
    """The last scrape of each epoch-aligned block window the grid touches."""
    k = 0
    block_ms = BLOCK_SECONDS * 1000
    while k < grid.count:
        boundary = (grid.start_ms + k * grid.interval_ms) // block_ms * block_ms + block_ms
        last = min(grid.count - 1, math.ceil((boundary - grid.start_ms) / grid.interval_ms) - 1)
        yield last
        k = last + 1


def _write_marks(stream: IO[bytes], time: float, marked: MarkedCall) -> None:
    call, key = marked.call, marked.key
    # a model event has no call id, and tool "model"
    tool, call_id = (MODEL_TOOL, None) if isinstance(call, ModelEvent) else (call.tool_name, call.call_id)
    base = {
        "session_id": key.session_id,
        "path": key.path,
        "call_id": call_id,
        "agent": call.agent,
        "tool": tool,
    }
    for decision in counted_decisions(call):
        fields = {**base, "action": decision.action, "code": decision.code}
        scope = CAP_SCOPES.get(decision.code)
        if scope is not None:
            fields |= {"cap": decision.cap or tool, "scope": scope}
            stream.write(orjson.dumps([time, "cap_hit", fields]) + b"\n")
        if decision.should_halt:
            stream.write(orjson.dumps([time, "halt", fields]) + b"\n")


def evaluation_times(rule: AlertRule, start: float, end: float) -> list[float]:
    """The times Prometheus would evaluate ``rule``'s group inside ``[start, end]``."""
    step = round(rule.interval * 1000)
    offset = round(eval_offset(RULE_FILE_NAME, rule.group, rule.interval) * 1000)
    first = math.ceil((start * 1000 - offset) / step) * step + offset
    count = max(0, math.floor((end * 1000 - first) / step) + 1)
    return [(first + k * step) / 1000 for k in range(count)]


def _evaluate(
    engine: Engine, rule: AlertRule, start: float, end: float
) -> tuple[list[FiredInterval], float | None]:
    """The intervals ``rule`` would have fired, and the longest its expression held (``None``: never)."""
    evaluations = evaluation_times(rule, start, end)
    if not evaluations:
        return [], None
    series = list(engine.query_range(rule.expr, evaluations[0], evaluations[-1], rule.interval))
    return firing_intervals(rule, series, evaluations, end), longest_hold(series, evaluations)


def _attribute(report: BacktestReport, marks_path: Path) -> None:
    intervals = [interval for outcome in report.alerts for interval in outcome.intervals]
    if not intervals or not marks_path.exists():
        return
    with marks_path.open("rb") as stream:
        for line in stream:
            time, kind, fields = orjson.loads(line)
            mark = Mark(time, kind, fields)
            for interval in intervals:
                if interval.covers(mark):
                    interval.add(mark)
