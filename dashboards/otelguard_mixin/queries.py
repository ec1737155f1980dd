"""Metric names, label sets and selectors shared by the dashboard and the rules (docs/telemetry.md).

One place spells every metric name, so a rename in the telemetry contract is a one-line change here
and the dashboard, the rules and their tests follow.
"""

from __future__ import annotations

TOOL_CALLS = "otelguard_tool_calls_total"
DECISIONS = "otelguard_decisions_total"
TURNS = "otelguard_turns_total"
CAP_HITS = "otelguard_cap_hits_total"
SUBAGENT_SPAWNS = "otelguard_subagent_spawns_total"
TURN_TOOL_CALLS_BUCKET = "otelguard_turn_tool_calls_bucket"
CAP_USAGE_BUCKET = "otelguard_turn_cap_usage_ratio_bucket"
SIGNATURE_HITS = "otelguard_loop_signature_hits_total"
INTERNAL_ERRORS = "otelguard_internal_errors_total"
BUILD_INFO = "otelguard_build_info"

# Decision codes that do not come from a loop detector: caps are budgets, turn_halted repeats an
# earlier halt, internal_error is the guard failing open. Excluding them (rather than listing the
# loop codes) keeps a loop detector added later inside the loop rate.
NON_LOOP_CODES = "cap_turn|cap_session|turn_halted|internal_error"
LOOP_CODE_MATCHER = f'code!~"{NON_LOOP_CODES}"'

# Labels the recording rules keep: the scrape's target plus the agent, so the dashboard's job,
# instance and agent variables filter them exactly like the raw series.
TARGET = "job, instance"
AGENT_LEVEL = "job, instance, agent"

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
        parts.append('agent=~"$agent"')
    if tool:
        parts.append('tool=~"$tool"')
    parts += matchers
    return f"{metric}{{{', '.join(parts)}}}"


def rate(series: str, window: str = "$__rate_interval") -> str:
    return f"rate({series}[{window}])"
