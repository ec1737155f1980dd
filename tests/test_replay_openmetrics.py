"""`otelguard replay --openmetrics FILE`: what a Prometheus scraping a live exporter would have stored,
with the transcripts' timestamps (promtool's acceptance is in test_backtest_e2e.py)."""

from __future__ import annotations

import itertools
import json
import math
import re
from collections import defaultdict
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter

from benchmarks.backtest_fleet import DAY, SessionWriter, healthy_session, runaway_session
from otelguard.cli import main
from otelguard.readers.times import parse_duration, parse_moment, parse_time
from otelguard.replay.openmetrics import (
    AFTER_LAST_EVENT,
    MetricsHistory,
    ScrapeGrid,
    escape_label_value,
    touched_families,
)
from otelguard.replay.timed import TimeSortedSpill
from otelguard.telemetry import Telemetry
from otelguard.telemetry.metrics import families_for
from tests.test_replay_cli import ARG_CANARY, ERROR_CANARY, RESULT_CANARY

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\} (\S+) (\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_openmetrics(
    text: str,
) -> tuple[dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[float, float]]], list[str]]:
    """Samples by series, in file order, and the order of the ``# TYPE`` lines."""
    series: dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[float, float]]] = defaultdict(list)
    types: list[str] = []
    for line in text.split("\n"):  # not splitlines(): a label value may hold U+2028
        if not line:
            continue
        if line.startswith("# TYPE "):
            types.append(line.split()[2])
            continue
        if line.startswith("#"):
            continue
        match = _LINE.match(line)
        assert match, line
        name, labels, value, stamp = match.groups()
        key = (name, tuple(_LABEL.findall(labels)))
        series[key].append((float(stamp), float(value)))
    return series, types


def replay_openmetrics(tmp_path: Path, *paths: Path, extra: tuple[str, ...] = ()) -> str:
    out = tmp_path / "replay.om"
    code = main(["replay", *map(str, paths), "--json", "--openmetrics", str(out), *extra])
    assert code == 0
    return out.read_text(encoding="utf-8")


def tool_calls(series: dict[Any, list[tuple[float, float]]], tool: str) -> list[tuple[float, float]]:
    [points] = [
        points
        for (name, labels), points in series.items()
        if name == "otelguard_tool_calls_total"
        and dict(labels)["tool"] == tool
        and dict(labels)["outcome"] == "ok"
    ]
    return points


def interleaved(tmp_path: Path) -> tuple[Path, Path, list[float]]:
    """Two sessions in two files whose calls alternate every ten seconds."""
    first, second = SessionWriter("aaaa-first"), SessionWriter("bbbb-second")
    first.prompt(DAY)
    second.prompt(DAY)
    for index in range(30):
        writer = first if index % 2 == 0 else second
        writer.call(DAY + timedelta(seconds=10 * index), "Read", {"file": f"f{index}"}, f"text {index}")
    times = sorted(t.timestamp() for w in (first, second) for t, _ in w.calls)
    return first.write(tmp_path), second.write(tmp_path), times


def test_sessions_of_two_files_interleaved_in_time_merge_into_one_cumulative_counter(tmp_path: Path) -> None:
    """Each scrape counts every call of either file up to its time: monotone, in time order."""
    first, second, times = interleaved(tmp_path)
    series, _ = parse_openmetrics(replay_openmetrics(tmp_path, first, second))
    points = tool_calls(series, "Read")
    stamps = [t for t, _ in points]
    assert stamps == sorted(set(stamps))
    assert all(b - a == 15 for a, b in itertools.pairwise(stamps))
    for stamp, value in points:
        assert value == sum(1 for t in times if t <= stamp)
    assert points[-1][1] == 30


def test_every_series_in_order_from_its_first_increment_to_five_minutes_after_the_last_event(
    tmp_path: Path,
) -> None:
    first, second, times = interleaved(tmp_path)
    runaway = runaway_session("cccc-runaway", DAY + timedelta(minutes=2), "WebSearch").write(tmp_path)
    text = replay_openmetrics(tmp_path, first, second, runaway)
    series, types = parse_openmetrics(text)
    assert text.endswith("# EOF\n")
    assert len(types) == len(set(types)), "a family's samples are together, its TYPE once"
    last_event = max([*times, (DAY + timedelta(minutes=2, seconds=1 + 50 * 0.9 + 1)).timestamp()])
    end = math.floor((last_event + AFTER_LAST_EVENT) / 15) * 15
    for (name, labels), points in series.items():
        assert not name.endswith("_created")
        assert ("job", "otelguard_replay") in labels and ("instance", "replay") in labels
        stamps = [t for t, _ in points]
        assert stamps == sorted(set(stamps)), name
        assert stamps[-1] == end, name
        if name.endswith(("_total", "_count", "_sum", "_bucket")):
            values = [v for _, v in points]
            assert values == sorted(values), f"{name} never goes down"
    cap_hits = [p for (n, _), p in series.items() if n == "otelguard_cap_hits_total"]
    assert len(cap_hits) == 1
    first_cap = cap_hits[0][0]
    hit = (DAY + timedelta(minutes=2, seconds=1 + 50 * 0.9)).timestamp()
    assert first_cap == (math.ceil(hit / 15) * 15, 1.0), (
        "the series starts at the first scrape after its first hit"
    )


