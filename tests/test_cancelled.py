"""Cancelled calls: dispatched by the host but never run (a cancelled parallel sibling, an interrupt).

``after_call(..., cancelled=True)``: outcome ``cancelled``, decision ``allow``, no detector state
touched (neither a failure nor a success), caps refunded like a refusal, ``failed``/``refusal``
ignored. The same through ``guard.call(...).finish``, ``otelguard.testing`` and the replay feed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from prometheus_client import CollectorRegistry

from otelguard import Guard, GuardConfig
from otelguard.readers.events import SessionKey, ToolCall
from otelguard.replay.runner import ReplayRunner
from otelguard.telemetry import Telemetry
from otelguard.testing import RecordingObserver, ScriptedCall, codes, run_script
from tests.test_detectors import KEY, fail, fresh, make_guard, ok

SIBLING = "<tool_use_error>Sibling tool call errored</tool_use_error>"


def cancelled(tool: str, args: Any = None, **fields: Any) -> ScriptedCall:
    return ScriptedCall(tool, args if args is not None else {"k": fresh()}, SIBLING, cancelled=True, **fields)


# -- the decision and the outcome ------------------------------------------------------------------


def test_a_cancelled_call_is_allowed_with_outcome_cancelled() -> None:
    recorder = RecordingObserver()
    guard = Guard(GuardConfig(signature_key=KEY, mode="unattended"), observers=(recorder,))
    guard.start_turn()
    assert guard.before_call("Read", {"file_path": "/a"}, call_id="t1").action == "allow"
    decision = guard.after_call("Read", {"file_path": "/a"}, SIBLING, call_id="t1", cancelled=True)
    assert decision.action == "allow" and decision.code == "allow"
    assert recorder.outcomes == ["cancelled"]
    assert recorder.unmatched_tokens == 0


@pytest.mark.parametrize(("failed", "refusal"), [(True, None), (None, "permission_denied"), (True, "x")])
def test_failed_and_refusal_are_ignored_when_cancelled(failed: bool | None, refusal: str | None) -> None:
    recorder = RecordingObserver()
    guard = Guard(GuardConfig(signature_key=KEY), observers=(recorder,))
    guard.start_turn()
    guard.before_call("Read", {"p": 1})
    guard.after_call("Read", {"p": 1}, "Error: x", failed=failed, refusal=refusal, cancelled=True)
    assert recorder.outcomes == ["cancelled"]
    assert recorder.calls[0].refusal is None


def test_without_a_before_call_it_is_still_an_allow() -> None:
    guard = make_guard()
    assert guard.after_call("Read", {"p": 1}, SIBLING, cancelled=True).action == "allow"


# -- no detector state -----------------------------------------------------------------------------


def test_seven_cancelled_siblings_of_one_failure_are_not_failures() -> None:
    """The real false positive: 8 parallel Reads, the 1st fails, the 7 others are cancelled."""
    batch = [fail("Read", {"file_path": "/missing"}, "File does not exist.")]
    batch += [cancelled("Read", {"file_path": f"/src/{i}.py"}) for i in range(7)]
    steps = run_script(make_guard(), batch)
    assert codes(steps) == ["allow"] * 8
    # the failure count is still 1: the next two failures of Read warn at the tool's third failure
    more = run_script(make_guard(), [*batch, fail("Read"), fail("Read")])
    assert codes(more)[-2:] == ["allow", "same_tool_failure_warn"]


def test_a_cancelled_call_does_not_reset_failure_streaks() -> None:
    """Neither a success: exact_failure's streak goes on through a cancelled run of the same call."""
    call = {"command": "pytest"}
    script = [
        fail("Bash", call, "1 failed"),
        cancelled("Bash", call),
        cancelled("Write", {"file_path": "/a"}),  # not a successful write either
        fail("Bash", call, "1 failed"),
    ]
    assert codes(run_script(make_guard(), script))[-1] == "exact_failure_warn"


def test_a_cancelled_call_does_not_count_as_a_repeat() -> None:
    """no_progress, identical_call, cycle and the streaks do not see a cancelled call."""
    read = ok("Read", {"file_path": "/a"}, "same")
    assert codes(run_script(make_guard(), [read, cancelled("Read", {"file_path": "/a"}), read]))[-1] == (
        "no_progress_warn"
    )
    guard = make_guard(warn_after={"read_only_streak": 3})
    script = [ok("Read"), cancelled("Read"), cancelled("Grep"), ok("Read")]
    assert codes(run_script(guard, script)) == ["allow"] * 4
    a, b = ok("tool_a", {"x": 1}, "r"), ok("tool_b", {"x": 2}, "r")
    steps = run_script(make_guard(), [a, b, a, cancelled("tool_b", {"x": 2}), b])
    # the cancelled B is not a call of the sequence: it neither breaks A B A B (B B) nor counts
    assert codes(steps)[-1] == "cycle_warn"


