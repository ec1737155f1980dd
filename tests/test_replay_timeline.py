"""Per-call marks for the HTML report: one per call, folded when long (a halt never disappears),
kept only for the highest-ranked sessions, and cap usage bucketed per turn."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from otelguard import GuardConfig
from otelguard.replay import ReplayRunner, SessionKey, ToolCall, replay_inputs
from otelguard.replay.timeline import (
    ALLOWED,
    CANCELLED,
    CLASS_MASK,
    MANY_TOOLS,
    MAX_COLUMNS,
    MAX_LABELS,
    MAX_STORED_MARKS,
    NOT_REPLAYED,
    PREVENTED,
    STOPPED,
    TURN_START,
    WARNED,
    CapUsage,
    SessionMarks,
    Timelines,
    merge,
    session_rank,
)

EXAMPLES = sorted((Path(__file__).parents[1] / "otelguard" / "data" / "examples").glob("*.jsonl"))
UNATTENDED = GuardConfig.from_file(Path(__file__).parent / "fixtures" / "replay" / "unattended.yaml")


def classes(marks: SessionMarks) -> list[int]:
    return [m & CLASS_MASK for m in marks.marks]


def replay_examples(timelines: Timelines) -> ReplayRunner:
    runner = ReplayRunner(GuardConfig(), timelines=timelines)
    replay_inputs([str(p) for p in EXAMPLES], "auto", runner)
    runner.finish()
    return runner


def test_every_call_of_the_examples_gets_one_mark_matching_the_report() -> None:
    timelines = Timelines()
    runner = replay_examples(timelines)
    kept = timelines.kept()
    assert len(kept) == len(runner.report.sessions)
    prevented = 0
    for session in runner.report.sessions:
        marks = kept[session.seq]
        assert marks.calls == session.tool_calls == len(marks.marks)
        assert sum(1 for m in marks.marks if m & TURN_START) == session.turns
        found = classes(marks)
        assert found.count(STOPPED) == session.halts_total
        assert found.count(PREVENTED) <= session.prevented_calls
        prevented += found.count(PREVENTED)
        stopped_in_turn = False
        for mark in marks.marks:  # a prevented call always follows a stop in its own turn
            stopped_in_turn = (not mark & TURN_START and stopped_in_turn) or mark & CLASS_MASK == STOPPED
            assert mark & CLASS_MASK != PREVENTED or stopped_in_turn
        warnings = sum(n for code, n in session.decisions.items() if code.endswith("_warn"))
        assert found.count(WARNED) == warnings
        # each halt's recorded position is a stopped mark, in the halt's turn and call
        assert len(marks.halt_calls) == len(session.halts)
        places = [(0, 0)]  # (turn, call in turn) of each mark, both 1-based
        for mark in marks.marks:
            turn, call = places[-1]
            places.append((turn + 1, 1) if mark & TURN_START else (turn, call + 1))
        del places[0]
        for position, halt in zip(marks.halt_calls, session.halts, strict=True):
            assert found[position] == STOPPED
            assert places[position] == (halt.turn, halt.call)
    assert prevented == 4  # the calls after the runaway search's cap hit


def test_runner_without_timelines_keeps_no_marks() -> None:
    runner = ReplayRunner(GuardConfig())
    replay_inputs([str(p) for p in EXAMPLES], "auto", runner)
    report = runner.finish()
    assert runner.timelines is None
    assert report.totals()["tool_calls"] == 68


def test_cancelled_and_unanswered_calls_get_their_own_marks() -> None:
    timelines = Timelines()
    runner = ReplayRunner(GuardConfig(), timelines=timelines)
    key = SessionKey("t.jsonl", "s")
    runner.start_turn(key)
    runner.tool_call(key, ToolCall("a", "read_file", {}, 1, result="ok", has_result=True))
    runner.tool_call(key, ToolCall("b", "terminal", {}, 2, result="", has_result=True, cancelled=True))
    runner.tool_call(key, ToolCall("c", "terminal", {}, 3, cancelled=True))
    runner.tool_call(key, ToolCall("d", "terminal", {}, 4))
    runner.finish()
    (marks,) = timelines.kept().values()
    assert classes(marks) == [ALLOWED, CANCELLED, CANCELLED, NOT_REPLAYED]


def test_a_rejected_call_is_stopped_but_not_a_halt() -> None:
    config = GuardConfig.from_mapping({"caps": {"on_hit": "reject", "turn": {"web_search": 1}}})
    timelines = Timelines()
    runner = ReplayRunner(config, timelines=timelines)
    key = SessionKey("t.jsonl", "s")
    runner.start_turn(key)
    for n in range(3):
        runner.tool_call(key, ToolCall(str(n), "web_search", {"q": n}, n, result="r", has_result=True))
    report = runner.finish()
    (marks,) = timelines.kept().values()
    assert classes(marks) == [ALLOWED, STOPPED, STOPPED]
    assert marks.halt_calls == [] and report.sessions[0].halts_total == 0


def test_merge_keeps_the_most_severe_class_and_every_flag() -> None:
    assert merge(ALLOWED | TURN_START, STOPPED) == STOPPED | TURN_START
    assert merge(PREVENTED, WARNED) == WARNED
    assert merge(CANCELLED, WARNED) == CANCELLED
    assert merge(NOT_REPLAYED, ALLOWED) == NOT_REPLAYED
    for other in (ALLOWED, WARNED, PREVENTED, CANCELLED, NOT_REPLAYED):
        assert merge(other, STOPPED) & CLASS_MASK == STOPPED
        assert merge(STOPPED, other) & CLASS_MASK == STOPPED


def test_a_long_session_is_folded_to_the_stored_bound_and_keeps_its_halts() -> None:
    marks = SessionMarks()
    halts = {7, MAX_STORED_MARKS + 3, 3 * MAX_STORED_MARKS + 11}
    total = 4 * MAX_STORED_MARKS + 5
    for call in range(total):
        if call % 1000 == 0:
            marks.start_turn()
        marks.add(STOPPED if call in halts else ALLOWED)
        if call in halts:
            marks.halt_here()
    assert len(marks.marks) <= MAX_STORED_MARKS
    assert marks.calls == total
    assert marks.calls_per_mark == 8
    assert sorted(marks.halt_calls) == sorted(halts)
    for call in halts:
        assert marks.marks[call // marks.calls_per_mark] & CLASS_MASK == STOPPED
    assert classes(marks).count(STOPPED) == len(halts)
    marks.shrink(MAX_COLUMNS)
    assert len(marks.marks) <= MAX_COLUMNS
    for call in halts:
        assert marks.marks[call // marks.calls_per_mark] & CLASS_MASK == STOPPED


@given(
    st.lists(st.sampled_from([ALLOWED, WARNED, STOPPED, PREVENTED, CANCELLED, NOT_REPLAYED]), max_size=400)
)
def test_shrink_never_loses_a_stop(calls: list[int]) -> None:
    marks = SessionMarks()
    for mark in calls:
        marks.add(mark)
    marks.shrink(7)
    assert len(marks.marks) <= 7
    assert (STOPPED in classes(marks)) == (STOPPED in calls)
    assert marks.calls_per_mark * len(marks.marks) >= len(calls)


def test_only_the_highest_ranked_sessions_keep_marks() -> None:
    timelines = Timelines(keep=3)
    for seq in range(1, 11):
        marks = SessionMarks()
        marks.add(ALLOWED)
        halts = 1 if seq in (4, 9) else 0
        decisions = {"cycle_warn": 2} if seq == 6 else {}
        timelines.offer(session_rank(halts, decisions, seq), seq, marks)
    assert sorted(timelines.kept()) == [4, 6, 9]
    ties = Timelines(keep=2)
    for seq in range(1, 6):
        ties.offer(session_rank(0, {}, seq), seq, SessionMarks())
    assert sorted(ties.kept()) == [1, 2]
    assert Timelines(keep=0).kept() == {}


def test_cap_usage_buckets_each_turn_by_its_highest_ratio() -> None:
    usage = CapUsage()
    for ratio in (0.0, 0.1, 0.49, 0.5, 0.79, 0.8, 0.99, 1.0):
        usage.add(ratio)
    assert usage.turns == [1, 2, 2, 2, 1]
    assert usage.highest == 1.0


def test_the_runner_buckets_turn_cap_usage() -> None:
    timelines = Timelines()
    runner = ReplayRunner(UNATTENDED, timelines=timelines)
    key = SessionKey("t.jsonl", "s")
    for turn_searches in (0, 2, 5, 9):
        runner.start_turn(key)
        for n in range(turn_searches):
            runner.tool_call(key, ToolCall(str(n), "web_search", {"q": n}, n, result=str(n), has_result=True))
    runner.finish()
    # web_search cap 5 per turn: 0/5, 2/5, 5/5, and a turn stopped at the cap
    assert timelines.cap_usage["web_search"].turns == [1, 1, 0, 0, 2]
    assert timelines.cap_usage["subagents"].turns == [4, 0, 0, 0, 0]


def test_a_folded_mark_is_named_after_the_call_whose_class_it_shows() -> None:
    marks = SessionMarks()
    marks.start_turn()
    for call in range(1000):
        if call == 517:
            marks.add(STOPPED, "Bash", "exact_failure_block")
        else:
            marks.add(ALLOWED, "Read", "allow")
    marks.shrink(MAX_COLUMNS)
    names = [marks.name(column) for column in range(len(marks.marks))]
    stopped = [c for c, mark in enumerate(marks.marks) if mark & CLASS_MASK == STOPPED]
    assert [names[c] for c in stopped] == [("Bash", "exact_failure_block")]
    assert set(names) == {("Read", "allow"), ("Bash", "exact_failure_block")}


def test_the_names_a_session_keeps_are_bounded() -> None:
    marks = SessionMarks()
    for call in range(5000):
        marks.add(ALLOWED, f"tool-{call}", "allow")
    assert len(marks.names) <= MAX_LABELS + 1
    assert marks.name(0) == ("tool-0", "allow")
    assert marks.name(4999) == MANY_TOOLS
