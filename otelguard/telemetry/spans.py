"""The spans of one guard (docs/telemetry.md): its turn spans, its tool-call spans or the host's spans
it annotates, and their decision events; one observer of the guard's ``ObserverGroup``.

The span of a call that carried a decision is that decision's exemplar: ``exemplar(call)`` hands
it to the Prometheus observer that runs next in the group, for the same call.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any, Final, cast

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, SpanKind, Status, StatusCode

from otelguard.config.telemetry import TelemetrySettings
from otelguard.core.bounded_map import BoundedMap
from otelguard.core.decisions import Decision, TurnSummary
from otelguard.core.observers import CallEvent, GuardObserver, ModelEvent, TurnInfo
from otelguard.core.signatures import RANDOM_KEY_NOTE, claim_random_key_note
from otelguard.telemetry import attributes as attr
from otelguard.telemetry import genai
from otelguard.telemetry.model_spans import model_attributes, model_span
from otelguard.telemetry.names import call_error_type, clip, plain
from otelguard.telemetry.tallies import Exemplar

if TYPE_CHECKING:
    from otelguard.core.tree import DelegationTree

__all__ = ["MAX_DELEGATION_PARENTS", "DelegationParents", "SpanTelemetry"]

logger = logging.getLogger("otelguard")
_ERROR: Final = Status(StatusCode.ERROR)
MAX_DELEGATION_PARENTS: Final = 1024
"""Delegating calls whose span a ``Telemetry`` remembers for the turn spans of the agents they start."""
_MAX_PENDING_EXEMPLARS: Final = 1024
"""Exemplars handed over and not yet taken (the taker runs right after, so this stays near empty)."""


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


class SpanTelemetry(GuardObserver):
    """The spans of one guard (``telemetry.span_mode`` and ``turn_spans``). Safe to call from many
    threads. Its errors go to the group, which logs them once and counts them."""

    def __init__(self, tracer: trace.Tracer, settings: TelemetrySettings, parents: DelegationParents) -> None:
        self._tracer = tracer
        self._parents = parents
        self._mode = settings.span_mode
        self.wants_call_start = self._mode not in ("off", "decisions")  # see on_call_start
        self._turn_spans = settings.turn_spans and self._mode != "off"
        self._every_call_spans = self._mode in ("auto", "own", "event")
        self._max_tools = 4 * settings.max_tool_values
        self._tools: dict[str, tuple[str, str]] = {}
        self._turn_span: Span | None = None
        self._turn_parent_span_id = 0
        self._exemplars: dict[int, SpanContext] = {}
        """By the ``id`` of a call being reported (alive until every observer heard of it)."""
        self.unkeyed = False
        """Whether the guard's hashes come from a random key (see ``Telemetry.bind``)."""

    # -- turns ---------------------------------------------------------------------------------
    def on_turn_start(self, turn: TurnInfo) -> None:
        if not self._turn_spans:
            return
        self._end_turn_span(None)  # a turn that was never ended
        current = trace.get_current_span()
        self._turn_parent_span_id = current.get_span_context().span_id if current.is_recording() else 0
        attributes: dict[str, Any] = {
            genai.GEN_AI_OPERATION_NAME: genai.OP_INVOKE_AGENT,
            genai.GEN_AI_AGENT_NAME: clip(turn.agent),
        }
        context = None  # the current one
        tree = turn.tree
        if tree is not None:
            attributes[attr.DELEGATION_DEPTH] = tree.depth
            parent = self._parents.parent(tree) if tree.depth else None
            if parent is not None:  # a delegated agent: under the call that delegated to it
                context = trace.set_span_in_context(NonRecordingSpan(parent))
        self._turn_span = self._tracer.start_span(
            f"{genai.OP_INVOKE_AGENT} {clip(turn.agent)}",
            context=context,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
        )

    def on_turn_end(self, summary: TurnSummary) -> None:
        self._end_turn_span(summary)

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
        current.set_attributes(
            _start_attributes(call, self._tool_names(call.tool_name)[1])
        )  # now, in case the host ends it first
        return (context, current)

    def _delegating(self, call: CallEvent, context: otel_context.Context) -> object:
        """The token of a delegating call: its span exists from ``before_call`` on (the host's span
        it annotates, else its own, started now), remembered as the parent of the agent it starts."""
        place = cast("DelegationTree", call.delegation)
        current = trace.get_current_span(context)
        if self._mode != "own" and current.is_recording():
            current.set_attributes(_start_attributes(call, self._tool_names(call.tool_name)[1]))
            self._parents.put(place, current.get_span_context())
            return (context, current)
        if self._mode == "event":
            return (context, None)
        span = self._tracer.start_span(
            self._tool_names(call.tool_name)[0],
            context=context if self._turn_span is None else self._under_turn(context),
            kind=SpanKind.INTERNAL,
            attributes=_start_attributes(call, self._tool_names(call.tool_name)[1]),
            start_time=call.start_time_ns or None,
        )
        self._parents.put(place, span.get_span_context())
        return _OwnSpan(span)

    def on_call_end(self, call: CallEvent, token: object) -> None:
        decision, before = call.decision, call.before
        # counts_before(call), inline: this runs on every call
        before_counts = before.action != "allow" and before is not decision and before != decision
        counted = before_counts or decision.action != "allow"
        if self._every_call_spans or (counted and self._mode == "decisions") or type(token) is _OwnSpan:
            exemplar = self._span_work(call, call.outcome or "ok", counted, before_counts, token)
            if exemplar is not None:  # only a counted call has one
                _hand_over(self._exemplars, call, exemplar)

    def on_model_call(self, event: ModelEvent) -> None:
        """The model call's own span (a recording GenAI ``chat`` span, current now) is annotated."""
        span = model_span()
        if span is None:
            return
        span.set_attributes(model_attributes(event))
        decision = event.decision
        if decision.action != "allow":
            span.add_event(attr.DECISION_EVENT, _event_attributes(decision))
            span.add_event(genai.EVALUATION_RESULT, _evaluation_attributes(decision))
            _hand_over(self._exemplars, event, span.get_span_context())

    def exemplar(self, call: CallEvent | ModelEvent) -> Exemplar:
        """The span of the decisions of ``call`` (or of a model event; ``None``: none recording),
        taken once, by the observer that counts them."""
        return self._exemplars.pop(id(call), None) if self._exemplars else None

    def _span_work(
        self, call: CallEvent, outcome: str, counted: bool, before_counts: bool, token: object
    ) -> Exemplar:
        """The call's span data; the exemplar its decisions carry (only a counted call has one)."""
        decision = call.decision
        error_type = call_error_type(call, outcome)
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
        span_name, tool_name = self._tools.get(call.tool_name) or self._tool_names(call.tool_name)
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
            attributes[genai.GEN_AI_TOOL_CALL_ID] = call_id if plain(call_id) else clip(call_id)
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
            _add_decision_events(call, span, before_counts)
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
            _add_decision_events(call, host, before_counts)
        if error_type is not None:
            host.set_attribute(genai.ERROR_TYPE, error_type)
            host.set_status(_ERROR)
        return host.get_span_context() if counted else None

    def _exporting_unkeyed_hashes(self) -> None:
        self.unkeyed = False  # checked once per guard; said once per process
        if claim_random_key_note():
            logger.warning("otelguard: %s", RANDOM_KEY_NOTE)

    def _tool_names(self, tool: str) -> tuple[str, str]:
        """(span name, ``gen_ai.tool.name``) of a tool, kept for as many tools as the label bound."""
        names = self._tools.get(tool)
        if names is None:
            clipped = clip(tool)
            names = (f"{genai.OP_EXECUTE_TOOL} {clipped}", clipped)
            if len(self._tools) < self._max_tools:
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


