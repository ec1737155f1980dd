"""The adapter overhead script keeps running (tiny counts; the figures come from running it in full)."""

from __future__ import annotations

import pytest

from benchmarks.integrations_overhead import FRAMEWORKS, measure


@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_overhead_figures_are_reported(framework: str) -> None:
    figure = measure(framework, calls=2, rounds=1)
    assert figure["framework"] == framework and figure["calls"] == 2
    assert {
        "plain_per_call_us",
        "guard_added_per_call_us",
        "guard_ratio",
        "guard_metrics_spans_ratio",
    } <= set(figure)
