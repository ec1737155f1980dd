"""The ``otelguard-overview`` Grafana dashboard (docs/dashboards.md), built with grafana-foundation-sdk.

Layout follows how an on-call engineer reads it: the top row answers "is anything halting or hitting
caps right now?" in six numbers; the rows below drill down by agent, cap, loop code, signature and
tool. Panels that share a number with an alert read the alert's recording rule, so the dashboard shows
exactly what paged.
"""

from __future__ import annotations

import json
from typing import Any

from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import heatmap, prometheus, stat, table, timeseries
from grafana_foundation_sdk.builders.common import (
    GraphThresholdsStyleConfig,
    ReduceDataOptions,
    StackingConfig,
    TableSortByFieldState,
    VizLegendOptions,
)
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models import heatmap as heatmap_model
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from . import rules
from .queries import (
    ACTION,
    AGENT,
    BUILD_INFO,
    CAP,
    CAP_HITS,
    CAP_USAGE_BUCKET,
    CODE,
    DECISIONS,
    DELEGATION_DEPTH_BUCKET,
    DELEGATIONS,
    INTERNAL_ERRORS,
    KIND,
    LOOP_CODE_MATCHER,
    MODEL,
    MODEL_CALLS,
    MODEL_TOKENS,
    OP,
    OUTCOME,
    SCOPE,
    SIGNATURE,
    SIGNATURE_HITS,
    STAGE,
    STALL_CODE_MATCHER,
    STATE_ERRORS,
    STATE_UP,
    SUBAGENT_SPAWNS,
    TARGET,
    TOKENS_CAP,
    TOOL,
    TOOL_CALLS,
    TURN_TOOL_CALLS_BUCKET,
    TURNS,
    VERSION,
    by,
    legend,
    rate,
    selector,
)

UID = "otelguard-overview"
TITLE = "otelguard / Overview"
DATASOURCE = model.DataSourceRef(type_val="prometheus", uid="${datasource}")

Steps = list[tuple[float | None, str]]
HALTED = f'{OUTCOME}="halted"'
TREE_SCOPE = f'{SCOPE}="tree"'
# A ratio panel reads a recording rule: empty means "rules not loaded" (or no traffic), never 0.
NO_RULES = "no data (rules loaded?)"
# "Any at all" thresholds: the smallest rate a real event produces is far above 0.001 per minute.
ANY = 0.001
OK_THEN_BAD: Steps = [(None, "green"), (ANY, "red")]


class _Ids:
    """Stable panel ids in layout order, so the generated JSON never churns."""

    def __init__(self) -> None:
        self.last = 0

    def next(self) -> int:
        self.last += 1
        return self.last


def _query(
    expr: str,
    legend: str = "__auto",
    *,
    ref: str = "A",
    exemplar: bool = False,
    instant: bool = False,
    fmt: PromQueryFormat = PromQueryFormat.TIME_SERIES,
) -> prometheus.Dataquery:
    query = (
        prometheus.Dataquery()
        .expr(expr)
        .legend_format(legend)
        .ref_id(ref)
        .datasource(DATASOURCE)
        .format(fmt)
        .exemplar(exemplar)
    )
    return query.instant() if instant else query.range()


def _thresholds(steps: Steps) -> dash.ThresholdsConfig:
    return (
        dash.ThresholdsConfig()
        .mode(model.ThresholdsMode.ABSOLUTE)
        .steps([model.Threshold(value=value, color=color) for value, color in steps])
    )


def _legend() -> VizLegendOptions:
    # A table legend with mean and max answers "which series, how bad" without hovering.
    return (
        VizLegendOptions()
        .display_mode(common.LegendDisplayMode.TABLE)
        .placement(common.LegendPlacement.BOTTOM)
        .show_legend(True)
        .calcs(["mean", "max", "lastNotNull"])
        .sort_by("Max")
        .sort_desc(True)
    )


