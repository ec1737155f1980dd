"""Metric names, label sets and selectors shared by the dashboard and the rules (docs/telemetry.md).

Metric names, label names and decision codes come from otelguard itself
(``otelguard.telemetry.attributes``, ``otelguard.core.decisions``), so a rename in the telemetry contract
reaches the dashboard, the rules and their tests at once.
"""

from __future__ import annotations

from otelguard.core.decisions import (
    MODEL_TOOL,
    NO_ACTION_HALT,
    NO_ACTION_WARN,
    NON_LOOP_CODES,
    READ_ONLY_STREAK_WARN,
    REPEATED_REPLY_HALT,
    REPEATED_REPLY_WARN,
    WRITE_STREAK_WARN,
)
from otelguard.telemetry import attributes as attr

TOOL_CALLS = f"{attr.TOOL_CALLS}_total"
DECISIONS = f"{attr.DECISIONS}_total"
TURNS = f"{attr.TURNS}_total"
CAP_HITS = f"{attr.CAP_HITS}_total"
SUBAGENT_SPAWNS = f"{attr.SUBAGENT_SPAWNS}_total"
DELEGATIONS = f"{attr.DELEGATIONS}_total"
DELEGATION_DEPTH_BUCKET = f"{attr.DELEGATION_DEPTH_HISTOGRAM}_bucket"
TURN_TOOL_CALLS_BUCKET = f"{attr.TURN_TOOL_CALLS_HISTOGRAM}_bucket"
CAP_USAGE_BUCKET = f"{attr.TURN_CAP_USAGE_RATIO}_bucket"
SIGNATURE_HITS = f"{attr.LOOP_SIGNATURE_HITS}_total"
INTERNAL_ERRORS = f"{attr.INTERNAL_ERRORS}_total"
BUILD_INFO = attr.BUILD_INFO
STATE_ERRORS = f"{attr.STATE_ERRORS}_total"
STATE_FALLBACKS = f"{attr.STATE_FALLBACKS}_total"
STATE_UP = attr.STATE_UP
MODEL_CALLS = f"{attr.MODEL_CALLS}_total"
MODEL_TOKENS = f"{attr.MODEL_TOKENS}_total"

AGENT = attr.LABEL_AGENT
TOOL = attr.LABEL_TOOL
OUTCOME = attr.LABEL_OUTCOME
ACTION = attr.LABEL_ACTION
CODE = attr.LABEL_CODE
CAP = attr.LABEL_CAP
SCOPE = attr.LABEL_SCOPE
SIGNATURE = attr.LABEL_SIGNATURE
STAGE = attr.LABEL_STAGE
VERSION = attr.LABEL_VERSION
OP = attr.LABEL_OP
KIND = attr.LABEL_KIND

# Codes of the loop detectors that are not loops: a long run of distinct reads (a research agent
# making 50 searches a turn) or of edits repeats no call, so it must not page as a loop rate.
STREAK_CODES = (READ_ONLY_STREAK_WARN, WRITE_STREAK_WARN)
# The loop rate excludes the codes that are no loop (rather than listing the loop codes), so a loop
# detector added later counts inside it.
NOT_LOOP_CODES = (*NON_LOOP_CODES, *STREAK_CODES)
LOOP_CODE_MATCHER = f'{CODE}!~"{"|".join(NOT_LOOP_CODES)}"'

# Decisions about model replies (tool "model"): the loop rate is per tool call, so they stay out of it
# and have a row and an alert of their own.
MODEL = f'{TOOL}="{MODEL_TOOL}"'
NOT_MODEL = f'{TOOL}!="{MODEL_TOOL}"'
# The model is stuck: replies that call nothing, over and over, or say the same again.
STALL_CODES = (NO_ACTION_WARN, NO_ACTION_HALT, REPEATED_REPLY_WARN, REPEATED_REPLY_HALT)
STALL_CODE_MATCHER = f'{CODE}=~"{"|".join(STALL_CODES)}"'
TOKENS_CAP = attr.MODEL_CAP

# Labels the recording rules keep: the scrape's target plus the agent, so the dashboard's job,
# instance and agent variables filter them exactly like the raw series.
TARGET = "job, instance"
AGENT_LEVEL = f"{TARGET}, {AGENT}"

# Window of every recording rule and alert. Dashboard queries use $__rate_interval instead.
RULE_WINDOW = "5m"

# Cap keys of the default tool groups (docs/configuration.md) that have a dedicated alert.
SEARCH_CAP = "web_search"
DELEGATION_CAP = "subagents"


def selector(metric: str, *matchers: str, agent: bool = True, tool: bool = False, target: bool = True) -> str:
    """``metric{...}`` filtered by the dashboard variables the metric's labels support."""
    parts: list[str] = []
    if target:
        parts += ['job=~"$job"', 'instance=~"$instance"']
    if agent:
        parts.append(f'{AGENT}=~"${AGENT}"')
    if tool:
        parts.append(f'{TOOL}=~"${TOOL}"')
    parts += matchers
    return f"{metric}{{{', '.join(parts)}}}"


def rate(series: str, window: str = "$__rate_interval") -> str:
    return f"rate({series}[{window}])"


def by(*labels: str) -> str:
    """The label list of a ``sum by (...)`` or ``on (...)`` clause."""
    return ", ".join(labels)


def legend(label: str) -> str:
    """A Grafana legend placeholder for a label's value."""
    return "{{" + label + "}}"


def alert_label(label: str) -> str:
    """An alert annotation placeholder for a label's value."""
    return "{{ $labels." + label + " }}"
