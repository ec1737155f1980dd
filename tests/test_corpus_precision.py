"""The detection benchmark on the regression corpus: public runs of agents, each with its own record.

The corpus is third-party data kept outside this repository (docs/replay.md, "The regression corpus"):
``$OTELGUARD_CORPUS``, else ``shared/corpus`` beside the checkout or a parent of it. Every run is
replayed through the real replay path with the defaults plus ``mode: unattended``. A run that solved
its task and did not end at its budget limit was not stuck, so a halt there is harmful; so is a halt of
a solved run that ended at its limit but changed its files or its world after the stop. ``pytest -s``
prints the figures per source (``python -m benchmarks.corpus_precision`` prints the same table). The
tests at the end read each format's record of a limit without a corpus.
"""

from __future__ import annotations

import functools
import io
import json
import re
import tarfile
from pathlib import Path
from typing import Any, Final

import pytest

from benchmarks.changes import ChangeClassifier, shell_writes
from benchmarks.corpus_precision import (
    ARCHIVE,
    CLAUDE_CODE,
    CONFIG,
    GROUND_TRUTH,
    PROVENANCE,
    TOTAL,
    Positions,
    SourceResult,
    StreakRunner,
    config,
    corpus_sources,
    find_corpus,
    measure_files,
    measure_source,
    read_yaml,
    score_report,
    table,
    total,
)
from benchmarks.run_records import RunRecord, run_records
from otelguard import GuardConfig
from otelguard.readers.events import ModelReply
from otelguard.replay import ReplayRunner, SessionKey, ToolCall

MAX_WARNINGS_PER_1000 = 5.0
"""Warnings are text in the model's context: at most 5 per 1,000 calls in the runs that solved."""
MIN_RUNS = 200

CORPUS = find_corpus()
SOURCES = corpus_sources(CORPUS) if CORPUS is not None and CORPUS.is_dir() else []
NO_CORPUS = (
    f"no regression corpus (looked in {CORPUS or 'shared/corpus beside the checkout and its parents'}): "
    "set OTELGUARD_CORPUS to a corpus directory or put one in shared/corpus beside the checkout "
    '(docs/replay.md, "The regression corpus")'
)

# Misses measured on a source and explained in docs/replay.md ("The regression corpus"). Strict: once
# a change fixes one, its test fails until the entry is removed.
CODER = "coder-swe-bench-lite"
KNOWN_MISSES = {
    ("tau-bench-apollo-gpt-4o-mini", "warnings"): "72.46 per 1,000 calls in solved runs, over 34 solved "
    "runs only: the environments were broken (tools answered with Python NameErrors), so the runs "
    "repeat failing calls; verdicts of runs whose gold actions failed the same way are null",
    ("tau-bench-llama-3.1-8b-airline", "warnings"): "73.33 per 1,000 calls in solved runs: "
    "Llama 3.1 8B repeats the same malformed call (exact_failure_warn from the 2nd)",
    (CODER, "warnings"): "27.95 per 1,000 calls in solved runs: edits refused by the linter, the same "
    "one again (exact_failure_warn, from the 2nd) or one after another (same_tool_failure_warn, from "
    "the 3rd); every count from warn_after on warns",
}


def per_source(check: str) -> list[Any]:
    if not SOURCES:
        return [pytest.param(None, id="no-corpus", marks=pytest.mark.skip(reason=NO_CORPUS))]
    params = []
    for source in SOURCES:
        reason = KNOWN_MISSES.get((source.name, check))
        marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
        params.append(pytest.param(source, id=source.name, marks=marks))
    return params


@functools.cache
def measured(source: Path) -> SourceResult:
    return measure_source(source)


def test_the_corpus_is_there() -> None:
    if not SOURCES:
        # Third-party runs are not shipped in this repository, so a checkout without the corpus skips
        # this test even where missing binaries fail (OTELGUARD_REQUIRE_E2E): nothing to install.
        pytest.skip(NO_CORPUS)
    results = [measured(source) for source in SOURCES]
    print()
    print(table([*results, total(TOTAL, results), measure_files("claude-code", CLAUDE_CODE)]))
    for result in results:
        for halt in result.halts:
            print(
                f"halt: {result.name}: {halt.run} (solved: {halt.solved}, at limit: {halt.at_limit})"
                f" {halt.code} on {halt.tool}, call {halt.call}{', after a refusal' if halt.after_refusal else ''}"
            )
    assert sum(len(r.runs) for r in results) >= MIN_RUNS


