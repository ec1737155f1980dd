"""Per-turn cost (50 calls) of the floors and of the guard in each telemetry configuration.

    pytest benchmarks/ --benchmark-group-by=param:workload

The floor rows are the reference: ``otelguard bench`` prints the same figures as ratios to them.
Here the whole round is timed, so the ``auto`` rows also include creating and ending the host's own
spans (``otelguard bench`` keeps those outside the timed section).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from otelguard.bench.runners import CONFIGURATIONS, Runner, SpanPipeline, runners_for
from otelguard.core.scripted import ScriptedCall

from .conftest import cycle_turns

PREFIXES = tuple(prefix for prefix, _ in CONFIGURATIONS)
RUNNERS = ("floor", "naive_floor", *PREFIXES)


def _runner(name: str, workload: str, spans: SpanPipeline) -> Runner:
    wanted = f"{name}_{workload}"
    for runner in runners_for(workload, PREFIXES, spans):
        if runner.name == wanted:
            return runner
    raise LookupError(wanted)


@pytest.mark.parametrize("workload", ["mixed", "large", "distinct"])
@pytest.mark.parametrize("name", RUNNERS)
def test_turn_cost(
    benchmark: BenchmarkFixture,
    spans: SpanPipeline,
    turns: Callable[[str], Sequence[Sequence[ScriptedCall]]],
    name: str,
    workload: str,
) -> None:
    if workload == "large" and name not in ("floor", "naive_floor", "guard_alone"):
        pytest.skip("the large workload is measured for the floors and the guard alone")
    runner = _runner(name, workload, spans)
    calls = turns(workload)
    rounds = min(len(calls), 200)
    benchmark.extra_info["calls_per_round"] = len(calls[0])
    benchmark.pedantic(runner.round, setup=cycle_turns(calls), rounds=rounds, warmup_rounds=2)
    runner.close()
