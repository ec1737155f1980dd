"""Every metric family's series count is bounded (``telemetry.max_series_per_metric``, default 2,000),
the ``_other`` series included: past it, new label sets go to ``_other`` for their host-chosen values,
so the whole exposition stays bounded whatever the workload, and no count is lost."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from otelguard import ConfigError, Guard, GuardConfig
from otelguard.config import TelemetrySettings
from otelguard.telemetry import Telemetry
from otelguard.telemetry.metrics import SeriesBound


def _series_per_family(registry: CollectorRegistry) -> Counter[str]:
    series: Counter[str] = Counter()
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            if sample.name.endswith(("_total", "_count")) or family.type in ("gauge", "unknown"):
                series[family.name] += 1
    return series


def _run_grid(registry: CollectorRegistry, agents: int, tools: int, **telemetry: int) -> int:
    """Every agent calls every tool once, failing, and ends its turn: returns the calls made."""
    shared = Telemetry(registry=registry, **telemetry)  # type: ignore[arg-type]
    calls = 0
    for a in range(agents):
        guard = Guard(GuardConfig(), telemetry=shared)
        guard.start_turn(agent=f"agent-{a}")
        for t in range(tools):
            guard.before_call(f"tool-{t}", {"a": a})
            guard.after_call(f"tool-{t}", {"a": a}, "Error: x", failed=True)
            calls += 1
        guard.end_turn()
    return calls


def test_default_bound_holds_for_120_agents_by_120_tools() -> None:
    registry = CollectorRegistry()
    _run_grid(registry, 120, 120)
    series = _series_per_family(registry)
    assert TelemetrySettings().max_series_per_metric == 2000
    # the _other series (one per outcome, action and code seen) are inside the bound, not on top
    assert 1900 <= series["otelguard_tool_calls"] <= 2000
    assert series["otelguard_turns"] <= 2000
    assert series["otelguard_decisions"] <= 2000
    body = generate_latest(registry)
    assert body.count(b"\n") < 16_000  # counters print _total and _created lines per series
    assert len(body) < 1_500_000


def test_overflow_goes_to_other_and_keeps_every_count() -> None:
    registry = CollectorRegistry()
    calls = _run_grid(registry, 10, 30, max_series_per_metric=50)
    series = _series_per_family(registry)
    assert series["otelguard_tool_calls"] <= 50
    total = registry.get_sample_value
    other = total("otelguard_tool_calls_total", {"agent": "_other", "tool": "_other", "outcome": "failed"})
    assert other is not None and other > 0
    counted = sum(
        sample.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        if family.name == "otelguard_tool_calls"
        for sample in family.samples
        if sample.name.endswith("_total")
    )
    assert counted == calls
    assert series["otelguard_turn_tool_calls"] <= 10  # ten agents: under the bound, nothing replaced


def test_bound_is_per_family_not_per_label() -> None:
    registry = CollectorRegistry()
    _run_grid(registry, 3, 40, max_series_per_metric=20)
    series = _series_per_family(registry)
    assert series["otelguard_tool_calls"] <= 20
    # another family's bound is not used up by tool_calls: 3 agents, each turn outcome created at 0
    assert series["otelguard_turns"] == 9


def test_bound_is_a_telemetry_setting() -> None:
    config = GuardConfig.from_mapping({"telemetry": {"max_series_per_metric": 10}})
    assert config.telemetry.max_series_per_metric == 10
    with pytest.raises(ConfigError, match=r"telemetry\.max_series_per_metric"):
        GuardConfig.from_mapping({"telemetry": {"max_series_per_metric": 0}})
    registry = CollectorRegistry()
    telemetry = Telemetry(registry=registry)
    guard = Guard(config, telemetry=telemetry)
    for t in range(30):
        guard.before_call(f"t{t}", {})
        guard.after_call(f"t{t}", {}, "ok", failed=False)
    assert _series_per_family(registry)["otelguard_tool_calls"] <= 10


def test_the_other_series_is_inside_the_bound() -> None:
    """One turn each for 10 agents, bound 5: the histogram labelled by agent alone keeps four agents
    and `_other` is the fifth series (it used to come on top, a sixth); every turn is still counted."""
    registry = CollectorRegistry()
    _run_grid(registry, 10, 1, max_series_per_metric=5)
    series = _series_per_family(registry)
    assert series["otelguard_turn_tool_calls"] == 5
    assert registry.get_sample_value("otelguard_turn_tool_calls_count", {"agent": "_other"}) == 6
    assert series["otelguard_turns"] <= 5
    turns = [
        sample.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        if family.name == "otelguard_turns"
        for sample in family.samples
        if sample.name.endswith("_total")
    ]
    assert sum(turns) == 10


AGENTS = st.sampled_from(("a", "b", "c", "d", "e"))
CONSTANTS = st.sampled_from(("ok", "failed", "refused", "blocked"))


@given(st.lists(st.tuples(AGENTS, AGENTS, CONSTANTS), max_size=60), st.integers(1, 12))
def test_no_mix_of_label_sets_exceeds_the_bound_and_each_keeps_one_series(
    label_sets: list[tuple[str, str, str]], limit: int
) -> None:
    """Whatever arrives in whatever order: at most ``limit`` label sets, a set always maps to the
    same series, and that series keeps its constant unless it is the all-``_other`` one."""
    bound = SeriesBound()
    seen: dict[tuple[str, ...], tuple[str, ...]] = {}
    for labels in label_sets:
        got = bound.admit(labels, 2, limit)
        assert seen.setdefault(labels, got) == got
        assert got == labels or got[:2] == ("_other", "_other")
        assert got[2] in (labels[2], "_other")
        assert len(set(seen.values())) <= limit
