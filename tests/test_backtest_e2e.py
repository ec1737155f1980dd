"""`otelguard backtest` against Debian's real prometheus and promtool, on fleets of timestamped
Claude Code sessions (benchmarks/backtest_fleet.py). Skipped without the binaries, failed under
OTELGUARD_REQUIRE_E2E=1."""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from itertools import chain
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks.backtest_fleet import (
    DAY,
    SessionWriter,
    delegation_storm,
    healthy_sessions,
    runaway_minutes,
    write_fleet,
)
from otelguard.backtest.engine import Binaries, Engine
from otelguard.backtest.rules import RULE_FILE_NAME, AlertRule, eval_offset
from otelguard.backtest.run import evaluation_times
from otelguard.cli import main
from tests.e2e import require_binary, stop_process, wait_until
from tests.test_replay_cli import ARG_CANARY, RESULT_CANARY
from tests.test_replay_openmetrics import interleaved, parse_openmetrics

SEARCH_START = DAY + timedelta(hours=10)
DELEGATION_START = DAY + timedelta(hours=11, minutes=30)
LOOP_MINUTES = 20
SLACK = timedelta(minutes=7)
"""How long an alert may outlast its loop: the rules' 5-minute rate windows, plus an evaluation
interval for the rule and one for the alert."""
EXAMPLES = Path(__file__).resolve().parent.parent / "otelguard" / "data" / "examples"
SHIPPED_RULES = (
    Path(__file__).resolve().parent.parent / "otelguard" / "data" / "prometheus" / "otelguard-rules.yaml"
)


@pytest.fixture(autouse=True)
def _binaries() -> None:
    require_binary("prometheus")
    require_binary("promtool")


def backtest(*arguments: str) -> tuple[int, dict[str, Any], str]:
    """``otelguard backtest ... --json`` in-process: exit code, document, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["backtest", *arguments, "--json"])
    return code, json.loads(out.getvalue()), err.getvalue()


def when(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def intervals(document: dict[str, Any], alert: str) -> list[dict[str, Any]]:
    [entry] = [a for a in document["alerts"] if a["alert"] == alert]
    found: list[dict[str, Any]] = entry["intervals"]
    return found


def inside(interval: dict[str, Any], start: datetime) -> bool:
    return (
        start <= when(interval["pending_since"])
        and when(interval["end"]) <= start + timedelta(minutes=LOOP_MINUTES) + SLACK
    )


@pytest.fixture(scope="module")
def runaway_fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Healthy sessions from 09:30 to 13:00, one every three minutes; a web-search cap hit every
    minute from 10:00 to 10:19 and a subagents cap hit every minute from 11:30 to 11:49; one
    session without timestamps; one malformed line."""
    directory = tmp_path_factory.mktemp("fleet")
    write_fleet(
        directory,
        chain(
            healthy_sessions(
                "ok", DAY + timedelta(hours=9, minutes=30), DAY + timedelta(hours=13), timedelta(minutes=3)
            ),
            runaway_minutes("search", SEARCH_START, LOOP_MINUTES, "WebSearch"),
            runaway_minutes("delegate", DELEGATION_START, LOOP_MINUTES, "Task"),
        ),
    )
    untimed = SessionWriter("untimed-1", timestamps=False)
    untimed.prompt(DAY)
    untimed.call(DAY, "Read", {"file": "a"}, "text")
    untimed.write(directory)
    with (directory / "ok-00000.jsonl").open("a", encoding="utf-8") as stream:
        stream.write("{not json\n")
    return directory


