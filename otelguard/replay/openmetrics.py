"""What a Prometheus scraping a live exporter would have stored, as OpenMetrics with timestamps.

The timed replay's events (``timed``) are played, oldest first, into a real ``Telemetry`` on its own
registry — the same families, names, labels and bounds as a live exporter's, so nothing can drift —
and the registry is collected on a scrape grid: one scrape every ``interval`` seconds (multiples of
the interval since the epoch), the first at or after the first event, the last at most five minutes
after the last event. A scrape sees every event at or before its time.

``MetricsHistory`` keeps, per series, only the scrapes where its value changed, so memory grows with
the changes, not with the samples written. It writes one sample per series per scrape, from the
scrape that first saw the series to the end of the period (a series the exporter removed — the
bounded signature family's least recently hit — stops where it was removed), each series' samples
together and in time order, every family once, ``job`` and ``instance`` added, no ``_created``
series, ending with ``# EOF``: what ``promtool tsdb create-blocks-from openmetrics`` reads (it
silently drops out-of-order and duplicate samples, so the order is not left to chance).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any, Final

from prometheus_client import CollectorRegistry
from prometheus_client.registry import Collector

from otelguard.config import TelemetrySettings
from otelguard.readers.times import unix_text
from otelguard.replay.timed import CALL, INTERNAL_ERROR, MODEL, TURN, MarkedCall, counted_decisions
from otelguard.telemetry import Telemetry
from otelguard.telemetry.metrics import MetricFamilies, families_for

__all__ = [
    "AFTER_LAST_EVENT",
    "DEFAULT_INSTANCE",
    "DEFAULT_JOB",
    "MetricsHistory",
    "ScrapeGrid",
    "escape_label_value",
    "write_openmetrics",
]

AFTER_LAST_EVENT: Final = 300.0
"""The exporter keeps being scraped for five minutes after the last event: the recorded period's end."""
DEFAULT_JOB: Final = "otelguard_replay"
DEFAULT_INSTANCE: Final = "replay"
_ABSENT: Final = math.nan
"""A change to this value means the series left the exposition (a removed series)."""


