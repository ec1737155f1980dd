"""A tree cap's refusals are cap hits wherever a turn or session cap's are: in ``replay --json``, the
replay's text and HTML reports and the backtest's table, the same count as
``otelguard_cap_hits_total{scope="tree"}`` (the shipped runaway tree history: 18 ``cap_tree`` blocks
of the ``subagents`` tree cap)."""

from __future__ import annotations

import contextlib
import io
import json
import re
from collections import defaultdict
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from benchmarks.backtest_fleet import DAY, TREES, tree_conversation
from otelguard.cli import main
from tests.e2e import require_binary

CONFIG = str(TREES / "otelguard.yaml")
RUNAWAY = str(TREES / "runaway")
TREE_ALERT = "OtelguardRunawayDelegationTree"


def run(*arguments: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(arguments))
    return code, out.getvalue()


def tree_cap_hits_metric(openmetrics: Path) -> dict[str, float]:
    """The final value of ``otelguard_cap_hits_total{scope="tree"}`` per cap, summed over agents."""
    last: dict[str, float] = {}
    caps: dict[str, str] = {}
    for line in openmetrics.read_text().splitlines():
        match = re.match(r"(otelguard_cap_hits_total\{([^}]*)\}) (\S+)", line)
        if match is None or 'scope="tree"' not in match.group(2):
            continue
        series = match.group(1)
        last[series] = float(match.group(3))  # samples are in time order: the last is the total
        cap = re.search(r'cap="([^"]*)"', match.group(2))
        assert cap is not None
        caps[series] = cap.group(1)
    totals: dict[str, float] = defaultdict(float)
    for series, value in last.items():
        totals[caps[series]] += value
    return dict(totals)


def test_replay_json_counts_tree_cap_hits_as_the_metric_does(tmp_path: Path) -> None:
    metrics = tmp_path / "replay.om"
    code, out = run("replay", RUNAWAY, "--config", CONFIG, "--json", "--openmetrics", str(metrics))
    assert code == 0
    report: dict[str, Any] = json.loads(out)
    totals = report["totals"]
    assert totals["decisions"] == {"cap_tree": 18}
    assert totals["cap_hits"] == {"subagents": 18} == tree_cap_hits_metric(metrics)
    assert sum(sum(s["cap_hits"].values()) for s in report["sessions"]) == 18


def test_the_text_and_html_reports_show_tree_cap_hits(tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    code, out = run("replay", RUNAWAY, "--config", CONFIG, "--html", str(page))
    assert code == 0
    assert re.search(r"cap hits\s*\n.*\n.*cap\s*┃\s*count", out)
    assert re.search(r"│ subagents\s*│\s*18 │", out)
    html = page.read_text()
    row = re.search(r'<tr data-cap="subagents">(.*?)</tr>', html)
    assert row is not None, "no cap row for the tree cap"
    assert row.group(1).endswith('<td class="n">18</td>')  # the cap hits column
    assert "No turn cap is configured" not in html


@pytest.mark.parametrize("on_hit", ["block", "reject"])
def test_the_backtest_table_counts_tree_cap_hits_in_the_interval_that_fired(
    on_hit: str, tmp_path: Path
) -> None:
    """The shipped runaway's refusals come before its alert fires; here the conversations go on (one
    a minute for 12 minutes), so the trees' refusals land in the interval the alert fires. A refusal
    that stops the turn (``block``) and one that lets it go on (``reject``) are cap hits alike."""
    require_binary("prometheus")
    require_binary("promtool")
    config = tmp_path / "otelguard.yaml"
    config.write_text(f"caps:\n  on_hit: {on_hit}\n  tree: {{subagents: 30}}\n")
    history = tmp_path / "history"
    history.mkdir()
    start = DAY + timedelta(hours=15)
    for n in range(12):
        lines = tree_conversation(f"runaway-tree-{n}", start + timedelta(minutes=n), 4, 10)
        (history / f"runaway-tree-{n}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    code, out = run("backtest", str(history), "--config", str(config), "--json")
    assert code == 1
    document = json.loads(out)
    [entry] = [a for a in document["alerts"] if a["alert"] == TREE_ALERT]
    [interval] = entry["intervals"]
    assert interval["cap_hits_total"] > 0
    assert {(m["code"], m["scope"], m["cap"]) for m in interval["cap_hits"]} == {
        ("cap_tree", "tree", "subagents")
    }
    if on_hit == "block":  # every halt of this history is a tree cap's block: each is a cap hit too
        assert interval["cap_hits_total"] == interval["halts_total"]
    totals = document["replay"]["totals"]
    assert totals["cap_hits"] == {"subagents": totals["decisions"]["cap_tree"]}
    code, table = run("backtest", str(history), "--config", str(config))
    assert code == 1
    [row] = [line for line in table.splitlines() if TREE_ALERT in line]
    cells = [cell.strip() for cell in row.split("│") if cell.strip()]
    assert cells[-2:] == [str(interval["halts_total"]), str(interval["cap_hits_total"])]