@pytest.mark.parametrize("source", per_source("provenance"))
def test_the_source_says_where_its_runs_come_from(source: Path) -> None:
    provenance = read_yaml(source / PROVENANCE)
    assert provenance["repository"].startswith("https://github.com/")
    assert re.fullmatch("[0-9a-f]{40}", provenance["commit"])
    assert provenance["licence"] and provenance["cut"] and provenance["agent"]
    with tarfile.open(source / ARCHIVE, "r:xz") as archive:
        runs = {m.name for m in archive if m.isfile()}
    truth = read_yaml(source / GROUND_TRUTH)
    assert truth["source"]  # where the verdicts come from
    assert set(truth["runs"]) == runs  # a verdict (or null) for every run, and no other
    for verdict in truth["runs"].values():  # solved, or per session of a file of several runs
        verdicts = verdict.values() if isinstance(verdict, dict) else [verdict]
        assert set(verdicts) <= {True, False, None}
    assert provenance["runs"] == len(runs)


@pytest.mark.parametrize("source", per_source("read"))
def test_every_run_is_read_with_exactly_the_known_input_errors(source: Path) -> None:
    result = measured(source)
    provenance = read_yaml(source / PROVENANCE)
    sessions = sum(
        len(v) if isinstance(v, dict) else 1 for v in read_yaml(source / GROUND_TRUTH)["runs"].values()
    )
    assert len(result.runs) == sessions  # one session per run, none lost
    assert result.tool_calls > 0
    known = [(e["path"], e["reason"]) for e in provenance.get("known_input_errors") or []]
    assert [(path, reason) for path, _line, reason in result.errors] == known


@pytest.mark.parametrize("source", per_source("solved"))
def test_no_solved_run_halts_before_its_limit(source: Path) -> None:
    """A run that solved its task and did not end at its budget limit was not stuck: never halted; nor
    one that ended at its limit but changed something after the stop."""
    harmful = [(h.run, h.code, h.tool, h.call) for h in measured(source).harmful_halts]
    assert harmful == []


@pytest.mark.parametrize("source", per_source("warnings"))
def test_warnings_stay_under_five_per_thousand_calls_in_solved_runs(source: Path) -> None:
    result = measured(source)
    assert result.solved_warnings_per_1000 <= MAX_WARNINGS_PER_1000, dict(result.decisions)


# Stuck runs (unsolved, ended at their limit) halted, and refused or halted, per source, as last
# measured: a change that catches fewer of them fails here. Sources not named have no stuck run to
# judge, or none caught. Raise a floor when a change catches more.
STUCK_FLOORS: Final = {
    CODER: (0.20, 0.36),
    "openhands-multi-swe-bench-python": (0.005, 0.005),
    "reflexion-react-hotpotqa": (0.0, 0.55),
    "swe-agent-multi-swe-bench-java": (0.11, 0.16),
    "tau-bench-agentverify-retail": (0.25, 0.25),
    "tau-bench-apollo-gpt-4o-mini": (0.85, 0.89),
    "tau-bench-asteroid-supervised-retail": (0.075, 0.075),
    "tau-bench-gpt-4o-airline": (0.0, 0.20),
    "tau-bench-libgen-iterations": (0.55, 0.79),
    "tau-bench-llama-3.1-8b-airline": (0.20, 0.20),
    "tau2-bench-grok-airline": (1.0, 1.0),
    "tau2-bench-leaderboard": (0.83, 0.83),
    "tau2-bench-sierra-experiments": (0.85, 1.0),
}


@pytest.mark.parametrize("source", per_source("stuck"))
def test_stuck_runs_are_caught_at_least_as_often_as_last_measured(source: Path) -> None:
    halted, answered = STUCK_FLOORS.get(source.name, (0.0, 0.0))
    result = measured(source)
    assert result.stuck_recall >= halted and result.stuck_answered >= answered


