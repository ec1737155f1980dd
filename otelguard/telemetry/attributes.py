"""Span names, attribute names and metric names otelguard emits (docs/telemetry.md).

The GenAI semantic-convention names are in ``otelguard.telemetry.genai``, the one module that
spells ``gen_ai.*`` names.
"""

from __future__ import annotations

from typing import Final

# otelguard's own attributes (the OTel metrics' names are in otel_metrics)
ARGS_HASH: Final = "otelguard.args_hash"
TOOL_CLASS: Final = "otelguard.tool.class"
OUTCOME: Final = "otelguard.outcome"
DECISION_ACTION: Final = "otelguard.decision.action"
DECISION_CODE: Final = "otelguard.decision.code"
DECISION_COUNT: Final = "otelguard.decision.count"
DECISION_LIMIT: Final = "otelguard.decision.limit"
DECISION_CAP: Final = "otelguard.decision.cap"
DECISION_EVENT: Final = "otelguard.decision"
TURN_TOOL_CALLS: Final = "otelguard.turn.tool_calls"
TURN_HALTED: Final = "otelguard.turn.halted"
TURN_HALT_CODE: Final = "otelguard.turn.halt_code"
TURN_OUTCOME: Final = "otelguard.turn.outcome"
DELEGATION_DEPTH: Final = "otelguard.delegation.depth"
"""On a turn span of an agent in a delegation tree: its depth (the root is 0)."""
MODEL_TOOL_CALLS: Final = "otelguard.model.tool_calls"
"""On a model call's span: the valid tool calls its reply asked for."""
MODEL_INVALID_TOOL_CALLS: Final = "otelguard.model.invalid_tool_calls"
"""On a model call's span: the tool calls of its reply the harness could not run."""
STATE: Final = "otelguard.state"
STATE_FALLBACK: Final = "fallback"
"""``otelguard.state`` of a call whose session caps were decided without the shared store."""

TOOL_ERROR: Final = "tool_error"
"""``error.type`` of a call that ran and failed."""
RUN_ERROR: Final = "run_error"
"""``error.type`` of a turn whose run ended in an exception (the host says only that it did)."""

# Prometheus metric names (counters are declared without ``_total``; prometheus_client adds it)
TOOL_CALLS: Final = "otelguard_tool_calls"
DECISIONS: Final = "otelguard_decisions"
TURNS: Final = "otelguard_turns"
CAP_HITS: Final = "otelguard_cap_hits"
SUBAGENT_SPAWNS: Final = "otelguard_subagent_spawns"
TURN_TOOL_CALLS_HISTOGRAM: Final = "otelguard_turn_tool_calls"
TURN_CAP_USAGE_RATIO: Final = "otelguard_turn_cap_usage_ratio"
LOOP_SIGNATURE_HITS: Final = "otelguard_loop_signature_hits"
DELEGATIONS: Final = "otelguard_delegations"
DELEGATION_DEPTH_HISTOGRAM: Final = "otelguard_delegation_depth"
MODEL_CALLS: Final = "otelguard_model_calls"
MODEL_TOKENS: Final = "otelguard_model_tokens"
INTERNAL_ERRORS: Final = "otelguard_internal_errors"
BUILD_INFO: Final = "otelguard_build_info"
STATE_ERRORS: Final = "otelguard_state_errors"
STATE_FALLBACKS: Final = "otelguard_state_fallback"
STATE_UP: Final = "otelguard_state_up"

# Prometheus label names (the dashboards and rules select and group by these same constants)
LABEL_AGENT: Final = "agent"
LABEL_TOOL: Final = "tool"
LABEL_OUTCOME: Final = "outcome"
LABEL_ACTION: Final = "action"
LABEL_CODE: Final = "code"
LABEL_CAP: Final = "cap"
LABEL_SCOPE: Final = "scope"
LABEL_SIGNATURE: Final = "signature"
LABEL_STAGE: Final = "stage"
LABEL_VERSION: Final = "version"
LABEL_OP: Final = "op"
LABEL_KIND: Final = "kind"

TURN_TOOL_CALLS_BUCKETS: Final = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
CAP_USAGE_BUCKETS: Final = (0.1, 0.25, 0.5, 0.75, 0.9, 1.0)
DELEGATION_DEPTH_BUCKETS: Final = (0, 1, 2, 3, 4, 5, 6, 7, 8)
DELEGATION_OUTCOMES: Final = ("started", "refused")
"""``outcome`` of ``otelguard_delegations_total``: the delegation ran, or a rule or the host refused it."""

TOKEN_KINDS: Final = ("input", "output")
"""``kind`` of ``otelguard_model_tokens_total``: the tokens a model read, and those it wrote."""
MODEL_CAP: Final = "tokens"
"""The ``cap`` of a token cap's hits (``otelguard_cap_hits_total{cap="tokens"}``)."""

STAGES: Final = ("before_call", "after_call", "start_turn", "end_turn", "observer")
"""Guard stages that report internal errors; each has a series at 0 from the start."""

STATE_OPS: Final = ("connect", "charge", "refund")
"""Shared-state operations that report errors; each has a series at 0 once a store is in use."""

OTHER: Final = "_other"
"""Label value that stands for every value past a label's bound."""