@pytest.fixture(scope="module")
def runaway(
    runaway_fleet: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[int, dict[str, Any], str, str]:
    html = tmp_path_factory.mktemp("html") / "report.html"
    code, document, err = backtest(str(runaway_fleet), "--html", str(html))
    return code, document, err, html.read_text(encoding="utf-8")


def test_runaway_search_fires_inside_its_window_and_nowhere_else(
    runaway: tuple[int, dict[str, Any], str, str],
) -> None:
    code, document, _, _ = runaway
    assert code == 1
    [interval] = intervals(document, "OtelguardRunawaySearchLoop")
    assert inside(interval, SEARCH_START)
    assert interval["resolved"] is True
    assert interval["labels"]["cap"] == "web_search" and interval["labels"]["severity"] == "critical"
    assert when(interval["start"]) - when(interval["pending_since"]) >= timedelta(minutes=10), "for: 10m"
    assert interval["cap_hits_total"] > 0
    assert {hit["cap"] for hit in interval["cap_hits"]} == {"web_search"}
    assert all(hit["session_id"].startswith("search-") for hit in interval["cap_hits"])
    assert all(
        when(interval["start"]) <= when(hit["time"]) <= when(interval["end"]) for hit in interval["cap_hits"]
    )
    assert {h["code"] for h in interval["halts"]} == {"cap_turn"}


def test_runaway_delegation_fires_inside_its_window_and_nowhere_else(
    runaway: tuple[int, dict[str, Any], str, str],
) -> None:
    _, document, _, _ = runaway
    [interval] = intervals(document, "OtelguardRunawayDelegationLoop")
    assert inside(interval, DELEGATION_START)
    assert {hit["cap"] for hit in interval["cap_hits"]} == {"subagents"}
    assert all(hit["session_id"].startswith("delegate-") for hit in interval["cap_hits"])


def test_the_halt_rate_alert_built_on_recorded_rules_fires_inside_both_windows_only(
    runaway: tuple[int, dict[str, Any], str, str],
) -> None:
    _, document, _, _ = runaway
    found = intervals(document, "OtelguardHaltRateHigh")
    assert any(inside(i, SEARCH_START) for i in found)
    assert any(inside(i, DELEGATION_START) for i in found)
    assert all(inside(i, SEARCH_START) or inside(i, DELEGATION_START) for i in found)
    assert all(i["halts_total"] > 0 for i in found)


def test_nothing_fires_outside_the_runaway_windows(runaway: tuple[int, dict[str, Any], str, str]) -> None:
    _, document, _, _ = runaway
    for alert in document["alerts"]:
        for interval in alert["intervals"]:
            assert inside(interval, SEARCH_START) or inside(interval, DELEGATION_START), (
                alert["alert"],
                interval,
            )
    assert "OtelguardInternalErrors" in document["quiet"]
    assert set(document["fired"]) | set(document["quiet"]) == {a["alert"] for a in document["alerts"]}


def test_the_period_untimed_sessions_and_input_errors_are_reported(
    runaway: tuple[int, dict[str, Any], str, str], runaway_fleet: Path
) -> None:
    _, document, err, _ = runaway
    assert when(document["period"]["start"]) >= DAY + timedelta(hours=9, minutes=30)
    assert document["sessions_without_timestamps"] == [
        {"path": str(runaway_fleet / "untimed-1.jsonl"), "session_id": "untimed-1"}
    ]
    assert document["replay"]["totals"]["errors"] == 1, "an input error is reported; the exit code stays 1"
    assert document["samples"]["blocks"] == 3, "09:30 to 13:05 touches three 2-hour blocks"
    assert "backfilling recording rules, level 3 of 3" in err


def test_the_html_report_gains_the_alerts_section(runaway: tuple[int, dict[str, Any], str, str]) -> None:
    _, _, _, page = runaway
    section = page.split('<h2 id="alerts-title">', 1)[1].split("<h2", 1)[0]
    assert section.startswith("Alerts that would have fired")
    for alert in ("OtelguardRunawaySearchLoop", "OtelguardRunawayDelegationLoop", "OtelguardHaltRateHigh"):
        assert alert in section
    assert "Quiet: " in section and "OtelguardInternalErrors" in section.split("Quiet: ", 1)[1]
    assert "untimed-1" in section
    assert "<script" not in page


def test_a_day_of_healthy_sessions_fires_nothing(tmp_path: Path) -> None:
    write_fleet(tmp_path, healthy_sessions("calm", DAY, DAY + timedelta(days=1), timedelta(minutes=15)))
    code, document, _ = backtest(str(tmp_path))
    assert code == 0
    assert document["fired"] == []
    assert len(document["quiet"]) == len(document["alerts"]) >= 5
    assert when(document["period"]["end"]) - when(document["period"]["start"]) > timedelta(hours=23)


def test_a_tuned_rule_file_is_backtested_instead(tmp_path: Path) -> None:
    """`otelguard rules export`, a longer `for:` on the web-search alert, `--rules`: quiet now."""
    write_fleet(tmp_path / "fleet", runaway_minutes("search", SEARCH_START, LOOP_MINUTES, "WebSearch"))
    assert main(["rules", "export", str(tmp_path / "rules")]) == 0
    path = tmp_path / "rules" / "otelguard-rules.yaml"
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    for group in document["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == "OtelguardRunawaySearchLoop":
                rule["for"] = "30m"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    code, result, _ = backtest(str(tmp_path / "fleet"), "--rules", str(path))
    assert "OtelguardRunawaySearchLoop" in result["quiet"]
    assert result["rules"] == str(path)
    assert code == (1 if result["fired"] else 0)


def test_a_rule_file_prometheus_cannot_load_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """promtool refuses the file once the temporary directory exists: it is removed all the same."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    (tmp_path / "t.jsonl").write_text("", encoding="utf-8")
    rules = tmp_path / "bad.yaml"
    rules.write_text(yaml.safe_dump({"groups": [{"name": "g", "rules": [{"alert": "A", "expr": "rate("}]}]}))
    assert main(["backtest", str(tmp_path / "t.jsonl"), "--rules", str(rules)]) == 2
    assert "the rules file does not load" in capsys.readouterr().err
    assert list(scratch.iterdir()) == []


def test_transcripts_without_timestamps_backtest_nothing_and_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    untimed = SessionWriter("untimed-2", timestamps=False)
    untimed.prompt(DAY)
    untimed.call(DAY, "Read", {"file": "a"}, "text")
    path = untimed.write(tmp_path)
    assert main(["backtest", str(path)]) == 3  # not 0: a gate on it must not pass untested
    out = capsys.readouterr().out
    assert "Nothing was backtested" in out and "untimed-2" in out
    assert "No alert would have fired" not in out


def test_a_directory_without_transcripts_is_named_as_such(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An empty directory is not a transcript without timestamps: it is named as holding none, and
    nothing was backtested (exit 3); beside a transcript, the transcript is backtested all the same."""
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("not a transcript", encoding="utf-8")
    assert main(["backtest", str(empty)]) == 3
    out, err = capsys.readouterr()
    assert f"otelguard backtest: {empty}: no transcript in this directory (looked for *.jsonl" in err
    assert "Nothing was backtested: no transcript was found in the paths given" in out
    assert "recorded when its calls happened" not in out
    code, document, err = backtest(str(empty))
    assert code == 3 and document["period"] is None and "no transcript in this directory" in err
    storm = EXAMPLES / "backtest" / "claude-code-delegation-storm.jsonl"
    code, document, err = backtest(str(empty), str(storm))
    assert code == 1 and document["fired"] and "no transcript in this directory" in err


def test_the_shipped_untimed_example_is_not_a_pass(capsys: pytest.CaptureFixture[str]) -> None:
    """The OpenAI example records no times: exit 3 and a plain message, also with --json."""
    assert main(["backtest", str(EXAMPLES / "openai-delegation-storm.jsonl")]) == 3
    assert "Nothing was backtested" in capsys.readouterr().out
    code, document, _ = backtest(str(EXAMPLES / "openai-delegation-storm.jsonl"))
    assert code == 3 and document["period"] is None


def test_the_shipped_delegation_example_fires_the_delegation_alert() -> None:
    """``otelguard backtest`` on the shipped timestamped delegation storm: the runaway-delegation
    alert fires on the subagents cap hits of that session, and the file is what the generator writes."""
    path = EXAMPLES / "backtest" / "claude-code-delegation-storm.jsonl"
    assert path.read_text(encoding="utf-8") == delegation_storm().text()
    code, document, _ = backtest(str(path))
    assert code == 1
    [interval] = intervals(document, "OtelguardRunawayDelegationLoop")
    assert interval["labels"]["cap"] == "subagents" and interval["labels"]["severity"] == "critical"
    assert {hit["session_id"] for hit in interval["cap_hits"]} == {"delegation-storm"}
    assert when(interval["start"]) - when(interval["pending_since"]) >= timedelta(minutes=10), "for: 10m"


def test_promtool_accepts_the_openmetrics_file_and_keeps_every_sample(tmp_path: Path) -> None:
    """Nothing dropped: promtool silently drops out-of-order and duplicate samples, so the blocks
    holding exactly the file's samples show there were none. Hostile tool names are escaped."""
    first, second, _ = interleaved(tmp_path)
    hostile = SessionWriter("gggg-hostile")
    hostile.prompt(DAY)
    for index, tool in enumerate(('quote"d', "back\\slash", "new\nline", "ünï\u2028code")):
        hostile.call(DAY + timedelta(seconds=index), tool, {"i": index}, "ok")
    out = tmp_path / "samples.om"
    assert (
        main(["replay", str(first), str(second), str(hostile.write(tmp_path)), "--openmetrics", str(out)])
        == 0
    )
    series, _ = parse_openmetrics(out.read_text(encoding="utf-8"))
    done = subprocess.run(
        [
            require_binary("promtool"),
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            str(out),
            str(tmp_path / "blocks"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (tmp_path / "blocks" / "wal").mkdir()  # tsdb dump opens a database, write-ahead log included
    dump = subprocess.run(
        [require_binary("promtool"), "tsdb", "dump", str(tmp_path / "blocks")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert len(dump.splitlines()) == sum(len(points) for points in series.values())
    assert 'tool="quote\\"d"' in dump and "back\\\\slash" in dump


def test_the_evaluation_offsets_are_the_ones_promtool_uses(tmp_path: Path) -> None:
    """Recorded rule samples land at the offset ``eval_offset`` computes for the group and the fixed
    rule file name, so the alerts are evaluated on the same grid; backfilled a day per promtool run,
    a period across midnight still gets every evaluation."""
    start = DAY.timestamp() - 1800
    samples = tmp_path / "s.om"
    samples.write_text(
        "# TYPE x counter\n" + "".join(f"x_total 1 {start + 15 * k:.0f}\n" for k in range(240)) + "# EOF\n"
    )
    end = start + 15 * 239
    with Engine(Binaries.find(), tmp_path, lookback=60, retention_days=3) as engine:
        engine.create_blocks(samples)
        engine.start()
        for record, group in (("y:a", "otelguard.rules"), ("y:b", "another group")):
            document = {"groups": [{"name": group, "rules": [{"record": record, "expr": "x_total"}]}]}
            engine.backfill_rules(document, start, end, 60)
            engine.start()
            [(_, [(_, stamp)])] = engine.query_range(f"timestamp({record})", start + 600, start + 600, 60)
            assert round(stamp % 60, 3) == round(eval_offset(RULE_FILE_NAME, group, 60), 3)
            rule = AlertRule(record, group, record, 60.0, 0.0, 0.0, {})
            expected = len(evaluation_times(rule, math.floor(start), math.ceil(end)))
            [(_, [(_, count)])] = engine.query_range(f"count_over_time({record}[2h])", end, end, 60)
            assert count == expected


@contextlib.contextmanager
def running_backtest(arguments: list[str], env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    # A test run started as a background job ignores SIGINT, and an ignored signal stays ignored
    # across exec: the backtest gets Ctrl-C as a terminal would give it, whatever ran the tests.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "otelguard", "backtest", *arguments],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **env},
        )
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        yield process
    finally:
        stop_process(process)  # type: ignore[arg-type]


def children(pid: int) -> list[tuple[int, str]]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        parent = int(stat[stat.rindex(")") + 2 :].split()[1])
        if parent == pid:
            found.append((int(entry.name), name))
    return found


PAUSED_PROMTOOL = """#!/bin/sh
case "$*" in
  *"create-blocks-from rules"*) : > "$OTELGUARD_TEST_PAUSED"; exec sleep 600 ;;
esac
exec "$OTELGUARD_TEST_PROMTOOL" "$@"
"""
"""The real promtool, except that backfilling recording rules (which happens only while the backtest's
prometheus serves) says so in a file and then never ends: a signal sent after that file appears
provably lands while prometheus runs, however loaded the machine is."""


def backtest_stopped_by(tmp_path: Path, sig: signal.Signals) -> str:
    """Signal a real backtest subprocess while its prometheus runs, and check what every ending signal
    leaves: exit 130, prometheus gone, the temporary directory under TMPDIR removed. Its stderr."""
    fleet = tmp_path / "fleet"
    write_fleet(fleet, runaway_minutes("search", SEARCH_START, LOOP_MINUTES, "WebSearch"))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "promtool").write_text(PAUSED_PROMTOOL, encoding="utf-8")
    (tools / "promtool").chmod(0o755)
    paused = tmp_path / "paused"
    env = {
        "TMPDIR": str(scratch),
        "PATH": f"{tools}{os.pathsep}{os.environ.get('PATH', '')}",
        "OTELGUARD_TEST_PROMTOOL": require_binary("promtool"),
        "OTELGUARD_TEST_PAUSED": str(paused),
    }
    with running_backtest([str(fleet)], env) as process:
        wait_until(
            lambda: paused.exists() or process.poll() is not None,
            300,
            interval=0.05,
            what="the backtest to backfill its recording rules",
        )
        assert process.poll() is None, "the backtest waits in its paused promtool"
        server = [pid for pid, name in children(process.pid) if name == "prometheus"]
        assert server, "prometheus serves the backfill"
        assert list(scratch.iterdir()), "the backtest works in a temporary directory under TMPDIR"
        process.send_signal(sig)
        assert process.wait(60) == 130
        assert process.stderr is not None
        stderr = process.stderr.read()
    assert list(scratch.iterdir()) == []
    deadline = time.monotonic() + 10
    while Path(f"/proc/{server[0]}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (
        not Path(f"/proc/{server[0]}").exists()
        or "Z" in Path(f"/proc/{server[0]}/stat").read_text().split()[2]
    )
    return stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_ctrl_c_stops_prometheus_and_removes_the_temporary_directory(
    tmp_path: Path, sig: signal.Signals
) -> None:
    """A real subprocess, signalled while its prometheus runs: exit 130, server gone, directory gone."""
    assert "interrupted; stopped prometheus and removed" in backtest_stopped_by(tmp_path, sig)


def test_no_argument_values_or_results_in_the_json_or_the_page(tmp_path: Path) -> None:
    writer = SessionWriter("hhhh-canary")
    writer.prompt(DAY, ARG_CANARY)
    for index in range(60):
        writer.call(
            DAY + timedelta(seconds=index), "WebSearch", {"query": f"{ARG_CANARY} {index}"}, RESULT_CANARY
        )
    page = tmp_path / "page.html"
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        main(["backtest", str(writer.write(tmp_path)), "--json", "--html", str(page)])
    for text in (out.getvalue(), err.getvalue(), page.read_text(encoding="utf-8")):
        assert ARG_CANARY not in text and RESULT_CANARY not in text


def test_the_tables_show_names_from_input_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent label (or any label, session id or path) holding rich markup is printed literally."""
    monkeypatch.setenv("COLUMNS", "200")  # rows on one line each, whatever the test's terminal
    write_fleet(tmp_path / "fleet", runaway_minutes("search", SEARCH_START, LOOP_MINUTES, "WebSearch"))
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["backtest", str(tmp_path / "fleet"), "--agent", "[bold]x[/]"])
    assert code == 1
    text = out.getvalue()
    assert "Alerts that would have fired" in text and "OtelguardRunawaySearchLoop" in text
    assert "agent=[bold]x[/]" in text


def test_since_leaves_out_what_came_before(tmp_path: Path) -> None:
    """The same runaway, backtested from its twelfth minute on: too short for the 10-minute `for:`."""
    write_fleet(tmp_path, runaway_minutes("search", SEARCH_START, LOOP_MINUTES, "WebSearch"))
    since = (SEARCH_START + timedelta(minutes=12)).isoformat()
    code, document, _ = backtest(str(tmp_path), "--since", since)
    assert code == 0
    assert "OtelguardRunawaySearchLoop" in document["quiet"]
    assert when(document["period"]["start"]) >= SEARCH_START + timedelta(minutes=12)
    assert document["events_outside_since_until"] > 0


def test_the_alerts_section_in_a_real_browser(
    runaway: tuple[int, dict[str, Any], str, str], tmp_path: Path
) -> None:
    """Headless chromium: the page loads clean, fetches nothing, and the section shows one row per
    interval the document lists, laid out with a real size."""
    from tests.browser import run_chromium

    _, document, _, page_text = runaway
    page_file = tmp_path / "report.html"
    page_file.write_text(page_text, encoding="utf-8")
    expected = sorted(a["alert"] for a in document["alerts"] for _ in a["intervals"])
    with run_chromium(tmp_path) as browser:
        page = browser.new_page()
        page.navigate(page_file.as_uri())
        assert page.events("Runtime.exceptionThrown") == []
        requested = [e["request"]["url"] for e in page.events("Network.requestWillBeSent")]
        assert requested == [page_file.as_uri()]
        rows = page.evaluate(
            "[...document.querySelectorAll('#alerts tbody tr')].map(r => r.cells[0].textContent)"
        )
        assert sorted(rows) == expected
        height = page.evaluate("document.querySelector('#alerts').getBoundingClientRect().height")
        assert height > 20 * len(rows)
