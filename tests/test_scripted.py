"""The driver of a scripted call (``otelguard.core.scripted``): product code beside the guard, which replay,
the demo and the bench use directly and ``otelguard.testing`` re-exports for users' tests."""

from __future__ import annotations

import otelguard.testing
from otelguard import Guard, GuardConfig
from otelguard.core.scripted import ScriptedCall, ScriptStep, play_call
from otelguard.readers.events import ToolCall

KEY = "test-signature-key"


def transcript_calls() -> list[ToolCall]:
    """A transcript's repeated failing call, then a cancelled one, as a reader records them."""
    failing = [
        ToolCall(
            f"c{i}", "terminal", {"command": "make"}, line=i, result="Error 2", failed=True, has_result=True
        )
        for i in range(13)  # 5 failures, 7 rejects, the block
    ]
    cancelled = ToolCall("c13", "terminal", {"command": "make"}, line=13, has_result=True, cancelled=True)
    return [*failing, cancelled]


def test_a_transcript_record_is_played_as_it_is_and_decided_as_its_scripted_twin() -> None:
    """Replay hands its ``ToolCall`` to ``play_call`` with no copy: the step holds that very record,
    and the guard decides exactly as for the ``ScriptedCall`` with the same seven fields."""
    config = GuardConfig(signature_key=KEY, mode="unattended")
    recorded, scripted = Guard(config), Guard(config)
    for call in transcript_calls():
        step = play_call(recorded, call)
        twin = ScriptedCall(
            call.tool_name, call.args, call.result, call.failed, call.refusal, call.call_id, call.cancelled
        )
        expected = play_call(scripted, twin)
        assert step.call is call
        assert (step.before, step.after) == (expected.before, expected.after)
    decisions = recorded.end_turn().decisions
    assert decisions["exact_failure_reject"] == 7 and decisions["exact_failure_block"] == 1


def test_testing_re_exports_the_driver_for_users_tests() -> None:
    """Users' ``from otelguard.testing import ScriptedCall, ScriptStep, play_call`` keeps working."""
    assert otelguard.testing.ScriptedCall is ScriptedCall
    assert otelguard.testing.ScriptStep is ScriptStep
    assert otelguard.testing.play_call is play_call
