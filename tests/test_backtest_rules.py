"""The backtest's reading of a rule file: levels of recording rules, alert timing, evaluation offsets."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from otelguard.backtest.alerts import FiredInterval, Mark, firing_intervals
from otelguard.backtest.rules import AlertRule, eval_offset, load_rules, referenced_names
from otelguard.backtest.run import block_window_ends, evaluation_times
from otelguard.errors import UsageError
from otelguard.replay.openmetrics import ScrapeGrid

SHIPPED = (
    Path(__file__).resolve().parent.parent / "otelguard" / "data" / "prometheus" / "otelguard-rules.yaml"
)


def write_rules(path: Path, groups: list[dict[str, object]]) -> Path:
    path.write_text(yaml.safe_dump({"groups": groups}), encoding="utf-8")
    return path


def test_the_shipped_recording_rules_fall_into_three_levels() -> None:
    """Rules reading only exported series come first; the halt ratio, built on two recorded rules
    of which one is itself built on another, comes last."""
    rules = load_rules(SHIPPED)
    documents = rules.levels()
    level_of = {
        rule["record"]: level
        for level, doc in enumerate(documents, start=1)
        for group in doc["groups"]
        for rule in group["rules"]
    }
    assert len(documents) == 3
    assert {name for name, level in level_of.items() if level > 1} == {
        "otelguard:halted_turns:rate5m",
        "otelguard:loop_decisions_per_tool_call:ratio_rate5m",
        "otelguard:loop_decisions_per_tool_call_by_code:ratio_rate5m",
        "otelguard:halted_turns_per_turn:ratio_rate5m",
    }
    assert level_of["otelguard:halted_turns_per_turn:ratio_rate5m"] == 3
    assert level_of["otelguard:turns:rate5m"] == level_of["otelguard:cap_hits:rate5m"] == 1
    assert {group["name"] for doc in documents for group in doc["groups"]} == {"otelguard.rules"}


def test_the_shipped_alerts_keep_their_for_labels_and_default_interval() -> None:
    alerts = {a.name: a for a in load_rules(SHIPPED).alerts}
    assert set(alerts) >= {
        "OtelguardRunawaySearchLoop",
        "OtelguardRunawayDelegationLoop",
        "OtelguardHaltRateHigh",
        "OtelguardLoopRateHigh",
        "OtelguardInternalErrors",
    }
    assert alerts["OtelguardRunawaySearchLoop"].hold == 600
    assert alerts["OtelguardHaltRateHigh"].hold == 900
    assert alerts["OtelguardHaltRateHigh"].labels == {"severity": "warning"}
    assert {a.interval for a in alerts.values()} == {60.0}


def test_a_group_interval_and_the_default_interval(tmp_path: Path) -> None:
    path = write_rules(
        tmp_path / "r.yaml",
        [
            {"name": "fast", "interval": "15s", "rules": [{"alert": "A", "expr": "up == 0"}]},
            {"name": "plain", "rules": [{"alert": "B", "expr": "up == 0", "for": "1m30s"}]},
        ],
    )
    alerts = load_rules(path, default_interval=30).alerts
    assert [(a.name, a.interval, a.hold) for a in alerts] == [("A", 15.0, 0.0), ("B", 30.0, 90.0)]


def test_names_inside_strings_and_comments_are_not_dependencies(tmp_path: Path) -> None:
    path = write_rules(
        tmp_path / "r.yaml",
        [
            {
                "name": "g",
                "rules": [
                    {"record": "a:b", "expr": "sum(rate(x_total[5m]))"},
                    {"record": "c:d", "expr": 'x_total{name="a:b"} # a:b\n'},
                    {"record": "e:f", "expr": "a:b / 2"},
                ],
            }
        ],
    )
    levels = load_rules(path).levels()
    assert [[r["record"] for r in doc["groups"][0]["rules"]] for doc in levels] == [["a:b", "c:d"], ["e:f"]]
    assert referenced_names('foo{l="bar"} + baz') == {"foo", "l", "baz"}


def test_a_rule_reading_itself_is_not_a_cycle_but_two_reading_each_other_are(tmp_path: Path) -> None:
    own = write_rules(tmp_path / "own.yaml", [{"name": "g", "rules": [{"record": "a:b", "expr": "a:b + 1"}]}])
    assert len(load_rules(own).levels()) == 1
    loop = write_rules(
        tmp_path / "loop.yaml",
        [{"name": "g", "rules": [{"record": "a:b", "expr": "c:d"}, {"record": "c:d", "expr": "a:b"}]}],
    )
    with pytest.raises(UsageError, match="cycle"):
        load_rules(loop).levels()


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("groups: [", "not valid YAML"),
        ("rules: []", "'groups' list"),
        ("groups: [{rules: []}]", r"groups\[0\] needs a string 'name'"),
        ("groups: [{name: g, rules: [{expr: up}]}]", "needs a 'record' or an 'alert'"),
        ("groups: [{name: g, rules: [{alert: A}]}]", "needs an 'expr'"),
        (
            "groups: [{name: g, rules: [{alert: A, expr: up, for: soon}]}]",
            r"rules\[0\].for: 'soon' is not a duration",
        ),
        ("groups: [{name: g, interval: -1m, rules: []}]", "interval"),
    ],
)
def test_a_bad_rule_file_is_a_usage_error_naming_the_place(
    tmp_path: Path, document: str, message: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(document, encoding="utf-8")
    with pytest.raises(UsageError, match=message):
        load_rules(path)


def test_eval_offset_is_stable_within_the_interval_and_depends_on_file_and_group() -> None:
    """The offset Prometheus derives from the group's name and file path (checked against promtool's
    own evaluations in the end-to-end tests)."""
    offset = eval_offset("rules.yaml", "g", 60)
    assert 0 <= offset < 60
    assert offset == eval_offset("rules.yaml", "g", 60)
    assert offset != eval_offset("/etc/prometheus/rules.yaml", "g", 60)
    assert offset != eval_offset("rules.yaml", "h", 60)


def test_evaluation_times_sit_on_the_group_offset_inside_the_period() -> None:
    rule = AlertRule("A", "g", "up", 60.0, 0.0, 0.0, {})
    times = evaluation_times(rule, 1000.0, 1300.0)
    offset = round(eval_offset("otelguard-backtest-rules.yaml", "g", 60), 3)  # query times are in ms
    assert all(1000 <= t <= 1300 for t in times)
    assert all(round((t - offset) % 60, 3) in (0.0, 60.0) for t in times)
    assert len(times) == 5


def test_block_windows_follow_two_hour_epoch_boundaries() -> None:
    grid = ScrapeGrid.covering(7200 - 30, 7200 * 3 + 10, 15)  # from just before a boundary to past two more
    ends = list(block_window_ends(grid))
    assert [grid.time(k) for k in ends] == [7200 - 15, 14400 - 15, 21600 - 15, grid.end]
    assert ends[-1] == grid.count - 1


def alert(hold: float = 600, keep: float = 0) -> AlertRule:
    return AlertRule("A", "g", "x > 0", 60.0, hold, keep, {"severity": "critical"})


def evaluations(count: int) -> list[float]:
    return [1000.0 + 60 * k for k in range(count)]


def at(*indexes: int) -> list[tuple[float, float]]:
    return [(1000.0 + 60 * k, 1.0) for k in indexes]


def test_an_alert_fires_after_for_and_resolves_at_the_first_evaluation_without_it() -> None:
    fired = firing_intervals(
        alert(), [({"__name__": "x", "cap": "web_search"}, at(*range(2, 20)))], evaluations(30), 9e9
    )
    assert len(fired) == 1
    interval = fired[0]
    assert (interval.pending_since, interval.start, interval.end, interval.resolved) == (
        1120,
        1720,
        2200,
        True,
    )
    assert interval.labels == {"cap": "web_search", "severity": "critical", "alertname": "A"}


def test_a_label_set_gone_before_for_never_fires_and_a_gap_restarts_pending() -> None:
    series = [({"a": "1"}, at(*range(0, 10), *range(11, 21)))]  # ten minutes, a gap, ten minutes
    assert firing_intervals(alert(), series, evaluations(30), 9e9) == []
    assert len(firing_intervals(alert(hold=540), series, evaluations(30), 9e9)) == 2


def test_an_alert_still_firing_at_the_end_is_not_resolved() -> None:
    [interval] = firing_intervals(alert(hold=0), [({}, at(5, 6, 7, 8, 9))], evaluations(10), 1600.0)
    assert (interval.start, interval.end, interval.resolved) == (1300, 1600, False)


def test_keep_firing_for_holds_the_alert_over_short_gaps() -> None:
    series = [({}, at(0, 1, 2, 3, 5, 6))]  # one missing evaluation, then gone for good
    [held] = firing_intervals(alert(hold=60, keep=120), series, evaluations(12), 9e9)
    assert (held.start, held.end) == (1060, 1000 + 60 * 9)
    assert len(firing_intervals(alert(hold=60), series, evaluations(12), 9e9)) == 2


def test_marks_are_listed_under_an_interval_only_inside_it_and_with_matching_labels() -> None:
    interval = FiredInterval("A", {"agent": "replay", "cap": "web_search"}, 0, 100, 200, True)
    inside = {"agent": "replay", "cap": "web_search", "tool": "WebSearch"}
    assert interval.covers(Mark(150, "cap_hit", inside))
    assert not interval.covers(Mark(99, "cap_hit", inside))
    assert not interval.covers(Mark(201, "cap_hit", inside))
    assert not interval.covers(Mark(150, "cap_hit", {**inside, "cap": "subagents"}))
    assert not interval.covers(Mark(150, "halt", {"agent": "replay", "code": "exact_failure_block"}))
    bounded = FiredInterval("A", {"agent": "_other"}, 0, 100, 200, True)
    assert bounded.covers(Mark(150, "halt", {"agent": "anyone"}))
