"""Every label value and span attribute is valid UTF-8: a name holding a lone surrogate (a model can
emit one) is exported with U+FFFD in its place, and never breaks an exposition or an OTLP batch."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from otelguard import Guard, GuardConfig
from otelguard.telemetry import Telemetry

SURROGATE_TOOL = json.loads('"search\\udce9"')
SURROGATE_AGENT = "agent\ud800"
_ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=20)  # surrogates included


def _setup(**config: object) -> tuple[Guard, CollectorRegistry, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    registry = CollectorRegistry()
    telemetry = Telemetry(tracer_provider=provider, registry=registry, turn_spans=True)
    guard = Guard(GuardConfig.from_mapping(config or None), telemetry=telemetry)
    return guard, registry, exporter


def _exports_cleanly(registry: CollectorRegistry, exporter: InMemorySpanExporter) -> tuple[str, str]:
    text = generate_latest(registry).decode("utf-8")
    openmetrics = generate_openmetrics(registry).decode("utf-8")
    spans = exporter.get_finished_spans()
    assert spans
    encode_spans(spans).SerializeToString()
    return text, openmetrics


def test_surrogate_tool_name_keeps_both_expositions_and_otlp_working() -> None:
    guard, registry, exporter = _setup()
    guard.start_turn(agent=SURROGATE_AGENT)
    for _ in range(4):
        guard.before_call(SURROGATE_TOOL, {}, call_id="id\udfff")
        guard.after_call(SURROGATE_TOOL, {}, "Error: boom", failed=True, call_id="id\udfff")
    guard.end_turn()
    text, openmetrics = _exports_cleanly(registry, exporter)
    assert 'tool="search\ufffd"' in text and 'agent="agent\ufffd"' in text
    assert 'tool="search\ufffd"' in openmetrics
    names = {span.name for span in exporter.get_finished_spans()}
    assert "execute_tool search\ufffd" in names and "invoke_agent agent\ufffd" in names
    for span in exporter.get_finished_spans():
        for value in (span.attributes or {}).values():
            if isinstance(value, str):
                value.encode("utf-8")
        for event in span.events:
            for value in (event.attributes or {}).values():
                if isinstance(value, str):
                    value.encode("utf-8")


def test_surrogate_cap_key_is_exported_as_valid_utf8() -> None:
    guard, registry, exporter = _setup(caps={"turn": {"web\udce9": 1}})
    guard.start_turn()
    for _ in range(3):
        decision = guard.before_call("web\udce9", {"q": 1})
        if decision.allows_execution:
            guard.after_call("web\udce9", {"q": 1}, "ok", failed=False)
    guard.end_turn()
    text, _ = _exports_cleanly(registry, exporter)
    assert 'cap="web\ufffd"' in text


@pytest.mark.parametrize("name", ["\ud800", "a\udc80b", "\udbff\udfff", "ok"])
def test_plain_call_with_any_name_exports(name: str) -> None:
    guard, registry, exporter = _setup()
    guard.before_call(name, {})
    guard.after_call(name, {}, "ok", failed=False)
    _exports_cleanly(registry, exporter)


@settings(max_examples=100, deadline=None)
@given(tool=_ANY_TEXT, agent=_ANY_TEXT, call_id=_ANY_TEXT)
def test_any_text_names_export_cleanly(tool: str, agent: str, call_id: str) -> None:
    guard, registry, exporter = _setup()
    guard.start_turn(agent=agent)
    guard.before_call(tool, {}, call_id=call_id)
    guard.after_call(tool, {}, "Error: x", failed=True, call_id=call_id)
    guard.end_turn()
    _exports_cleanly(registry, exporter)
