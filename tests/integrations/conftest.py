"""Fixtures shared by the framework adapter tests: a fresh registry and an in-memory span exporter."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from otelguard import Telemetry


@dataclass
class Rig:
    """What a test reads after an agent run: metric samples and finished spans."""

    registry: CollectorRegistry
    exporter: InMemorySpanExporter
    provider: TracerProvider

    def telemetry(self, span_mode: str = "auto") -> Telemetry:
        return Telemetry(tracer_provider=self.provider, registry=self.registry, span_mode=span_mode)

    def sample(self, name: str, **labels: str) -> float:
        value = self.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value

    def tool_spans(self) -> list[ReadableSpan]:
        return [
            s for s in self.exporter.get_finished_spans() if (s.attributes or {}).get("otelguard.args_hash")
        ]


@pytest.fixture
def rig() -> Iterator[Rig]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield Rig(CollectorRegistry(), exporter, provider)
    provider.shutdown()
