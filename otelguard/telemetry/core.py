"""``Telemetry``: turns guard decisions into OpenTelemetry spans and Prometheus metrics (docs/telemetry.md).

One ``Telemetry`` may serve many guards: ``bind(settings)`` returns a per-guard observer that holds
the turn span, while metric families, label bounds and the signature-series bound are shared. That
observer is a ``GuardTelemetry``: observers of one concern each (``spans``, ``prometheus``,
``otel_metrics``) composed by the core's ``ObserverGroup``.
Nothing raw is exported: only tool names, codes, counts, the keyed ``args_hash`` and refusal
categories that look like identifiers.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from opentelemetry import metrics, trace
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider
from prometheus_client import REGISTRY, CollectorRegistry

from otelguard._version import __version__
from otelguard.config.telemetry import TelemetrySettings
from otelguard.core.observers import GuardObserver, ObserverGroup
from otelguard.telemetry.metrics import LabelSpace, families_for
from otelguard.telemetry.names import refusal_category
from otelguard.telemetry.prometheus import PrometheusTelemetry, prime_agent
from otelguard.telemetry.spans import MAX_DELEGATION_PARENTS, DelegationParents, SpanTelemetry

if TYPE_CHECKING:
    from otelguard.state.reports import StateReport
    from otelguard.telemetry.otel_metrics import OtelInstruments, OtelSpace

__all__ = ["MAX_DELEGATION_PARENTS", "DelegationParents", "GuardTelemetry", "Telemetry", "refusal_category"]

_default: Telemetry | None = None
_default_lock = threading.Lock()


class Telemetry:
    """Spans and metrics for every guard decision.

    ``tracer_provider``/``registry``/``meter_provider`` default to the global OTel providers and
    prometheus_client's default registry. Keyword settings left at ``None`` come from the guard
    config's ``telemetry:`` section (see docs/configuration.md). Never installs a global provider.
    The meter provider is used only by guards with ``telemetry.otel_metrics`` on.
    """

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        registry: CollectorRegistry | None = None,
        *,
        meter_provider: MeterProvider | None = None,
        otel_metrics: bool | None = None,
        span_mode: str | None = None,
        turn_spans: bool | None = None,
        max_tool_values: int | None = None,
        max_signature_series: int | None = None,
        max_series_per_metric: int | None = None,
    ) -> None:
        overrides: dict[str, Any] = {
            "span_mode": span_mode,
            "turn_spans": turn_spans,
            "max_tool_values": max_tool_values,
            "max_signature_series": max_signature_series,
            "max_series_per_metric": max_series_per_metric,
            "otel_metrics": otel_metrics,
        }
        self._overrides = {k: v for k, v in overrides.items() if v is not None}
        TelemetrySettings(**self._overrides)  # raises ConfigError naming telemetry.<key>
        self._tracer = trace.get_tracer("otelguard", __version__, tracer_provider=tracer_provider)
        self.registry: CollectorRegistry = registry if registry is not None else REGISTRY
        self._families = families_for(self.registry)
        self._spaces: dict[tuple[int, int], LabelSpace] = {}
        self._meter_provider = meter_provider
        self._instruments: OtelInstruments | None = None
        self._otel_spaces: dict[tuple[int, int], OtelSpace] = {}
        self._lock = threading.Lock()
        self._parents = DelegationParents()  # shared by every guard bound here: a tree's guards

    @classmethod
    def default(cls) -> Telemetry:
        """The process-wide ``Telemetry()`` (global tracer provider, default registry) that
        ``Guard(config, telemetry=True)`` uses, so label bounds hold per process, not per guard."""
        global _default
        with _default_lock:
            if _default is None:
                _default = cls()
            return _default

    def settings(self, settings: TelemetrySettings | None = None) -> TelemetrySettings:
        """The effective settings: the config's section with this object's keyword overrides."""
        return replace(settings or TelemetrySettings(), **self._overrides)

    def bind(
        self,
        settings: TelemetrySettings | None = None,
        *,
        random_signature_key: bool = False,
        caps: tuple[tuple[str, str], ...] = (),
    ) -> GuardObserver:
        """A per-guard observer (the guard calls this once with ``config.telemetry``): a
        ``GuardTelemetry`` of its spans, Prometheus and (``otel_metrics``) OTel metrics observers, or
        the Prometheus observer alone when the guard has neither spans nor OTel metrics.

        ``random_signature_key``: the guard hashes with the process's random key, so its hashes match
        no other process's; the first time one is exported (on a recording span, or as a looping
        signature's series) that is said once on the ``otelguard`` logger, with how to set a key.
        ``caps``: the guard's ``(cap, scope)`` pairs with a limit; the observer creates their hit
        series at 0, with the agent's other alerting series, the first time it sees an agent.
        """
        effective = self.settings(settings)
        observers: list[GuardObserver] = []
        spans = None
        if effective.span_mode != "off":  # off: no span, not even a turn's, so no spans observer
            spans = SpanTelemetry(self._tracer, effective, self._parents)
            spans.unkeyed = random_signature_key
            observers.append(spans)
        space = self._space(effective)
        prometheus = PrometheusTelemetry(
            space, effective, caps, spans.exemplar if spans is not None else None
        )
        prometheus.unkeyed = random_signature_key
        observers.append(prometheus)
        if effective.otel_metrics:  # else not one extra step per call
            from otelguard.telemetry.otel_metrics import OtelMetricsTelemetry  # only when turned on

            observers.append(OtelMetricsTelemetry(self._otel_space(space)))
        return observers[0] if len(observers) == 1 else GuardTelemetry(observers)

    def prime(
        self, agent: str = "default", *, tools: tuple[str, ...] = (), caps: tuple[str, ...] = ()
    ) -> None:
        """Create at 0 the series that alerts and dashboards read before any call, so that ``rate()``
        counts their first increment: every turn outcome, each cap's hits (turn and session), the
        per-agent histograms, and ``outcome="ok"`` of each of ``tools`` (the other outcomes of a tool
        appear with their first call: no alert selects on them)."""
        space = self._space(self.settings())
        prime_agent(space, agent, tuple((cap, scope) for cap in caps for scope in ("turn", "session")))
        for tool in tools:
            space.tool_calls(agent, tool, "ok")

    def state_reported(self, report: StateReport) -> None:
        """Count a use of the shared store: the listener a host wires a shared session-cap backend to
        (``otelguard.hosting``), and ``otelguard serve``'s check of it at start."""
        self._families.state().record(report)

    def _otel_space(self, space: LabelSpace) -> OtelSpace:
        """The OTel attribute space sharing ``space``'s name bounds (instruments made on first use:
        a process that never turns ``otel_metrics`` on never creates a meter)."""
        from otelguard.telemetry.otel_metrics import OtelInstruments, OtelSpace  # only when turned on

        with self._lock:
            if self._instruments is None:
                meter = metrics.get_meter("otelguard", __version__, meter_provider=self._meter_provider)
                self._instruments = OtelInstruments(meter)
            key = (id(space.agent), id(space.tool))
            otel = self._otel_spaces.get(key)
            if otel is None:
                otel = self._otel_spaces[key] = OtelSpace(self._instruments, space)
            return otel

    def _space(self, settings: TelemetrySettings) -> LabelSpace:
        key = (settings.max_tool_values, settings.max_series_per_metric)
        space = self._spaces.get(key)
        if space is None:
            space = self._spaces.setdefault(key, LabelSpace(self._families, *key))
        return space


class GuardTelemetry(ObserverGroup, GuardObserver):
    """One guard's telemetry: its observers of one concern each (``SpanTelemetry``,
    ``PrometheusTelemetry``, ``OtelMetricsTelemetry``), composed by the core's ``ObserverGroup`` as
    any guard's observers are: each called in turn, a failing one logged once and counted (stage
    ``observer``) while the others still record. It is the group itself, seen by the guard as one
    observer (its hooks are the group's methods: no step between them). ``observers``: those, in
    the order they run."""

    def __init__(self, observers: Iterable[GuardObserver]) -> None:
        super().__init__(observers)
        self.observers = self._observers

    on_turn_start = ObserverGroup.turn_started
    on_call_start = ObserverGroup.call_started  # type: ignore[assignment]
    on_call_end = ObserverGroup.call_ended  # type: ignore[assignment]  # its token: the group's tokens
    on_turn_end = ObserverGroup.turn_ended
    on_model_call = ObserverGroup.model_called
    on_internal_error = ObserverGroup.report
