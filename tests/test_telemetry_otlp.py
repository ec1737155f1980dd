"""OTLP span export (the `otlp` extra) to a loopback OTLP/HTTP receiver, and an endpoint that is down."""

from __future__ import annotations

import gzip
import threading
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from prometheus_client import CollectorRegistry

from otelguard import Guard, GuardConfig
from otelguard.telemetry import Telemetry
from otelguard.telemetry.tracer_setup import NoopSpanExporter, span_export_from_env
from tests.e2e import free_port


class Receiver(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _ReceiverHandler)
        self.requests: list[ExportTraceServiceRequest] = []
        self.metric_requests: list[ExportMetricsServiceRequest] = []
        self.paths: list[str] = []

    def spans(self) -> list[tuple[dict[str, Any], Any]]:
        """(resource attributes, span) for every span received."""
        found = []
        for request in self.requests:
            for resource_spans in request.resource_spans:
                resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    found += [(resource, span) for span in scope_spans.spans]
        return found


class _ReceiverHandler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        encoding = self.headers.get("Content-Encoding")
        if encoding == "gzip":
            body = gzip.decompress(body)
        elif encoding == "deflate":
            body = zlib.decompress(body)
        reply: bytes
        if self.path == "/v1/metrics":
            metrics = ExportMetricsServiceRequest()
            metrics.ParseFromString(body)
            self.server.metric_requests.append(metrics)
            reply = ExportMetricsServiceResponse().SerializeToString()
        else:
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            self.server.requests.append(request)
            reply = ExportTraceServiceResponse().SerializeToString()
        self.server.paths.append(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def run_calls(guard: Guard, count: int) -> list[str]:
    actions = []
    for i in range(count):
        args = {"path": f"f{i % 3}"}
        decision = guard.before_call("read_file", args)
        if decision.allows_execution:
            decision = guard.after_call("read_file", args, "same content")
        actions.append(decision.action)
    return actions


def test_spans_arrive_at_an_otlp_http_receiver(receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{receiver.server_address[1]}")
    export = span_export_from_env("otlp-test")
    assert export.target == "otlp"
    guard = Guard(
        GuardConfig(signature_key="k"), Telemetry(export.provider, CollectorRegistry()), agent="otlp"
    )
    run_calls(guard, 6)
    assert export.provider.force_flush(10_000)
    export.shutdown()
    assert receiver.paths and all(path == "/v1/traces" for path in receiver.paths)
    spans = receiver.spans()
    assert len(spans) == 6 and export.exporter.exported == 6
    resource, span = spans[-1]
    assert resource["service.name"] == "otlp-test"
    assert span.name == "execute_tool read_file"
    attributes = {a.key: a.value for a in span.attributes}
    assert attributes["gen_ai.tool.name"].string_value == "read_file"
    assert attributes["otelguard.decision.code"].string_value == "no_progress_warn"
    assert attributes["otelguard.decision.count"].int_value == 2
    assert [e.name for e in span.events] == ["otelguard.decision", "gen_ai.evaluation.result"]
    evaluation = {a.key: a.value.string_value for a in span.events[1].attributes}
    assert evaluation == {
        "gen_ai.evaluation.name": "otelguard",
        "gen_ai.evaluation.score.label": "warn",
        "gen_ai.evaluation.explanation": "no_progress_warn",
    }


def test_no_otlp_variables_means_a_noop_exporter(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    export = span_export_from_env("noop-test")
    assert export.target == "none"
    assert isinstance(export.exporter.inner, NoopSpanExporter)
    export.shutdown()


def test_endpoint_down_drops_spans_and_the_agent_loop_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{free_port()}/v1/traces")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "1")
    export = span_export_from_env("down-test", max_queue_size=64)
    registry = CollectorRegistry()
    guard = Guard(GuardConfig(signature_key="k"), Telemetry(export.provider, registry), agent="down")
    actions = run_calls(guard, 3000)
    assert len(actions) == 3000 and set(actions) <= {"allow", "warn"}  # every call got its decision
    export.provider.force_flush(5_000)
    export.shutdown(5)
    # spans past the bounded queue are dropped by the SDK; those that reached the exporter are counted
    assert export.exporter.dropped > 0
    assert export.exporter.exported == 0
    assert registry.get_sample_value("otelguard_tool_calls_total", {"agent": "down", "tool": "read_file",
                                                                      "outcome": "ok"}) == 3000  # fmt: skip


def test_a_failing_collector_is_said_once_per_outage(caplog: pytest.LogCaptureFixture) -> None:
    """Spans and metrics failing together is one line; one kind taken again while the other still
    fails says nothing; once everything is taken again, the next failure is a new outage, said again.
    The collector is named by its scheme, host and port only."""
    from otelguard.telemetry.tracer_setup import _collector, _CollectorHealth

    where = _collector(f"http://user:pw@127.0.0.1:{free_port()}/token-path?key=k", ())
    assert "token" not in where and "pw" not in where and "key" not in where
    caplog.set_level("WARNING", logger="otelguard")
    for kind, ok in [("spans", False), ("metrics", False), ("spans", True), ("spans", False),
                     ("spans", True), ("metrics", True), ("metrics", False)]:  # fmt: skip
        _CollectorHealth.exported(where, kind, ok)
    said = [r.getMessage() for r in caplog.records if "did not take" in r.getMessage()]
    assert said == [
        f"otelguard: the OTLP collector at {where} did not take the exported spans; spans and metrics "
        "are dropped while it does not (the agent loop is unaffected)",
        f"otelguard: the OTLP collector at {where} did not take the exported metrics; spans and metrics "
        "are dropped while it does not (the agent loop is unaffected)",
    ]
