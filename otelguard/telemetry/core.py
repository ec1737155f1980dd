"""``Telemetry``: turns guard decisions into OpenTelemetry spans and Prometheus metrics (docs/telemetry.md).

One ``Telemetry`` may serve many guards: ``bind(settings)`` returns a per-guard observer that holds
the turn span, while metric families, label bounds and the signature-series bound are shared.
Nothing raw is exported: only tool names, codes, counts, the keyed ``args_hash`` and refusal
categories that look like identifiers.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final, cast

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import (
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TracerProvider,
)
from prometheus_client import REGISTRY, CollectorRegistry

from otelguard._version import __version__
from otelguard.config.telemetry import TelemetrySettings
from otelguard.core.bounded_map import BoundedMap
from otelguard.core.decisions import (
    CAP_SCOPES,
    LOOP_CODES,
    TURN_OUTCOMES,
    Decision,
    TurnSummary,
)
from otelguard.core.observers import CallEvent, GuardObserver, TurnInfo
from otelguard.core.signatures import MAX_NAME_CHARS, RANDOM_KEY_NOTE, bounded_name, claim_random_key_note
from otelguard.telemetry import attributes as attr
from otelguard.telemetry import genai
from otelguard.telemetry.metrics import LabelSpace, families_for, valid_utf8
from otelguard.telemetry.tallies import Exemplar

if TYPE_CHECKING:
    from otelguard.core.tree import DelegationTree
    from otelguard.state.reports import StateReport
    from otelguard.telemetry.otel_metrics import OtelInstruments, OtelSpace

__all__ = ["DelegationParents", "GuardTelemetry", "MeteredGuardTelemetry", "Telemetry"]

_REFUSING_ACTIONS: Final = frozenset(("block", "halt", "reject"))
_LOOP_ACTIONS: Final = frozenset(("warn", "reject", "block", "halt"))  # every action but allow
_RAN: Final = frozenset(("ok", "failed"))
# A refusal category is host-chosen text: export it only when it looks like a category, never a sentence.
_CATEGORY: Final = re.compile(r"[A-Za-z][A-Za-z0-9_.:-]{0,63}")
_REFUSED_FALLBACK: Final = "refused"
_ERROR: Final = Status(StatusCode.ERROR)
MAX_DELEGATION_PARENTS: Final = 1024
"""Delegating calls whose span a ``Telemetry`` remembers for the turn spans of the agents they start."""


class DelegationParents:
    """The span of each recent delegating call, by the place in the tree of the agent it starts, so
    that agent's ``invoke_agent`` span starts under it (the delegating call's span never becomes
    current: its ``before_call`` and ``after_call`` may run in different contexts). Bounded: the
    least recently used are dropped. Keyed by digests only; nothing of it is exported."""

    __slots__ = ("_lock", "_spans")

    def __init__(self) -> None:
        self._spans: BoundedMap[DelegationTree, SpanContext] = BoundedMap(MAX_DELEGATION_PARENTS)
        self._lock = threading.Lock()

    def put(self, place: DelegationTree, span: SpanContext) -> None:
        if span.is_valid:
            with self._lock:
                self._spans.put(place, span)

    def parent(self, tree: DelegationTree) -> SpanContext | None:
        """The span of the call that delegated to the agent at ``tree``: one that named the agent,
        else the latest of its delegator that named none."""
        unnamed = tree._replace(path=(*tree.path[:-1], ""))
        with self._lock:
            return self._spans.use(tree) or self._spans.use(unnamed)


class _OwnSpan:
    """The token of a delegating call whose own span started at ``before_call`` (ended at its end)."""

    __slots__ = ("span",)

    def __init__(self, span: Span) -> None:
        self.span = span


def refusal_category(refusal: str | None) -> str:
    """The refusal category as exported (``refused`` when the host passed free text)."""
    if refusal and _CATEGORY.fullmatch(refusal):
        return refusal
    return _REFUSED_FALLBACK


logger = logging.getLogger("otelguard")
_REPORTED_STEPS: set[tuple[str, str]] = set()
"""Telemetry steps whose failure was logged already (place, error type): said once per process."""

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
    ) -> GuardTelemetry:
        """A per-guard observer (the guard calls this once with ``config.telemetry``).

        ``random_signature_key``: the guard hashes with the process's random key, so its hashes match
        no other process's; the first time one is exported (on a recording span, or as a looping
        signature's series) that is said once on the ``otelguard`` logger, with how to set a key.
        ``caps``: the guard's ``(cap, scope)`` pairs with a limit; the observer creates their hit
        series at 0, with the agent's other alerting series, the first time it sees an agent.
        """
        effective = self.settings(settings)
        space = self._space(effective)
        observer: GuardTelemetry
        if effective.otel_metrics:
            otel = self._otel_space(space)
            observer = MeteredGuardTelemetry(self._tracer, space, effective, otel, caps, self._parents)
        else:  # no OTel metrics: not one extra step per call
            observer = GuardTelemetry(self._tracer, space, effective, caps, self._parents)
        observer.unkeyed = random_signature_key
        return observer

    def prime(
        self, agent: str = "default", *, tools: tuple[str, ...] = (), caps: tuple[str, ...] = ()
    ) -> None:
        """Create at 0 the series that alerts and dashboards read before any call, so that ``rate()``
        counts their first increment: every turn outcome, each cap's hits (turn and session), the
        per-agent histograms, and ``outcome="ok"`` of each of ``tools`` (the other outcomes of a tool
        appear with their first call: no alert selects on them)."""
        space = self._space(self.settings())
        _prime(space, agent, tuple((cap, scope) for cap in caps for scope in ("turn", "session")))
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


class GuardTelemetry(GuardObserver):
    """The observer one guard reports to (``GuardObserver``). Safe to call from many threads."""

    def __init__(
        self,
        tracer: trace.Tracer,
        space: LabelSpace,
        settings: TelemetrySettings,
        caps: tuple[tuple[str, str], ...] = (),
        parents: DelegationParents | None = None,
    ) -> None:
        self._tracer = tracer
        self._caps = caps
        self._parents = parents if parents is not None else DelegationParents()
        self._primed: str | None = None
        """The agent whose alerting series were last created (priming again is harmless, so one
        name is memory enough: a guard mostly serves one agent)."""
        self._space = space
        self.settings = settings
        self._mode = settings.span_mode
        self.wants_call_start = self._mode not in ("off", "decisions")  # see on_call_start
        self._turn_spans = settings.turn_spans and self._mode != "off"
        self._max_signature_series = settings.max_signature_series
        self._every_call_spans = self._mode in ("auto", "own", "event")
        self._call_counters = space.call_counters
        self._tools: dict[str, tuple[str, str]] = {}
        self._turn_span: Span | None = None
        self._turn_parent_span_id = 0
        self.unkeyed = False
        """Whether the guard's hashes come from a random key (see ``Telemetry.bind``)."""

    # -- turns ---------------------------------------------------------------------------------
    def on_turn_start(self, turn: TurnInfo) -> None:
        if turn.agent != self._primed:
            self._prime(turn.agent)
        if not self._turn_spans:
            return
        self._end_turn_span(None)  # a turn that was never ended
        current = trace.get_current_span()
        self._turn_parent_span_id = current.get_span_context().span_id if current.is_recording() else 0
        attributes: dict[str, Any] = {
            genai.GEN_AI_OPERATION_NAME: genai.OP_INVOKE_AGENT,
            genai.GEN_AI_AGENT_NAME: _clip(turn.agent),
        }
        context = None  # the current one
        tree = turn.tree
        if tree is not None:
            attributes[attr.DELEGATION_DEPTH] = tree.depth
            parent = self._parents.parent(tree) if tree.depth else None
            if parent is not None:  # a delegated agent: under the call that delegated to it
                context = trace.set_span_in_context(NonRecordingSpan(parent))
        self._turn_span = self._tracer.start_span(
            f"{genai.OP_INVOKE_AGENT} {_clip(turn.agent)}",
            context=context,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
        )

    def on_turn_end(self, summary: TurnSummary) -> None:
        # Each step on its own: a turn is counted even when its span or a ratio cannot be recorded.
        space, agent = self._space, _name(summary.agent)
        try:
            space.turns(agent, summary.outcome).inc()
        except Exception as exc:
            self._step_failed("on_turn_end", exc)
        try:
            space.per_agent("turn_tool_calls", agent).observe(summary.tool_calls)
            for cap, ratio in summary.cap_usage_ratio.items():
                space.cap_usage(agent, _name(cap)).observe(ratio)
        except Exception as exc:
            self._step_failed("on_turn_end", exc)
        try:
            self._end_turn_span(summary)
        except Exception as exc:
            self._step_failed("on_turn_end", exc)

    def _step_failed(self, where: str, exc: Exception) -> None:
        """One step of recording an event failed: count it (``otelguard_internal_errors_total``,
        stage ``observer``), say it once per place and error type, and go on with the next step."""
        self._space.families.internal_error("observer")
        key = (where, type(exc).__name__)
        if key not in _REPORTED_STEPS:
            _REPORTED_STEPS.add(key)
            # Only the exception type: its message may quote a host-chosen value.
            logger.error("otelguard internal error in telemetry %s (%s); the rest is still recorded", *key)

    def _end_turn_span(self, summary: TurnSummary | None) -> None:
        span, self._turn_span = self._turn_span, None
        if span is None:
            return
        if summary is not None:
            span.set_attribute(attr.TURN_TOOL_CALLS, summary.tool_calls)
            span.set_attribute(attr.TURN_HALTED, summary.halted)
            span.set_attribute(attr.TURN_OUTCOME, summary.outcome)
            if summary.halt_decision is not None:
                span.set_attribute(attr.TURN_HALT_CODE, summary.halt_decision.code)
                span.set_status(Status(StatusCode.ERROR))
                span.set_attribute(genai.ERROR_TYPE, summary.halt_decision.code)
            elif summary.errored:
                span.set_status(Status(StatusCode.ERROR))
                span.set_attribute(genai.ERROR_TYPE, attr.RUN_ERROR)
        span.end()

    def on_internal_error(self, stage: str) -> None:
        self._space.families.internal_error(stage)

    def _prime(self, agent: object) -> None:
        """Create at 0 the series of a newly seen agent that alerts and panels rate (``_prime``), so
        that ``rate()`` counts its first cap hit or halted turn."""
        try:
            _prime(self._space, _name(agent), tuple((_name(cap), scope) for cap, scope in self._caps))
        except Exception as exc:
            self._step_failed("prime", exc)
        self._primed = agent if isinstance(agent, str) else None

    # -- calls ---------------------------------------------------------------------------------
    # Span work happens when a call ends: an own span is created then, with every attribute at once
    # and ``start_time`` from ``before_call`` (otelguard never makes its span current, so nothing in
    # between could use it). What must be known at ``before_call`` is only which context is current
    # then: the parent of an own span (``own``), and the host's span to annotate (``auto``,
    # ``event``). ``off`` and ``decisions`` need nothing, so the guard spares them the call start.

    def on_call_start(self, call: CallEvent) -> object:
        """Token: the context current at ``before_call`` (``own``); with it, for ``auto`` and
        ``event``, the host's recording span to annotate, else ``None``; ``None`` for the others."""
        mode = self._mode
        if mode in ("off", "decisions"):
            return None
        context = otel_context.get_current()
        if call.delegation is not None:
            return self._delegating(call, context)
        if mode == "own":
            return context
        current = trace.get_current_span(context)
        if not current.is_recording():
            return (context, None)
        current.set_attributes(self._start_attributes(call))  # now, in case the host ends it first
        return (context, current)

    def _delegating(self, call: CallEvent, context: otel_context.Context) -> object:
        """The token of a delegating call: its span exists from ``before_call`` on (the host's span
        it annotates, else its own, started now), remembered as the parent of the agent it starts."""
        place = cast("DelegationTree", call.delegation)
        current = trace.get_current_span(context)
        if self._mode != "own" and current.is_recording():
            current.set_attributes(self._start_attributes(call))
            self._parents.put(place, current.get_span_context())
            return (context, current)
        if self._mode == "event":
            return (context, None)
        span = self._tracer.start_span(
            self._tool_names(call.tool_name)[0],
            context=context if self._turn_span is None else self._under_turn(context),
            kind=SpanKind.INTERNAL,
            attributes=self._start_attributes(call),
            start_time=call.start_time_ns or None,
        )
        self._parents.put(place, span.get_span_context())
        return _OwnSpan(span)

    def _delegated(self, agent: str, delegation: DelegationTree, outcome: str) -> None:
        """Count a delegation (``cancelled``: it never ran, nor was it refused) and its depth."""
        if outcome != "cancelled":
            space = self._space
            space.delegations(agent, "started" if outcome in _RAN else "refused").inc()
            space.per_agent("delegation_depth", agent).observe(delegation.depth)

    def on_call_end(self, call: CallEvent, token: object) -> None:
        # Each step on its own: a call is counted even when its span or its decision cannot be.
        outcome = call.outcome or "ok"
        agent, tool = call.agent, call.tool_name
        agent = agent if isinstance(agent, str) else attr.OTHER  # what _name does, on every call
        if agent != self._primed:
            self._prime(agent)
        try:
            if not isinstance(tool, str):
                tool = attr.OTHER
            add = self._call_counters.get((agent, tool, outcome))  # the hot path: a lookup, a C call
            if add is None:
                self._space.count_call(agent, tool, outcome)
            else:
                add()
            if call.spawn_count and outcome in _RAN:
                self._space.per_agent("subagent_spawns", agent).inc(call.spawn_count)
            if call.delegation is not None:
                self._delegated(agent, call.delegation, outcome)
        except Exception as exc:
            self._step_failed("on_call_end", exc)
        decision, before = call.decision, call.before
        # a call that ran after a non-allow before_call decision has two decisions to report
        before_counts = before.action != "allow" and before is not decision and before != decision
        counted = before_counts or decision.action != "allow"
        exemplar: Exemplar = None
        if self._every_call_spans or (counted and self._mode == "decisions") or type(token) is _OwnSpan:
            try:
                exemplar = self._span_work(call, outcome, counted, before_counts, token)
            except Exception as exc:
                self._step_failed("on_call_end", exc)
        if not counted:
            return
        try:
            if before_counts:
                self._record_decision(call, before, exemplar)
            if decision.action != "allow":
                self._record_decision(call, decision, exemplar)
        except Exception as exc:
            self._step_failed("on_call_end", exc)

    def _span_work(
        self, call: CallEvent, outcome: str, counted: bool, before_counts: bool, token: object
    ) -> Exemplar:
        """The call's span data; the exemplar its decisions carry (only a counted call has one)."""
        decision = call.decision
        if decision.action == "allow" and outcome == "ok":
            error_type = None
        else:
            error_type = _error_type(decision, outcome, call.refusal)
        if type(token) is _OwnSpan:  # a delegating call's own span, started at before_call
            span = token.span
            recording = span.is_recording()
            exemplar = self._annotate(span, call, outcome, counted, before_counts, error_type)
            span.end()
            return exemplar if recording else None
        if self._mode == "own" or token is None:
            context = cast("otel_context.Context | None", token)
        else:
            context, host = cast("tuple[otel_context.Context, Span | None]", token)
            if host is not None and host.is_recording():
                return self._annotate(host, call, outcome, counted, before_counts, error_type)
        if self._mode == "event":
            return None
        # own and decisions spans, and auto when no host span was recording (or it ended before
        # after_call): every attribute given at once (error.type included), so the SDK takes its
        # lock once for them
        tool = call.tool_name
        span_name, tool_name = self._tools.get(tool) or self._tool_names(tool)
        attributes: dict[str, Any] = {
            genai.GEN_AI_OPERATION_NAME: genai.OP_EXECUTE_TOOL,
            genai.GEN_AI_TOOL_NAME: tool_name,
            attr.ARGS_HASH: call.signature.args_hash,
            attr.TOOL_CLASS: call.tool_class,
            attr.OUTCOME: outcome,
            attr.DECISION_ACTION: decision.action,
            attr.DECISION_CODE: decision.code,
            attr.DECISION_COUNT: decision.count,
        }
        call_id = call.call_id
        if call_id is not None:
            attributes[genai.GEN_AI_TOOL_CALL_ID] = call_id if _plain(call_id) else _clip(call_id)
        if call.state_fallback:
            attributes[attr.STATE] = attr.STATE_FALLBACK
        if error_type is not None:
            attributes[genai.ERROR_TYPE] = error_type
        span = self._tracer.start_span(
            span_name,
            context=context if self._turn_span is None else self._under_turn(context),
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            start_time=call.start_time_ns or None,
        )
        if self.unkeyed and span.is_recording():
            self._exporting_unkeyed_hashes()
        exemplar = None
        if counted:  # only decisions carry exemplars
            self._add_decision_events(call, span, before_counts)
            if span.is_recording():
                exemplar = span.get_span_context()
        if error_type is not None:
            span.set_status(_ERROR)
        span.end()
        return exemplar

    def _annotate(
        self,
        host: Span,
        call: CallEvent,
        outcome: str,
        counted: bool,
        before_counts: bool,
        error_type: str | None,
    ) -> Exemplar:
        """The host's span current at ``before_call`` gets the end attributes and decision events."""
        if self.unkeyed:
            self._exporting_unkeyed_hashes()
        host.set_attributes(_end_attributes(call, outcome))
        if counted:
            self._add_decision_events(call, host, before_counts)
        if error_type is not None:
            host.set_attribute(genai.ERROR_TYPE, error_type)
            host.set_status(_ERROR)
        return host.get_span_context() if counted else None

    def _exporting_unkeyed_hashes(self) -> None:
        self.unkeyed = False  # checked once per guard; said once per process
        if claim_random_key_note():
            logger.warning("otelguard: %s", RANDOM_KEY_NOTE)

    def _start_attributes(self, call: CallEvent) -> dict[str, Any]:
        attributes: dict[str, Any] = {
            genai.GEN_AI_OPERATION_NAME: genai.OP_EXECUTE_TOOL,
            genai.GEN_AI_TOOL_NAME: self._tool_names(call.tool_name)[1],
            attr.ARGS_HASH: call.signature.args_hash,
            attr.TOOL_CLASS: call.tool_class,
        }
        if call.call_id is not None:
            attributes[genai.GEN_AI_TOOL_CALL_ID] = _clip(call.call_id)
        return attributes

    def _tool_names(self, tool: str) -> tuple[str, str]:
        """(span name, ``gen_ai.tool.name``) of a tool, kept for as many tools as the label bound."""
        names = self._tools.get(tool)
        if names is None:
            clipped = _clip(tool)
            names = (f"{genai.OP_EXECUTE_TOOL} {clipped}", clipped)
            if len(self._tools) < 4 * self.settings.max_tool_values:
                self._tools[tool] = names
        return names

    def _under_turn(self, context: otel_context.Context | None) -> otel_context.Context | None:
        """Parent of an own span while a turn span is open: the turn span, unless a recording span
        other than the turn's own parent was current at ``before_call`` (``context``; ``None`` when
        unknown: the current one). The turn span is never made current, since start_turn and
        end_turn may run in different contexts."""
        current = trace.get_current_span(context)
        turn_span = self._turn_span
        if turn_span is not None and (
            not current.is_recording() or current.get_span_context().span_id == self._turn_parent_span_id
        ):
            return trace.set_span_in_context(turn_span)
        return context

    @staticmethod
    def _add_decision_events(call: CallEvent, span: Span, before_counts: bool) -> None:
        decision = call.decision
        if before_counts:
            span.add_event(attr.DECISION_EVENT, _event_attributes(call.before))
            span.add_event(genai.EVALUATION_RESULT, _evaluation_attributes(call.before))
        if decision.action != "allow":
            span.add_event(attr.DECISION_EVENT, _event_attributes(decision))
            span.add_event(genai.EVALUATION_RESULT, _evaluation_attributes(decision))

    def _record_decision(self, call: CallEvent, decision: Decision, exemplar: Exemplar) -> None:
        space = self._space
        agent, tool = _name(call.agent), _name(call.tool_name)
        space.decisions(agent, tool, decision.action, decision.code).inc(1, exemplar)
        scope = CAP_SCOPES.get(decision.code)
        if scope is not None:
            space.cap_hits(agent, _name(decision.cap or call.tool_name), scope).inc(1, exemplar)
        elif decision.code in LOOP_CODES and decision.action in _LOOP_ACTIONS:
            if self.unkeyed:
                self._exporting_unkeyed_hashes()
            signature = decision.signature or call.signature
            space.signature_hit(
                agent,
                tool,
                decision.code,
                signature.args_hash,
                self._max_signature_series,
                exemplar,
            )


