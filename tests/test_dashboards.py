"""The Grafana dashboard: generated from code, no drift, loads into the foundation SDK's
model without loss, valid PromQL on $__rate_interval, exemplars where the metrics carry them; and the
`otelguard dashboards|rules export` commands that ship it."""

from __future__ import annotations

import datetime
import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import promql_parser
import pytest

from otelguard.cli import main
from otelguard.cli.shipped_files import shipped_files

REPO = Path(__file__).resolve().parent.parent
DASHBOARDS = REPO / "dashboards"
DASHBOARD_JSON = DASHBOARDS / "otelguard-overview.json"
RULES_YAML = DASHBOARDS / "prometheus" / "otelguard-rules.yaml"

# Metrics whose counter increments carry exemplars (docs/telemetry.md).
EXEMPLAR_METRICS = ("otelguard_decisions_total", "otelguard_cap_hits_total")


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("otelguard_dashboards_generate", DASHBOARDS / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


generate = load_generator()
from otelguard_mixin import walk  # noqa: E402  (importable once the generator put dashboards/ on sys.path)

# Stand-ins for Grafana's variables: $__rate_interval must become a duration promql-parser accepts.
RATE_INTERVAL = "1m"
RANGE = "1h"
SUBSTITUTIONS = {
    "__rate_interval": RATE_INTERVAL,
    "__range": RANGE,
    "job": "otelguard",
    "instance": walk.grafana_regex(["127.0.0.1:9464"]),
    "agent": "(research-agent|coder)",
    "tool": ".*",
}


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(DASHBOARD_JSON.read_text(encoding="utf-8"))
    return document


def all_targets(dashboard: dict[str, Any]) -> list[walk.Target]:
    return list(walk.targets(dashboard))


# --- generated, committed, shipped ------------------------------------------------------------


def test_committed_files_equal_generator_output() -> None:
    """CI fails on drift: every committed generated file is byte-for-byte what the code produces."""
    stale = generate.drifted(REPO)
    assert stale == [], f"run python dashboards/generate.py; out of date: {stale}"


def test_generator_check_mode_reports_drift(tmp_path: Path) -> None:
    """`generate.py --check` exits 1 naming the file when a committed copy was edited by hand."""
    files = generate.generated_files(tmp_path)
    for path, content in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
    assert generate.drifted(tmp_path) == []
    edited = tmp_path / "dashboards" / "otelguard-overview.json"
    edited.write_text(edited.read_text().replace("otelguard-overview", "hand-edited"), encoding="utf-8")
    assert generate.drifted(tmp_path) == [edited]


def test_package_data_copies_are_identical_to_the_repository_files() -> None:
    """What a wheel ships (otelguard/data) is exactly what the repository shows (dashboards/)."""
    shipped = shipped_files("dashboards")
    assert set(shipped) == set(generate.DASHBOARD_TREE)
    for relative, content in shipped.items():
        assert (DASHBOARDS / relative).read_bytes() == content, relative
    assert shipped_files("rules") == {"otelguard-rules.yaml": RULES_YAML.read_bytes()}


def test_provisioned_dashboard_is_the_dashboard() -> None:
    """One mount of grafana/provisioning loads the same dashboard operators import by hand."""
    provisioned = DASHBOARDS / "grafana" / "provisioning" / "dashboards" / DASHBOARD_JSON.name
    assert provisioned.read_bytes() == DASHBOARD_JSON.read_bytes()
    provider = (DASHBOARDS / "grafana" / "provisioning" / "dashboards" / "otelguard.yaml").read_text()
    assert "path: /etc/grafana/provisioning/dashboards" in provider
    datasource = (
        DASHBOARDS / "grafana" / "provisioning" / "datasources" / "otelguard-prometheus.yaml"
    ).read_text()
    assert "type: prometheus" in datasource


def test_dashboard_round_trips_through_the_foundation_sdk_model(dashboard: dict[str, Any]) -> None:
    """Unmarshalled into grafana_foundation_sdk's Dashboard and marshalled back, nothing is lost."""
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.cog.plugins import register_default_plugins
    from grafana_foundation_sdk.models.dashboard import Dashboard

    register_default_plugins()  # so panel options and Prometheus queries decode to their typed models
    model = Dashboard.from_json(dashboard)
    assert json.loads(json.dumps(model, cls=JSONEncoder)) == dashboard
    assert model.uid == "otelguard-overview"


# --- what the dashboard contains ----------------------------------------------------------------


def test_uid_and_variables(dashboard: dict[str, Any]) -> None:
    assert dashboard["uid"] == "otelguard-overview"
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert list(variables) == ["datasource", "job", "instance", "agent", "tool"]
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("job", "instance", "agent", "tool"):
        variable = variables[name]
        assert variable["type"] == "query"
        assert re.fullmatch(rf"label_values\(.+, {name}\)", variable["query"]), variable["query"]
        assert variable["datasource"]["uid"] == "${datasource}"
        assert variable["multi"] and variable["includeAll"]


def test_every_panel_and_query_uses_the_datasource_variable(dashboard: dict[str, Any]) -> None:
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


def test_every_expression_parses_with_variables_substituted(dashboard: dict[str, Any]) -> None:
    """Each panel query and each variable's selector is valid PromQL once Grafana fills it in."""
    for target in all_targets(dashboard):
        promql_parser.parse(walk.substitute(target.expr, SUBSTITUTIONS))
    for variable in dashboard["templating"]["list"][1:]:
        inner = re.fullmatch(r"label_values\((.+), \w+\)", variable["query"])
        assert inner is not None
        promql_parser.parse(walk.substitute(inner.group(1), SUBSTITUTIONS))


def _matrix_ranges(expr: str) -> list[tuple[str, datetime.timedelta]]:
    found: list[tuple[str, datetime.timedelta]] = []

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.Call):
            for arg in node.args:
                if isinstance(arg, promql_parser.MatrixSelector):
                    found.append((node.func.name, arg.range))

    promql_parser.walk(promql_parser.parse(expr), visit)
    return found


