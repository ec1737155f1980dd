"""Codex's hook payloads → the guard → the answers Codex honours (the mapping in process, and through
the sidecar with the payloads codex-cli 0.171.0 sent: ``tests/data/codex_payloads``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from otelguard import GuardConfig
from otelguard.coding_agents.claude_code import ClaudeCodeHooks
from otelguard.coding_agents.codex import CodexHooks
from otelguard.core.sessions import SessionHost
from otelguard.testing import RecordingObserver
from tests.e2e import stop_process
from tests.hook_observers import observed
from tests.test_claude_code_stop import start_starter_serve
from tests.test_cli_serve import Serve

PAYLOADS = Path(__file__).parent / "data" / "codex_payloads"
UNATTENDED = GuardConfig(mode="unattended", signature_key="k")
FAILED_OUTPUT = (
    "Chunk ID: 1a2b3c\nWall time: 0.0000 seconds\nProcess exited with code 2\nOriginal token count: 16\n"
    "Output:\nls: cannot access '/nonexistent-dir': No such file or directory\n"
)


def real(event: str, **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((PAYLOADS / f"{event}.json").read_text())
    return {**body, **changes}


def play(hooks: CodexHooks, calls: int, output: str = FAILED_OUTPUT) -> list[dict[str, Any] | None]:
    """One prompt, then ``calls`` times the same command: the answers to each ``PreToolUse``."""
    hooks.handle(real("UserPromptSubmit"))
    answers = []
    for number in range(calls):
        call_id = f"call_{number}"
        answer = hooks.handle(real("PreToolUse", tool_use_id=call_id))
        answers.append(answer)
        if answer is None:
            hooks.handle(real("PostToolUse", tool_use_id=call_id, tool_response=output))
    return answers


def test_a_refusal_is_a_plain_deny_never_a_stop_and_every_later_call_is_denied() -> None:
    """Codex ignores a whole answer holding ``continue`` or ``stopReason`` and runs the call: none is
    ever sent. After the block, each later call of the turn is denied with the stop's message."""
    answers = play(CodexHooks(UNATTENDED), 20)
    denied = [answer for answer in answers if answer is not None]
    assert answers[0] is None and denied
    for answer in denied:
        assert set(answer) == {"hookSpecificOutput"}, answer
        specific = answer["hookSpecificOutput"]
        assert set(specific) == {"hookEventName", "permissionDecision", "permissionDecisionReason"}
        assert (specific["hookEventName"], specific["permissionDecision"]) == ("PreToolUse", "deny")
    reasons = [answer["hookSpecificOutput"]["permissionDecisionReason"] for answer in denied]
    stops = [n for n, reason in enumerate(reasons) if reason.startswith("otelguard stopped this turn (")]
    assert stops and stops == list(range(stops[0], len(reasons)))
    assert len(set(reasons[stops[0] :])) == 1  # the block's stop message, repeated
    assert answers.index(denied[stops[0]]) < len(answers) - 1  # later calls came, and were denied


def test_the_failure_is_read_from_the_output_text() -> None:
    """``PostToolUse`` says nothing of a failure: ``Process exited with code 2`` in the output does."""
    observer = RecordingObserver()
    hooks = observed(CodexHooks, UNATTENDED, observer)
    play(hooks, 1)
    play(hooks, 1, FAILED_OUTPUT.replace("code 2", "code 0"))
    assert observer.outcomes == ["failed", "ok"]


def test_a_new_prompt_is_a_new_turn_after_a_block() -> None:
    hooks = CodexHooks(UNATTENDED)
    assert play(hooks, 20)[-1] is not None
    hooks.handle(real("Stop"))
    hooks.handle(real("UserPromptSubmit", turn_id="second-turn"))
    assert hooks.handle(real("PreToolUse", tool_input={"command": "git status"}, tool_use_id="x")) is None


def test_a_warning_after_a_call_reaches_the_model_as_additional_context() -> None:
    hooks = CodexHooks(GuardConfig(signature_key="k"))  # interactive: warns, never refuses
    hooks.handle(real("UserPromptSubmit"))
    answers = []
    for number in range(6):
        assert hooks.handle(real("PreToolUse", tool_use_id=f"c{number}")) is None
        answers.append(
            hooks.handle(real("PostToolUse", tool_use_id=f"c{number}", tool_response=FAILED_OUTPUT))
        )
    warned = [answer for answer in answers if answer is not None]
    assert warned and all(set(answer) == {"hookSpecificOutput"} for answer in warned)
    assert all(answer["hookSpecificOutput"]["hookEventName"] == "PostToolUse" for answer in warned)
    assert all(answer["hookSpecificOutput"]["additionalContext"] for answer in warned)


def test_codex_sessions_on_a_shared_host_carry_codexs_label() -> None:
    """One host for every CLI (the sidecar's): each CLI's sessions carry its name; the host's own
    sessions, and Claude Code's, the host's label."""
    host = SessionHost(UNATTENDED, agent="claude-code")
    codex, claude = CodexHooks(host=host), ClaudeCodeHooks(host=host)
    codex.handle(real("UserPromptSubmit", session_id="c"))
    claude.handle({"session_id": "a", "hook_event_name": "UserPromptSubmit", "prompt": "p"})
    assert [host.session(s).main.agent for s in ("c", "a", "other")] == [
        "codex",
        "claude-code",
        "claude-code",
    ]
    assert CodexHooks(UNATTENDED).sessions.session("x").main.agent == "codex"
    assert CodexHooks(UNATTENDED, agent="my-codex").sessions.session("x").main.agent == "my-codex"


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    running = start_starter_serve(tmp_path)
    yield running
    stop_process(running.process)


def test_the_sidecar_takes_every_payload_codex_sent(serve: Serve) -> None:
    answers = {
        path.stem: serve.post("/v1/hooks/codex", json.loads(path.read_text()))
        for path in sorted(PAYLOADS.iterdir())
    }
    assert answers == {event: None for event in answers}  # a first call: allowed, nothing to say
    status, body = serve.request("POST", "/v1/hooks/codex", {"session_id": "s"})
    assert status == 400 and body.startswith(b"hook_event_name")
