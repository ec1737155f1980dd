"""Growth within a turn, retained memory, and metric series, with their issue-6 bounds.

These are the non-timing figures of ``otelguard bench``; each is recorded in ``extra_info`` and the
memory and series bounds are asserted (they do not depend on the machine's speed).
"""

from __future__ import annotations

from pytest_benchmark.fixture import BenchmarkFixture

from otelguard.bench import TARGETS
from otelguard.bench.measure import growth_ratio, retained_bytes, series_after_signatures


def test_growth_ratio(benchmark: BenchmarkFixture) -> None:
    """Cost at call 100,000 of one turn over the cost at call 100 (recorded, not asserted)."""
    ratio = benchmark.pedantic(growth_ratio, args=(100_000,), rounds=1, iterations=1)
    benchmark.extra_info["growth_ratio"] = ratio
    benchmark.extra_info["target"] = TARGETS["growth_ratio"]


def test_retained_memory_after_1m_distinct_calls(benchmark: BenchmarkFixture) -> None:
    retained = benchmark.pedantic(retained_bytes, args=(1_000_000,), rounds=1, iterations=1)
    benchmark.extra_info["retained_bytes"] = retained
    assert retained <= TARGETS["retained_bytes_after_1m_distinct"]


def test_series_after_100k_looping_signatures(benchmark: BenchmarkFixture) -> None:
    figures = benchmark.pedantic(series_after_signatures, args=(100_000,), rounds=1, iterations=1)
    benchmark.extra_info["series"] = figures.series
    benchmark.extra_info["metrics_body_bytes"] = figures.body_bytes
    assert figures.loop_decisions >= 100_000
    assert figures.series <= TARGETS["series_after_100k_signatures"]
