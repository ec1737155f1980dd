"""Every OpenTelemetry GenAI semantic-convention name otelguard emits, in one place (docs/telemetry.md).

The GenAI conventions are at Development status, so the names are spelled out here rather than
imported from the semantic-conventions package (whose incubating names move between releases):
docs/telemetry.md says which convention version they follow, and a rename is one edit here.
"""

from __future__ import annotations

from typing import Final

CONVENTIONS_VERSION: Final = "semantic-conventions-genai v0.1.0"
"""The GenAI semantic conventions release these names follow (named in docs/telemetry.md)."""

# attributes
GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
GEN_AI_TOOL_NAME: Final = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
GEN_AI_AGENT_NAME: Final = "gen_ai.agent.name"
GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
GEN_AI_TOKEN_TYPE: Final = "gen_ai.token.type"
"""``input`` or ``output``: the attribute the conventions' token metrics split by."""
ERROR_TYPE: Final = "error.type"
"""The general OpenTelemetry attribute the GenAI spans and metrics use for a failure's kind."""

# ``gen_ai.operation.name`` values (and span name prefixes)
OP_EXECUTE_TOOL: Final = "execute_tool"
OP_INVOKE_AGENT: Final = "invoke_agent"
MODEL_OPERATIONS: Final = frozenset(("chat", "text_completion", "generate_content"))
"""The operations of a span around one model call (a GenAI ``chat`` span and its kin): the spans
otelguard annotates with a model event."""

# metrics
EXECUTE_TOOL_DURATION: Final = "gen_ai.execute_tool.duration"
"""Histogram, seconds: how long a tool call ran."""
EXECUTE_TOOL_DURATION_UNIT: Final = "s"
INVOKE_AGENT_TOOL_CALLS: Final = "gen_ai.invoke_agent.tool_calls"
"""Histogram: tool calls in one agent invocation (one guarded turn)."""
INVOKE_AGENT_TOOL_CALLS_UNIT: Final = "{tool_call}"

DURATION_BUCKETS: Final = (
    0.01,
    0.02,
    0.04,
    0.08,
    0.16,
    0.32,
    0.64,
    1.28,
    2.56,
    5.12,
    10.24,
    20.48,
    40.96,
    81.92,
)
"""The bucket boundaries the GenAI conventions advise for their duration histograms."""

# the evaluation event
EVALUATION_RESULT: Final = "gen_ai.evaluation.result"
EVALUATION_NAME: Final = "gen_ai.evaluation.name"
EVALUATION_SCORE_LABEL: Final = "gen_ai.evaluation.score.label"
EVALUATION_EXPLANATION: Final = "gen_ai.evaluation.explanation"
EVALUATOR: Final = "otelguard"
"""``gen_ai.evaluation.name`` of every evaluation otelguard emits."""
