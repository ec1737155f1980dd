"""Transcript times: a call's time is its result's line, else its request's; turns carry their
prompt's time; the timed replay stamps every guard event and names sessions without any time."""

from __future__ import annotations

import json
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from benchmarks.backtest_fleet import DAY, SessionWriter
from otelguard import GuardConfig
from otelguard.cli import main
from otelguard.readers.times import parse_time
from otelguard.replay import SessionKey, ToolCall, expand_paths, replay_inputs
from otelguard.replay.timed import CALL, TURN, Clock, TimedEvents, TimedRun, TimeSortedSpill
from otelguard.testing import RecordingObserver

REAL = Path(__file__).parent / "data" / "real"


class Times:
    """An event sink that keeps each call's time and each turn's."""

    def __init__(self) -> None:
        self.calls: list[ToolCall] = []
        self.turns: list[float | None] = []

    def describe_input(self, path: str, fmt: str) -> None: ...

    def begin_session(self, key: SessionKey) -> None: ...

    def start_turn(self, key: SessionKey, time: float | None = None) -> None:
        self.turns.append(time)

    def tool_call(self, key: SessionKey, call: ToolCall) -> None:
        self.calls.append(call)

    def end_session(self, key: SessionKey) -> None: ...

    def error(self, path: str, line: int | None, reason: str) -> None: ...


def read(*paths: Path) -> Times:
    sink = Times()
    replay_inputs(expand_paths([str(p) for p in paths]), "auto", sink)
    return sink


