"""What the bench times: the floors, and guards in each telemetry configuration.

A runner's ``round(index, turn)`` runs one turn of calls and returns the nanoseconds it took. Work
that is not the guard's (building guards, creating the host's own spans, ending them) happens outside
the timed section.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Final, Protocol

import orjson
import xxhash
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from prometheus_client import CollectorRegistry

from otelguard import Guard, GuardConfig
from otelguard.core.scripted import ScriptedCall
from otelguard.telemetry import Telemetry

__all__ = [
    "BENCH_KEY",
    "CONFIGURATIONS",
    "TREE_CONFIGURATION",
    "TURNS_PER_SESSION",
    "FloorRunner",
    "GuardRunner",
    "NaiveFloorRunner",
    "Runner",
    "SpanPipeline",
    "bench_config",
    "guard_alone",
    "make_guard_factory",
    "metrics_guard",
    "run_turn",
    "runners_for",
    "tree_guard_factory",
]

BENCH_KEY: Final = "otelguard-bench-signature-key"
_KEY_BYTES: Final = BENCH_KEY.encode()
_SORT: Final = orjson.OPT_SORT_KEYS
TURNS_PER_SESSION: Final = 20
"""A new Guard every 20 turns (1,000 calls): one Guard is one session, as in a real host, so the
default session caps (200 web searches) are never what the bench measures."""

TREE_CONFIGURATION: Final = "guard_in_tree"
"""The guard alone, one level down in a delegation tree with tree caps on web searches and subagents."""

CONFIGURATIONS: Final = (
    # (figure prefix, span_mode or None for no telemetry at all)
    ("guard_alone", None),
    (TREE_CONFIGURATION, None),
    ("guard_metrics", "off"),
    ("guard_metrics_spans_own", "own"),
    ("guard_metrics_spans_auto", "auto"),
    ("guard_metrics_spans_decisions", "decisions"),
)


def bench_config() -> GuardConfig:
    """The default config with a fixed key (so no random-key warning and stable hashes)."""
    return GuardConfig.from_mapping({"signature_key": BENCH_KEY})


class Runner(Protocol):
    name: str

    def round(self, index: int, turn: Sequence[ScriptedCall]) -> int: ...

    def close(self) -> None: ...


class FloorRunner:
    """The work no guard can avoid, with the fastest tools: canonical JSON, keyed hash, result hash."""

    def __init__(self, name: str) -> None:
        self.name = name

    def round(self, index: int, turn: Sequence[ScriptedCall]) -> int:
        dumps, blake2b, xxh3, key = orjson.dumps, hashlib.blake2b, xxhash.xxh3_128_intdigest, _KEY_BYTES
        start = time.perf_counter_ns()
        for call in turn:
            blake2b(dumps(call.args, option=_SORT), digest_size=8, key=key).hexdigest()
            xxh3(call.result.encode())
        return time.perf_counter_ns() - start

    def close(self) -> None:
        pass


class NaiveFloorRunner:
    """The same work with the standard library only (stdlib JSON, SHA-256), for reference."""

    def __init__(self, name: str) -> None:
        self.name = name

    def round(self, index: int, turn: Sequence[ScriptedCall]) -> int:
        dumps, sha256 = json.dumps, hashlib.sha256
        start = time.perf_counter_ns()
        for call in turn:
            canonical = dumps(call.args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
            sha256(canonical.encode()).hexdigest()
            sha256(call.result.encode()).hexdigest()
        return time.perf_counter_ns() - start

    def close(self) -> None:
        pass


def run_turn(guard: Guard, turn: Sequence[ScriptedCall]) -> None:
    """One turn the way a host drives the guard: start, before/after each call, end.

    The same steps as ``otelguard.core.scripted.play_call``, written out as its own timed loop so the bench
    times the guard and not the driver's ``ScriptStep`` records.
    """
    guard.start_turn()
    for call in turn:
        decision = guard.before_call(call.tool_name, call.args, call.call_id)
        if decision.allows_execution:
            guard.after_call(call.tool_name, call.args, call.result, failed=call.failed, call_id=call.call_id)
    guard.end_turn()


class _NoopExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


class SpanPipeline:
    """An SDK tracer provider with a BatchSpanProcessor and a no-op exporter: real span cost, no I/O."""

    def __init__(self) -> None:
        self.provider = TracerProvider()
        self.provider.add_span_processor(BatchSpanProcessor(_NoopExporter()))
        self.host_tracer = self.provider.get_tracer("otelguard-bench-host")

    def close(self) -> None:
        self.provider.shutdown()


def make_guard_factory(span_mode: str | None, spans: SpanPipeline | None) -> Callable[[], Guard]:
    """Guards for one configuration. They share one ``Telemetry`` (one registry), as a host's do."""
    config = bench_config()
    if span_mode is None:
        return lambda: Guard(config)
    telemetry = Telemetry(
        tracer_provider=spans.provider if spans is not None and span_mode != "off" else None,
        registry=CollectorRegistry(),
        span_mode=span_mode,
    )
    return lambda: Guard(config, telemetry)