def _timeseries(
    ids: _Ids,
    title: str,
    description: str,
    unit: str,
    queries: list[prometheus.Dataquery],
    *,
    width: int = 8,
    stacked: bool = False,
    steps: Steps | None = None,
) -> timeseries.Panel:
    panel = (
        timeseries.Panel()
        .id(ids.next())
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .targets([*queries])
        .unit(unit)
        .min(0)
        .height(8)
        .span(width)
        .legend(_legend())
        .fill_opacity(10)
        .show_points(common.VisibilityMode.NEVER)
        .thresholds(_thresholds(steps or [(None, "green")]))
    )
    if stacked:
        panel = panel.stacking(StackingConfig().mode(common.StackingMode.NORMAL))
    if steps:
        # Draw the threshold as a dashed line so the panel says where "bad" starts.
        panel = panel.thresholds_style(
            GraphThresholdsStyleConfig().mode(common.GraphThresholdsStyleMode.DASHED)
        )
    return panel


def _stat(
    ids: _Ids,
    title: str,
    description: str,
    unit: str,
    expr: str,
    steps: Steps,
    *,
    decimals: int = 2,
    no_value: str = "0",
) -> stat.Panel:
    return (
        stat.Panel()
        .id(ids.next())
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .with_target(_query(expr, title))
        .unit(unit)
        .decimals(decimals)
        .no_value(no_value)
        .height(4)
        .span(4)
        .color_mode(common.BigValueColorMode.BACKGROUND)
        .graph_mode(common.BigValueGraphMode.AREA)
        .reduce_options(ReduceDataOptions().calcs(["lastNotNull"]).values(False))
        .thresholds(_thresholds(steps))
    )


def _row(ids: _Ids, title: str) -> dash.Row:
    return dash.Row(title).id(ids.next())


def _ratio_of_sums(numerator: str, denominator: str) -> str:
    # A ratio across agents must divide the sums, never average the per-agent ratios.
    return f"sum({numerator}) / sum({denominator})"


def _top_row(ids: _Ids) -> list[stat.Panel]:
    per_min = "cpm"
    return [
        _stat(
            ids,
            "Halted turns / min",
            "Turns otelguard stopped (a block or halt ended the turn), per minute, all selected agents.",
            per_min,
            f"sum({rate(selector(TURNS, HALTED))}) * 60",
            [(None, "green"), (ANY, "orange"), (1, "red")],
        ),
        _stat(
            ids,
            "Halted-turn ratio",
            "Share of turns halted over the last 5 minutes (recording rule shared with OtelguardHaltRateHigh).",
            "percentunit",
            _ratio_of_sums(selector(rules.HALTED_TURNS_RATE), selector(rules.TURNS_RATE)),
            [(None, "green"), (0.05, "orange"), (0.25, "red")],
            decimals=1,
            no_value=NO_RULES,
        ),
        _stat(
            ids,
            "Cap hits / min",
            "Calls refused because a turn or session cap (web_search, subagents, …) was reached, per minute.",
            per_min,
            f"sum({rate(selector(CAP_HITS))}) * 60",
            [(None, "green"), (ANY, "orange"), (1, "red")],
        ),
        _stat(
            ids,
            "Loop rate",
            "Loop-detector warnings, blocks and halts per tool call over the last 5 minutes "
            "(recording rule shared with OtelguardLoopRateHigh).",
            "percentunit",
            _ratio_of_sums(selector(rules.LOOP_DECISIONS_RATE), selector(rules.TOOL_CALLS_RATE)),
            [(None, "green"), (0.02, "orange"), (0.1, "red")],
            decimals=1,
            no_value=NO_RULES,
        ),
        _stat(
            ids,
            "Internal errors / min",
            "Calls on which otelguard itself failed and allowed the call unchecked. Should be 0.",
            per_min,
            f"sum({rate(selector(INTERNAL_ERRORS, agent=False))}) * 60",
            OK_THEN_BAD,
        ),
        _stat(
            ids,
            "Tool calls / s",
            "Guarded tool calls per second, every outcome: the traffic the numbers on the left are out of.",
            "cps",
            f"sum({rate(selector(TOOL_CALLS, tool=True))})",
            [(None, "blue")],
        ),
    ]


