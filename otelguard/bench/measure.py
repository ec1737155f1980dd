"""The measurements: side-by-side rounds, growth within a turn, retained memory, metric series.

Timings are only ever compared with timings taken in the same run: every round of every runner is
interleaved with the other runners' rounds over the same calls, in a rotating order, so drift in
clock speed or background load touches all of them alike.
"""

from __future__ import annotations

import gc
import math
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, generate_latest

from otelguard import Guard
from otelguard.bench.runners import Runner, guard_alone, metrics_guard
from otelguard.bench.workloads import DistinctCalls, looping_signatures
from otelguard.core.scripted import ScriptedCall

__all__ = [
    "Timing",
    "growth_ratio",
    "percentile",
    "retained_bytes",
    "series_after_signatures",
    "side_by_side",
]

Progress = Callable[[str], None]

_WARMUP_TURNS = 2
_SIGNATURES_PER_TURN = 50


@dataclass(frozen=True, slots=True)
class Timing:
    """Per-call nanoseconds of one runner: the median and the p99 over its rounds."""

    median_ns: float
    p99_ns: float
    rounds: int


def percentile(values: Sequence[float], share: float) -> float:
    """Nearest-rank percentile (no interpolation: with few rounds, a real observed value)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(share * len(ordered)))
    return ordered[rank - 1]


def side_by_side(runners: Sequence[Runner], turns: Sequence[Sequence[ScriptedCall]]) -> dict[str, Timing]:
    """Run every turn through every runner, interleaved; per-call time of each round."""
    for runner in runners:
        for index, turn in enumerate(turns[:_WARMUP_TURNS]):
            runner.round(index, turn)
    per_call: dict[str, list[float]] = {runner.name: [] for runner in runners}
    count = len(runners)
    for index, turn in enumerate(turns):
        for offset in range(count):
            runner = runners[(index + offset) % count]
            per_call[runner.name].append(runner.round(index, turn) / len(turn))
    return {
        name: Timing(percentile(values, 0.5), percentile(values, 0.99), len(values))
        for name, values in per_call.items()
    }


def growth_ratio(calls: int, window: int = 256, repeats: int = 3, seed: int = 1) -> float:
    """Median per-call cost at call ``calls`` of one turn over the median cost at call 100.

    Distinct calls, so per-signature state fills up to its bound and then evicts: the worst case
    for growth. Both windows time the same sequence of call shapes.
    """
    source = DistinctCalls(seed)
    early_start = 100
    late_start = max(calls, early_start + window)
    early: list[int] = []
    late: list[int] = []
    for repeat in range(repeats):
        base = repeat * (late_start + window) * 2
        guard = guard_alone()
        guard.start_turn()
        _feed(guard, source, base, early_start)
        early += _timed_window(guard, source, base + early_start, window)
        _feed(guard, source, base + early_start + window, late_start - early_start - window)
        late += _timed_window(guard, source, base + late_start, window)
        guard.end_turn()
    return percentile(late, 0.5) / percentile(early, 0.5)


def _feed(guard: Guard, source: DistinctCalls, start: int, count: int) -> None:
    for call in source.calls(start, count):
        decision = guard.before_call(call.tool_name, call.args, call.call_id)
        if decision.allows_execution:
            guard.after_call(call.tool_name, call.args, call.result, failed=call.failed, call_id=call.call_id)


def _timed_window(guard: Guard, source: DistinctCalls, start: int, count: int) -> list[int]:
    calls = [source.call(start + k, shape=k) for k in range(count)]
    clock = time.perf_counter_ns
    samples = []
    for call in calls:
        begin = clock()
        decision = guard.before_call(call.tool_name, call.args, call.call_id)
        if decision.allows_execution:
            guard.after_call(call.tool_name, call.args, call.result, failed=call.failed, call_id=call.call_id)
        samples.append(clock() - begin)
    return samples


def retained_bytes(calls: int, seed: int = 1, progress: Progress | None = None) -> int:
    """Bytes still allocated after ``calls`` distinct calls in one turn of one guard (tracemalloc).

    The baseline is taken after the guard exists and its turn has started, so the figure is what
    the calls themselves leave behind.
    """
    source = DistinctCalls(seed)
    gc.collect()
    tracemalloc.start()
    try:
        guard = guard_alone()
        guard.start_turn()
        _feed(guard, source, 0, 1)  # first-call caches (tool catalog, logger) are not per-call state
        gc.collect()
        baseline = tracemalloc.get_traced_memory()[0]
        step = max(1, calls // 10)
        done = 1
        while done < calls:
            count = min(step, calls - done)
            _feed(guard, source, done, count)
            done += count
            if progress is not None:
                progress(f"memory: {done:,}/{calls:,} distinct calls")
        gc.collect()
        retained = tracemalloc.get_traced_memory()[0] - baseline
        del guard
    finally:
        tracemalloc.stop()
    return max(0, retained)


@dataclass(frozen=True, slots=True)
class SeriesFigures:
    series: int
    body_bytes: int
    loop_decisions: int


def series_after_signatures(signatures: int) -> SeriesFigures:
    """Series on ``/metrics`` after ``signatures`` distinct signatures each failed twice in a row.

    The second failure of each is an ``exact_failure_warn``: one loop decision per signature, over
    more tool names than the label bound allows.
    """
    registry = CollectorRegistry()
    guard = metrics_guard(registry)
    loop_decisions = 0
    for n, (tool, args) in enumerate(looping_signatures(signatures)):
        if n % _SIGNATURES_PER_TURN == 0:
            guard.start_turn()
        for _ in range(2):
            decision = guard.before_call(tool, args)
            if decision.allows_execution:
                decision = guard.after_call(tool, args, '{"error": "no such item"}', failed=True)
            if decision.action != "allow":
                loop_decisions += 1
    guard.end_turn()
    body = generate_latest(registry)
    series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
    return SeriesFigures(series=series, body_bytes=len(body), loop_decisions=loop_decisions)
