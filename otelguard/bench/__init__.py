"""``otelguard bench``: the guard's per-call cost as ratios to the floor, its memory and its series.

``run_bench(BenchOptions(...))`` returns the bench document (a dict; docs/overhead.md). Without a workload it runs
the standard figures (every configuration on ``mixed``, the guard alone on ``large``); with one, every
configuration on that workload. Retained memory, growth and series are measured apart from the
timed rounds and scale with their own options so a smoke run stays fast.
"""

from __future__ import annotations

import gc
import platform
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from otelguard import __version__
from otelguard.bench import measure
from otelguard.bench.model_turns import model_vs_tool
from otelguard.bench.runners import CONFIGURATIONS, SpanPipeline, runners_for
from otelguard.bench.tricks import TRICKS, measure_trick
from otelguard.bench.workloads import WORKLOADS, workload_turns

__all__ = ["FIGURE_NAMES", "TARGETS", "BenchOptions", "run_bench"]

FIGURE_NAMES: Final = (
    "guard_alone_mixed",
    "guard_alone_large",
    "guard_in_tree_mixed",
    "guard_metrics_mixed",
    "guard_metrics_spans_own_mixed",
    "guard_metrics_spans_auto_mixed",
    "guard_metrics_spans_decisions_mixed",
)
"""The standard figures (docs/overhead.md), in the order they are printed."""

TARGETS: Final = {
    "guard_alone_mixed": 3.0,
    "guard_alone_large": 2.0,
    "guard_metrics_mixed": 4.0,
    "guard_metrics_spans_own_mixed": 15.0,
    "guard_metrics_spans_decisions_mixed": 5.0,
    "growth_ratio": 1.2,
    "retained_bytes_after_1m_distinct": 4_000_000,
    "series_after_100k_signatures": 2000,
}
"""The overhead budget (docs/overhead.md): figures as ratios to the floor, the rest in their own units."""

_LARGE_SHARE: Final = 4  # a large call costs ~10x a mixed one: a quarter of the calls is plenty


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchOptions:
    calls: int = 20_000
    workload: str | None = None
    memory_calls: int = 1_000_000
    growth_calls: int = 100_000
    loop_signatures: int = 100_000
    seed: int = 1


Progress = Callable[[str], None]


def _quiet(message: str) -> None:
    pass


def run_bench(options: BenchOptions, progress: Progress = _quiet) -> dict[str, Any]:
    """Run every measurement and return the ``--json`` document."""
    if options.workload is not None and options.workload not in WORKLOADS:
        raise ValueError(f"unknown workload {options.workload!r}; expected one of {', '.join(WORKLOADS)}")
    plan = _plan(options)
    floors: dict[str, float] = {}
    naive: dict[str, float] = {}
    figures: list[dict[str, Any]] = []
    spans = SpanPipeline()
    tricks: dict[str, Any] = {}
    model_events: dict[str, Any] = {}
    try:
        for workload, prefixes, calls in plan:
            progress(f"timing {workload}: {calls:,} calls x {len(prefixes) + 2} runners")
            turns = workload_turns(workload, calls, options.seed)
            if not tricks:
                progress(f"hot-path tricks: {workload}, each beside its plain alternative")
                tricks.update((name, measure_trick(trick, turns)) for name, trick in TRICKS.items())
                progress(f"model events: {workload}, each beside the tool call it asks for")
                model_events = model_vs_tool(turns)
            timings = _timed(workload, prefixes, turns, spans)
            floor = timings.pop(f"floor_{workload}")
            floors[workload] = _us(floor.median_ns)
            naive[workload] = _us(timings.pop(f"naive_floor_{workload}").median_ns)
            for name, timing in timings.items():
                figures.append(_figure(name, timing, floor))
    finally:
        spans.close()
    progress(f"growth: call 100 vs call {options.growth_calls:,} of one turn")
    growth = measure.growth_ratio(options.growth_calls, seed=options.seed)
    progress(f"memory: {options.memory_calls:,} distinct calls in one turn")
    retained = measure.retained_bytes(options.memory_calls, options.seed, progress)
    progress(f"series: {options.loop_signatures:,} distinct looping signatures")
    series = measure.series_after_signatures(options.loop_signatures)
    document: dict[str, Any] = {
        "calls": options.calls,
        "floor_us": floors,
        "naive_floor_us": naive,
        "figures": figures,
        "growth_ratio": round(growth, 3),
        "retained_bytes_after_1m_distinct": retained,
        "series_after_100k_signatures": series.series,
        "metrics_body_bytes": series.body_bytes,
        "hot_path_tricks": tricks,
        "model_events": model_events,
    }
    document["targets"] = _targets(document)
    document["parameters"] = {
        "workload": options.workload,
        "memory_calls": options.memory_calls,
        "growth_calls": options.growth_calls,
        "loop_signatures": options.loop_signatures,
        "loop_decisions": series.loop_decisions,
        "seed": options.seed,
        "otelguard": __version__,
        "python": sys.version.split()[0],
        "machine": platform.machine(),
    }
    return document


def _plan(options: BenchOptions) -> list[tuple[str, tuple[str, ...], int]]:
    """(workload, configuration prefixes, calls) for each side-by-side group."""
    every = tuple(prefix for prefix, _ in CONFIGURATIONS)
    large_calls = max(1, options.calls // _LARGE_SHARE)
    if options.workload is None:
        return [("mixed", every, options.calls), ("large", ("guard_alone",), large_calls)]
    calls = large_calls if options.workload == "large" else options.calls
    return [(options.workload, every, calls)]


def _timed(workload: str, prefixes: tuple[str, ...], turns: Any, spans: SpanPipeline) -> dict[str, Any]:
    runners = runners_for(workload, prefixes, spans)
    # The workload is long-lived and not the guard's: keep the collector from rescanning it.
    gc.collect()
    gc.freeze()
    try:
        return measure.side_by_side(runners, turns)
    finally:
        for runner in runners:
            runner.close()
        gc.unfreeze()


def _us(ns: float) -> float:
    return round(ns / 1000.0, 3)


def _figure(name: str, timing: measure.Timing, floor: measure.Timing) -> dict[str, Any]:
    ratio = timing.median_ns / floor.median_ns if floor.median_ns else float("inf")
    target = TARGETS.get(name)
    return {
        "name": name,
        "per_call_us": _us(timing.median_ns),
        "p99_us": _us(timing.p99_ns),
        "ratio_to_floor": round(ratio, 2),
        "target": target,
        "met": None if target is None else ratio <= target,
    }


def _targets(document: dict[str, Any]) -> list[dict[str, Any]]:
    """Every issue-6 target that this run measured, with its value and whether it was met."""
    rows: list[dict[str, Any]] = []
    for figure in document["figures"]:
        if figure["target"] is not None:
            rows.append(_target_row(figure["name"], figure["ratio_to_floor"]))
    for name in ("growth_ratio", "retained_bytes_after_1m_distinct", "series_after_100k_signatures"):
        rows.append(_target_row(name, document[name]))
    return rows


def _target_row(name: str, value: float) -> dict[str, Any]:
    target = TARGETS[name]
    return {"name": name, "value": value, "target": target, "met": value <= target}