@dataclass(frozen=True, slots=True)
class ScrapeGrid:
    """Scrape ``k`` happens at ``start_ms + k * interval_ms`` (milliseconds since the epoch)."""

    start_ms: int
    interval_ms: int
    count: int

    @classmethod
    def covering(cls, first_event: float, last_event: float, interval: float) -> ScrapeGrid:
        """The grid of the recorded period: first event to last event plus five minutes."""
        step = max(1, round(interval * 1000))
        start = math.ceil(first_event * 1000 / step) * step
        end = math.floor((last_event + AFTER_LAST_EVENT) * 1000 / step) * step
        return cls(start, step, max(1, (end - start) // step + 1))

    def index_for(self, time: float) -> int:
        """The first scrape that sees an event at ``time``."""
        return max(0, math.ceil((time * 1000 - self.start_ms) / self.interval_ms))

    def time(self, k: int) -> float:
        return (self.start_ms + k * self.interval_ms) / 1000

    @property
    def end(self) -> float:
        return self.time(self.count - 1)


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _value_text(value: float) -> str:
    """A sample value as Go parses it (``repr`` of a float, infinities spelled ``+Inf``/``-Inf``)."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


@dataclass(slots=True)
class _Series:
    """One sample series (a counter's ``_total``, one histogram bucket, ...): the scrapes where its
    value changed, and the text before its value on every line."""

    prefix: str
    steps: array[int] = field(default_factory=lambda: array("q"))
    values: array[float] = field(default_factory=lambda: array("d"))
    last: float = _ABSENT

    def value_at(self, position: int) -> float:
        return self.values[position] if position >= 0 else _ABSENT


@dataclass(slots=True)
class _Metric:
    """One label set of a family: one series, or a histogram's buckets, count and sum together."""

    series: list[_Series] = field(default_factory=list)


@dataclass(slots=True)
class _Family:
    name: str
    kind: str
    help: str
    metrics: dict[tuple[tuple[str, str], ...], _Metric] = field(default_factory=dict)
    index: dict[tuple[str, tuple[tuple[str, str], ...]], _Series] = field(default_factory=dict)


class MetricsHistory:
    """Every series of one registry, as the scrapes where it changed (see the module docstring)."""

    def __init__(self, registry: CollectorRegistry, job: str, instance: str) -> None:
        self._registry = registry
        self._extra = f'job="{escape_label_value(job)}",instance="{escape_label_value(instance)}"'
        self._families: dict[str, _Family] = {}
        self.changes = 0

    def scrape(self, k: int, collectors: Iterable[Collector] | None = None) -> None:
        """Collect the registry (or only ``collectors``, the families that can have changed) as
        scrape ``k`` and note what changed since the last scrape."""
        metrics = (
            self._registry.collect() if collectors is None else (m for c in collectors for m in c.collect())
        )
        for metric in metrics:
            family = self._families.get(metric.name)
            if family is None:
                family = self._families[metric.name] = _Family(metric.name, metric.type, metric.documentation)
            seen: set[int] = set()
            for sample in metric.samples:
                if sample.name.endswith("_created"):
                    continue
                labels = tuple(sample.labels.items())
                series = family.index.get((sample.name, labels))
                if series is None:
                    series = self._new_series(family, sample.name, labels)
                seen.add(id(series))
                if series.last != sample.value:  # NaN (absent) never equals: a return is a change
                    self._change(series, k, sample.value)
            if len(seen) < len(family.index):
                for series in family.index.values():
                    if id(series) not in seen and not math.isnan(series.last):
                        self._change(series, k, _ABSENT)

    def series_count(self) -> int:
        return sum(len(f.index) for f in self._families.values())

    def write(self, stream: IO[str], grid: ScrapeGrid, first: int, last: int) -> int:
        """Write scrapes ``first``..``last`` (every family once, each series' samples together and in
        time order, no ``# EOF``); returns the samples written."""
        times = [unix_text(grid.time(k)) for k in range(first, last + 1)]
        written = 0
        for family in self._families.values():
            header = f"# HELP {family.name} {_escape_help(family.help)}\n# TYPE {family.name} {family.kind}\n"
            for metric in family.metrics.values():
                lines = _metric_lines(metric, first, last, times)
                if lines:
                    if header:
                        stream.write(header)
                        header = ""
                    stream.write("".join(lines))
                    written += len(lines)
        return written

    def forget_before(self, k: int) -> None:
        """Drop the changes no scrape from ``k`` on needs (all but the last one before ``k``), and the
        series the exporter removed before ``k`` (a signature series hit again later comes back as a
        new one), so memory follows the live series, not every series ever seen."""
        for family in self._families.values():
            gone = []
            for key, series in family.index.items():
                position = _position(series.steps, k - 1)
                if position == len(series.steps) - 1 and math.isnan(series.last):
                    gone.append(key)
                elif position > 0:
                    del series.steps[:position]
                    del series.values[:position]
            for key in gone:
                self._drop(family, key)

    def _drop(self, family: _Family, key: tuple[str, tuple[tuple[str, str], ...]]) -> None:
        series = family.index.pop(key)
        metric_labels = tuple(item for item in key[1] if item[0] != "le")
        metric = family.metrics[metric_labels]
        metric.series.remove(series)
        if not metric.series:
            del family.metrics[metric_labels]

    def _new_series(self, family: _Family, name: str, labels: tuple[tuple[str, str], ...]) -> _Series:
        shown = ",".join(f'{key}="{escape_label_value(value)}"' for key, value in labels)
        series = _Series(f"{name}{{{shown + ',' if shown else ''}{self._extra}}} ")
        family.index[(name, labels)] = series
        metric_labels = tuple(item for item in labels if item[0] != "le")
        metric = family.metrics.get(metric_labels)
        if metric is None:
            metric = family.metrics[metric_labels] = _Metric()
        metric.series.append(series)
        return series

    def _change(self, series: _Series, k: int, value: float) -> None:
        if series.steps and series.steps[-1] == k:
            series.values[-1] = value
        else:
            series.steps.append(k)
            series.values.append(value)
            self.changes += 1
        series.last = value


def _position(steps: array[int], k: int) -> int:
    """Index of the last change at or before scrape ``k`` (-1 when none)."""
    low, high = 0, len(steps)
    while low < high:
        middle = (low + high) // 2
        if steps[middle] <= k:
            low = middle + 1
        else:
            high = middle
    return low - 1


def _metric_lines(metric: _Metric, first: int, last: int, times: list[str]) -> list[str]:
    if len(metric.series) == 1:
        return _series_lines(metric.series[0], first, last, times)
    # a histogram: each scrape's buckets, count and sum stay together (one OpenMetrics MetricPoint)
    lines: list[str] = []
    cursors = [_position(s.steps, first) for s in metric.series]
    for k in range(first, last + 1):
        stamp = times[k - first]
        for index, series in enumerate(metric.series):
            position = cursors[index]
            while position + 1 < len(series.steps) and series.steps[position + 1] <= k:
                position += 1
            cursors[index] = position
            value = series.value_at(position)
            if not math.isnan(value):
                lines.append(f"{series.prefix}{_value_text(value)} {stamp}\n")
    return lines


def _series_lines(series: _Series, first: int, last: int, times: list[str]) -> list[str]:
    """One line per scrape while the value holds: a run of scrapes shares its text up to the time."""
    lines: list[str] = []
    position = _position(series.steps, first)
    start = first
    while start <= last:
        following = position + 1
        end = series.steps[following] - 1 if following < len(series.steps) else last
        end = min(end, last)
        value = series.value_at(position)
        if not math.isnan(value):
            head = f"{series.prefix}{_value_text(value)} "
            lines.extend([head + stamp + "\n" for stamp in times[start - first : end - first + 1]])
        start = end + 1
        position = following
    return lines


def touched_families(families: MetricFamilies) -> dict[str, tuple[Collector, ...]]:
    """The families each kind of event can change: a scrape collects only those (collecting all of
    them at every scrape costs more than the whole replay). ``decisions`` is what a call with a
    non-allow decision adds to ``call``; a test checks these cover every family of the registry."""
    return {
        "call": (
            families.tool_calls,
            families.subagent_spawns,
            families.delegations,
            families.delegation_depth,
        ),
        "model": (families.model_calls, families.model_tokens),
        "decisions": (families.decisions, families.cap_hits, families.loop_signature_hits),
        "turn": (families.turns, families.turn_tool_calls, families.turn_cap_usage_ratio),
        "internal_error": (families.internal_errors,),
        "never": (families.build_info,),
    }


@dataclass(slots=True)
class Playback:
    """The timed events played into a real ``Telemetry``, scrape by scrape (see ``play``)."""

    grid: ScrapeGrid
    history: MetricsHistory
    observer: Any
    families: dict[str, tuple[Collector, ...]]
    on_marked: Callable[[float, MarkedCall], None] | None = None
    events: int = 0
    _touched: set[Collector] = field(default_factory=set)

    @classmethod
    def start(
        cls,
        grid: ScrapeGrid,
        settings: TelemetrySettings,
        job: str,
        instance: str,
        on_marked: Callable[[float, MarkedCall], None] | None = None,
    ) -> Playback:
        registry = CollectorRegistry()
        # spans off: only the metric families are wanted, exactly as the live exporter builds them
        telemetry = Telemetry(registry=registry, span_mode="off", turn_spans=False)
        families = touched_families(families_for(registry))
        history = MetricsHistory(registry, job, instance)
        return cls(grid, history, telemetry.bind(settings), families, on_marked)

    def play(
        self,
        events: Iterable[tuple[float, Any]],
        window_ends: Iterable[int],
        on_window: Callable[[int, int], None],
    ) -> None:
        """Apply ``events`` (oldest first), scraping whenever the grid moves on; ``on_window(first,
        last)`` is called once every scrape up to ``last`` is final (``window_ends`` ascending, the
        last being the grid's last scrape)."""
        ends: Iterator[int] = iter(window_ends)
        window_end = next(ends)
        window_start = 0
        current = 0
        self.history.scrape(0)  # every family, in the registry's order: the file's order
        for time, item in events:
            k = min(self.grid.index_for(time), self.grid.count - 1)
            if k > current:
                self._scrape(current)
                while window_end < k:  # no event between the last scrape and k: those are final
                    on_window(window_start, window_end)
                    window_start, window_end = window_end + 1, next(ends)
                current = k
            self._apply(time, item)
        self._scrape(current)
        while True:
            on_window(window_start, window_end)
            window_start = window_end + 1
            window_end = next(ends, -1)
            if window_end < window_start:
                return

    def _scrape(self, k: int) -> None:
        if self._touched:
            self.history.scrape(k, self._touched)
            self._touched = set()

    def _apply(self, time: float, item: tuple[int, Any]) -> None:
        kind, payload = item
        self.events += 1
        touched = self._touched
        if kind == CALL:
            if isinstance(payload, MarkedCall):
                if self.on_marked is not None:
                    self.on_marked(time, payload)
                payload = payload.call
            self.observer.on_call_end(payload, None)
            touched.update(self.families["call"])
            if counted_decisions(payload):
                touched.update(self.families["decisions"])
        elif kind == MODEL:
            if isinstance(payload, MarkedCall):
                if self.on_marked is not None:
                    self.on_marked(time, payload)
                payload = payload.call
            self.observer.on_model_call(payload)
            touched.update(self.families["model"])
            if counted_decisions(payload):
                touched.update(self.families["decisions"])
        elif kind == TURN:
            self.observer.on_turn_end(payload)
            touched.update(self.families["turn"])
        elif kind == INTERNAL_ERROR:
            self.observer.on_internal_error(payload)
            touched.update(self.families["internal_error"])


@dataclass(frozen=True, slots=True)
class OpenMetricsSummary:
    series: int
    samples: int
    first_scrape: float
    last_scrape: float


def write_openmetrics(
    stream: IO[str],
    events: Iterable[tuple[float, Any]],
    first_event: float,
    last_event: float,
    interval: float,
    settings: TelemetrySettings,
    job: str = DEFAULT_JOB,
    instance: str = DEFAULT_INSTANCE,
) -> OpenMetricsSummary:
    """The whole recorded period as one OpenMetrics document (``otelguard replay --openmetrics``)."""
    grid = ScrapeGrid.covering(first_event, last_event, interval)
    playback = Playback.start(grid, settings, job, instance)
    written = [0]

    def window(first: int, last: int) -> None:
        written[0] += playback.history.write(stream, grid, first, last)

    playback.play(events, [grid.count - 1], window)
    stream.write("# EOF\n")
    return OpenMetricsSummary(playback.history.series_count(), written[0], grid.time(0), grid.end)
