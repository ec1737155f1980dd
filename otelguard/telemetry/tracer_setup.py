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
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final
from urllib.parse import urlsplit

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    MetricsData,
    PeriodicExportingMetricReader,
)
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


def _shown(url: str) -> str:
    """A collector's URL as the log names it: scheme, host and port only (a path, a query or user
    info may hold a token)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "the configured address"
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    return (
        f"{parts.scheme}://{host}{'' if port is None else f':{port}'}" if host else "the configured address"
    )


def _collector(endpoint: str | None, variables: Sequence[str]) -> str:
    """Where an OTLP exporter sends: ``endpoint``, else the first standard variable set, else the
    SDK's default."""
    url = endpoint or next((os.environ[name] for name in variables if os.environ.get(name)), None)
    return _shown(url or "http://localhost:4318")


_exporting = threading.local()


@contextmanager
def _exporting_quietly() -> Iterator[None]:
    """The OTLP exporters log every failed attempt, retry and give-up of an export (a dozen lines in
    20 seconds for a collector that is down); while otelguard's wrappers export, those lines are
    dropped and the wrapper says once what happened instead (``_CollectorHealth``)."""
    before = getattr(_exporting, "active", False)
    _exporting.active = True
    try:
        yield
    finally:
        _exporting.active = before


class _QuietWhileExporting(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(_exporting, "active", False)


_QUIET: Final = _QuietWhileExporting()


def _quiet_logs_of(exporter: object) -> None:
    """The filter on the logger of ``exporter``'s module, where the OTLP exporters log (a filter on a
    logger holds for its own records only, not for those of the loggers below it)."""
    for name in (type(exporter).__module__, "opentelemetry.exporter.otlp.common.http"):
        sdk_logger = logging.getLogger(name)
        if _QUIET not in sdk_logger.filters:
            sdk_logger.addFilter(_QUIET)


class _CollectorHealth:
    """Whether exports to one collector fail, said once per outage: on the first failed export
    (after the SDK's own retries), and again only after every kind that failed (spans, metrics) has
    been taken since. A collector that refuses metrics but takes spans is said once, not on every
    export."""

    _lock: Final = threading.Lock()
    _failing: Final[dict[str, set[str]]] = {}

    @classmethod
    def exported(cls, where: str, kind: str, ok: bool) -> None:
        with cls._lock:
            failing = cls._failing.setdefault(where, set())
            if ok:
                failing.discard(kind)
                return
            tell = not failing
            failing.add(kind)
        if tell:
            logger.warning(
                "otelguard: the OTLP collector at %s did not take the exported %s; spans and metrics are "
                "dropped while it does not (the agent loop is unaffected)",
                where,
                kind,
            )


def _resource(service_name: str) -> Resource:
    attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": service_name}
    return Resource.create(attributes)


class NoopSpanExporter(SpanExporter):
    """Accepts spans and drops them: spans still record, so exemplars carry real trace ids."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


class CountingExporter(SpanExporter):
    """Wraps an exporter and counts the spans of failed exports (dropped: the SDK does not retry
    them). Runs in the batch processor's thread, never in the agent loop. With ``collector`` (where
    an OTLP exporter sends) a failure is said once per outage, and the exporter's own lines about each
    attempt are left out."""

    def __init__(self, inner: SpanExporter, collector: str | None = None) -> None:
        self.inner = inner
        self.exported = 0
        self.dropped = 0
        self._lock = threading.Lock()
        self._warned = False
        self._collector = collector
        if collector is not None:
            _quiet_logs_of(inner)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            with _exporting_quietly():
                result = self.inner.export(spans)
        except Exception:  # an exporter bug must not kill the batch thread
            result = SpanExportResult.FAILURE
        ok = result is SpanExportResult.SUCCESS
        if self._collector is not None:
            _CollectorHealth.exported(self._collector, "spans", ok)
        with self._lock:
            if ok:
                self.exported += len(spans)
                return result
            self.dropped += len(spans)
            warn, self._warned = self._collector is None and not self._warned, True
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
    exporter = CountingExporter(
        inner, _collector(endpoint, OTLP_ENDPOINT_VARIABLES) if target == "otlp" else None
    )
    # Shut down by ``SpanExport.shutdown`` alone, within its bound: the SDK's own handler at exit
    # would shut it down a second time.
    provider = TracerProvider(resource=_resource(service_name), shutdown_on_exit=False)
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
    reporting = _ReportingMetricExporter(exporter, _collector(endpoint, OTLP_METRICS_ENDPOINT_VARIABLES))
    # Shut down by ``MetricExport.shutdown`` alone: the SDK's handler at exit would call it a second
    # time while a bounded first shutdown still waits on an unreachable collector, and log so.
    provider = MeterProvider(
        resource=_resource(service_name),
        metric_readers=[PeriodicExportingMetricReader(reporting)],
        shutdown_on_exit=False,
    )
    return MetricExport(provider)


class _ReportingMetricExporter(MetricExporter):
    """The OTLP metric exporter, its failures said once per outage as for spans (``CountingExporter``)."""

    def __init__(self, inner: MetricExporter, collector: str) -> None:
        # the periodic reader asks its exporter for these: the OTLP exporter's, from its variables
        super().__init__(
            preferred_temporality=getattr(inner, "_preferred_temporality", None),
            preferred_aggregation=getattr(inner, "_preferred_aggregation", None),
        )
        self.inner = inner
        self._collector = collector
        _quiet_logs_of(inner)

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        try:
            with _exporting_quietly():
                result = self.inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs)
        except Exception:  # as for spans: the reader's thread goes on
            result = MetricExportResult.FAILURE
        _CollectorHealth.exported(self._collector, "metrics", result is MetricExportResult.SUCCESS)
        return result

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self.inner.force_flush(timeout_millis=timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        with _exporting_quietly():
            self.inner.shutdown(timeout_millis=timeout_millis, **kwargs)