# Solved runs refused harmfully, per source, as last measured: a change that refuses more of them fails
# here. Sources not named were not measured with this count.
HARMFUL_REFUSALS: Final = {
    "mini-swe-agent-gemini-3-pro": 0,
    "openhands-multi-swe-bench-python": 0,
    "reflexion-react-hotpotqa": 0,
    "swe-agent-multi-swe-bench-java": 1,
    "tau-bench-agentverify-retail": 0,
    "tau-bench-asteroid-supervised-retail": 0,
    "tau-bench-gpt-4o-airline": 0,
    "tau-bench-grok-4-fast": 0,
    "tau-bench-libgen-iterations": 6,
    "tau-bench-libgen-retail": 0,
    "tau-bench-llama-3.1-8b-airline": 0,
    "tau2-bench-grok-airline": 0,
    "tau2-bench-sierra-experiments": 0,
}


@pytest.mark.parametrize("source", per_source("refusals"))
def test_solved_runs_are_refused_no_more_often_than_last_measured(source: Path) -> None:
    ceiling = HARMFUL_REFUSALS.get(source.name)
    if ceiling is None:
        pytest.skip(f"{source.name}: harmful refusals not measured yet")
    result = measured(source)
    refused = [run.name for run in result.runs if run.harmfully_refused]
    assert len(refused) <= ceiling, refused


# --- the run's own record, read without a corpus ----------------------------------------------------


def _json(document: Any) -> bytes:
    return json.dumps(document).encode()


def test_swe_agent_ended_at_its_cost_limit_even_when_it_says_submitted() -> None:
    steps = [
        {"action": "edit 1:1\nx\nend_of_edit\n", "observation": "ok"},
        {"action": "exit_cost", "observation": "Exited"},
    ]
    record = run_records(
        _json({"trajectory": steps, "history": [], "info": {"exit_status": "submitted (exit_cost)"}})
    )
    assert record == {None: RunRecord(at_limit=True, calls=1)}
    submitted = [{"action": "submit\n", "observation": "diff"}]
    assert (
        run_records(_json({"trajectory": submitted, "info": {"exit_status": "submitted"}}))[None].at_limit
        is False
    )


def test_mini_swe_agent_limit_and_format_errors() -> None:
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "```bash\nls\n```"},
        {"role": "user", "content": "<returncode>0</returncode>"},
        {"role": "assistant", "content": "two\n```bash\nls\n```\n```bash\npwd\n```"},
        {"role": "user", "content": "Please always provide EXACTLY ONE action in triple backticks."},
    ]
    limited = {
        "info": {"exit_status": "LimitsExceeded"},
        "messages": messages,
        "trajectory_format": "mini-swe-agent-1",
    }
    assert run_records(_json(limited)) == {None: RunRecord(at_limit=True, calls=1)}


def test_openhands_completion_log_at_its_iteration_budget() -> None:
    def reply(name: str) -> dict[str, Any]:
        call = {"id": name, "type": "function", "function": {"name": name, "arguments": "{}"}}
        return {"role": "assistant", "content": "", "tool_calls": [call]}

    fncall = [
        {"role": "user", "content": "task"},
        reply("execute_bash"),
        {"role": "tool", "tool_call_id": "execute_bash", "content": "x"},
    ]
    for last, at_limit in (("execute_bash", True), ("finish", False)):
        log = {
            "messages": [],
            "fncall_messages": fncall,
            "fncall_response": {"choices": [{"message": reply(last)}]},
        }
        assert run_records(_json(log), {"model_calls": 2}) == {None: RunRecord(at_limit=at_limit, calls=2)}


def test_tau_bench_step_limit_without_a_stop_and_tau2_termination() -> None:
    def step(i: int) -> list[dict[str, Any]]:
        call = {"id": f"c{i}", "type": "function", "function": {"name": "think", "arguments": "{}"}}
        return [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": ""},
        ]

    stuck = {"task_id": 1, "trial": 0, "reward": 0.0, "traj": [m for i in range(3) for m in step(i)]}
    stopped = {
        "task_id": 2,
        "trial": 0,
        "reward": 1.0,
        "traj": [*step(0), {"role": "user", "content": "thanks ###STOP###"}],
    }
    records = run_records(_json([stuck, stopped]), {"steps": 3})
    assert records == {"task-1-trial-0": RunRecord(True, 3), "task-2-trial-0": RunRecord(False, 1)}
    simulations = [
        {"id": "a", "termination_reason": "max_steps", "messages": []},
        {"id": "b", "termination_reason": "user_stop", "messages": []},
    ]
    assert {k: r.at_limit for k, r in run_records(_json({"simulations": simulations})).items()} == {
        "a": True,
        "b": False,
    }