def test_scrape_interval_job_and_instance(tmp_path: Path) -> None:
    first, second, _ = interleaved(tmp_path)
    text = replay_openmetrics(
        tmp_path,
        first,
        second,
        extra=("--scrape-interval", "1m", "--job", 'my "job"', "--instance", "lap\\top"),
    )
    series, _ = parse_openmetrics(text)
    points = tool_calls(series, "Read")
    assert all(b - a == 60 for (a, _), (b, _) in itertools.pairwise(points))
    labels = dict(next(iter(series))[1])
    assert labels["job"] == 'my \\"job\\"' and labels["instance"] == "lap\\\\top"


def test_a_transcript_without_timestamps_is_named_and_left_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    timed = healthy_session("dddd-timed", DAY, __import__("random").Random(1)).write(tmp_path)
    untimed_writer = SessionWriter("eeee-untimed", timestamps=False)
    untimed_writer.prompt(DAY)
    for index in range(4):
        untimed_writer.call(DAY, "LS", {"path": f"p{index}"}, "none")
    untimed = untimed_writer.write(tmp_path)
    text = replay_openmetrics(tmp_path, timed, untimed)
    captured = capsys.readouterr()
    assert "1 session(s) without timestamps left out" in captured.err
    assert f"{untimed} (eeee-untimed)" in captured.err
    assert json.loads(captured.out)["totals"]["sessions"] == 2, "the replay itself runs both"
    series, _ = parse_openmetrics(text)
    assert not any(dict(labels).get("tool") == "LS" for _, labels in series)


def test_no_argument_values_results_or_error_texts_in_the_file(tmp_path: Path) -> None:
    writer = SessionWriter("ffff-canary")
    writer.prompt(DAY, ARG_CANARY)
    for index in range(12):
        moment = DAY + timedelta(seconds=5 * index)
        writer.call(moment, "Bash", {"command": ARG_CANARY}, f"{RESULT_CANARY} {ERROR_CANARY}", error=True)
    text = replay_openmetrics(tmp_path, writer.write(tmp_path))
    assert "otelguard_decisions_total" in text
    for canary in (ARG_CANARY, RESULT_CANARY, ERROR_CANARY):
        assert canary not in text


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--openmetrics", "OUT", "--follow"], "cannot be used with --follow"),
        (["--openmetrics", "OUT", "--serve", "0"], "cannot be combined with --serve"),
        (["--instance", "x"], "need --openmetrics"),
        (["--scrape-interval", "30s"], "need --openmetrics"),
        (["--openmetrics", "."], "is a directory"),
        (["--since", "7d"], "need --openmetrics"),
        (
            ["--openmetrics", "OUT", "--since", "2025-03-04", "--until", "2025-03-03"],
            "--since must be before --until",
        ),
    ],
)
def test_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], arguments: list[str], message: str
) -> None:
    first, _, _ = interleaved(tmp_path)
    arguments = [str(tmp_path / "out.om") if a == "OUT" else a for a in arguments]
    assert main(["replay", str(first), *arguments]) == 2
    assert message in capsys.readouterr().err


def test_a_bad_scrape_interval_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["replay", str(tmp_path), "--openmetrics", str(tmp_path / "o"), "--scrape-interval", "soon"])
    assert exit_info.value.code == 2
    assert "'soon' is not a duration" in capsys.readouterr().err


def signature_history() -> tuple[Counter, MetricsHistory]:
    """A counter labelled like the signature family, and the history of its registry."""
    registry = CollectorRegistry()
    return Counter("hits", "h", ["signature"], registry=registry), MetricsHistory(registry, "j", "i")


def test_a_series_the_exporter_removes_stops_and_a_new_one_starts_over() -> None:
    """The bounded signature family removes its least recently hit series: its samples stop there."""
    counter, history = signature_history()
    grid = ScrapeGrid(0, 15_000, 6)
    counter.labels("a").inc()
    history.scrape(0)
    counter.remove("a")
    counter.labels("b").inc()
    history.scrape(2)
    counter.labels("a").inc()
    history.scrape(4)
    out: list[str] = []
    history.write(_Collect(out), grid, 0, 5)
    series, _ = parse_openmetrics("".join(out))
    a = series[("hits_total", (("signature", "a"), ("job", "j"), ("instance", "i")))]
    b = series[("hits_total", (("signature", "b"), ("job", "j"), ("instance", "i")))]
    assert a == [(0, 1), (15, 1), (60, 1), (75, 1)]
    assert b == [(30, 1), (45, 1), (60, 1), (75, 1)]


