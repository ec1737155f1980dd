"""The hook overhead script keeps running (one run of each; the figures come from running it in full)."""

from __future__ import annotations

from benchmarks.hook_overhead import CLIS, measure


def test_every_cli_hook_command_is_timed_against_the_floor() -> None:
    figures = measure(runs=1)
    assert sorted(figures["hooks"]) == sorted(
        f"{cli} {event}" for cli, _, *events in CLIS for event in events
    )
    assert all({"median_ms", "ratio", "paired_ratio"} <= set(f) for f in figures["hooks"].values())
    assert figures["python_pass_median_ms"] > 0