def test_tau_bench_text_agents_record_their_calls_as_actions_in_the_text() -> None:
    """An act/react agent's call is the JSON after its message's last ``Action:``; ``respond`` (the
    reply to the user) and text that does not parse are no calls."""
    search = json.dumps({"name": "search_direct_flight", "arguments": {"origin": "JFK"}})
    reply = json.dumps({"name": "respond", "arguments": {"content": "which date?"}})
    traj = [
        {"role": "assistant", "content": f"Thought: search.\nAction:\n{search}"},
        {"role": "user", "content": "API output: []"},
        {"role": "assistant", "content": f"Action:\n{reply}"},
        {"role": "user", "content": "May 20"},
        {"role": "assistant", "content": "Action: {not json"},
        {"role": "user", "content": "hm?"},
    ]
    run = {"task_id": 4, "trial": 1, "reward": 0.0, "traj": traj}
    assert run_records(_json([run]), {"steps": 3}) == {"task-4-trial-1": RunRecord(True, 1)}


def test_auto_code_rover_ran_out_of_rounds_unless_it_located_the_bug() -> None:
    """AutoCodeRover leaves its search rounds before the limit only by locating the bug; its calls
    are the search results the harness answered (the model writes them as text)."""
    start = [
        {"role": "system", "content": "You are a software developer maintaining a large project."},
        {"role": "user", "content": "<issue>x</issue>"},
        {
            "role": "user",
            "content": "Based on the files, classes, methods, code statements from the issue...",
        },
        {"role": "assistant", "content": "search_class('A')"},
        {
            "role": "user",
            "content": "Result of search_class('A'):\nFound 1\n\nResult of search_method('f'):\nnone",
        },
        {"role": "user", "content": "Let's analyze collected context first"},
        {"role": "assistant", "content": "analysis"},
    ]
    invalid = [
        {"role": "assistant", "content": "I cannot search."},
        {"role": "user", "content": "The search API calls seem not valid. Please check the arguments..."},
    ]
    located = [{"role": "user", "content": "Here are the code in buggy locations:\nFound 1 methods"}]
    assert run_records(_json(start + invalid * 3)) == {None: RunRecord(at_limit=True, calls=2)}
    assert run_records(_json(start + located)) == {None: RunRecord(at_limit=False, calls=2)}


def test_a_halt_is_placed_by_its_index_in_the_run_across_turns() -> None:
    """A halt is recorded as (turn, call in that turn); the benchmark places it in the run: the second
    call of the second turn after a turn of three calls is the run's fifth."""
    positions = Positions(ReplayRunner(config()))
    key = SessionKey("run.json", "task-9-trial-2")
    positions.begin_session(key)
    for turn_calls in (3, 2):
        positions.start_turn(key)
        for index in range(turn_calls):
            positions.tool_call(
                key, ToolCall(f"c{index}", "think", {}, 1, result="", failed=False, has_result=True)
            )
    positions.end_session(key)
    assert positions.index("run.json", "task-9-trial-2", turn=2, call=2) == 5
    assert positions.index("run.json", "task-9-trial-2", turn=1, call=3) == 3


def _replay_identical_writes(calls: int, guard_config: GuardConfig) -> SourceResult:
    """One solved run, not at its limit, sending the same write call with the same result ``calls``
    times in one turn."""
    runner = ReplayRunner(guard_config)
    positions = Positions(runner)
    key = SessionKey("run.json", "s")
    positions.begin_session(key)
    positions.start_turn(key)
    for index in range(calls):
        call = ToolCall(
            f"c{index}", "write_file", {"path": "a"}, 1, result="ok", failed=False, has_result=True
        )
        positions.tool_call(key, call)
    positions.end_session(key)
    return score_report("source", runner.finish(), {"run.json": True}, {}, positions)


