"""The Prometheus metrics of one guard (docs/telemetry.md): calls, model calls and their tokens,
decisions, turns, cap hits, looping signatures, delegations and internal errors, within the label bounds of its ``LabelSpace``; one
observer of the guard's ``ObserverGroup``.

A decision's exemplar is the span the spans observer (which runs before this one in the group) made
for its call, or the model call's span it annotated; ``exemplars`` is how this observer asks for it (``None``: the guard has no spans).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

from otelguard.config.telemetry import TelemetrySettings
from otelguard.core.decisions import (
    CAP_SCOPES,
    LOOP_CODES,
    MODEL_OUTCOMES,
    MODEL_TOOL,
    TURN_OUTCOMES,
    Decision,
    Signature,
    TurnSummary,
)
from otelguard.core.observers import CallEvent, GuardObserver, ModelEvent, TurnInfo
from otelguard.core.signatures import RANDOM_KEY_NOTE, claim_random_key_note
from otelguard.telemetry import attributes as attr
from otelguard.telemetry.metrics import LabelSpace
from otelguard.telemetry.names import exported
from otelguard.telemetry.tallies import Exemplar

__all__ = ["PrometheusTelemetry", "prime_agent"]

logger = logging.getLogger("otelguard")
_LOOP_ACTIONS: Final = frozenset(("warn", "reject", "block", "halt"))  # every action but allow
_RAN: Final = frozenset(("ok", "failed"))
_REPORTED_STEPS: set[tuple[str, str]] = set()
"""Telemetry steps whose failure was logged already (place, error type): said once per process."""


class PrometheusTelemetry(GuardObserver):
    """The metrics of one guard. Safe to call from many threads. Each step of recording an event
    stands on its own: a call is counted even when its decision cannot be."""

    wants_call_start = False

    def __init__(
        self,
        space: LabelSpace,
        settings: TelemetrySettings,
        caps: tuple[tuple[str, str], ...] = (),
        exemplars: Callable[[CallEvent | ModelEvent], Exemplar] | None = None,
    ) -> None:
        self._space = space
        self._caps = caps
        self._exemplars = exemplars
        self._max_signature_series = settings.max_signature_series
        self._call_counters = space.call_counters
        self._primed: str | None = None
        """The agent whose alerting series were last created (priming again is harmless, so one
        name is memory enough: a guard mostly serves one agent)."""
        self._model_primed: str | None = None
        """The agent whose model-call series were last created (at its first model event)."""
        self.unkeyed = False
        """Whether the guard's hashes come from a random key (see ``Telemetry.bind``)."""

    def on_turn_start(self, turn: TurnInfo) -> None:
        if turn.agent != self._primed:
            self._prime(turn.agent)

    def on_turn_end(self, summary: TurnSummary) -> None:
        space, agent = self._space, exported(summary.agent)
        try:
            space.turns(agent, summary.outcome).inc()
        except Exception as exc:
            self._step_failed("on_turn_end", exc)
        try:
            space.per_agent("turn_tool_calls", agent).observe(summary.tool_calls)
            for cap, ratio in summary.cap_usage_ratio.items():
                space.cap_usage(agent, exported(cap)).observe(ratio)
        except Exception as exc:
            self._step_failed("on_turn_end", exc)

    def on_internal_error(self, stage: str) -> None:
        self._space.families.internal_error(stage)

    def on_call_end(self, call: CallEvent, token: object) -> None:
        outcome = call.outcome or "ok"
        agent, tool = call.agent, call.tool_name
        agent = agent if isinstance(agent, str) else attr.OTHER  # what exported does, on every call
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
            if call.delegation is not None and outcome != "cancelled":  # cancelled: it never ran
                space = self._space
                space.delegations(agent, "started" if outcome in _RAN else "refused").inc()
                space.per_agent("delegation_depth", agent).observe(call.delegation.depth)
        except Exception as exc:
            self._step_failed("on_call_end", exc)
        decision, before = call.decision, call.before
        # counts_before(call), inline: this runs on every call
        before_counts = before.action != "allow" and before is not decision and before != decision
        if not before_counts and decision.action == "allow":
            return
        try:
            exemplar = self._exemplars(call) if self._exemplars is not None else None
            agent, tool = exported(call.agent), exported(call.tool_name)
            if before_counts:
                self._record_decision(agent, tool, before, before.signature or call.signature, exemplar)
            if decision.action != "allow":
                self._record_decision(agent, tool, decision, decision.signature or call.signature, exemplar)
        except Exception as exc:
            self._step_failed("on_call_end", exc)

    def on_model_call(self, event: ModelEvent) -> None:
        """A model call's reply counted by what it asked for (at ``after_model``: ``outcome`` set), its
        tokens by kind, and a non-allow decision under tool ``model``, as a call's would be."""
        agent = exported(event.agent)
        if agent != self._model_primed:
            self._prime_model(agent)
        space = self._space
        try:
            if event.outcome in MODEL_OUTCOMES:
                space.model_calls(agent, event.outcome).inc()
                for kind, tokens in zip(
                    attr.TOKEN_KINDS, (event.input_tokens, event.output_tokens), strict=True
                ):
                    if type(tokens) is int and tokens > 0:  # unreported (None) charges nothing
                        space.model_tokens(agent, kind).inc(tokens)
        except Exception as exc:
            self._step_failed("on_model_call", exc)
        decision = event.decision
        if decision.action == "allow":
            return
        try:
            exemplar = self._exemplars(event) if self._exemplars is not None else None
            # no looping signature: what identifies a reply is a fingerprint of its text, never exported
            self._record_decision(agent, MODEL_TOOL, decision, None, exemplar)
        except Exception as exc:
            self._step_failed("on_model_call", exc)

    def _record_decision(
        self, agent: str, tool: str, decision: Decision, signature: Signature | None, exemplar: Exemplar
    ) -> None:
        space = self._space
        space.decisions(agent, tool, decision.action, decision.code).inc(1, exemplar)
        scope = CAP_SCOPES.get(decision.code)
        if scope is not None:
            space.cap_hits(agent, exported(decision.cap or tool), scope).inc(1, exemplar)
        elif decision.code in LOOP_CODES and decision.action in _LOOP_ACTIONS and signature is not None:
            if self.unkeyed:
                self.unkeyed = False  # checked once per guard; said once per process
                if claim_random_key_note():
                    logger.warning("otelguard: %s", RANDOM_KEY_NOTE)
            space.signature_hit(
                agent, tool, decision.code, signature.args_hash, self._max_signature_series, exemplar
            )

    def _prime_model(self, agent: str) -> None:
        """Create at 0 the model-call series of an agent at its first model event: a guard that never
        hears of a model call exports none of them."""
        try:
            for outcome in MODEL_OUTCOMES:
                self._space.model_calls(agent, outcome)
            for kind in attr.TOKEN_KINDS:
                self._space.model_tokens(agent, kind)
        except Exception as exc:
            self._step_failed("prime", exc)
        self._model_primed = agent

    def _prime(self, agent: object) -> None:
        """Create at 0 the series of a newly seen agent that alerts and panels rate (``prime_agent``),
        so that ``rate()`` counts its first cap hit or halted turn."""
        try:
            prime_agent(
                self._space, exported(agent), tuple((exported(cap), scope) for cap, scope in self._caps)
            )
        except Exception as exc:
            self._step_failed("prime", exc)
        self._primed = agent if isinstance(agent, str) else None

    def _step_failed(self, where: str, exc: Exception) -> None:
        """One step of recording an event failed: count it (``otelguard_internal_errors_total``,
        stage ``observer``), say it once per place and error type, and go on with the next step."""
        self._space.families.internal_error("observer")
        key = (where, type(exc).__name__)
        if key not in _REPORTED_STEPS:
            _REPORTED_STEPS.add(key)
            # Only the exception type: its message may quote a host-chosen value.
            logger.error("otelguard internal error in telemetry %s (%s); the rest is still recorded", *key)


def prime_agent(space: LabelSpace, agent: str, caps: tuple[tuple[str, str], ...]) -> None:
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
