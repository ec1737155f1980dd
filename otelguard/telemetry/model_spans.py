"""A model event on the GenAI span of its model call (docs/telemetry.md): otelguard opens no span of
its own for a model call; when the span current at ``before_model``/``after_model`` is a recording
``chat`` span (or one of its kin, ``genai.MODEL_OPERATIONS``), it gets the reply's outcome, its
tokens and the guard's decision (``SpanTelemetry.on_model_call`` adds a non-allow decision's
events). Never the reply's text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span

from otelguard.core.observers import ModelEvent
from otelguard.telemetry import attributes as attr
from otelguard.telemetry import genai

__all__ = ["model_attributes", "model_span"]


def model_span() -> Span | None:
    """The current span when it is a recording span of a model call, else ``None``.

    The API's span says nothing of what it is; the SDK's (and most others) expose ``attributes``
    and ``name``: a span is a model call's when its ``gen_ai.operation.name`` is one, or, without
    that attribute, when its name starts with one (``chat gpt-4o``)."""
    span = trace.get_current_span()
    if not span.is_recording():
        return None
    attributes = getattr(span, "attributes", None)
    operation = attributes.get(genai.GEN_AI_OPERATION_NAME) if isinstance(attributes, Mapping) else None
    if operation is None:
        name = getattr(span, "name", None)
        operation = name.split(" ", 1)[0] if isinstance(name, str) else None
    return span if operation in genai.MODEL_OPERATIONS else None


def model_attributes(event: ModelEvent) -> dict[str, Any]:
    """What a model call's span gets of ``event``: the decision, and after the reply its outcome,
    its calls and the tokens the provider reported (unreported ones are left to the instrumentation)."""
    decision = event.decision
    attributes: dict[str, Any] = {
        attr.DECISION_ACTION: decision.action,
        attr.DECISION_CODE: decision.code,
        attr.DECISION_COUNT: decision.count,
    }
    if event.outcome is not None:
        attributes[attr.OUTCOME] = event.outcome
        attributes[attr.MODEL_TOOL_CALLS] = _count(event.tool_calls)
        attributes[attr.MODEL_INVALID_TOOL_CALLS] = _count(event.invalid_tool_calls)
        for name, tokens in (
            (genai.GEN_AI_USAGE_INPUT_TOKENS, event.input_tokens),
            (genai.GEN_AI_USAGE_OUTPUT_TOKENS, event.output_tokens),
        ):
            if type(tokens) is int and 0 <= tokens < 2**63:  # an OTLP int is 64-bit
                attributes[name] = tokens
    return attributes


def _count(value: object) -> int:
    return value if type(value) is int and 0 <= value < 2**63 else 0