def line_times(path: Path) -> dict[int, float | None]:
    return {
        number: parse_time(json.loads(line).get("timestamp"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if line.strip()
    }


@pytest.mark.parametrize("path", sorted((REAL / "claude-code").glob("*.jsonl")), ids=lambda p: p.name)
def test_a_real_claude_code_call_takes_its_result_lines_time(path: Path) -> None:
    """Every answered call's time is the timestamp of the line holding its tool_result."""
    times = line_times(path)
    results: dict[str, float | None] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        record = json.loads(line) if line.strip() else {}
        content = (record.get("message") or {}).get("content") if isinstance(record, dict) else None
        for block in content if isinstance(content, list) else ():
            if isinstance(block, dict) and block.get("type") == "tool_result":
                results.setdefault(block.get("tool_use_id"), times[number])
    calls = [c for c in read(path).calls if c.has_result]
    assert calls
    for call in calls:
        assert call.time is not None
        assert call.time == results[call.call_id]


def test_real_openhands_calls_take_their_observations_time_and_finish_its_own() -> None:
    events = json.loads((REAL / "openhands" / "wrong_initial_state.json").read_text(encoding="utf-8"))
    by_cause = {e["cause"]: parse_time(e["timestamp"]) for e in events if "cause" in e}
    actions = [e for e in events if "tool_call_metadata" in e and "action" in e]
    sink = read(REAL / "openhands" / "wrong_initial_state.json")
    assert [c.time for c in sink.calls] == [
        by_cause.get(a["id"], parse_time(a["timestamp"])) for a in actions
    ]
    assert sink.calls[-1].tool_name == "finish" and sink.calls[-1].time == parse_time(
        actions[-1]["timestamp"]
    )
    assert sink.turns == [parse_time(events[0]["timestamp"])]


def test_a_call_without_a_result_time_keeps_its_requests() -> None:
    writer = SessionWriter("iiii-request")
    writer.prompt(DAY)
    writer.call(DAY + timedelta(seconds=5), "Read", {"file": "a"}, "text")
    del writer.lines[-1]["timestamp"]  # the result line has no time
    with tempfile.TemporaryDirectory() as directory:
        [call] = read(writer.write(Path(directory))).calls
    assert call.time == (DAY + timedelta(seconds=5)).timestamp()


def test_formats_that_record_no_time_give_none() -> None:
    sink = read(REAL / "swe-agent")
    assert sink.calls and all(c.time is None for c in sink.calls)
    assert all(t is None for t in sink.turns)


def test_the_timed_replay_stamps_calls_and_turn_ends_and_names_untimed_sessions(tmp_path: Path) -> None:
    timed_writer = SessionWriter("jjjj-timed")
    timed_writer.prompt(DAY)
    for index in range(3):
        timed_writer.call(DAY + timedelta(seconds=10 * index), "Read", {"f": index}, f"r{index}")
    timed_writer.prompt(DAY + timedelta(minutes=5), "next")  # a turn without calls: ends at its prompt
    untimed = SessionWriter("kkkk-untimed", timestamps=False)
    untimed.prompt(DAY)
    untimed.call(DAY, "Read", {"f": 1}, "r")
    paths = [str(timed_writer.write(tmp_path)), str(untimed.write(tmp_path))]
    run = TimedRun(GuardConfig(), tmp_path)
    replay_inputs(paths, "auto", run.sink)
    report = run.finish()
    assert report.totals()["sessions"] == 2
    events = list(run.spill.drain())
    calls = [t for t, (kind, _) in events if kind == CALL]
    turns = [t for t, (kind, _) in events if kind == TURN]
    assert calls == [(DAY + timedelta(seconds=10 * i + 1)).timestamp() for i in range(3)]
    assert turns == [(DAY + timedelta(seconds=21)).timestamp(), (DAY + timedelta(minutes=5)).timestamp()]
    assert run.sink.untimed_sessions == [SessionKey(paths[1], "kkkk-untimed")]
    assert run.events.untimed_events == 4  # its call, the model request and reply that asked for it, its turn


def test_a_spill_that_cannot_be_written_is_kept_as_the_failure_not_lost_quietly(tmp_path: Path) -> None:
    """The guard isolates observer errors; a lost event must still be noticed."""
    spill = TimeSortedSpill(tmp_path / "missing", run_records=1)
    clock = Clock(now=1.0, key=SessionKey("p", "s"))
    events = TimedEvents(clock, spill)
    recorder = RecordingObserver()
    from otelguard import Guard

    guard = Guard(GuardConfig(signature_key="k"), observers=(recorder, events))
    guard.start_turn()
    guard.before_call("Read", {"f": 1})
    guard.after_call("Read", {"f": 1}, "text")
    assert isinstance(events.failure, FileNotFoundError)


def test_replay_reports_a_failed_spill_instead_of_writing_a_partial_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing_add(self: TimeSortedSpill, time: float, item: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(TimeSortedSpill, "add", failing_add)
    writer = SessionWriter("llll-full")
    writer.prompt(DAY)
    writer.call(DAY, "Read", {"f": 1}, "r")
    out = tmp_path / "x.om"
    assert main(["replay", str(writer.write(tmp_path)), "--json", "--openmetrics", str(out)]) == 1
    assert "could not be kept" in capsys.readouterr().err
    assert not out.exists()


def test_replay_with_no_session_detail_still_counts_every_session(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("mmmm-a", "mmmm-b"):
        writer = SessionWriter(name)
        writer.prompt(DAY)
        writer.call(DAY, "Read", {"f": 1}, "r")
        writer.write(tmp_path)
    assert main(["replay", str(tmp_path), "--json", "--detail-sessions", "0"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["sessions"] == [] and document["totals"]["sessions"] == 2


def test_mini_swe_agent_messages_stamped_in_extra_give_their_times(tmp_path: Path) -> None:
    """Recent mini-swe-agent versions put ``extra.timestamp`` on model answers and observations."""
    start = DAY.timestamp()
    messages = [
        {"role": "system", "content": "you are an agent"},
        {"role": "user", "content": "fix it", "extra": {"timestamp": start}},
        {"role": "assistant", "content": "```mswea_bash_command\nls\n```", "extra": {"timestamp": start + 5}},
        {
            "role": "user",
            "content": "<returncode>0</returncode>\n<output>a</output>",
            "extra": {"timestamp": start + 6},
        },
        {
            "role": "assistant",
            "content": "```mswea_bash_command\ncat a\n```",
            "extra": {"timestamp": start + 9},
        },
    ]
    path = tmp_path / "run.traj.json"
    path.write_text(json.dumps({"messages": messages, "trajectory_format": "mini-swe-agent-1"}))
    sink = read(path)
    assert [c.time for c in sink.calls] == [start + 6, start + 9]
    assert sink.turns == [start]


@pytest.mark.parametrize(
    "path",
    sorted((Path(__file__).parent / "fixtures" / "mini-swe-agent-2").glob("*.json")),
    ids=lambda p: p.name,
)
def test_real_mini_swe_agent_2_runs_give_each_call_its_observations_time(path: Path) -> None:
    """Trajectories written by mini-swe-agent 2.4.6 itself: every answered call is stamped with a
    time the run recorded (the task message has none: its turn ends at its calls' latest time)."""
    document = json.loads(path.read_text(encoding="utf-8"))
    stamps = {
        parse_time(m["extra"]["timestamp"])
        for m in document["messages"]
        if isinstance(m, dict) and isinstance(m.get("extra"), dict) and "timestamp" in m["extra"]
    }
    sink = read(path)
    answered = [c for c in sink.calls if c.has_result]
    assert answered
    assert all(c.time in stamps for c in answered)