def test_a_harmful_halt_after_a_refusal_is_counted_apart() -> None:
    """``identical_call`` refuses the 5th (``reject``) to the 11th and halts the 12th: a halt the
    recorded model reached only because it never read the refusals."""
    result = _replay_identical_writes(12, config())
    [halt] = result.harmful_halts
    assert (halt.code, halt.call, halt.after_refusal) == ("identical_call_halt", 12, True)
    assert result.harmful_halts_after_refusal == [halt]
    assert result.to_json()["harmful_halts_after_refusal"] == 1


def test_a_halt_with_no_refusal_before_it_is_not_after_a_refusal() -> None:
    """With ``rejects_before_stop: 0`` the 5th identical call halts at once."""
    no_rejects = GuardConfig.from_mapping({**CONFIG, "rejects_before_stop": 0})
    result = _replay_identical_writes(5, no_rejects)
    [halt] = result.harmful_halts
    assert (halt.code, halt.call, halt.after_refusal) == ("identical_call_halt", 5, False)
    assert result.harmful_halts_after_refusal == []


def _replay_failing_checks(commands: list[str]) -> SourceResult:
    """One solved run, not at its limit, sending each shell command in turn; every one fails the same
    way."""
    runner = StreakRunner(config())
    positions = Positions(runner)
    key = SessionKey("run.json", "s")
    positions.begin_session(key)
    positions.start_turn(key)
    for index, command in enumerate(commands):
        call = ToolCall(
            f"c{index}", "bash", {"command": command}, 1, result="error 1", failed=True, has_result=True
        )
        positions.tool_call(key, call)
    positions.end_session(key)
    return score_report("source", runner.finish(), {"run.json": True}, {}, positions, runner.streaks)


def test_a_streak_warned_at_every_count_is_one_warned_streak() -> None:
    """The same failing check sent four times is warned at its 2nd, 3rd and 4th count: three warnings,
    one streak. Another check failing after it starts a streak of its own (its count starts again), and
    the shell failing with two checks is a third (``same_tool_failure``)."""
    one = _replay_failing_checks(["make"] * 4)
    assert (one.warnings, one.streaks) == (3, 1)
    two = _replay_failing_checks(["make"] * 4 + ["pytest"] * 3)
    assert dict(two.decisions) == {"exact_failure_warn": 5, "same_tool_failure_warn": 1}
    assert (two.warnings, two.streaks) == (6, 3)
    assert two.solved_streaks_per_1000 == 1000 * 3 / 7
    assert two.to_json()["solved_warned_streaks_per_1000_calls"] == round(1000 * 3 / 7, 2)


def test_a_refusal_in_a_solved_run_is_a_harmful_refusal_and_a_stuck_run_refused_is_intervened() -> None:
    """``identical_call`` refuses the 5th of twelve identical writes: in a solved run that did not end
    at its limit, a harmful refusal (and a harmful halt at the 12th)."""
    result = _replay_identical_writes(12, config())
    assert (result.harmful_refusals, len(result.harmful_halts)) == (1, 1)
    assert result.to_json()["harmful_refusals"] == 1