def _prime(space: LabelSpace, agent: str, caps: tuple[tuple[str, str], ...]) -> None:
    """Create at 0 an agent's series that alerts and dashboards rate: every turn outcome, the hits of
    each ``(cap, scope)``, the usage of each cap, spawns and tool calls per turn. Within the label
    bounds, like every series: past them the agent is ``_other``."""
    for turn_outcome in TURN_OUTCOMES:
        space.turns(agent, turn_outcome)
    space.per_agent("subagent_spawns", agent)
    space.per_agent("turn_tool_calls", agent)
    for cap in dict.fromkeys(cap for cap, _ in caps):
        space.cap_usage(agent, cap)
    for cap, scope in caps:
        space.cap_hits(agent, cap, scope)


class MeteredGuardTelemetry(GuardTelemetry):
    """The observer of a guard with ``telemetry.otel_metrics`` on: everything ``GuardTelemetry``
    records, then the same counts through the OTel Metrics API (a subclass, so a guard without them
    pays nothing for them)."""

    def __init__(
        self,
        tracer: trace.Tracer,
        space: LabelSpace,
        settings: TelemetrySettings,
        otel: OtelSpace,
        caps: tuple[tuple[str, str], ...] = (),
        parents: DelegationParents | None = None,
    ) -> None:
        super().__init__(tracer, space, settings, caps, parents)
        self._otel = otel

    def on_call_end(self, call: CallEvent, token: object) -> None:
        super().on_call_end(call, token)
        try:
            outcome = call.outcome or "ok"
            decision = call.decision
            error_type = (
                None
                if decision.action == "allow" and outcome == "ok"
                else _error_type(decision, outcome, call.refusal)
            )
            self._otel.call_ended(call, outcome, error_type)
        except Exception as exc:
            self._step_failed("on_call_end", exc)

    def on_turn_end(self, summary: TurnSummary) -> None:
        super().on_turn_end(summary)
        try:
            self._otel.turn_ended(summary)
        except Exception as exc:
            self._step_failed("on_turn_end", exc)