def tree_guard_factory() -> Callable[[], Guard]:
    """Guards one level down in a delegation tree, each in a tree of its own (a new conversation's),
    with ``web_search`` and ``subagents`` tree caps the workload never reaches: what a tree costs a call."""
    tree_caps = {"web_search": 10**9, "subagents": 10**9}
    config = GuardConfig.from_mapping({"signature_key": BENCH_KEY, "caps": {"tree": tree_caps}})
    return lambda: Guard(config, session_id=uuid.uuid4().hex).subagent_guard("subagent")


class GuardRunner:
    """A guard configuration; ``host_spans`` puts each call under a recording span of the host's."""

    def __init__(
        self,
        name: str,
        make_guard: Callable[[], Guard],
        host_tracer: trace.Tracer | None = None,
        flush: Callable[[], object] | None = None,
    ) -> None:
        self.name = name
        self._make_guard = make_guard
        self._host_tracer = host_tracer
        self._flush = flush
        self._guard: Guard | None = None

    def round(self, index: int, turn: Sequence[ScriptedCall]) -> int:
        if self._guard is None or index % TURNS_PER_SESSION == 0:
            self._guard = self._make_guard()
        if self._host_tracer is not None:
            elapsed = self._round_under_host_spans(self._guard, turn, self._host_tracer)
        else:
            start = time.perf_counter_ns()
            run_turn(self._guard, turn)
            elapsed = time.perf_counter_ns() - start
        if self._flush is not None:
            # Export this round's spans now, untimed, so the exporter thread's work does not land
            # in some other runner's round. Ending a span (queueing it) stays timed.
            self._flush()
        return elapsed

    def _round_under_host_spans(
        self, guard: Guard, turn: Sequence[ScriptedCall], tracer: trace.Tracer
    ) -> int:
        # The host's spans are the host's cost: created and ended outside the timed section. Only
        # making each one current (a contextvar set/reset) is timed along with the guard.
        spans = [tracer.start_span(f"execute_tool {call.tool_name}") for call in turn]
        contexts = [trace.set_span_in_context(span) for span in spans]
        attach, detach = otel_context.attach, otel_context.detach
        start = time.perf_counter_ns()
        guard.start_turn()
        for call, ctx in zip(turn, contexts, strict=True):
            token = attach(ctx)
            decision = guard.before_call(call.tool_name, call.args, call.call_id)
            if decision.allows_execution:
                guard.after_call(
                    call.tool_name, call.args, call.result, failed=call.failed, call_id=call.call_id
                )
            detach(token)
        guard.end_turn()
        elapsed = time.perf_counter_ns() - start
        for span in spans:
            span.end()
        return elapsed

    def close(self) -> None:
        self._guard = None


def runners_for(workload: str, prefixes: Sequence[str], spans: SpanPipeline) -> list[Runner]:
    """The floors and the named guard configurations, for one workload."""
    runners: list[Runner] = [FloorRunner(f"floor_{workload}"), NaiveFloorRunner(f"naive_floor_{workload}")]
    for prefix, span_mode in CONFIGURATIONS:
        if prefix not in prefixes:
            continue
        host = spans.host_tracer if span_mode == "auto" else None
        flush = spans.provider.force_flush if span_mode not in (None, "off") else None
        make = tree_guard_factory() if prefix == TREE_CONFIGURATION else make_guard_factory(span_mode, spans)
        runners.append(GuardRunner(f"{prefix}_{workload}", make, host, flush))
    return runners


def guard_alone() -> Guard:
    return Guard(bench_config())


def metrics_guard(registry: CollectorRegistry) -> Guard:
    return Guard(bench_config(), Telemetry(registry=registry, span_mode="off"))