def test_an_older_openhands_completion_log_at_its_iteration_budget() -> None:
    """``{messages, response, args, kwargs, timestamp, cost}``: the same record as a log of the newer
    shape, from the request's ``messages`` and the ``response``."""
    call = {"id": "c", "type": "function", "function": {"name": "execute_bash", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c", "content": "x"},
    ]
    reply = {"role": "assistant", "content": "", "tool_calls": [call]}
    log = {"messages": messages, "response": {"choices": [{"message": reply}]}, "kwargs": {}, "cost": 0.1}
    assert run_records(_json(log), {"model_calls": 2}) == {None: RunRecord(at_limit=True, calls=2)}


# --- a change after the stop: harmful even at the limit ----------------------------------------------

READ: Final = ("read_file", {"path": "a.py"})
EDIT: Final = (
    "str_replace_editor",
    {"command": "str_replace", "path": "a.py", "old_str": "x", "new_str": "y"},
)
BOOKING: Final = ("update_reservation_flights", {"reservation_id": "JG7FMM", "cabin": "economy"})


def _replay_solved_run_at_its_limit(calls: list[tuple[str, dict[str, Any]]]) -> SourceResult:
    """One solved run that ended at its budget limit, making ``calls`` in one turn, each answered the
    same way."""
    runner = StreakRunner(config())
    positions = Positions(runner)
    key = SessionKey("run.json", "s")
    positions.begin_session(key)
    positions.start_turn(key)
    for index, (tool, args) in enumerate(calls):
        call = ToolCall(f"c{index}", tool, args, 1, result="same", failed=False, has_result=True)
        positions.tool_call(key, call)
    positions.end_session(key)
    records = {("run.json", None): RunRecord(at_limit=True, calls=len(calls))}
    return score_report(
        "source", runner.finish(), {"run.json": True}, records, positions, runner.streaks, runner.changes
    )


def test_a_solved_run_at_its_limit_halted_before_a_later_edit_is_a_harmful_halt() -> None:
    """The same read 13 times is stopped at the 13th (``no_progress_block``); the run's edit after it
    is lost: the passing patch may have been that edit."""
    result = _replay_solved_run_at_its_limit([READ] * 13 + [EDIT])
    [halt] = result.harmful_halts
    assert (halt.code, halt.call, halt.at_limit, halt.changes_lost) == ("no_progress_block", 13, True, 1)
    assert result.harmless_halts == []
    assert result.to_json()["harmful_halts"] == 1
    assert result.harmful_refusals == 0  # the refused calls were reads: the run lost nothing there


def test_a_solved_run_at_its_limit_halted_after_its_last_change_is_a_harmless_halt() -> None:
    """The edit comes first, the stop after it: the run lost nothing."""
    result = _replay_solved_run_at_its_limit([EDIT] + [READ] * 13)
    [halt] = result.harmless_halts
    assert (halt.code, halt.call, halt.changes_lost) == ("no_progress_block", 14, 0)
    assert result.harmful_halts == []


def test_a_refused_change_in_a_solved_run_at_its_limit_is_a_harmful_refusal() -> None:
    """The same booking change sent 12 times: the 5th to the 11th are refused (changes the run made,
    lost to the refusal), the 12th runs and halts, and nothing follows it."""
    result = _replay_solved_run_at_its_limit([BOOKING] * 12)
    assert result.harmful_refusals == 1
    assert result.runs[0].refused_changes == 7
    [halt] = result.harmless_halts  # the halting call ran: no change came after the stop
    assert (halt.code, halt.call, halt.changes_lost) == ("identical_call_halt", 12, 0)


def _call(tool: str, args: Any, failed: bool = False) -> ToolCall:
    return ToolCall("c", tool, args, 1, result="error" if failed else "ok", failed=failed, has_result=True)


@pytest.mark.parametrize(
    ("tool", "args", "failed", "change"),
    [
        ("str_replace_editor", {"command": "str_replace", "path": "a"}, False, True),
        ("str_replace_editor", '{"command": "view", "path": "a"}', False, False),
        ("str_replace_editor", {"command": "str_replace_editor view /a"}, False, False),
        ("edit", {"command": "edit 1:1\nx\nend_of_edit"}, True, False),  # the linter refused it
        ("Edit", {"file_path": "a", "old_string": "x", "new_string": "y"}, False, True),
        ("open", {"command": "open a.py"}, False, False),
        ("Read", {"file_path": "a"}, False, False),
        ("bash", {"command": "sed -i 's/a/b/' a.py"}, False, True),
        ("bash", {"command": "sed -i 's/a/b/' a.py && pytest"}, True, True),
        ("bash", {"command": "python reproduce.py 2>&1 | tail -5"}, False, False),
        ("execute_bash", {"command": "cat <<'EOF' > a.py\nif a > b:\n    pass\nEOF"}, False, True),
        ("bash", {"command": "python - <<'EOF'\nif a > b:\n    print(1)\nEOF"}, False, False),
        ("cancel_reservation", '{"reservation_id": "K1NW8N"}', False, True),
        ("book_reservation", {"user_id": "u"}, True, False),  # the domain refused it: nothing changed
        ("get_reservation_details", {"reservation_id": "K1NW8N"}, False, False),
        ("think", {"thought": "..."}, False, False),
        ("Search", {"query": "x"}, False, False),
    ],
)
def test_a_change_is_told_by_the_guards_tool_classes(
    tool: str, args: Any, failed: bool, change: bool
) -> None:
    assert ChangeClassifier(config()).changes(_call(tool, args, failed)) is change


def test_a_shell_command_writes_when_its_text_shows_it() -> None:
    writes = ["echo x >> a", "git checkout -- a.py", "pip install -e .", "find . -name '*.pyc' | xargs rm"]
    reads = ["ls -la > /dev/null 2>&1", "grep -rn 'a > b' .", "git diff", "sed -n 1,20p a.py | grep -i x"]
    assert [shell_writes(c) for c in writes] == [True] * 4
    assert [shell_writes(c) for c in reads] == [False] * 4


def _replay_a_model_stop(solved: bool) -> SourceResult:
    """One run, not at its limit: a write, then replies the harness could not run until the model's
    stop, then one more write (it would never have run)."""
    guard_config = GuardConfig.from_mapping(
        {**CONFIG, "warn_after": {"no_action": 2}, "hard_stop_after": {"no_action": 3}}
    )
    runner = StreakRunner(guard_config)
    positions = Positions(runner)
    key = SessionKey("run.json", "s")
    positions.begin_session(key)
    positions.start_turn(key)
    for index in range(2):
        positions.model_reply(key, ModelReply(1, tool_calls=1))
        call = ToolCall(
            f"c{index}", "write_file", {"path": "a"}, 1, result="ok", failed=False, has_result=True
        )
        positions.tool_call(key, call)
        if index == 0:
            for text in ("first try", "second attempt here", "a third one"):
                positions.model_reply(key, ModelReply(1, text=text, invalid_tool_calls=1))
    positions.end_session(key)
    record = {("run.json", None): RunRecord(calls=2, at_limit=False)}
    return score_report(
        "source", runner.finish(), {"run.json": solved}, record, positions, runner.streaks, runner.changes
    )


def test_a_model_stop_is_scored_like_a_tool_stop() -> None:
    """The model's stop comes after the run's first call: it is placed there, the write after it is
    a change lost, so in a solved run it is harmful; its warning is a warned streak."""
    result = _replay_a_model_stop(solved=True)
    [halt] = result.harmful_halts
    assert (halt.tool, halt.code, halt.call, halt.changes_lost) == ("model", "no_action_halt", 1, 1)
    doc = result.to_json()
    assert (doc["model_replies"], doc["model_halted_runs"], doc["harmful_model_halts"]) == (5, 1, 1)
    assert result.decisions["no_action_warn"] == 1
    assert result.streaks == 1


# --- a limit the ground truth lists -------------------------------------------------------------------


def _conversation(query: str) -> bytes:
    """One run of a search agent as a converted conversation: one search, its answer, a reply."""
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "Search", "arguments": json.dumps({"query": query})},
    }
    messages = [
        {"role": "user", "content": "question"},
        {"role": "assistant", "content": "Thought 1", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": f"Could not find [{query}]."},
        {"role": "assistant", "content": "Finish[answer]"},
    ]
    return json.dumps({"messages": messages}).encode() + b"\n"


def test_a_run_the_ground_truth_lists_at_its_limit_is_stuck_when_unsolved(tmp_path: Path) -> None:
    """A harness whose transcripts do not record its limit (Reflexion's HotpotQA runs) lists the runs
    that ended there under ``at_limit``: an unsolved one listed is stuck, one not listed is not."""
    runs = {"a/q1.jsonl": _conversation("x"), "a/q2.jsonl": _conversation("y")}
    with tarfile.open(tmp_path / ARCHIVE, "w:xz") as archive:
        for name, data in runs.items():
            member = tarfile.TarInfo(name)
            member.size = len(data)
            archive.addfile(member, io.BytesIO(data))
    ground = {
        "source": "test",
        "runs": {"a/q1.jsonl": False, "a/q2.jsonl": False},
        "at_limit": ["a/q1.jsonl"],
    }
    (tmp_path / GROUND_TRUTH).write_text(json.dumps(ground), encoding="utf-8")
    (tmp_path / PROVENANCE).write_text("{}", encoding="utf-8")
    result = measure_source(tmp_path)
    assert [run.name for run in result.stuck] == ["a/q1.jsonl"]
    assert result.to_json()["runs_at_limit"] == 1
