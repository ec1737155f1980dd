"""`otelguard bench --sidecar`: the sidecar figures are measured on real processes and reported with targets."""

from __future__ import annotations

from otelguard.bench.shared_state import SHARED_STATE_TARGETS
from otelguard.bench.sidecar import SIDECAR_TARGETS, SidecarOptions, run_sidecar_bench
from otelguard.bench.tricks import PAYS


def test_sidecar_figures_are_measured_and_the_session_pool_stays_bounded() -> None:
    figures = run_sidecar_bench(
        SidecarOptions(pairs_per_client=20, hook_runs=3, sessions=400, max_sessions=100, state_calls=200),
        lambda message: None,
    )
    assert figures["sidecar_calls_per_s"] > 0
    assert figures["hook_median_ms"] > 0 and figures["python_pass_median_ms"] > 0
    ratio = figures["hook_median_ms"] / figures["python_pass_median_ms"]
    assert abs(figures["hook_roundtrip_ratio"] - ratio) < 0.01
    assert figures["serve_sessions_sent"] == 400
    assert figures["serve_sessions_held"] <= 100
    assert figures["serve_rss_kib_after_flood"] > 0
    cache = figures["hot_path_tricks"]["request_head_cache"]  # serve beside serve without its cache
    assert cache["with_us"] > 0 and cache["without_us"] > 0
    assert cache["pays"] == (cache["saving"] >= PAYS)
    shared = set() if "skipped" in figures["shared_state"] else set(SHARED_STATE_TARGETS)
    assert {row["name"] for row in figures["targets"]} == set(SIDECAR_TARGETS) | shared


def test_shared_state_figures_come_from_two_replicas_on_a_real_redis() -> None:
    """Capped pairs/s through two replicas on one Redis and with memory state, the added cost of a
    capped call, and per-call figures with Redis killed and hung, each from few Redis attempts."""
    from otelguard.bench.shared_state import run_shared_state_bench
    from tests.e2e import require_binary

    require_binary("redis-server", "redis-server")
    figures = run_shared_state_bench(pairs_per_client=20, calls=400, progress=lambda message: None)
    assert figures["shared_state_capped_calls_per_s"] > 0 and figures["memory_state_capped_calls_per_s"] > 0
    cost = figures["capped_call_us"]
    assert figures["added_us_per_capped_call"] == round(cost["redis"] - cost["memory"], 1)
    for outage in ("killed", "hung"):
        fail_open = figures["fail_open"][outage]
        assert fail_open["calls"] == 400 and fail_open["timeout_ms"] == 50
        assert 1 <= fail_open["redis_attempts"] < 400  # the back-off spares most calls the attempt
    assert {row["name"] for row in figures["targets"]} == set(SHARED_STATE_TARGETS)
