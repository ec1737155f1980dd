"""The OpenTelemetry metrics (``telemetry.otel_metrics``) read with the SDK's in-memory reader: the
same counts as the Prometheus families, the GenAI histograms, the same bounds on attribute values,
off by default; and the ``gen_ai.evaluation.result`` event of every non-allow decision."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader, NumberDataPoint
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from otelguard import ConfigError, Guard, GuardConfig
from otelguard.config.telemetry import TelemetrySettings
from otelguard.telemetry import Telemetry, genai
from tests.test_telemetry_leak import run_leaky_session

ROOT = Path(__file__).resolve().parent.parent

Points = dict[str, list[Any]]


def metric_points(reader: InMemoryMetricReader) -> Points:
    """Metric name -> its data points (with unit/kind checked by the caller through ``units``)."""
    found: Points = {}
    data = reader.get_metrics_data()
    if data is None:
        return found
    for resource_metrics in data.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                found.setdefault(metric.name, []).extend(metric.data.data_points)
    return found


def units(reader: InMemoryMetricReader) -> dict[str, str]:
    data = reader.get_metrics_data()
    assert data is not None
    return {m.name: m.unit for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}


def otel_sums(points: list[Any], keys: tuple[str, ...]) -> Counter[tuple[str, ...]]:
    sums: Counter[tuple[str, ...]] = Counter()
    for point in points:
        assert isinstance(point, NumberDataPoint)
        sums[tuple(str(point.attributes.get(k)) for k in keys)] += int(point.value)
    return sums


def prom_sums(registry: CollectorRegistry, family: str, labels: tuple[str, ...]) -> Counter[tuple[str, ...]]:
    sums: Counter[tuple[str, ...]] = Counter()
    for metric in registry.collect():
        for sample in metric.samples:
            if sample.name == f"{family}_total" and sample.value:
                sums[tuple(sample.labels[k] for k in labels)] += int(sample.value)
    return sums


def rig(
    telemetry_settings: dict[str, Any], **telemetry_kwargs: Any
) -> tuple[Guard, InMemoryMetricReader, CollectorRegistry, InMemorySpanExporter, TracerProvider]:
    reader = InMemoryMetricReader()
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    registry = CollectorRegistry()
    config = GuardConfig.from_mapping(
        {"mode": "unattended", "signature_key": "k", "telemetry": {"span_mode": "own", **telemetry_settings}}
    )
    telemetry = Telemetry(
        tracer_provider, registry, meter_provider=MeterProvider(metric_readers=[reader]), **telemetry_kwargs
    )
    return Guard(config, telemetry, agent="otel-test"), reader, registry, exporter, tracer_provider


def test_otel_metrics_are_off_by_default() -> None:
    """Without ``otel_metrics`` the meter provider is never used: no instrument, no point."""
    assert TelemetrySettings().otel_metrics is False
    guard, reader, registry, _, provider = rig({})
    run_leaky_session(guard, provider.get_tracer("host"))
    assert metric_points(reader) == {}
    assert prom_sums(registry, "otelguard_tool_calls", ("outcome",))  # Prometheus still counts


@pytest.mark.parametrize("how", ["config", "keyword"])
def test_otel_counts_match_the_prometheus_families(how: str) -> None:
    """One scripted session (every outcome, warn/reject/block/halt, cap hits, cancelled calls):
    each OTel counter holds exactly the counts of its Prometheus family, attribute for label."""
    guard, reader, registry, _, provider = (
        rig({"otel_metrics": True}) if how == "config" else rig({}, otel_metrics=True)
    )
    decisions = run_leaky_session(guard, provider.get_tracer("host"))
    points = metric_points(reader)

    agent, tool = genai.GEN_AI_AGENT_NAME, genai.GEN_AI_TOOL_NAME
    pairs = [
        ("otelguard.tool_calls", (agent, tool, "otelguard.outcome"), "otelguard_tool_calls", ("agent", "tool", "outcome")),
        (
            "otelguard.decisions",
            (agent, tool, "otelguard.decision.action", "otelguard.decision.code"),
            "otelguard_decisions",
            ("agent", "tool", "action", "code"),
        ),
        ("otelguard.turns", (agent, "otelguard.turn.outcome"), "otelguard_turns", ("agent", "outcome")),
    ]  # fmt: skip
    for otel_name, keys, family, labels in pairs:
        expected = prom_sums(registry, family, labels)
        assert expected, family
        assert otel_sums(points[otel_name], keys) == expected, otel_name
    assert sum(otel_sums(points["otelguard.decisions"], (agent,)).values()) == sum(
        1 for d in decisions if d.action != "allow"
    )

    # the GenAI histograms: one duration per call that ran, one tool-call count per turn
    ran = prom_sums(registry, "otelguard_tool_calls", ("outcome",))
    durations = points[genai.EXECUTE_TOOL_DURATION]
    assert all(isinstance(p, HistogramDataPoint) for p in durations)
    assert sum(p.count for p in durations) == ran[("ok",)] + ran[("failed",)]
    assert {p.attributes.get(genai.ERROR_TYPE) for p in durations} >= {None, "tool_error"}
    assert all(set(p.attributes) <= {tool, genai.ERROR_TYPE} for p in durations)
    assert all(p.min >= 0 for p in durations)
    per_turn = points[genai.INVOKE_AGENT_TOOL_CALLS]
    turns = prom_sums(registry, "otelguard_turns", ("agent",))[("otel-test",)]
    assert sum(p.count for p in per_turn) == turns
    assert sum(p.sum for p in per_turn) == sum(ran.values())
    assert [dict(p.attributes) for p in per_turn] == [{agent: "otel-test"}]
    assert units(reader) | {} == {
        "otelguard.tool_calls": "{tool_call}",
        "otelguard.decisions": "{decision}",
        "otelguard.turns": "{turn}",
        genai.EXECUTE_TOOL_DURATION: "s",
        genai.INVOKE_AGENT_TOOL_CALLS: "{tool_call}",
    }


def test_attribute_values_are_bounded_as_the_labels() -> None:
    """Past ``max_tool_values`` a tool is ``_other`` in both, and each instrument holds at most
    ``max_series_per_metric`` attribute sets."""
    guard, reader, registry, _, _ = rig(
        {"otel_metrics": True, "max_tool_values": 3, "max_series_per_metric": 8}
    )
    for i in range(40):
        guard.before_call(f"tool_{i}", {"i": i})
        guard.after_call(f"tool_{i}", {"i": i}, "ok")
    guard.end_turn()
    points = metric_points(reader)
    keys = (genai.GEN_AI_AGENT_NAME, genai.GEN_AI_TOOL_NAME, "otelguard.outcome")
    counted = otel_sums(points["otelguard.tool_calls"], keys)
    assert counted == prom_sums(registry, "otelguard_tool_calls", ("agent", "tool", "outcome"))
    assert ("otel-test", "_other", "ok") in counted and sum(counted.values()) == 40
    tools = {p.attributes[genai.GEN_AI_TOOL_NAME] for p in points[genai.EXECUTE_TOOL_DURATION]}
    assert len(tools - {"_other"}) == 3
    for name, metric_points_ in points.items():
        assert len(metric_points_) <= 8, name


def test_each_non_allow_decision_is_an_evaluation_event() -> None:
    """``gen_ai.evaluation.result`` beside each ``otelguard.decision`` event: the evaluator's name,
    the action as the label, the code as the explanation (never the message)."""
    guard, _, _, exporter, provider = rig({})
    decisions = run_leaky_session(guard, provider.get_tracer("host"))
    evaluations = [
        e for s in exporter.get_finished_spans() for e in s.events if e.name == genai.EVALUATION_RESULT
    ]
    decision_events = [
        e for s in exporter.get_finished_spans() for e in s.events if e.name == "otelguard.decision"
    ]
    assert len(evaluations) == len(decision_events) > 0
    labels = Counter((e.attributes or {})[genai.EVALUATION_SCORE_LABEL] for e in evaluations)
    assert set(labels) <= {"warn", "reject", "block", "halt"} and len(labels) == 4
    codes = {d.code for d in decisions if d.action != "allow"}
    for event in evaluations:
        attributes = dict(event.attributes or {})
        assert set(attributes) == {
            genai.EVALUATION_NAME,
            genai.EVALUATION_SCORE_LABEL,
            genai.EVALUATION_EXPLANATION,
        }
        assert attributes[genai.EVALUATION_NAME] == "otelguard"
        assert attributes[genai.EVALUATION_EXPLANATION] in codes


def test_otel_metrics_config_key_is_checked() -> None:
    with pytest.raises(ConfigError, match=r"telemetry\.otel_metrics"):
        GuardConfig.from_mapping({"telemetry": {"otel_metrics": "yes"}})
    assert GuardConfig.from_mapping({"telemetry": {"otel_metrics": True}}).telemetry.otel_metrics is True


def test_every_gen_ai_name_is_spelled_in_one_module() -> None:
    """The GenAI conventions are at Development status: a ``gen_ai.*`` string anywhere but
    ``otelguard/telemetry/genai.py`` would escape the one place a rename is made."""
    found = []
    for path in (ROOT / "otelguard").rglob("*.py"):
        if path.name == "genai.py" and path.parent.name == "telemetry":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and node.value.startswith("gen_ai.")
            ):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []
    assert genai.CONVENTIONS_VERSION in (ROOT / "docs" / "telemetry.md").read_text()


def test_without_otel_metrics_their_module_is_never_loaded() -> None:
    """Off, nothing of them runs: a guard with telemetry makes calls and turns, and the OTel metrics
    module is never imported (no meter, no instrument, no step on the call path)."""
    code = (
        "import sys\n"
        "from prometheus_client import CollectorRegistry\n"
        "from otelguard import Guard, GuardConfig\n"
        "from otelguard.telemetry import Telemetry\n"
        "guard = Guard(GuardConfig(signature_key='k'), Telemetry(registry=CollectorRegistry()), agent='a')\n"
        "for i in range(5):\n"
        "    guard.before_call('t', {'i': 1}); guard.after_call('t', {'i': 1}, 'same')\n"
        "guard.end_turn()\n"
        "print('otelguard.telemetry.otel_metrics' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