def _halts_row(ids: _Ids) -> list[Any]:
    halted = rate(selector(TURNS, HALTED))
    stops = selector(DECISIONS, f'{ACTION}=~"reject|block|halt"', f'{CODE}!="turn_halted"', tool=True)
    return [
        _row(ids, "Halts: which agent, why"),
        _timeseries(
            ids,
            "Halted turns per minute by agent",
            "Turns ended by a block or halt decision, per agent.",
            "cpm",
            [_query(f"sum by ({AGENT}) ({halted}) * 60", legend(AGENT))],
        ),
        _timeseries(
            ids,
            "Halted-turn ratio by agent",
            "Share of each agent's turns halted over the last 5 minutes. OtelguardHaltRateHigh fires "
            "above 25% for 15 minutes.",
            "percentunit",
            [
                _query(
                    f"sum by ({AGENT}) ({selector(rules.HALTED_TURNS_RATE)})"
                    f" / sum by ({AGENT}) ({selector(rules.TURNS_RATE)})",
                    legend(AGENT),
                )
            ],
            steps=[(None, "green"), (0.25, "red")],
        ),
        _timeseries(
            ids,
            "Rejects, blocks and halts per minute by code",
            "The decisions that refused calls or stopped turns, by decision code: caps, and the loop "
            "detectors, which reject a repeated call first (*_reject: the turn goes on) and stop the turn "
            "when the model sends it again. Exemplars link to the trace of the call.",
            "cpm",
            [_query(f"sum by ({CODE}) ({rate(stops)}) * 60", legend(CODE), exemplar=True)],
        ),
    ]


def _caps_row(ids: _Ids) -> list[Any]:
    usage = rate(selector(CAP_USAGE_BUCKET))
    return [
        _row(ids, "Caps: which cap, which agent"),
        _timeseries(
            ids,
            "Cap hits per minute by cap",
            "Calls refused by a turn or session cap, by cap key and scope. Exemplars link to the trace.",
            "cpm",
            [
                _query(
                    f"sum by ({by(CAP, SCOPE)}) ({rate(selector(CAP_HITS))}) * 60",
                    f"{legend(CAP)} ({legend(SCOPE)})",
                    exemplar=True,
                )
            ],
        ),
        _timeseries(
            ids,
            "Cap hits per minute by agent",
            "Cap hits per agent and cap over the last 5 minutes: the series OtelguardRunawaySearchLoop "
            "(web_search) and OtelguardRunawayDelegationLoop (subagents) page on when it stays above 0.",
            "cpm",
            [
                _query(
                    f"sum by ({by(AGENT, CAP)}) ({selector(rules.CAP_HITS_RATE)}) * 60",
                    f"{legend(AGENT)} · {legend(CAP)}",
                )
            ],
        ),
        _timeseries(
            ids,
            "Cap usage p95 by cap",
            "How close turns come to their cap: 95th percentile of the highest used/limit of each turn "
            "(1 = the turn reached its cap).",
            "percentunit",
            [_query(f"histogram_quantile(0.95, sum by ({by(CAP, 'le')}) ({usage}))", f"{legend(CAP)} p95")],
            steps=[(None, "green"), (0.9, "orange"), (1, "red")],
        ),
        _cap_usage_heatmap(ids, usage),
        _timeseries(
            ids,
            "Subagent spawns per minute by agent",
            "Subagents started by spawning tools (a batch counts each subagent).",
            "cpm",
            [_query(f"sum by ({AGENT}) ({rate(selector(SUBAGENT_SPAWNS))}) * 60", legend(AGENT))],
            width=12,
        ),
    ]