def _hand_over(exemplars: dict[int, SpanContext], event: CallEvent | ModelEvent, span: SpanContext) -> None:
    """Keep ``span`` as the exemplar of ``event``'s decisions until the Prometheus observer takes it."""
    if len(exemplars) >= _MAX_PENDING_EXEMPLARS:
        exemplars.clear()  # never taken: the Prometheus observer was replaced
    exemplars[id(event)] = span


def _start_attributes(call: CallEvent, tool_name: str) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        genai.GEN_AI_OPERATION_NAME: genai.OP_EXECUTE_TOOL,
        genai.GEN_AI_TOOL_NAME: tool_name,
        attr.ARGS_HASH: call.signature.args_hash,
        attr.TOOL_CLASS: call.tool_class,
    }
    if call.call_id is not None:
        attributes[genai.GEN_AI_TOOL_CALL_ID] = clip(call.call_id)
    return attributes


def _add_decision_events(call: CallEvent, span: Span, before_counts: bool) -> None:
    decision = call.decision
    if before_counts:
        span.add_event(attr.DECISION_EVENT, _event_attributes(call.before))
        span.add_event(genai.EVALUATION_RESULT, _evaluation_attributes(call.before))
    if decision.action != "allow":
        span.add_event(attr.DECISION_EVENT, _event_attributes(decision))
        span.add_event(genai.EVALUATION_RESULT, _evaluation_attributes(decision))


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
        attributes[attr.DECISION_CAP] = clip(decision.cap)
    return attributes
