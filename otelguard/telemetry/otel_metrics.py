"""The OpenTelemetry metrics (``telemetry.otel_metrics: true``): otelguard's counts through the OTel
Metrics API, for deployments that read an OpenTelemetry Collector and no Prometheus scrape
(docs/telemetry.md).

Attribute values are bounded exactly as the Prometheus labels are: the same ``LabelBound`` objects
map a tool or agent name to itself or to ``_other``, and each instrument holds at most
``telemetry.max_series_per_metric`` attribute sets (``SeriesBound``), so an OTLP backend and
``/metrics`` show the same names and the same counts.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Final

from opentelemetry.metrics import Counter, Histogram, Meter

from otelguard.core.decisions import MODEL_OUTCOMES, MODEL_TOOL, Decision, TurnSummary
from otelguard.core.observers import CallEvent, GuardObserver, ModelEvent
from otelguard.telemetry import attributes as attr
from otelguard.telemetry import genai
from otelguard.telemetry.metrics import LabelBound, LabelSpace, SeriesBound
from otelguard.telemetry.names import call_error_type, counts_before

__all__ = [
    "DECISIONS",
    "MODEL_CALLS",
    "MODEL_TOKENS",
    "TOOL_CALLS",
    "TURNS",
    "OtelInstruments",
    "OtelMetricsTelemetry",
    "OtelSpace",
]

DECISIONS: Final = "otelguard.decisions"
TOOL_CALLS: Final = "otelguard.tool_calls"
TURNS: Final = "otelguard.turns"
MODEL_CALLS: Final = "otelguard.model_calls"
MODEL_TOKENS: Final = "otelguard.model_tokens"
"""otelguard's own name, not the conventions' ``gen_ai.client.token.usage``: that histogram belongs
to the model client's instrumentation, and the same tokens under its name would count twice."""

_RAN: Final = frozenset(("ok", "failed"))
_NONE: Final = ""
"""An absent attribute (``error.type`` of a call that did not fail) in a bounded attribute set."""

Attributes = Mapping[str, str]


class OtelInstruments:
    """The seven instruments of one ``Telemetry``, created on the first guard that turns them on."""

    def __init__(self, meter: Meter) -> None:
        self.decisions: Counter = meter.create_counter(
            DECISIONS, unit="{decision}", description="Non-allow guard decisions."
        )
        self.tool_calls: Counter = meter.create_counter(
            TOOL_CALLS, unit="{tool_call}", description="Guarded tool calls, by outcome."
        )
        self.turns: Counter = meter.create_counter(
            TURNS, unit="{turn}", description="Guarded turns, by outcome."
        )
        self.model_calls: Counter = meter.create_counter(
            MODEL_CALLS, unit="{call}", description="Model replies, by what they asked for."
        )
        self.model_tokens: Counter = meter.create_counter(
            MODEL_TOKENS, unit="{token}", description="Tokens of model calls as the provider reported them."
        )
        self.duration: Histogram = meter.create_histogram(
            genai.EXECUTE_TOOL_DURATION,
            unit=genai.EXECUTE_TOOL_DURATION_UNIT,
            description="Duration of a tool call that ran.",
            explicit_bucket_boundaries_advisory=genai.DURATION_BUCKETS,
        )
        self.turn_tool_calls: Histogram = meter.create_histogram(
            genai.INVOKE_AGENT_TOOL_CALLS,
            unit=genai.INVOKE_AGENT_TOOL_CALLS_UNIT,
            description="Tool calls in one guarded turn.",
            explicit_bucket_boundaries_advisory=attr.TURN_TOOL_CALLS_BUCKETS,
        )