def test_every_rate_uses_rate_interval(dashboard: dict[str, Any]) -> None:
    """No hard-coded window: every rate() reads $__rate_interval, other ranges only $__range."""
    rate_calls = 0
    for target in all_targets(dashboard):
        assert set(re.findall(r"\[([^\]]*)\]", target.expr)) <= {"$__rate_interval", "$__range"}, target.expr
        for func, window in _matrix_ranges(walk.substitute(target.expr, SUBSTITUTIONS)):
            if func in ("rate", "irate"):
                rate_calls += 1
                assert window == datetime.timedelta(minutes=1), (target.panel_title, target.expr)
    assert rate_calls >= 10


def test_exemplars_enabled_exactly_where_the_metric_has_them(dashboard: dict[str, Any]) -> None:
    with_exemplars = [t for t in all_targets(dashboard) if t.exemplar]
    assert {t.panel_title for t in with_exemplars} >= {
        "Cap hits per minute by cap",
        "Loop warnings per minute by code",
        "Rejects, blocks and halts per minute by code",
        "Token cap hits per minute by scope",
        "No-action and repeated-reply decisions per minute by code",
    }
    for target in all_targets(dashboard):
        raw_exemplar_metric = any(f"{m}{{" in target.expr for m in EXEMPLAR_METRICS)
        graph = target.panel_type == "timeseries"
        assert target.exemplar == (raw_exemplar_metric and graph), target.panel_title


REQUIRED_PANELS = {
    "tool-call rate by outcome": "Tool calls per second by outcome",
    "loop-warning rate by code": "Loop warnings per minute by code",
    "loop rate (decisions per tool call) by code": "Loop rate by code (per tool call)",
    "halted turns per minute": "Halted turns per minute by agent",
    "halted-turn ratio": "Halted-turn ratio by agent",
    "cap hits by cap": "Cap hits per minute by cap",
    "cap usage distribution": "Cap usage distribution",
    "tool calls per turn (p50/p95/p99)": "Tool calls per turn (p50 / p95 / p99)",
    "top looping signatures (table)": "Top looping signatures",
    "subagent spawns rate": "Subagent spawns per minute by agent",
    "internal errors": "Internal errors per minute by stage",
    "delegations per minute by outcome": "Delegations per minute by outcome",
    "delegation depth distribution": "Delegation depth distribution",
    "tree cap hits": "Tree cap hits per minute by cap",
    "delegation cycles": "Delegation cycles per minute by code",
    "model calls by outcome": "Model calls per minute by outcome",
    "tokens per minute by agent": "Tokens per minute by agent",
    "token cap hits": "Token cap hits per minute by scope",
    "no-action and repeated-reply decisions": "No-action and repeated-reply decisions per minute by code",
}


def test_spec_panels_are_present(dashboard: dict[str, Any]) -> None:
    titles = {p["title"]: p for p in dashboard["panels"]}
    for what, title in REQUIRED_PANELS.items():
        assert title in titles, what
    assert titles["Top looping signatures"]["type"] == "table"
    assert titles["Cap usage distribution"]["type"] == "heatmap"
    assert titles["Delegation depth distribution"]["type"] == "heatmap"
    quantiles = [t["legendFormat"] for t in titles["Tool calls per turn (p50 / p95 / p99)"]["targets"]]
    assert quantiles == ["p50", "p95", "p99"]


