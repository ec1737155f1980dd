"""Shared fixtures for the pytest-benchmark suite (``pytest benchmarks/``; not part of ``pytest``).

The same workloads, floors and guard configurations as ``otelguard bench``; pytest-benchmark reports
absolute times per turn of 50 calls, so compare rows of one run, never runs of different machines.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from otelguard.bench.runners import SpanPipeline
from otelguard.bench.workloads import workload_turns
from otelguard.core.scripted import ScriptedCall

BENCH_CALLS = 5_000


@pytest.fixture(scope="session")
def spans() -> Iterator[SpanPipeline]:
    pipeline = SpanPipeline()
    yield pipeline
    pipeline.close()


@pytest.fixture(scope="session")
def turns() -> Callable[[str], Sequence[Sequence[ScriptedCall]]]:
    cache: dict[str, Sequence[Sequence[ScriptedCall]]] = {}

    def get(workload: str) -> Sequence[Sequence[ScriptedCall]]:
        if workload not in cache:
            cache[workload] = workload_turns(
                workload, BENCH_CALLS // 4 if workload == "large" else BENCH_CALLS
            )
        return cache[workload]

    return get


def cycle_turns(
    turns: Sequence[Sequence[ScriptedCall]],
) -> Callable[[], tuple[tuple[Any, ...], dict[str, Any]]]:
    """A pytest-benchmark ``setup``: each round gets the next turn (and its index)."""
    counter = itertools.count()

    def setup() -> tuple[tuple[Any, ...], dict[str, Any]]:
        index = next(counter)
        return (index, turns[index % len(turns)]), {}

    return setup