class OtelSpace:
    """Bounded attribute sets for the instruments, sharing one ``LabelSpace``'s name bounds.

    An attribute set is cached by the raw values only while every value is within its bound, so
    the cache is as bounded as the attribute sets themselves.
    """

    def __init__(self, instruments: OtelInstruments, space: LabelSpace) -> None:
        self.instruments = instruments
        self._space = space
        self._series = {
            name: SeriesBound()
            for name in (
                "decisions",
                "tool_calls",
                "turns",
                "duration",
                "agent",
                "model_calls",
                "model_tokens",
            )
        }
        self._cache: dict[tuple[str, ...], Attributes] = {}
        self._lock = threading.Lock()

    def call_ended(self, call: CallEvent, outcome: str, error_type: str | None) -> None:
        """Count one call, its decisions, and (when it ran) how long it took; ``error_type`` is the
        call span's (``tool_error``, or the code of a block/halt after it ran), ``None`` when it passed."""
        ended = time.time_ns()
        agent, tool = _name(call.agent), _name(call.tool_name)
        space, instruments = self._space, self.instruments
        bounds = (space.agent, space.tool)
        instruments.tool_calls.add(
            1,
            self._attributes(
                "tool_calls", (genai.GEN_AI_AGENT_NAME, genai.GEN_AI_TOOL_NAME, attr.OUTCOME), bounds,
                (agent, tool), (outcome,),
            ),
        )  # fmt: skip
        decision = call.decision
        if counts_before(call):
            self._count_decision(agent, tool, call.before)
        if decision.action != "allow":
            self._count_decision(agent, tool, decision)
        if outcome in _RAN and call.start_time_ns:
            instruments.duration.record(
                max(0, ended - call.start_time_ns) / 1e9,
                self._attributes(
                    "duration", (genai.GEN_AI_TOOL_NAME, genai.ERROR_TYPE), (space.tool,), (tool,),
                    (error_type or _NONE,),
                ),
            )  # fmt: skip

    def turn_ended(self, summary: TurnSummary) -> None:
        agent = _name(summary.agent)
        bounds = (self._space.agent,)
        self.instruments.turns.add(
            1,
            self._attributes(
                "turns", (genai.GEN_AI_AGENT_NAME, attr.TURN_OUTCOME), bounds, (agent,), (summary.outcome,)
            ),
        )
        self.instruments.turn_tool_calls.record(
            summary.tool_calls, self._attributes("agent", (genai.GEN_AI_AGENT_NAME,), bounds, (agent,), ())
        )

    def model_called(self, event: ModelEvent) -> None:
        """Count a reply by what it asked for, its tokens by type, and a non-allow decision under
        ``gen_ai.tool.name`` ``model``, as ``otelguard_model_*`` and ``otelguard_decisions`` do."""
        agent = _name(event.agent)
        bounds = (self._space.agent,)
        if event.outcome in MODEL_OUTCOMES:
            self.instruments.model_calls.add(
                1,
                self._attributes(
                    "model_calls", (genai.GEN_AI_AGENT_NAME, attr.OUTCOME), bounds, (agent,), (event.outcome,)
                ),
            )
            for kind, tokens in zip(attr.TOKEN_KINDS, (event.input_tokens, event.output_tokens), strict=True):
                if type(tokens) is int and tokens > 0:
                    self.instruments.model_tokens.add(
                        tokens,
                        self._attributes(
                            "model_tokens", (genai.GEN_AI_AGENT_NAME, genai.GEN_AI_TOKEN_TYPE), bounds,
                            (agent,), (kind,),
                        ),
                    )  # fmt: skip
        if event.decision.action != "allow":
            self._count_decision(agent, MODEL_TOOL, event.decision)

    def _count_decision(self, agent: str, tool: str, decision: Decision) -> None:
        self.instruments.decisions.add(
            1,
            self._attributes(
                "decisions",
                (genai.GEN_AI_AGENT_NAME, genai.GEN_AI_TOOL_NAME, attr.DECISION_ACTION, attr.DECISION_CODE),
                (self._space.agent, self._space.tool),
                (agent, tool),
                (decision.action, decision.code),
            ),
        )

    def _attributes(
        self,
        instrument: str,
        keys: tuple[str, ...],
        bounds: tuple[LabelBound, ...],
        host_chosen: tuple[str, ...],
        constants: tuple[str, ...],
    ) -> Attributes:
        """The attribute set: host-chosen values bounded, then code constants, within the
        instrument's series bound (``SeriesBound``: past it the host-chosen values are ``_other``)."""
        key = (instrument, *host_chosen, *constants)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        bounded = tuple(bound(value) for bound, value in zip(bounds, host_chosen, strict=True))
        values = self._series[instrument].admit((*bounded, *constants), len(bounded), self._space.max_series)
        attributes = {name: value for name, value in zip(keys, values, strict=True) if value != _NONE}
        if values == (*host_chosen, *constants):
            with self._lock:
                self._cache[key] = attributes
        return attributes


def _name(value: object) -> str:
    """A host-chosen name as exported: a string as it is, anything else ``_other``."""
    return value if isinstance(value, str) else attr.OTHER


class OtelMetricsTelemetry(GuardObserver):
    """The OTel metrics of one guard (``telemetry.otel_metrics: true``): one observer of its
    ``ObserverGroup``, after the spans and the Prometheus metrics; a guard without them has none."""

    wants_call_start = False

    def __init__(self, otel: OtelSpace) -> None:
        self._otel = otel

    def on_call_end(self, call: CallEvent, token: object) -> None:
        outcome = call.outcome or "ok"
        self._otel.call_ended(call, outcome, call_error_type(call, outcome))

    def on_turn_end(self, summary: TurnSummary) -> None:
        self._otel.turn_ended(summary)

    def on_model_call(self, event: ModelEvent) -> None:
        self._otel.model_called(event)
