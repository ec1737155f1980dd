"""The Claude Code hook mapping: each event's guard call and the exact hook output Claude Code expects."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otelguard import Guard, GuardConfig
from otelguard.coding_agents.claude_code import (
    DEFAULT_AGENT,
    EVENTS,
    ClaudeCodeHooks,
    HookPayloadError,
    hook_output,
    stop_reason,
)
from otelguard.core.edges import Edges
from otelguard.core.sessions import SessionHost
from otelguard.testing import RecordingObserver

UNATTENDED = GuardConfig(mode="unattended", signature_key="k", caps={"turn": {"web_search": 2}})


def hooks(config: GuardConfig = UNATTENDED, **kwargs: Any) -> ClaudeCodeHooks:
    return ClaudeCodeHooks(config, **kwargs)


def observed_hooks(observer: RecordingObserver, **kwargs: Any) -> ClaudeCodeHooks:
    """Hooks whose every guard reports to ``observer`` as well (the host's own edges)."""
    edges = Edges(observer=lambda _config: observer)
    host = SessionHost(UNATTENDED, edges=edges, guard_class=Guard, agent=DEFAULT_AGENT, **kwargs)
    return ClaudeCodeHooks(host=host)


def payload(event: str, session: str = "s1", **fields: Any) -> dict[str, Any]:
    return {
        "session_id": session,
        "transcript_path": "/tmp/t.jsonl",
        "cwd": "/tmp",
        "permission_mode": "default",
        "hook_event_name": event,
        **fields,
    }


def pre(tool: str, args: Any, call_id: str, **extra: Any) -> dict[str, Any]:
    return payload("PreToolUse", tool_name=tool, tool_input=args, tool_use_id=call_id, **extra)


def post(tool: str, args: Any, call_id: str, response: Any = "ok", **extra: Any) -> dict[str, Any]:
    return payload(
        "PostToolUse", tool_name=tool, tool_input=args, tool_use_id=call_id, tool_response=response, **extra
    )


def failure(tool: str, args: Any, call_id: str, **extra: Any) -> dict[str, Any]:
    return payload(
        "PostToolUseFailure",
        tool_name=tool,
        tool_input=args,
        tool_use_id=call_id,
        error="Exit code 2",
        **extra,
    )


def test_user_prompt_submit_starts_a_turn_and_prints_nothing() -> None:
    h = hooks()
    assert h.handle(payload("UserPromptSubmit", prompt="fix the build")) is None
    session = h.sessions.peek("s1")
    assert session is not None and session.main.turn_id == "1"
    h.handle(payload("UserPromptSubmit", prompt="again"))
    assert session.main.turn_id == "2"


def test_an_allowed_call_gets_no_output_at_all() -> None:
    """No permissionDecision: "allow" would skip Claude Code's own permission prompt."""
    h = hooks()
    h.handle(payload("UserPromptSubmit", prompt="p"))
    assert h.handle(pre("Read", {"file_path": "/a"}, "t1")) is None
    assert h.handle(post("Read", {"file_path": "/a"}, "t1", {"content": "x"})) is None


def test_a_cap_reject_denies_without_stopping() -> None:
    h = hooks(GuardConfig(signature_key="k", caps={"turn": {"web_search": 2}, "on_hit": "reject"}))
    h.handle(payload("UserPromptSubmit", prompt="p"))
    for index in range(2):
        assert h.handle(pre("WebSearch", {"query": f"q{index}"}, f"t{index}")) is None
        h.handle(post("WebSearch", {"query": f"q{index}"}, f"t{index}"))
    output = h.handle(pre("WebSearch", {"query": "q2"}, "t2"))
    assert output is not None
    assert set(output) == {"hookSpecificOutput"}
    specific = output["hookSpecificOutput"]
    assert specific["hookEventName"] == "PreToolUse"
    assert specific["permissionDecision"] == "deny"
    assert "web search" in specific["permissionDecisionReason"]


def test_a_halt_denies_and_stops_claude() -> None:
    h = hooks()
    h.handle(payload("UserPromptSubmit", prompt="p"))
    befores: list[dict[str, Any] | None] = []
    for index in range(13):  # five failures, seven rejects (denied, the turn goes on), then the stop
        befores.append(h.handle(pre("Bash", {"command": "make"}, f"t{index}")))
        if befores[-1] is None:
            h.handle(failure("Bash", {"command": "make"}, f"t{index}"))
    assert befores[:5] == [None] * 5
    for denied in befores[5:12]:
        assert denied is not None and "continue" not in denied
        assert denied["hookSpecificOutput"]["permissionDecision"] == "deny"
    first = befores[12]
    assert first is not None and first["continue"] is False
    assert first["stopReason"].startswith("otelguard stopped this turn (exact_failure_block): ")
    assert first["hookSpecificOutput"]["hookEventName"] == "PreToolUse"
    # every later call of the halted turn is denied and stops again
    later = h.handle(pre("Read", {"file_path": "/b"}, "t9"))
    assert later is not None and later["continue"] is False
    assert later["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert "turn_halted" in later["stopReason"]


def test_warnings_reach_the_model_as_additional_context() -> None:
    h = hooks()
    h.handle(payload("UserPromptSubmit", prompt="p"))
    h.handle(pre("Bash", {"command": "make"}, "t1"))
    assert h.handle(failure("Bash", {"command": "make"}, "t1")) is None
    h.handle(pre("Bash", {"command": "make"}, "t2"))
    output = h.handle(failure("Bash", {"command": "make"}, "t2"))
    assert output == {
        "hookSpecificOutput": {
            "hookEventName": "PostToolUseFailure",
            "additionalContext": output["hookSpecificOutput"]["additionalContext"],  # type: ignore[index]
        }
    }
    assert "make" not in output["hookSpecificOutput"]["additionalContext"]  # never an argument value


def test_post_tool_use_is_a_successful_call() -> None:
    h = hooks()
    h.handle(payload("UserPromptSubmit", prompt="p"))
    for index in range(6):  # the same failing result text, but Claude Code said it succeeded
        h.handle(pre("Bash", {"command": "ls"}, f"t{index}"))
        output = h.handle(post("Bash", {"command": "ls"}, f"t{index}", {"stdout": f"v{index}"}))
        assert output is None or output.get("continue") is not False


def test_an_interrupted_call_is_not_a_failure() -> None:
    h = hooks()
    h.handle(payload("UserPromptSubmit", prompt="p"))
    for index in range(6):
        assert h.handle(pre("Bash", {"command": "sleep 100"}, f"t{index}")) is None
        assert h.handle(failure("Bash", {"command": "sleep 100"}, f"t{index}", is_interrupt=True)) is None


def test_stop_ends_the_turn_and_session_end_forgets_the_session() -> None:
    h = hooks()
    h.handle(payload("UserPromptSubmit", prompt="p"))
    session = h.sessions.peek("s1")
    assert session is not None
    assert h.handle(payload("Stop", stop_hook_active=False)) is None
    assert session.main.turn_id is None
    assert h.handle(payload("SessionEnd", reason="exit")) is None
    assert h.sessions.peek("s1") is None
    assert h.handle(payload("SessionEnd", reason="exit")) is None  # twice is harmless


def test_stop_failure_ends_the_turn_as_errored_and_stop_as_completed() -> None:
    """``StopFailure`` is the turn an API error ended (Claude Code ignores any output there)."""
    recorder = RecordingObserver()
    h = observed_hooks(recorder)
    h.handle(payload("UserPromptSubmit", prompt="p"))
    h.handle(pre("Read", {"file_path": "a"}, "t1"))
    h.handle(post("Read", {"file_path": "a"}, "t1"))
    failed = payload("StopFailure", error_type="rate_limit", error="429", error_message="Rate limited")
    assert h.handle(failed) is None
    h.handle(payload("UserPromptSubmit", prompt="again"))
    assert h.handle(payload("Stop", stop_hook_active=False)) is None
    assert h.handle(failed) is None  # no open turn left: nothing more is counted
    assert [(s.outcome, s.tool_calls) for s in recorder.summaries] == [("errored", 1), ("completed", 0)]


def test_a_subagent_is_its_own_turn_stream_inside_the_session() -> None:
    h = hooks()
    h.handle(payload("UserPromptSubmit", prompt="p"))
    # the main agent has one failure of `make`; a subagent failing the same call starts its own count
    h.handle(pre("Bash", {"command": "make"}, "m1"))
    h.handle(failure("Bash", {"command": "make"}, "m1"))
    sub = {"agent_id": "a1", "agent_type": "general-purpose"}
    h.handle(pre("Bash", {"command": "make"}, "s1", **sub))
    assert h.handle(failure("Bash", {"command": "make"}, "s1", **sub)) is None  # first for the subagent
    session = h.sessions.peek("s1")
    assert session is not None and session.guard("a1") is not session.main
    assert h.handle(payload("SubagentStop", stop_hook_active=False, **sub)) is None
    assert session.guard("a1").turn_id is None  # a fresh guard after the subagent stopped


def test_session_caps_are_shared_by_the_main_agent_and_its_subagents() -> None:
    h = hooks(GuardConfig(signature_key="k", caps={"session": {"web_search": 2}}))
    h.handle(payload("UserPromptSubmit", prompt="p"))
    assert h.handle(pre("WebSearch", {"query": "a"}, "t1")) is None
    h.handle(post("WebSearch", {"query": "a"}, "t1"))
    sub = {"agent_id": "a1"}
    assert h.handle(pre("WebSearch", {"query": "b"}, "t2", **sub)) is None
    h.handle(post("WebSearch", {"query": "b"}, "t2", **sub))
    refused = h.handle(pre("WebSearch", {"query": "c"}, "t3", **sub))
    assert refused is not None and refused["hookSpecificOutput"]["permissionDecision"] == "deny"


def test_session_end_and_eviction_end_the_open_turns_of_the_main_agent_and_its_subagents() -> None:
    """A session that ends, or is dropped for a newer one, has its open turns ended (and so counted)."""
    recorder = RecordingObserver()
    h = observed_hooks(recorder, max_sessions=1)
    for session in ("s1", "s2"):
        h.handle(payload("UserPromptSubmit", session=session, prompt="p"))
        h.handle(
            pre(
                "Read",
                {"file_path": "/x"},
                f"{session}-t",
                session=session,
                agent_id="a1",
                agent_type="Explore",
            )
        )
    # s2 evicted s1: s1's subagent turn, then its main turn, ended
    assert [(s.agent, s.turn_id) for s in recorder.summaries] == [("Explore", None), ("claude-code", "1")]
    h.handle(payload("SessionEnd", session="s2", reason="exit"))
    assert len(recorder.summaries) == 4 and h.sessions.peek("s2") is None


def test_sessions_are_bounded() -> None:
    h = hooks(max_sessions=5)
    for index in range(100):
        h.handle(payload("UserPromptSubmit", session=f"s{index}", prompt="p"))
    assert len(h.sessions) == 5


def test_events_the_mapping_does_not_use_get_no_output() -> None:
    h = hooks()
    assert h.handle(payload("SessionStart", source="startup")) is None
    assert h.handle(payload("Notification", message="m")) is None


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"hook_event_name": "PreToolUse"}, "session_id"),
        ({"session_id": "s", "hook_event_name": 3}, "hook_event_name"),
        ({"session_id": "", "hook_event_name": "Stop"}, "session_id"),
        ({"session_id": "s", "hook_event_name": "PreToolUse", "tool_input": {}}, "tool_name"),
        ({"session_id": "s" * 300, "hook_event_name": "Stop"}, "session_id"),
        ({"session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "x", "agent_id": 7}, "agent_id"),
    ],
)
def test_a_payload_missing_a_field_names_the_field_never_the_value(body: dict[str, Any], field: str) -> None:
    with pytest.raises(HookPayloadError) as info:
        hooks().handle(body)
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: expected")
    assert "sss" not in str(info.value)