def _delegation_row(ids: _Ids) -> list[Any]:
    cycles = selector(DECISIONS, f'{CODE}=~"delegation_cycle_.*"', tool=True)
    return [
        _row(ids, "Delegation trees: how far, how deep, refused"),
        _timeseries(
            ids,
            "Delegations per minute by outcome",
            "Delegations by agents in a delegation tree (spawns, and handoffs or agents called as tools "
            "that name their agent): started, or refused by the depth limit, a tree cap, a cycle or "
            "the host.",
            "cpm",
            [_query(f"sum by ({OUTCOME}) ({rate(selector(DELEGATIONS))}) * 60", legend(OUTCOME))],
            width=12,
            stacked=True,
        ),
        _depth_heatmap(ids),
        _timeseries(
            ids,
            "Tree cap hits per minute by cap",
            "Calls refused by a cap across a whole delegation tree (caps.tree), by cap key, and spawns "
            "refused at the depth limit. Refusals in every window for 5 minutes page "
            "OtelguardRunawayDelegationTree. Exemplars link to the trace.",
            "cpm",
            [
                _query(
                    f"sum by ({CAP}) ({rate(selector(CAP_HITS, TREE_SCOPE))}) * 60",
                    legend(CAP),
                    exemplar=True,
                ),
                _query(
                    f"sum({selector(rules.TREE_REFUSALS_RATE)}) * 60",
                    "tree refusals (alert rule)",
                    ref="B",
                ),
            ],
            width=12,
        ),
        _timeseries(
            ids,
            "Delegation cycles per minute by code",
            "Delegations back to an agent already on the tree's path (a handoff ping-pong, an agent "
            "calling itself): warned, refused once, then the turn stopped. Exemplars link to the trace.",
            "cpm",
            [_query(f"sum by ({CODE}) ({rate(cycles)}) * 60", legend(CODE), exemplar=True)],
            width=12,
        ),
    ]


def _depth_heatmap(ids: _Ids) -> heatmap.Panel:
    return (
        heatmap.Panel()
        .id(ids.next())
        .title("Delegation depth distribution")
        .description(
            "Delegations by the depth of the agent they start (the root is 0), started and refused: "
            "a band near delegation.max_depth means trees grow as deep as they may."
        )
        .datasource(DATASOURCE)
        .with_target(
            _query(
                f"sum by (le) ({rate(selector(DELEGATION_DEPTH_BUCKET))})",
                "{{le}}",
                fmt=PromQueryFormat.HEATMAP,
            )
        )
        .height(8)
        .span(12)
        .calculate(False)
        .y_axis(heatmap.YAxisConfig().unit("none").decimals(0))
        .cell_values(heatmap.CellValues().unit("cps"))
        .color(heatmap.HeatmapColorOptions().mode(heatmap_model.HeatmapColorMode.SCHEME).scheme("Purples"))
        .rows_frame(heatmap.RowsHeatmapOptions().layout(common.HeatmapCellLayout.LE))
        .show_legend()
    )


def _cap_usage_heatmap(ids: _Ids, usage: str) -> heatmap.Panel:
    return (
        heatmap.Panel()
        .id(ids.next())
        .title("Cap usage distribution")
        .description(
            "Turns by the highest share of a cap they used (all caps). A band at 1 means turns "
            "run into their caps; healthy agents sit in the low buckets."
        )
        .datasource(DATASOURCE)
        .with_target(_query(f"sum by (le) ({usage})", "{{le}}", fmt=PromQueryFormat.HEATMAP))
        .height(8)
        .span(12)
        .calculate(False)
        .y_axis(heatmap.YAxisConfig().unit("percentunit").decimals(0))
        .cell_values(heatmap.CellValues().unit("cps"))
        .color(heatmap.HeatmapColorOptions().mode(heatmap_model.HeatmapColorMode.SCHEME).scheme("Oranges"))
        .rows_frame(heatmap.RowsHeatmapOptions().layout(common.HeatmapCellLayout.LE))
        .show_legend()
    )


def _loops_row(ids: _Ids) -> list[Any]:
    loops = selector(DECISIONS, LOOP_CODE_MATCHER, tool=True)
    warnings = selector(DECISIONS, f'{ACTION}="warn"', LOOP_CODE_MATCHER, tool=True)
    return [
        _row(ids, "Loops: which code, which tool"),
        _timeseries(
            ids,
            "Loop warnings per minute by code",
            "Warnings from the loop detectors (the model is told it is repeating itself), by decision "
            "code: the same failing call, a tool failing again and again, the very same error from "
            "any tool (same_error), repeated refusals, results or cycles. Exemplars link to the trace "
            "of the call.",
            "cpm",
            [_query(f"sum by ({CODE}) ({rate(warnings)}) * 60", legend(CODE), exemplar=True)],
        ),
        _timeseries(
            ids,
            "Loop rate by code (per tool call)",
            "Loop-detector warnings, rejects, blocks and halts per tool call over the last 5 minutes, by code. "
            "OtelguardLoopRateHigh fires when an agent's total stays above 10% for 15 minutes.",
            "percentunit",
            [
                _query(
                    f"sum by ({CODE}) ({selector(rules.LOOP_DECISIONS_RATE)})"
                    f" / scalar(sum({selector(rules.TOOL_CALLS_RATE)}))",
                    legend(CODE),
                )
            ],
            stacked=True,
            steps=[(None, "green"), (0.1, "red")],
        ),
        _timeseries(
            ids,
            "Loop decisions per minute by tool",
            "Which tools the loop detectors fire on (warnings, rejects, blocks and halts). Exemplars link to traces.",
            "cpm",
            [_query(f"sum by ({TOOL}) ({rate(loops)}) * 60", legend(TOOL), exemplar=True)],
        ),
        _signatures_table(ids),
    ]