def test_top_row_answers_is_anything_halting_or_hitting_caps(dashboard: dict[str, Any]) -> None:
    """The first row, above any drill-down row, is single numbers for halts, caps, loops, errors."""
    first_row_y = min(p["gridPos"]["y"] for p in dashboard["panels"] if p["type"] == "row")
    top = [p for p in dashboard["panels"] if p["gridPos"]["y"] < first_row_y]
    assert {p["type"] for p in top} == {"stat"}
    assert sum(p["gridPos"]["w"] for p in top) == 24
    titles = [p["title"] for p in sorted(top, key=lambda p: p["gridPos"]["x"])]
    assert titles[:3] == ["Halted turns / min", "Halted-turn ratio", "Cap hits / min"]
    assert "Loop rate" in titles and "Internal errors / min" in titles


def test_panels_read_without_a_legend_hunt(dashboard: dict[str, Any]) -> None:
    """Units, descriptions, thresholds on every panel; legends name the series they split by."""
    checked = 0
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        assert panel.get("description"), panel["title"]
        if panel["type"] == "heatmap":
            units = {"Cap usage distribution": "percentunit", "Delegation depth distribution": "none"}
            assert panel["options"]["yAxis"]["unit"] == units[panel["title"]]
            continue  # colours come from its scheme, not from thresholds
        defaults = panel["fieldConfig"]["defaults"]
        if panel["type"] in ("stat", "timeseries"):
            assert defaults.get("unit"), panel["title"]
            assert defaults.get("thresholds", {}).get("steps"), panel["title"]
        if panel["type"] == "timeseries":
            assert panel["options"]["legend"]["displayMode"] == "table"
            for target in panel["targets"]:
                split = re.search(r"\bby \(([\w, ]+)\)", target["expr"])
                labels = re.findall(r"\w+", split.group(1)) if split else []
                checked += 1
                for label in labels:
                    if label != "le":
                        assert f"{{{{{label}}}}}" in target["legendFormat"], (panel["title"], label)
    assert checked >= 15