def test_hook_output_for_each_action() -> None:
    from otelguard.core.decisions import Decision

    allow = Decision("allow", "allow", "")
    assert hook_output("PreToolUse", allow) is None
    halt = Decision("halt", "identical_call_halt", "stop it", "Bash")
    assert hook_output("PostToolUse", halt) == {
        "hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "stop it"},
        "continue": False,
        "stopReason": stop_reason(halt),
    }
    block = Decision("block", "cycle_block", "cycling", "Bash")
    assert hook_output("PreToolUse", block) == {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": "cycling",
        },
        "continue": False,
        "stopReason": "otelguard stopped this turn (cycle_block): cycling",
    }


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=10,
)


SHARED = ClaudeCodeHooks(UNATTENDED, max_sessions=50)


@settings(max_examples=200, deadline=None)
@given(
    event=st.sampled_from((*EVENTS, "Other", None, 1)),
    session=st.one_of(st.text(max_size=5), st.none(), st.integers()),
    tool=st.one_of(st.text(max_size=5), st.none(), st.integers()),
    args=JSON,
    extra=st.dictionaries(
        st.sampled_from(["agent_id", "tool_use_id", "is_interrupt", "tool_response", "error", "agent_type"]),
        JSON,
    ),
)
def test_any_payload_gets_an_output_or_a_field_error_never_a_crash(
    event: Any, session: Any, tool: Any, args: Any, extra: dict[str, Any]
) -> None:
    h = SHARED
    body = {"hook_event_name": event, "session_id": session, "tool_name": tool, "tool_input": args, **extra}
    try:
        output = h.handle(body)
    except HookPayloadError:
        return
    assert output is None or output["hookSpecificOutput"]["hookEventName"] == event


def test_permission_denials_that_stop_the_turn_name_their_event() -> None:
    """Claude Code's own permission rules refusing the same tool until the refusal rule stops the
    turn: the stopping output carries ``hookSpecificOutput.hookEventName`` like every other one."""
    h = hooks()
    h.handle(payload("UserPromptSubmit", prompt="go"))
    outputs = [
        h.handle(
            payload(
                "PermissionDenied", tool_name="Bash", tool_input={"command": f"rm {n}"}, tool_use_id=f"t{n}"
            )
        )
        for n in range(6)
    ]
    assert outputs[:5] == [None] * 5
    last = outputs[5]
    assert last is not None and last["continue"] is False
    assert last["hookSpecificOutput"] == {"hookEventName": "PermissionDenied"}
    assert "refusal_halt" in last["stopReason"]