def hits_in_range(series: str) -> str:
    """A counter's hits over ``$__range``, counting the hits of a series born inside the range.

    A loop that starts and ends between two scrapes makes its signature's series appear at its final
    value and never change, and ``increase()`` counts nothing for it. So: the value at the range's
    end less the value at its start, or all of it when the series did not exist at the start. Only a
    series whose counter went back (a restarted process, a series evicted and born again) falls back
    to ``increase()``, which counts across a reset where a difference would go negative.
    """
    last = f"last_over_time({series}[$__range])"
    difference = f"(({last} - {series} offset $__range) or {last})"
    return f"({difference} unless resets({series}[$__range]) > 0) or increase({series}[$__range])"


def _signatures_table(ids: _Ids) -> table.Panel:
    # Over the whole dashboard range, not a rate: a signature that looped 20 minutes ago still matters
    # to the engineer reading this, and an instant rate would already have forgotten it.
    hits = selector(SIGNATURE_HITS, LOOP_CODE_MATCHER, tool=True)
    expr = f"topk(20, sum by ({by(AGENT, TOOL, CODE, SIGNATURE)}) ({hits_in_range(hits)})) > 0"
    organize = model.DataTransformerConfig(
        id_val="organize",
        options={
            "excludeByName": {"Time": True},
            "indexByName": {AGENT: 0, TOOL: 1, CODE: 2, SIGNATURE: 3, "Value": 4},
            "renameByName": {SIGNATURE: f"{SIGNATURE} (args hash)", "Value": "hits in range"},
        },
    )
    return (
        table.Panel()
        .id(ids.next())
        .title("Top looping signatures")
        .description(
            "The calls (tool + keyed hash of the arguments) the loop detectors fired on most in the "
            "selected time range. Search the agent's traces for otelguard.args_hash to find the calls."
        )
        .datasource(DATASOURCE)
        .with_target(_query(expr, "", instant=True, fmt=PromQueryFormat.TABLE))
        .with_transformation(organize)
        .unit("short")
        .decimals(0)
        .height(9)
        .span(24)
        .sort_by([TableSortByFieldState().display_name("hits in range").desc(True)])
        # Spelled out because Grafana fills these in on load: the JSON then round-trips unchanged.
        .align(common.FieldTextAlignment.AUTO)
        .inspect(False)
        .thresholds(_thresholds([(None, "green"), (5, "orange"), (20, "red")]))
    )