def _error_type(decision: Decision, outcome: str, refusal: str | None) -> str | None:
    """``error.type`` as docs/telemetry.md defines it, on otelguard's own span and on a host's span alike."""
    if decision.action in _REFUSING_ACTIONS:
        return decision.code
    if outcome == "failed":
        return attr.TOOL_ERROR
    if outcome == "refused":
        return refusal_category(refusal)
    return None


def _clip(text: object) -> str:
    """Host-chosen names (tools, agents, call ids) on spans: bounded as the guard bounds them where a
    call enters it (``bounded_name``, a no-op on what the guard hands over), so a span and a metric
    label show one same name; and valid UTF-8."""
    if _plain(text):
        return cast("str", text)  # the common name, as the guard hands it over
    text = _name(text)
    return valid_utf8(text if len(text) <= MAX_NAME_CHARS else bounded_name(text))


def _plain(text: object) -> bool:
    """Whether a name is exported as it is (short ASCII text; ``_clip`` is a no-op on it)."""
    return type(text) is str and len(text) <= MAX_NAME_CHARS and text.isascii()


def _name(value: object) -> str:
    """A host-chosen name as exported: a string as it is, anything else (a host passed its agent
    object where the name goes) ``_other``, never its ``repr``, which may hold anything."""
    return value if isinstance(value, str) else attr.OTHER


def _end_attributes(call: CallEvent, outcome: str) -> dict[str, Any]:
    decision = call.decision
    attributes: dict[str, Any] = {
        attr.OUTCOME: outcome,
        attr.DECISION_ACTION: decision.action,
        attr.DECISION_CODE: decision.code,
        attr.DECISION_COUNT: decision.count,
    }
    if call.state_fallback:
        attributes[attr.STATE] = attr.STATE_FALLBACK
    return attributes


def _evaluation_attributes(decision: Decision) -> dict[str, Any]:
    """The GenAI evaluation event of a decision: its action as the label, its code as the
    explanation (never its message, which may quote a host-chosen value)."""
    return {
        genai.EVALUATION_NAME: genai.EVALUATOR,
        genai.EVALUATION_SCORE_LABEL: decision.action,
        genai.EVALUATION_EXPLANATION: decision.code,
    }


def _event_attributes(decision: Decision) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        attr.DECISION_ACTION: decision.action,
        attr.DECISION_CODE: decision.code,
        attr.DECISION_COUNT: decision.count,
        attr.DECISION_LIMIT: decision.limit,
    }
    if decision.cap is not None:
        attributes[attr.DECISION_CAP] = _clip(decision.cap)
    return attributes
