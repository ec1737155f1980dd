"""otelguard.testing: helpers shipped for users to test their own agent loops against a guard."""

from __future__ import annotations

import random
import threading

import pytest

from otelguard import Guard, GuardConfig
from otelguard.core.observers import GuardObserver
from otelguard.testing import RecordingObserver, ScriptedCall, ScriptStep, codes, run_script

KEY = "test-signature-key"


def make_guard(**config: object) -> tuple[Guard, RecordingObserver]:
    recorder = RecordingObserver()
    guard = Guard(GuardConfig.from_mapping({"signature_key": KEY, **config}), observers=(recorder,))
    return guard, recorder


def test_recording_observer_is_a_guard_observer() -> None:
    """RecordingObserver implements the GuardObserver protocol."""
    assert isinstance(RecordingObserver(), GuardObserver)


def test_recording_observer_records_turns_calls_and_summaries() -> None:
    """It records turn starts, call starts and ends, and turn summaries, in order."""
    guard, recorder = make_guard()
    guard.start_turn(turn_id="t1", agent="bot")
    run_script(guard, [("read_file", {"p": 1}, "x", False), ("terminal", {"c": "ls"}, "Error", True)])
    summary = guard.end_turn()
    assert [(t.turn_id, t.agent) for t in recorder.turns_started] == [("t1", "bot")]
    assert [e.tool_name for e in recorder.call_starts] == ["read_file", "terminal"]
    assert [e.tool_name for e in recorder.calls] == ["read_file", "terminal"]
    assert recorder.outcomes == ["ok", "failed"]
    assert [e.tool_class for e in recorder.calls] == ["read", "shell"]
    assert recorder.summaries == (summary,)
    assert recorder.unmatched_tokens == 0


def test_recording_observer_codes_lists_non_allow_final_decisions() -> None:
    """codes lists the codes of non-allow final decisions; decisions lists every final decision."""
    guard, recorder = make_guard()
    guard.start_turn()
    run_script(guard, [("read_file", {"p": 1}, "same", False)] * 3)
    assert recorder.codes == ["no_progress_warn", "no_progress_warn"]
    assert [d.action for d in recorder.decisions] == ["allow", "warn", "warn"]


def test_recording_observer_records_refused_calls_once() -> None:
    """A call refused at before_call is recorded once, with outcome blocked/rejected."""
    guard, recorder = make_guard(caps={"on_hit": "reject", "turn": {"web_search": 1}})
    guard.start_turn()
    run_script(guard, [("web_search", {"q": 1}, "r", False), ("web_search", {"q": 2}, "r", False)])
    assert recorder.outcomes == ["ok", "rejected"]
    assert recorder.codes == ["cap_turn"]


def test_recording_observer_snapshots_and_clear() -> None:
    """Accessors return snapshots; clear() forgets everything."""
    guard, recorder = make_guard()
    guard.start_turn()
    run_script(guard, [("read_file", {"p": 1}, "x", False)])
    snapshot = recorder.calls
    run_script(guard, [("read_file", {"p": 2}, "y", False)])
    assert len(snapshot) == 1
    assert len(recorder.calls) == 2
    recorder.clear()
    assert recorder.calls == () and recorder.turns_started == () and recorder.codes == []


def test_recording_observer_records_internal_errors() -> None:
    """on_internal_error stages are kept."""
    recorder = RecordingObserver()
    recorder.on_internal_error("before_call")
    assert recorder.internal_errors == ("before_call",)


def test_recording_observer_is_thread_safe() -> None:
    """Several threads may report to one recorder."""
    guard, recorder = make_guard(hard_stop=False)
    guard.start_turn()

    def worker(n: int) -> None:
        run_script(guard, [("read_file", {"t": n, "i": i}, "x", False) for i in range(200)])

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(recorder.calls) == 800
    assert len(recorder.call_starts) == 800


def test_run_script_returns_one_step_per_call() -> None:
    """run_script feeds (tool, args, result, failed, refusal) tuples and returns before/after decisions."""
    guard, _ = make_guard(hard_stop=True)
    guard.start_turn()
    steps = run_script(guard, [("flaky_api", {"id": 1}, "Error", True)] * 13)
    assert len(steps) == 13
    assert all(isinstance(s, ScriptStep) for s in steps)
    assert codes(steps) == ["allow"] + ["exact_failure_warn"] * 4 + ["exact_failure_reject"] * 7 + [
        "exact_failure_block"
    ]
    assert steps[0].before.action == "allow" and steps[0].after is not None
    assert steps[-1].ran is False and steps[-1].after is None
    assert steps[-1].decision is steps[-1].before


def test_run_script_does_not_run_refused_calls() -> None:
    """A refused call gets no after_call (like a host that does not run it)."""
    guard, recorder = make_guard(caps={"on_hit": "reject", "turn": {"web_search": 1}})
    guard.start_turn()
    steps = run_script(guard, [("web_search", {"q": i}, "r", False) for i in range(3)])
    assert [s.ran for s in steps] == [True, False, False]
    assert recorder.outcomes == ["ok", "rejected", "rejected"]


def test_run_script_accepts_short_tuples_names_and_scripted_calls() -> None:
    """Tuples may stop after any field; a bare name or a ScriptedCall works too; failed defaults to None."""
    guard, recorder = make_guard()
    guard.start_turn()
    run_script(
        guard,
        [
            "list_directory",
            ("read_file",),
            ("read_file", {"p": 1}),
            ("read_file", {"p": 2}, "Error: missing"),
            ("write_file", {"p": 3}, "ok", False, "permission_denied"),
            ScriptedCall("terminal", {"c": "ls"}, "out", False, call_id="c-1"),
        ],
    )
    assert recorder.outcomes == ["ok", "ok", "ok", "failed", "refused", "ok"]
    assert recorder.calls[-1].call_id == "c-1"


def test_run_script_rejects_malformed_calls() -> None:
    """A tuple with too many fields is a ValueError (a bug in the script, not in the guard)."""
    guard, _ = make_guard()
    with pytest.raises(ValueError):
        run_script(guard, [("a", None, None, None, None, None, False, "extra")])


def test_testing_helpers_test_an_agent_loop() -> None:
    """Example: a user's loop that stops on halt_decision is stopped by a repeated identical write."""
    guard, recorder = make_guard(mode="unattended")
    guard.start_turn()
    ran = 0
    for _ in range(20):
        if guard.halt_decision is not None:
            break
        steps = run_script(guard, [("send_message", {"to": "ops", "text": "deploy failed"}, "sent", False)])
        ran += steps[0].ran
    assert ran == 5
    assert guard.halt_decision is not None
    assert guard.halt_decision.code == "identical_call_halt"
    assert recorder.codes[-1] == "identical_call_halt"


def test_the_demo_and_the_bench_script_calls_with_the_one_record() -> None:
    """A scripted call has one record: the demo's scenarios and the bench's workloads yield ScriptedCall."""
    from otelguard.bench.workloads import DistinctCalls, mixed_turns
    from otelguard.demo.simulation import SCENARIOS

    demo_calls = [call for scenario in SCENARIOS.values() for call in scenario(random.Random(3))]
    bench_calls = [call for turn in mixed_turns(120) for call in turn] + [DistinctCalls().call(7)]
    assert all(type(call) is ScriptedCall for call in demo_calls + bench_calls)
    assert {call.call_id for call in bench_calls if call.call_id is None} == set()