# -- caps ------------------------------------------------------------------------------------------


def test_caps_refund_a_cancelled_call() -> None:
    guard = make_guard(caps={"turn": {"web_search": 2}, "session": {"web_search": 2}})
    script = [ok("web_search"), cancelled("web_search"), ok("web_search")]
    assert codes(run_script(guard, script)) == ["allow"] * 3
    refused = guard.before_call("web_search", {"q": "more"})
    assert (refused.code, refused.count) == ("cap_turn", 2)


def test_a_cancelled_spawn_is_refunded_and_spawns_nothing() -> None:
    """A cancelled Task gives its subagent back and adds nothing to the spawn counter."""
    registry = CollectorRegistry()
    config = GuardConfig.from_mapping({"signature_key": KEY, "caps": {"turn": {"subagents": 1}}})
    guard = Guard(config, Telemetry(registry=registry, span_mode="off"), agent="t")
    guard.start_turn()
    run_script(guard, [cancelled("Task", {"prompt": "p"})])
    assert guard.before_call("Task", {"prompt": "q"}).action == "allow"
    assert registry.get_sample_value("otelguard_subagent_spawns_total", {"agent": "t"}) in (None, 0.0)


# -- the convenience APIs --------------------------------------------------------------------------


def test_guarded_call_finish_takes_cancelled() -> None:
    recorder = RecordingObserver()
    guard = Guard(GuardConfig(signature_key=KEY), observers=(recorder,))
    guard.start_turn()
    with guard.call("Read", {"p": 1}, call_id="c1") as call:
        decision = call.finish(SIBLING, failed=True, cancelled=True)
    assert decision.action == "allow" and call.finished
    assert recorder.outcomes == ["cancelled"]


def test_run_script_passes_cancelled() -> None:
    recorder = RecordingObserver()
    guard = Guard(GuardConfig(signature_key=KEY), observers=(recorder,))
    guard.start_turn()
    run_script(guard, [cancelled("Read"), ("Read", {"p": 2}, "x", None, None, None, True)])
    assert recorder.outcomes == ["cancelled", "cancelled"]


# -- telemetry -------------------------------------------------------------------------------------


@pytest.fixture
def exporter() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    yield provider, spans
    provider.shutdown()


def test_telemetry_counts_the_outcome_and_marks_the_span(
    exporter: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, spans = exporter
    registry = CollectorRegistry()
    telemetry = Telemetry(provider, registry, span_mode="own")
    telemetry.prime("primed", tools=("Read",))
    guard = Guard(GuardConfig(signature_key=KEY), telemetry, agent="t")
    guard.start_turn()
    run_script(guard, [cancelled("Read", {"p": 1})])
    labels = {"agent": "t", "tool": "Read", "outcome": "cancelled"}
    assert registry.get_sample_value("otelguard_tool_calls_total", labels) == 1
    primed = {"agent": "primed", "tool": "Read", "outcome": "ok"}
    assert registry.get_sample_value("otelguard_tool_calls_total", primed) == 0
    [span] = [s for s in spans.get_finished_spans() if s.name == "execute_tool Read"]
    assert span.attributes is not None
    assert span.attributes["otelguard.outcome"] == "cancelled"
    assert span.attributes["otelguard.decision.action"] == "allow"
    assert span.status.status_code != StatusCode.ERROR
    assert "error.type" not in span.attributes


# -- replay ----------------------------------------------------------------------------------------


def replay(calls: list[ToolCall], **config: Any) -> dict[str, Any]:
    runner = ReplayRunner(GuardConfig.from_mapping({"signature_key": KEY, "mode": "unattended", **config}))
    key = SessionKey("transcript.jsonl", "s1")
    runner.begin_session(key)
    runner.start_turn(key)
    for call in calls:
        runner.tool_call(key, call)
    runner.end_session(key)
    [session] = runner.finish().to_json()["sessions"]
    return dict(session)


def test_replay_feeds_cancelled_and_refusal_to_the_guard() -> None:
    """The transcript event's cancelled and refusal fields reach after_call."""
    first = ToolCall("t0", "Read", {"file_path": "/missing"}, 1, "File does not exist.", True, True)
    siblings = [
        ToolCall(f"t{i}", "Read", {"file_path": f"/{i}"}, 1, SIBLING, True, True, cancelled=True)
        for i in range(1, 8)
    ]
    session = replay([first, *siblings])
    assert session["decisions"] == {} and session["halts"] == []
    refused = [
        ToolCall(f"r{i}", "Write", {"file_path": f"/{i}"}, 2, "denied", True, True, refusal="user_rejected")
        for i in range(2)
    ]
    assert replay(refused)["decisions"] == {"refusal_warn": 1}