class _Collect:
    def __init__(self, out: list[str]) -> None:
        self.out = out

    def write(self, text: str) -> int:
        self.out.append(text)
        return len(text)


def test_label_values_are_escaped() -> None:
    assert escape_label_value('a"b\\c\nd') == 'a\\"b\\\\c\\nd'


@given(
    st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=80), st.lists(st.integers())
    )
)
def test_parse_time_never_raises(value: Any) -> None:
    parsed = parse_time(value)
    assert parsed is None or math.isfinite(parsed)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("2025-03-03T00:00:01.500Z", DAY.timestamp() + 1.5),
        ("2025-03-03T00:00:01", DAY.timestamp() + 1),  # naive: UTC
        ("2025-03-03T01:00:00+01:00", DAY.timestamp()),
        (DAY.timestamp(), DAY.timestamp()),
        (DAY.timestamp() * 1000, DAY.timestamp()),  # milliseconds
        ("yesterday", None),
        (True, None),
        (float("nan"), None),
    ],
)
def test_parse_time(value: Any, seconds: float | None) -> None:
    assert parse_time(value) == seconds


@pytest.mark.parametrize(
    ("text", "seconds"), [("15s", 15.0), ("1m30s", 90.0), ("500ms", 0.5), ("2h", 7200.0), ("1d", 86400.0)]
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0s", "15", "1.5m", "-1m", "s", "1m 30s"])
def test_a_bad_duration_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), max_size=200), st.integers(1, 20))
def test_the_spill_returns_everything_in_time_order_ties_in_arrival_order(
    tmp_path_factory: pytest.TempPathFactory, times: list[float], run_records: int
) -> None:
    spill = TimeSortedSpill(tmp_path_factory.mktemp("spill"), run_records=run_records)
    for index, time in enumerate(times):
        spill.add(time, index)
    out = list(spill.drain())
    assert out == sorted(((t, i) for i, t in enumerate(times)), key=lambda pair: pair[0])
    assert (spill.first, spill.last) == ((min(times), max(times)) if times else (None, None))
    spill.close()


def test_the_families_a_scrape_collects_cover_every_family_of_the_registry() -> None:
    """A scrape collects only the families an event can change; a family missing from that map would
    have its changes land on a later scrape. Adding a family to telemetry fails this test first."""
    registry = CollectorRegistry()
    Telemetry(registry=registry)
    mapped = touched_families(families_for(registry))
    names = {
        metric.name for group in mapped.values() for collector in group for metric in collector.collect()
    }
    assert names == {metric.name for metric in registry.collect()}


def test_since_and_until_leave_out_the_events_outside_the_window(tmp_path: Path) -> None:
    first, second, times = interleaved(tmp_path)
    since, until = times[10], times[19]
    text = replay_openmetrics(
        tmp_path,
        first,
        second,
        extra=("--since", "2025-03-03T00:01:41Z", "--until", "2025-03-03T00:03:11Z"),
    )
    assert (since, until) == (
        (DAY + timedelta(seconds=101)).timestamp(),
        (DAY + timedelta(seconds=191)).timestamp(),
    )
    points = tool_calls(parse_openmetrics(text)[0], "Read")
    assert points[0][0] == math.ceil(since / 15) * 15
    assert points[-1] == (math.floor((until + AFTER_LAST_EVENT) / 15) * 15, 10.0)


def test_a_moment_is_a_time_or_a_duration_before_now(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_moment("7d", 1_000_000.0) == 1_000_000.0 - 7 * 86400
    assert parse_moment("2025-03-03", 0.0) == DAY.timestamp()
    with pytest.raises(ValueError, match="neither a time"):
        parse_moment("last tuesday", 0.0)


def test_forgetting_a_written_window_keeps_what_later_scrapes_need_and_drops_removed_series() -> None:
    counter, history = signature_history()
    grid = ScrapeGrid(0, 15_000, 8)
    counter.labels("a").inc()
    counter.labels("b").inc()
    history.scrape(0)
    counter.remove("a")
    counter.labels("b").inc()
    history.scrape(2)
    history.forget_before(4)  # scrapes 0..3 are written
    assert history.series_count() == 1, "a was removed before scrape 4: nothing left to write of it"
    counter.labels("a").inc()
    history.scrape(5)
    out: list[str] = []
    history.write(_Collect(out), grid, 4, 7)
    series, _ = parse_openmetrics("".join(out))
    labels = (("job", "j"), ("instance", "i"))
    assert series[("hits_total", (("signature", "b"), *labels))] == [(60, 2), (75, 2), (90, 2), (105, 2)]
    assert series[("hits_total", (("signature", "a"), *labels))] == [(75, 1), (90, 1), (105, 1)]
