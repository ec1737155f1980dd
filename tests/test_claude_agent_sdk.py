"""`guard_hooks()` for the Claude Agent SDK: the callbacks answer the SDK's documented hook inputs with
the SDK's documented outputs, and the module never imports the SDK."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

from otelguard import GuardConfig
from otelguard.integrations.claude_agent_sdk import SDK_EVENTS, guard_hooks, sdk_output

CONFIG = GuardConfig(mode="unattended", signature_key="k")


def base(event: str) -> dict[str, Any]:
    # BaseHookInput of the SDK: session_id, transcript_path, cwd, permission_mode
    return {"session_id": "sdk-1", "transcript_path": "/tmp/t.jsonl", "cwd": "/tmp", "hook_event_name": event}


def call(
    mapping: dict[str, Any], event: str, input_data: dict[str, Any], tool_use_id: str | None = None
) -> Any:
    callback = mapping[event][0].hooks[0]
    return asyncio.run(callback(input_data, tool_use_id, {"signal": None}))


def test_the_mapping_has_one_matcher_per_event_readable_as_dict_and_as_hook_matcher() -> None:
    mapping = guard_hooks(CONFIG)
    assert tuple(mapping) == SDK_EVENTS
    for event in SDK_EVENTS:
        (matcher,) = mapping[event]
        assert matcher == {"matcher": None, "hooks": matcher["hooks"], "timeout": None}
        assert matcher.matcher is None and matcher.timeout is None  # what the SDK reads
        assert matcher.hooks == matcher["hooks"] and len(matcher.hooks) == 1
        assert asyncio.iscoroutinefunction(matcher.hooks[0])


def test_a_looping_agent_is_warned_denied_and_stopped() -> None:
    """A failing Bash call sent forever: it runs 5 times (warned from the 2nd failure on), is denied
    the next 7 times (a reject each: the turn goes on, Claude asks again), and the 13th stops the turn."""
    mapping = guard_hooks(CONFIG)
    assert call(mapping, "UserPromptSubmit", {**base("UserPromptSubmit"), "prompt": "build"}) == {}
    befores: list[dict[str, Any]] = []
    afters: list[dict[str, Any]] = []
    for index in range(13):
        tool = {"tool_name": "Bash", "tool_input": {"command": "make"}}
        before = call(
            mapping, "PreToolUse", {**base("PreToolUse"), **tool, "tool_use_id": f"t{index}"}, f"t{index}"
        )
        befores.append(before)
        if "continue_" in before:
            break
        if "hookSpecificOutput" in before:  # denied, the turn goes on (a reject): Claude asks again
            continue
        failure = {**base("PostToolUseFailure"), **tool, "tool_use_id": f"t{index}", "error": "Exit code 2"}
        afters.append(call(mapping, "PostToolUseFailure", failure, f"t{index}"))
    assert befores[:5] == [{}] * 5 and len(befores) == 13
    assert afters[0] == {} and len(afters) == 5
    assert all(a["hookSpecificOutput"]["additionalContext"] for a in afters[1:])  # the warnings
    for denied in befores[5:12]:
        assert "continue_" not in denied and "stopReason" not in denied
        assert denied["hookSpecificOutput"]["permissionDecision"] == "deny"
        assert denied["hookSpecificOutput"]["permissionDecisionReason"].endswith(
            "if you keep sending this same call, the turn stops."
        )
    last = befores[-1]
    assert last["continue_"] is False and "continue" not in last
    assert last["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert last["stopReason"].startswith("otelguard stopped this turn (exact_failure_block): ")
    assert call(mapping, "Stop", {**base("Stop"), "stop_hook_active": False}) == {}


def test_a_refused_call_is_denied_with_the_reason_and_never_allowed_explicitly() -> None:
    mapping = guard_hooks(GuardConfig(signature_key="k", caps={"turn": {"web_search": 1}}))
    call(mapping, "UserPromptSubmit", {**base("UserPromptSubmit"), "prompt": "p"})
    first = {
        **base("PreToolUse"),
        "tool_name": "WebSearch",
        "tool_input": {"query": "a"},
        "tool_use_id": "t1",
    }
    assert call(mapping, "PreToolUse", first, "t1") == {}  # allowed: no permissionDecision at all
    done = {
        **base("PostToolUse"),
        "tool_name": "WebSearch",
        "tool_input": {"query": "a"},
        "tool_response": "r",
    }
    assert call(mapping, "PostToolUse", {**done, "tool_use_id": "t1"}, "t1") == {}
    second = {**first, "tool_input": {"query": "b"}, "tool_use_id": "t2"}
    denied = call(mapping, "PreToolUse", second, "t2")
    assert denied["hookSpecificOutput"]["hookEventName"] == "PreToolUse"
    assert denied["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert denied["hookSpecificOutput"]["permissionDecisionReason"]


def test_the_tool_use_id_argument_is_the_call_id_when_the_input_lacks_it() -> None:
    mapping = guard_hooks(CONFIG)
    data = {**base("PreToolUse"), "tool_name": "Read", "tool_input": {"file_path": "/a"}}
    assert call(mapping, "PreToolUse", data, "t1") == {}
    assert (
        call(mapping, "PostToolUse", {**data, "hook_event_name": "PostToolUse", "tool_response": "x"}, "t1")
        == {}
    )


def test_an_unreadable_input_lets_the_call_go_ahead() -> None:
    mapping = guard_hooks(CONFIG)
    assert call(mapping, "PreToolUse", {"hook_event_name": "PreToolUse"}) == {}
    assert call(mapping, "PreToolUse", "not a dict") == {}  # type: ignore[arg-type]


def test_sdk_output_spells_continue_the_python_way() -> None:
    assert sdk_output(None) == {}
    assert sdk_output({"continue": False, "stopReason": "x"}) == {"continue_": False, "stopReason": "x"}


def test_importing_the_adapter_does_not_import_the_sdk() -> None:
    code = (
        "import sys, otelguard.integrations.claude_agent_sdk as m; m.guard_hooks();"
        "print(any(n.startswith('claude_agent_sdk') for n in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
