"""Span and metric export for programs that own their process (``otelguard serve``, ``otelguard
demo``, examples): an SDK tracer provider with OTLP/HTTP export when an endpoint is given or the
standard ``OTEL_EXPORTER_OTLP_*`` variables are set, else a no-op exporter, always behind a
``BatchSpanProcessor`` so spans record (and exemplars exist); and an SDK meter provider exporting
the OpenTelemetry metrics over OTLP/HTTP on the SDK's periodic reader.

A library host configures its own provider instead; otelguard never installs a global one.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from typing import Final

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

__all__ = [
    "OTLP_ENDPOINT_VARIABLES",
    "OTLP_METRICS_ENDPOINT_VARIABLES",
    "CountingExporter",
    "MetricExport",
    "NoopSpanExporter",
    "SpanExport",
    "metric_export",
    "signal_url",
    "span_export_from_env",
]

logger = logging.getLogger("otelguard")

OTLP_ENDPOINT_VARIABLES: Final = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
"""Either one switches span export to OTLP/HTTP (the OTel SDK reads the rest: headers, timeout...)."""
OTLP_METRICS_ENDPOINT_VARIABLES: Final = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
)
"""Either one switches metric export to OTLP/HTTP in ``otelguard serve``."""


def signal_url(endpoint: str, signal: str) -> str:
    """The URL of one signal under a collector's base URL (``/v1/traces``, ``/v1/metrics``), as the
    SDK builds it from ``OTEL_EXPORTER_OTLP_ENDPOINT``: an explicit endpoint is used as given."""
    return f"{endpoint.rstrip('/')}/v1/{signal}"


def _resource(service_name: str) -> Resource:
    attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": service_name}
    return Resource.create(attributes)


class NoopSpanExporter(SpanExporter):
    """Accepts spans and drops them: spans still record, so exemplars carry real trace ids."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


class CountingExporter(SpanExporter):
    """Wraps an exporter and counts the spans of failed exports (dropped: the SDK does not retry
    them). Runs in the batch processor's thread, never in the agent loop."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.exported = 0
        self.dropped = 0
        self._lock = threading.Lock()
        self._warned = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self.inner.export(spans)
        except Exception:  # an exporter bug must not kill the batch thread
            result = SpanExportResult.FAILURE
        with self._lock:
            if result is SpanExportResult.SUCCESS:
                self.exported += len(spans)
                return result
            self.dropped += len(spans)
            warn, self._warned = not self._warned, True
        if warn:
            logger.warning("otelguard: span export failed; dropping spans (the agent loop is unaffected)")
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class SpanExport:
    """A tracer provider with its counting exporter; ``shutdown`` flushes within a time bound."""

    def __init__(self, provider: TracerProvider, exporter: CountingExporter, target: str) -> None:
        self.provider = provider
        self.exporter = exporter
        self.target = target

    def shutdown(self, timeout_seconds: float = 3.0) -> None:
        # An unreachable collector may hold the flush for the exporter's whole timeout: bound it.
        thread = threading.Thread(target=self.provider.shutdown, name="otelguard-span-shutdown", daemon=True)
        thread.start()
        thread.join(timeout_seconds)


def span_export_from_env(
    service_name: str, *, max_queue_size: int = 2048, endpoint: str | None = None
) -> SpanExport:
    """An SDK tracer provider exporting over OTLP/HTTP to ``endpoint`` (a collector's base URL),
    else where ``OTEL_EXPORTER_OTLP_*`` says.

    Falls back to the no-op exporter (and says so on the log) when the ``otlp`` extra is missing.
    """
    inner: SpanExporter = NoopSpanExporter()
    target = "none"
    if endpoint is not None or any(os.environ.get(name) for name in OTLP_ENDPOINT_VARIABLES):
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            from otelguard.telemetry.otlp_session import exporter_session
        except ImportError:
            logger.warning("otelguard: OTLP export is asked for but the otlp extra is not installed")
        else:
            url = signal_url(endpoint, "traces") if endpoint else None
            inner = OTLPSpanExporter(endpoint=url, session=exporter_session("TRACES"))
            target = "otlp"
    exporter = CountingExporter(inner)
    provider = TracerProvider(resource=_resource(service_name))
    batch = min(512, max_queue_size)
    provider.add_span_processor(
        BatchSpanProcessor(exporter, max_queue_size=max_queue_size, max_export_batch_size=batch)
    )
    return SpanExport(provider, exporter, target)


class MetricExport:
    """A meter provider exporting over OTLP/HTTP; ``shutdown`` exports a last time within a time bound."""

    def __init__(self, provider: MeterProvider) -> None:
        self.provider = provider

    def shutdown(self, timeout_seconds: float = 3.0) -> None:
        # the last collection and export: bounded, as an unreachable collector may hold it
        thread = threading.Thread(
            target=self.provider.shutdown, name="otelguard-metric-shutdown", daemon=True
        )
        thread.start()
        thread.join(timeout_seconds)


def metric_export(service_name: str, endpoint: str | None = None) -> MetricExport | None:
    """An SDK meter provider exporting over OTLP/HTTP to ``endpoint`` (a collector's base URL), else
    where ``OTEL_EXPORTER_OTLP_*`` says, every ``OTEL_METRIC_EXPORT_INTERVAL`` ms (the SDK's
    periodic reader, in its own thread). ``None`` (said on the log) without the ``otlp`` extra."""
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        from otelguard.telemetry.otlp_session import exporter_session
    except ImportError:
        logger.warning("otelguard: OTLP export is asked for but the otlp extra is not installed")
        return None
    url = signal_url(endpoint, "metrics") if endpoint else None
    exporter = OTLPMetricExporter(endpoint=url, session=exporter_session("METRICS"))
    provider = MeterProvider(
        resource=_resource(service_name), metric_readers=[PeriodicExportingMetricReader(exporter)]
    )
    return MetricExport(provider)
