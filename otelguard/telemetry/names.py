"""What every telemetry observer exports of a call in the same words: host-chosen names bounded and
made valid UTF-8, ``error.type``, the refusal category, and whether a call has decisions to count.

Spans, Prometheus and the OTel metrics each read a call on their own (``otelguard.telemetry.spans``,
``prometheus``, ``otel_metrics``); these helpers are what makes a span and a metric label show one
same name and one same ``error.type``.
"""

from __future__ import annotations

import re
from typing import Final, cast

from otelguard.core.decisions import Decision
from otelguard.core.observers import CallEvent
from otelguard.core.signatures import MAX_NAME_CHARS, bounded_name
from otelguard.telemetry import attributes as attr
from otelguard.telemetry.metrics import valid_utf8

__all__ = ["call_error_type", "clip", "counts_before", "error_type", "exported", "plain", "refusal_category"]

_REFUSING_ACTIONS: Final = frozenset(("block", "halt", "reject"))
# A refusal category is host-chosen text: export it only when it looks like a category, never a sentence.
_CATEGORY: Final = re.compile(r"[A-Za-z][A-Za-z0-9_.:-]{0,63}")
_REFUSED_FALLBACK: Final = "refused"


def refusal_category(refusal: str | None) -> str:
    """The refusal category as exported (``refused`` when the host passed free text)."""
    if refusal and _CATEGORY.fullmatch(refusal):
        return refusal
    return _REFUSED_FALLBACK


def error_type(decision: Decision, outcome: str, refusal: str | None) -> str | None:
    """``error.type`` as docs/telemetry.md defines it, on otelguard's own span and on a host's span alike."""
    if decision.action in _REFUSING_ACTIONS:
        return decision.code
    if outcome == "failed":
        return attr.TOOL_ERROR
    if outcome == "refused":
        return refusal_category(refusal)
    return None


def call_error_type(call: CallEvent, outcome: str) -> str | None:
    """The ``error.type`` of an ended call (``None`` for the common allowed call that ran)."""
    decision = call.decision
    if decision.action == "allow" and outcome == "ok":
        return None
    return error_type(decision, outcome, call.refusal)


def counts_before(call: CallEvent) -> bool:
    """Whether a call that ran after a non-allow ``before_call`` decision has that decision to report
    besides its final one."""
    before, decision = call.before, call.decision
    return before.action != "allow" and before is not decision and before != decision


def clip(text: object) -> str:
    """Host-chosen names (tools, agents, call ids) on spans: bounded as the guard bounds them where a
    call enters it (``bounded_name``, a no-op on what the guard hands over), so a span and a metric
    label show one same name; and valid UTF-8."""
    if plain(text):
        return cast("str", text)  # the common name, as the guard hands it over
    text = exported(text)
    return valid_utf8(text if len(text) <= MAX_NAME_CHARS else bounded_name(text))


def plain(text: object) -> bool:
    """Whether a name is exported as it is (short ASCII text; ``clip`` is a no-op on it)."""
    return type(text) is str and len(text) <= MAX_NAME_CHARS and text.isascii()


def exported(value: object) -> str:
    """A host-chosen name as exported: a string as it is, anything else (a host passed its agent
    object where the name goes) ``_other``, never its ``repr``, which may hold anything."""
    return value if isinstance(value, str) else attr.OTHER