def _model_row(ids: _Ids) -> list[Any]:
    # Model decisions are selected by tool "model" rather than the tool variable, which lists the
    # tools of tool calls: picking one must not empty the model's panels.
    stalls = selector(DECISIONS, MODEL, STALL_CODE_MATCHER)
    token_hits = rate(selector(CAP_HITS, f'{CAP}="{TOKENS_CAP}"'))
    return [
        _row(ids, "Model turns: replies, tokens, stuck models"),
        _timeseries(
            ids,
            "Model calls per minute by outcome",
            "Model replies by what they asked for: tool_calls (at least one valid call), invalid_tool_call "
            "(only calls the harness could not run) or no_tool_call (a final answer, or a model that "
            "answers without acting). A growing share of the last two is a model going nowhere.",
            "cpm",
            [_query(f"sum by ({OUTCOME}) ({rate(selector(MODEL_CALLS))}) * 60", legend(OUTCOME))],
            width=12,
            stacked=True,
        ),
        _timeseries(
            ids,
            "Tokens per minute by agent",
            "Input and output tokens of the model calls, as the provider reported them, per agent. "
            "Calls whose usage was not reported count nothing.",
            "short",
            [
                _query(
                    f"sum by ({by(AGENT, KIND)}) ({rate(selector(MODEL_TOKENS))}) * 60",
                    f"{legend(AGENT)} · {legend(KIND)}",
                )
            ],
            width=12,
        ),
        _timeseries(
            ids,
            "Token cap hits per minute by scope",
            "Model calls refused, or replies halted, because a token cap (caps.turn.tokens, "
            "caps.session.tokens, caps.tree.tokens) was spent. Hits in every window for 10 minutes page "
            "OtelguardRunawayTokens. Exemplars link to the trace of the model call.",
            "cpm",
            [
                _query(
                    f"sum by ({SCOPE}) ({token_hits}) * 60",
                    legend(SCOPE),
                    exemplar=True,
                )
            ],
            width=12,
        ),
        _timeseries(
            ids,
            "No-action and repeated-reply decisions per minute by code",
            "The guard telling a stuck model, then stopping it: replies without a valid tool call "
            "(no_action_*) and replies that say the same again (repeated_reply_*). Decisions in every "
            "window for 10 minutes page OtelguardModelStalled. Exemplars link to the trace.",
            "cpm",
            [_query(f"sum by ({CODE}) ({rate(stalls)}) * 60", legend(CODE), exemplar=True)],
            width=12,
        ),
    ]


def _traffic_row(ids: _Ids) -> list[Any]:
    calls = rate(selector(TOOL_CALLS, tool=True))
    per_turn = rate(selector(TURN_TOOL_CALLS_BUCKET))
    quantiles = [
        _query(f"histogram_quantile({q}, sum by (le) ({per_turn}))", f"p{round(q * 100)}", ref=ref)
        for q, ref in ((0.5, "A"), (0.95, "B"), (0.99, "C"))
    ]
    return [
        _row(ids, "Traffic: tool calls and turns"),
        _timeseries(
            ids,
            "Tool calls per second by outcome",
            "Guarded tool calls by outcome: ok, failed (ran and failed), refused (a host policy said "
            "no), blocked/rejected (otelguard said no), cancelled (the host dispatched it but it never "
            "ran, e.g. a parallel sibling cancelled after another call of the batch failed).",
            "cps",
            [_query(f"sum by ({OUTCOME}) ({calls})", legend(OUTCOME))],
            stacked=True,
        ),
        _timeseries(
            ids,
            "Tool calls per turn (p50 / p95 / p99)",
            "Distribution of tool calls per finished turn. The default turn caps are 50 web searches "
            "and 50 subagents.",
            "short",
            quantiles,
        ),
        _timeseries(
            ids,
            "Tool calls per second by tool (top 10)",
            "The busiest tools.",
            "cps",
            [_query(f"topk(10, sum by ({TOOL}) ({calls}))", legend(TOOL))],
        ),
    ]


def _health_row(ids: _Ids) -> list[Any]:
    errors = rate(selector(INTERNAL_ERRORS, agent=False))
    versions = f"sum by ({by(TARGET, VERSION)}) ({selector(BUILD_INFO, agent=False)})"
    return [
        _row(ids, "otelguard health"),
        _timeseries(
            ids,
            "Internal errors per minute by stage",
            "otelguard failed internally and allowed the call unchecked. OtelguardInternalErrors fires "
            "when this stays above 0 for 10 minutes.",
            "cpm",
            [_query(f"sum by ({STAGE}) ({errors}) * 60", legend(STAGE))],
            width=12,
            steps=OK_THEN_BAD,
        ),
        table.Panel()
        .id(ids.next())
        .title("otelguard versions")
        .description("Processes exporting otelguard metrics and the otelguard version they run.")
        .datasource(DATASOURCE)
        .with_target(_query(versions, "", instant=True, fmt=PromQueryFormat.TABLE))
        .with_transformation(
            model.DataTransformerConfig(
                id_val="organize", options={"excludeByName": {"Time": True, "Value": True}}
            )
        )
        .align(common.FieldTextAlignment.AUTO)
        .inspect(False)
        .height(8)
        .span(12),
        *_shared_state_panels(ids),
    ]


