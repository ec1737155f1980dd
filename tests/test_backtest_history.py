"""The shipped history a new user backtests (docs/backtest.md): the documented command, run as written
against Debian's real prometheus and promtool, makes the runaway-search alert fire, says why every
other alert stayed quiet, and prints what the guide shows."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.backtest_fleet import HISTORY, shipped_history
from otelguard.backtest.alerts import longest_hold
from tests.e2e import require_binary
from tests.markdown_docs import DOCS_DIR, REPO, blocks

GUIDE = DOCS_DIR / "backtest.md"
SECTION = "## Try it on the shipped history"
_ROW = re.compile(
    r"^│ (Otelguard\w+) +│[^│]*│ (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) │ ([\d:]+|still firing) +│ +(\d+) │ +(\d+) │$"
)
_QUIET = re.compile(r"^  (Otelguard\w+): (.+)$")


def section_blocks() -> tuple[str, str]:
    """The documented command and the sample output the guide shows for it."""
    text = GUIDE.read_text(encoding="utf-8")
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    [console] = [b for b in blocks(GUIDE, "console") if b.text.strip() in section]
    [sample] = [b for b in blocks(GUIDE, "text") if b.text.strip() in section]
    [command] = [line.removeprefix("$ ") for line in console.text.splitlines() if line.startswith("$ ")]
    return command, sample.text


def run_documented(command: str, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = shlex.split(command)
    assert argv[0] == "otelguard"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTELGUARD_")}
    env["PYTHONPATH"] = str(REPO)
    env["COLUMNS"] = "200"  # the table's rows on one line each, alert names whole
    return subprocess.run(
        [sys.executable, "-m", "otelguard", *argv[1:], *extra],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_the_shipped_history_is_what_its_generator_writes(tmp_path: Path) -> None:
    written = {session.session_id: session for session in shipped_history()}
    assert {p.stem for p in HISTORY.glob("*.jsonl")} == set(written)
    for session_id, session in written.items():
        assert (HISTORY / f"{session_id}.jsonl").read_text() == session.write(tmp_path).read_text(), (
            session_id
        )


@pytest.fixture(scope="module")
def documented() -> tuple[str, dict[str, Any], str]:
    require_binary("prometheus")
    require_binary("promtool")
    command, _ = section_blocks()
    text = run_documented(command)
    assert text.returncode == 1, text.stderr  # 1: an alert would have fired
    as_json = run_documented(command, "--json")
    assert as_json.returncode == 1, as_json.stderr
    return text.stdout, json.loads(as_json.stdout), command


def test_the_documented_command_fires_the_runaway_search_alert(
    documented: tuple[str, dict[str, Any], str],
) -> None:
    _, document, _ = documented
    assert "OtelguardRunawaySearchLoop" in document["fired"]
    [search] = [a for a in document["alerts"] if a["alert"] == "OtelguardRunawaySearchLoop"]
    [interval] = search["intervals"]
    assert interval["labels"]["cap"] == "web_search" and interval["halts_total"] >= 1
    assert document["replay"]["errors"] == [] and document["sessions_without_timestamps_total"] == 0


def test_the_documented_command_fires_the_stalled_model_alert_on_the_stalled_turns(
    documented: tuple[str, dict[str, Any], str],
) -> None:
    """The stalled turns (09:38 to 09:50, replies read from the transcripts' assistant entries) fire
    the stalled-model alert ten minutes after their first repeated-reply warning, and nothing else
    model-related: no token cap is set, so the runaway-tokens alert stays quiet."""
    _, document, _ = documented
    assert "OtelguardModelStalled" in document["fired"] and "OtelguardRunawayTokens" in document["quiet"]
    [stalled] = [a for a in document["alerts"] if a["alert"] == "OtelguardModelStalled"]
    [interval] = stalled["intervals"]
    assert interval["labels"]["agent"] == "replay" and interval["resolved"] is True
    assert "2025-03-03T09:48:00Z" <= interval["start"] <= "2025-03-03T09:52:00Z"
    assert interval["end"] <= "2025-03-03T10:00:00Z"
    totals = document["replay"]["totals"]
    assert totals["model"]["decisions"]["repeated_reply_warn"] >= 7 * 2


def test_every_quiet_alert_says_its_for_and_how_long_it_held(
    documented: tuple[str, dict[str, Any], str],
) -> None:
    text, document, _ = documented
    quiet = [a for a in document["alerts"] if not a["fired"]]
    assert quiet and [a["alert"] for a in quiet] == document["quiet"]
    held = [a for a in quiet if a["longest_hold"] is not None]
    assert held, "some quiet alert held for a while, short of its for:"
    for alert in quiet:
        assert f"for: {alert['for']}" in alert["why_quiet"]
        if alert["longest_hold"] is None:
            assert alert["why_quiet"] == f"its condition never held (for: {alert['for']})"
        else:
            assert f"held {alert['longest_hold']} at most" in alert["why_quiet"]
        assert f"  {alert['alert']}: {alert['why_quiet']}" in text.splitlines()
    assert all(a["longest_hold"] is not None for a in document["alerts"] if a["fired"])


def test_the_guide_shows_what_the_documented_command_prints(
    documented: tuple[str, dict[str, Any], str],
) -> None:
    """Row for row and reason for reason: the table's widths and the rules path may differ."""
    text, document, _ = documented
    _, sample = section_blocks()

    def rows(output: str) -> list[tuple[str, ...]]:
        return [m.groups() for line in output.splitlines() if (m := _ROW.match(line))]

    def quiet(output: str) -> list[tuple[str, ...]]:
        return [m.groups() for line in output.splitlines() if (m := _QUIET.match(line))]

    assert rows(sample) and rows(sample) == rows(text)
    assert quiet(sample) and quiet(sample) == quiet(text)
    period = document["period"]
    assert f"Recorded period {period['start']} to {period['end']}" in sample
    fired = [a["alert"] for a in document["alerts"] for _ in a["intervals"]]
    assert [row[0] for row in rows(sample)] == sorted(fired, key=fired.index)


def test_the_backtest_page_has_a_title_of_its_own(
    tmp_path: Path, documented: tuple[str, dict[str, Any], str]
) -> None:
    _, _, command = documented
    page = tmp_path / "backtest.html"
    assert run_documented(command, "--html", str(page)).returncode == 1
    html = page.read_text()
    assert "<title>otelguard backtest</title>" in html and "<h1>otelguard backtest</h1>" in html
    assert "otelguard replay</title>" not in html
    quiet = html.split('<ul id="alerts-quiet">', 1)[1].split("</ul>", 1)[0]
    assert "OtelguardHaltRateHigh: its condition held" in quiet and "short of its for: 15m" in quiet


def test_longest_hold_is_the_longest_unbroken_run_of_any_label_set() -> None:
    evaluations = [60.0 * k for k in range(11)]
    broken = [(t, 1.0) for t in (0, 60, 120, 300, 360, 420, 480, 540)]  # 2m, then 4m after a break
    short = [(t, 1.0) for t in (600,)]
    assert longest_hold([({"a": "1"}, broken), ({"a": "2"}, short)], evaluations) == 240
    assert longest_hold([({"a": "2"}, short)], evaluations) == 0
    assert longest_hold([], evaluations) is None
