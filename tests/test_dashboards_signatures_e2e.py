"""The "Top looping signatures" panel against a real Prometheus, on backfilled scrapes.

A loop that starts and ends between two scrapes makes its signature's series appear at its final
value and never change after; the panel must still list it, with every hit, over any range that
holds its first scrape. The scrapes (every 15 s) are written as OpenMetrics and backfilled with
``promtool tsdb create-blocks-from openmetrics``, then queried with the committed panel expression.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import require_binary, run_prometheus
from tests.test_dashboards import DASHBOARD_JSON, walk

pytestmark = pytest.mark.e2e

SCRAPE_SECONDS = 15
RANGE_SECONDS = 300
# Two hours back: the backfilled block lies wholly before Prometheus's head block.
START = (int(time.time()) // 3600 - 3) * 3600
END = START + 2 * RANGE_SECONDS
LABELS = 'job="otelguard",instance="a:9464",agent="research",tool="web_search"'

# signature -> (code, [(seconds after START, counter value)]): each a series as scrapes saw it.
SERIES: dict[str, tuple[str, list[tuple[int, float]]]] = {
    # looped 8 times between two scrapes inside the range: first seen at 8, never changes
    "short": ("no_progress_reject", [(t, 8) for t in range(400, 2 * RANGE_SECONDS + 1, SCRAPE_SECONDS)]),
    # looped before the range and not since: not in the panel
    "old": ("exact_failure_warn", [(t, 5) for t in range(0, 2 * RANGE_SECONDS + 1, SCRAPE_SECONDS)]),
    # 2 hits before the range, 4 more inside it
    "growing": (
        "identical_call_warn",
        [(t, 2 if t <= 420 else 6) for t in range(0, 2 * RANGE_SECONDS + 1, SCRAPE_SECONDS)],
    ),
    # the process restarted inside the range (the counter began again) and hit it 3 more times
    "restarted": (
        "cycle_warn",
        [(t, 5 if t < 450 else 3) for t in range(0, 2 * RANGE_SECONDS + 1, SCRAPE_SECONDS)],
    ),
    # a streak warning inside the range: not a loop
    "streak": ("read_only_streak_warn", [(t, 11) for t in range(400, 2 * RANGE_SECONDS + 1, SCRAPE_SECONDS)]),
}


def backfill(data_dir: Path, tmp_path: Path) -> None:
    lines = ["# TYPE otelguard_loop_signature_hits counter"]
    for signature, (code, points) in SERIES.items():
        labels = f'{LABELS},code="{code}",signature="{signature}"'
        lines += [f"otelguard_loop_signature_hits_total{{{labels}}} {v} {START + t}" for t, v in points]
    source = tmp_path / "scrapes.om"
    source.write_text("\n".join([*lines, "# EOF", ""]), encoding="utf-8")
    promtool = require_binary("promtool")
    subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(source), str(data_dir)],
        check=True,
        capture_output=True,
        timeout=120,
    )


def panel_expr() -> str:
    dashboard: dict[str, Any] = json.loads(DASHBOARD_JSON.read_text(encoding="utf-8"))
    [target] = [t for t in walk.targets(dashboard) if t.panel_title == "Top looping signatures"]
    assert target.instant
    variables = {"job": ".*", "instance": ".*", "agent": ".*", "tool": ".*", "__range": f"{RANGE_SECONDS}s"}
    return walk.substitute(target.expr, variables)


def test_top_looping_signatures_lists_a_loop_shorter_than_a_scrape_interval(tmp_path: Path) -> None:
    backfill(tmp_path / "prom-data", tmp_path)
    with run_prometheus(tmp_path, [], extra_args=("--storage.tsdb.retention.time=30d",)) as prom:
        rows = {row["metric"]["signature"]: float(row["value"][1]) for row in prom.query(panel_expr(), END)}
    assert rows.keys() == {"short", "growing", "restarted"}, rows
    assert rows["short"] == 8  # every hit of the loop, though its series never changed
    assert rows["growing"] == 4  # only the hits inside the range
    assert rows["restarted"] >= 3  # a counter reset is not a negative count
