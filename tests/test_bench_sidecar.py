"""`otelguard bench --sidecar`: the sidecar figures are measured on real processes and reported with targets."""

from __future__ import annotations

from otelguard.bench.sidecar import SIDECAR_TARGETS, SidecarOptions, run_sidecar_bench


def test_sidecar_figures_are_measured_and_the_session_pool_stays_bounded() -> None:
    figures = run_sidecar_bench(
        SidecarOptions(pairs_per_client=20, hook_runs=3, sessions=400, max_sessions=100), lambda message: None
    )
    assert figures["sidecar_calls_per_s"] > 0
    assert figures["hook_median_ms"] > 0 and figures["python_pass_median_ms"] > 0
    ratio = figures["hook_median_ms"] / figures["python_pass_median_ms"]
    assert abs(figures["hook_roundtrip_ratio"] - ratio) < 0.01
    assert figures["serve_sessions_sent"] == 400
    assert figures["serve_sessions_held"] <= 100
    assert figures["serve_rss_kib_after_flood"] > 0
    assert {row["name"] for row in figures["targets"]} == set(SIDECAR_TARGETS)