def _shared_state_panels(ids: _Ids) -> list[Any]:
    errors = f"sum by ({OP}) ({rate(selector(STATE_ERRORS, agent=False))}) * 60"
    fallbacks = f"sum({selector(rules.STATE_FALLBACKS_RATE, agent=False)}) * 60"
    return [
        _timeseries(
            ids,
            "Shared state: errors and fallbacks per minute",
            "Failed commands to the shared session-cap store (Redis) by operation, and the tool calls "
            "whose session caps were decided without it (from the process's own counts). Empty without "
            "state.url. OtelguardSharedStateDown fires when calls keep falling back for 5 minutes.",
            "cpm",
            [_query(errors, f"errors: {legend(OP)}"), _query(fallbacks, "calls decided without it", ref="B")],
            width=12,
            steps=OK_THEN_BAD,
        ),
        _timeseries(
            ids,
            "Shared state up by instance",
            "1 when the process's last command to the shared session-cap store succeeded, 0 when it "
            "failed. Empty without state.url.",
            "short",
            [
                _query(
                    f"min by ({TARGET}) ({selector(STATE_UP, agent=False)})",
                    f"{legend('instance')} ({legend('job')})",
                )
            ],
            width=12,
            steps=[(None, "red"), (1, "green")],
        ),
    ]


def _variable(name: str, label: str, query: str) -> dash.QueryVariable:
    return (
        dash.QueryVariable(name)
        .label(label)
        .datasource(DATASOURCE)
        .query(query)
        .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(model.VariableSort.ALPHABETICAL_CASE_INSENSITIVE_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
        .current(model.VariableOption(selected=True, text="All", value="$__all"))
    )


def _variables() -> list[Any]:
    target = 'job=~"$job", instance=~"$instance"'
    return [
        dash.DatasourceVariable("datasource").label("Data source").type("prometheus"),
        _variable("job", "Job", f"label_values({BUILD_INFO}, job)"),
        _variable("instance", "Instance", f'label_values({BUILD_INFO}{{job=~"$job"}}, instance)'),
        _variable(AGENT, "Agent", f"label_values({TOOL_CALLS}{{{target}}}, {AGENT})"),
        _variable(TOOL, "Tool", f'label_values({TOOL_CALLS}{{{target}, {AGENT}=~"${AGENT}"}}, {TOOL})'),
    ]


def build_dashboard() -> dash.Dashboard:
    ids = _Ids()
    builder = (
        dash.Dashboard(TITLE)
        .uid(UID)
        .description("Tool-call loops, halts and cap hits of LLM agents guarded by otelguard.")
        .tags(["otelguard", "llm-agents"])
        .editable()
        .tooltip(model.DashboardCursorSync.CROSSHAIR)
        .time("now-1h", "now")
        .refresh("30s")
        .timezone("browser")
        .link(
            dash.DashboardLink("Runbooks")
            .type(model.DashboardLinkType.LINK)
            .url(f"{rules.RUNBOOK_BASE}#runbooks")
            .icon("doc")
            .target_blank(True)
        )
        .variables(_variables())
        .annotation(
            # Grafana's own "Annotations & Alerts" entry, as a dashboard created in the UI has it.
            dash.AnnotationQuery()
            .name("Annotations & Alerts")
            .datasource(model.DataSourceRef(type_val="grafana", uid="-- Grafana --"))
            .enable(True)
            .hide(True)
            .icon_color("rgba(0, 211, 255, 1)")
            .type("dashboard")
            .built_in(1)
        )
    )
    for panel in _top_row(ids):
        builder = builder.with_panel(panel)
    for section in (
        _halts_row,
        _caps_row,
        _delegation_row,
        _loops_row,
        _model_row,
        _traffic_row,
        _health_row,
    ):
        for item in section(ids):
            builder = builder.with_row(item) if isinstance(item, dash.Row) else builder.with_panel(item)
    return builder


def render_dashboard() -> str:
    document: dict[str, Any] = json.loads(json.dumps(build_dashboard().build(), cls=JSONEncoder))
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