def test_panel_ids_are_unique_and_the_grid_does_not_overlap(dashboard: dict[str, Any]) -> None:
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for panel in dashboard["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24
        area = {
            (x, y) for x in range(pos["x"], pos["x"] + pos["w"]) for y in range(pos["y"], pos["y"] + pos["h"])
        }
        assert not area & cells, panel["title"]
        cells |= area


def test_recording_rules_the_dashboard_reads_exist(dashboard: dict[str, Any]) -> None:
    """A panel showing a shared ratio reads the same recording rule its alert uses."""
    import yaml

    rules = yaml.safe_load(RULES_YAML.read_text())
    recorded = {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}
    used = {name for t in all_targets(dashboard) for name in re.findall(r"otelguard:[\w:]+", t.expr)}
    assert used, "the dashboard should read the shared recording rules"
    assert used <= recorded


# --- otelguard dashboards|rules export ---------------------------------------------------------


def test_dashboards_export_writes_the_shipped_tree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["dashboards", "export", str(tmp_path / "out"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {f["status"] for f in report["files"]} == {"written"}
    for relative in generate.DASHBOARD_TREE:
        assert (tmp_path / "out" / relative).read_bytes() == (DASHBOARDS / relative).read_bytes()


def test_rules_export_writes_the_rules_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rules", "export", str(tmp_path)]) == 0
    assert "otelguard-rules.yaml" in capsys.readouterr().out
    assert (tmp_path / "otelguard-rules.yaml").read_bytes() == RULES_YAML.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["otelguard-rules.yaml"]


def test_export_never_overwrites_an_edited_file_without_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    edited = tmp_path / "otelguard-rules.yaml"
    edited.write_text("# my local edits\n")
    assert main(["rules", "export", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--force" in err and "otelguard-rules.yaml" in err
    assert edited.read_text() == "# my local edits\n"
    assert main(["rules", "export", str(tmp_path), "--force", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["files"][0]["status"] == "overwritten"
    assert edited.read_bytes() == RULES_YAML.read_bytes()


def test_export_again_reports_unchanged_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dashboards", "export", str(tmp_path)]) == 0
    capsys.readouterr()
    assert main(["dashboards", "export", str(tmp_path), "--json"]) == 0
    assert {f["status"] for f in json.loads(capsys.readouterr().out)["files"]} == {"unchanged"}


def test_export_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("")
    assert main(["dashboards", "export", str(a_file)]) == 2
    assert "not a directory" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["rules", "import", str(tmp_path)])
    assert exc.value.code == 2


def test_generator_module_is_not_shadowing_anything() -> None:
    """The generator's helper package lives under dashboards/, never inside the shipped package."""
    assert Path(sys.modules["otelguard_mixin"].__file__ or "").parent.parent == DASHBOARDS


def _otelguard_series_labels() -> dict[str, set[str]]:
    """Each exposed otelguard series name and the label names the telemetry gives it."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

    from otelguard.telemetry.metrics import families_for
    from otelguard.telemetry.tallies import CounterChildren, CounterFamily

    series: dict[str, set[str]] = {}
    for family in vars(families_for(CollectorRegistry())).values():
        if isinstance(family, CounterFamily | CounterChildren):  # the counters bumped on every call
            series[f"{family.name}_total"] = set(family.labelnames) | {"job", "instance"}
            continue
        if not isinstance(family, Counter | Gauge | Histogram):
            continue
        labels = set(family._labelnames) | {"job", "instance"}
        if isinstance(family, Counter):
            series[f"{family._name}_total"] = labels
        elif isinstance(family, Histogram):
            series[f"{family._name}_bucket"] = labels | {"le"}
            series[f"{family._name}_sum"] = series[f"{family._name}_count"] = labels
        else:
            series[family._name] = labels
    return series


def test_queries_select_and_group_only_by_labels_the_telemetry_exports(dashboard: dict[str, Any]) -> None:
    """A label renamed in the telemetry but not in the dashboards or rules (or the reverse) fails here."""
    series = _otelguard_series_labels()
    import yaml

    rules = [r["expr"] for g in yaml.safe_load(RULES_YAML.read_text())["groups"] for r in g["rules"]]
    expressions = [walk.substitute(t.expr, SUBSTITUTIONS) for t in all_targets(dashboard)] + rules
    selected: set[str] = set()

    def raw_series(node: Any) -> list[str]:
        found: list[str] = []
        promql_parser.walk(
            node, lambda n: found.append(n.name) if isinstance(n, promql_parser.VectorSelector) else None
        )
        return [name for name in found if name in series]

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector) and node.name in series:
            names = {matcher.name for matcher in node.matchers.matchers}
            assert names <= series[node.name], (node.name, names - series[node.name])
            selected.update(names)
        if isinstance(node, promql_parser.AggregateExpr) and node.modifier is not None:
            grouped = set(node.modifier.labels)
            for name in raw_series(node):
                assert grouped <= series[name], (name, grouped - series[name])
            selected.update(grouped)

    for expr in expressions:
        promql_parser.walk(promql_parser.parse(expr), visit)
    assert selected >= {
        "agent",
        "tool",
        "outcome",
        "action",
        "code",
        "cap",
        "scope",
        "signature",
        "stage",
        "version",
        "kind",
    }


def test_the_loop_code_matcher_selects_exactly_the_loop_detector_codes() -> None:
    """The dashboard and rules select loop decisions by excluding the non-loop codes: every loop
    detector's code (same_error included) passes; caps, turn_halted, allow, internal errors and the
    streak warnings (long runs of distinct calls, no repeat) do not."""
    from otelguard_mixin.queries import LOOP_CODE_MATCHER

    from otelguard.core.decisions import CODES, LOOP_CODES

    pattern = re.fullmatch(r'code!~"([^"]*)"', LOOP_CODE_MATCHER)
    assert pattern is not None
    excluded = re.compile(f"^(?:{pattern.group(1)})$")
    assert {"same_error_warn", "same_error_halt"} <= LOOP_CODES
    streaks = {"read_only_streak_warn", "write_streak_warn"}
    assert {code for code in CODES if not excluded.match(code)} - {"allow"} == set(LOOP_CODES) - streaks


def test_model_turns_row_reads_the_model_series_whatever_tool_is_picked(dashboard: dict[str, Any]) -> None:
    """The model's panels select tool "model" themselves: the tool variable lists the tools of tool
    calls, and picking one must not empty them; the stuck-model panel shows exactly the codes its
    alert counts."""
    rows = [p for p in dashboard["panels"] if p["type"] == "row"]
    model_row = next(r for r in rows if r["title"].startswith("Model turns"))
    next_row_y = min(
        (r["gridPos"]["y"] for r in rows if r["gridPos"]["y"] > model_row["gridPos"]["y"]), default=10**6
    )
    panels = [p for p in dashboard["panels"] if model_row["gridPos"]["y"] < p["gridPos"]["y"] < next_row_y]
    assert [p["title"] for p in panels] == [
        "Model calls per minute by outcome",
        "Tokens per minute by agent",
        "Token cap hits per minute by scope",
        "No-action and repeated-reply decisions per minute by code",
    ]
    exprs = [t["expr"] for p in panels for t in p["targets"]]
    assert not any("$tool" in expr for expr in exprs)
    assert 'cap="tokens"' in exprs[2]
    assert 'tool="model"' in exprs[3]
    assert set(re.findall(r"[a-z_]+_(?:warn|halt)", exprs[3])) == {
        "no_action_warn",
        "no_action_halt",
        "repeated_reply_warn",
        "repeated_reply_halt",
    }
