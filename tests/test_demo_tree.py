"""The demo's runaway delegation tree: one conversation whose agents hand a draft back and forth, delegate
down to the depth limit and fan out until the tree cap; every refusal shows in the metrics, and the
delegated agents' turn spans hang under the handoffs that started them (one trace)."""

from __future__ import annotations

import threading

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from otelguard import GuardConfig
from otelguard.core import decisions as codes
from otelguard.demo.simulation import (
    SCENARIOS,
    TREE_CAP,
    TREE_SCENARIO,
    DemoStats,
    SimulatedAgent,
    tree_config,
)
from otelguard.telemetry import Telemetry


def test_the_runaway_tree_is_warned_refused_stopped_and_capped() -> None:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    registry = CollectorRegistry()
    stats = DemoStats()
    config = GuardConfig.from_mapping(
        {"mode": "unattended", "signature_key": "demo", "telemetry": {"turn_spans": True}}
    )
    agent = SimulatedAgent(
        "research-agent",
        0,
        config,
        Telemetry(tracer_provider=provider, registry=registry),
        stats,
        threading.Event(),
        seed=1,
        interval=0,
    )
    assert TREE_SCENARIO in SCENARIOS
    agent.run_tree()  # what run_turn plays for the tree scenario: a new conversation of its own
    snap = stats.snapshot()
    assert snap["codes"] == {
        codes.DELEGATION_CYCLE_WARN: 1,
        codes.DELEGATION_CYCLE_REJECT: 1,
        codes.DELEGATION_CYCLE_BLOCK: 1,
        codes.DELEGATION_DEPTH: 1,
        codes.CAP_TREE: 1,
    }
    assert snap["halted_turns"] == 2  # the reviewer stopped by the cycle, the root by the tree cap

    def value(name: str, **labels: str) -> float:
        return registry.get_sample_value(name, labels) or 0.0

    assert value("otelguard_cap_hits_total", agent="research-agent", cap="subagents", scope="tree") == 1
    assert value("otelguard_delegations_total", agent="summarizer", outcome="refused") == 1
    assert value("otelguard_delegation_depth_bucket", agent="summarizer", le="5.0") == 1
    finished = spans.get_finished_spans()
    assert len({span.context.trace_id for span in finished}) == 1  # one trace per tree
    turns = [span for span in finished if span.name.startswith("invoke_agent")]
    depths = sorted(span.attributes["otelguard.delegation.depth"] for span in turns)  # type: ignore[index]
    assert depths == [0, 1, 1, 2, 2, 3, 3, 4]
    by_id = {span.context.span_id: span for span in finished}
    for turn in turns:
        if turn.attributes["otelguard.delegation.depth"]:  # type: ignore[index]
            assert turn.parent is not None and by_id[turn.parent.span_id].name == "execute_tool handoff"
    provider.shutdown()


def test_a_config_with_its_own_tree_caps_keeps_them() -> None:
    mine = GuardConfig.from_mapping({"caps": {"tree": {"web_search": 9}}})
    assert tree_config(mine) is mine
    assert dict(tree_config(GuardConfig()).caps.tree) == {"subagents": TREE_CAP}
    assert tree_config(GuardConfig()).caps.turn == GuardConfig().caps.turn
