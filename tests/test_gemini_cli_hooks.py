"""Gemini CLI's hook payloads → the guard → the answers Gemini CLI honours (the mapping in process,
and through the sidecar with the payloads Gemini CLI 0.61.0 sent: ``tests/data/gemini_cli_payloads``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from otelguard import GuardConfig
from otelguard.coding_agents.gemini_cli import GeminiCliHooks, exit_code
from otelguard.testing import RecordingObserver
from tests.e2e import stop_process
from tests.hook_observers import observed
from tests.test_claude_code_stop import start_starter_serve
from tests.test_cli_serve import Serve

PAYLOADS = Path(__file__).parent / "data" / "gemini_cli_payloads"
UNATTENDED = GuardConfig(mode="unattended", signature_key="k")


def real(event: str, **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((PAYLOADS / f"{event}.json").read_text())
    return {**body, **changes}


def after(number: int, code: int = 2) -> dict[str, Any]:
    """The recorded ``AfterTool`` of attempt ``number``: a new description and process group each time."""
    body = real("AfterTool")
    text = body["tool_response"]["llmContent"].replace("Exit Code: 2", f"Exit Code: {code}")
    text = text.replace("PGID: 29344", f"PGID: {29344 + number}")
    args = {**body["tool_input"], "description": f"Attempt {number}"}
    return {**body, "tool_input": args, "tool_response": {**body["tool_response"], "llmContent": text}}


def play(hooks: GeminiCliHooks, calls: int, code: int = 2) -> list[dict[str, Any] | None]:
    """One prompt, then ``calls`` times the same command: the answers to each ``BeforeTool``."""
    hooks.handle(real("BeforeAgent"))
    answers = []
    for number in range(calls):
        args = {**real("BeforeTool")["tool_input"], "description": f"Attempt {number}"}
        answer = hooks.handle(real("BeforeTool", tool_input=args))
        answers.append(answer)
        if answer is None:
            hooks.handle(after(number, code))
    return answers


def test_a_refusal_is_a_deny_and_a_block_is_the_stop() -> None:
    observer = RecordingObserver()
    answers = play(observed(GeminiCliHooks, UNATTENDED, observer), 20)
    assert answers[:5] == [None] * 5  # ran, and failed: the exit code read from the text
    assert observer.outcomes[:5] == ["failed"] * 5
    refused = [answer for answer in answers if answer is not None]
    stops = [answer for answer in refused if "continue" in answer]
    stop = stops[0]
    assert all(later == stop for later in stops)  # a later call (none comes in Gemini CLI): the same stop
    denies = refused[: refused.index(stop)]
    assert denies and all(set(answer) == {"decision", "reason"} for answer in denies)
    assert all(answer["decision"] == "deny" and answer["reason"].startswith("Not run:") for answer in denies)
    assert stop == {"continue": False, "stopReason": stop["stopReason"]}
    assert stop["stopReason"].startswith("otelguard stopped this turn (exact_failure_block): ")


def test_the_exit_code_line_decides_the_failure_and_the_process_group_is_left_out() -> None:
    assert exit_code(after(1)["tool_response"]["llmContent"]) == 2
    assert exit_code("Output: fine\nExit Code: 0\n") == 0 and exit_code("no status here") is None
    observer = RecordingObserver()
    play(observed(GeminiCliHooks, UNATTENDED, observer), 6, code=0)
    # four runs with the same output but four process groups: the same result each time, so the
    # fifth identical call is refused
    assert observer.outcomes[:5] == ["ok"] * 4 + ["rejected"], observer.outcomes
    assert observer.decisions[4].code == "identical_call_reject"


READ_FILE_NOT_FOUND: dict[str, Any] = {
    "llmContent": "Could not read file because no file was found at the specified path.",
    "returnDisplay": "File not found.",
    "error": {"message": "File not found: /home/me/project/missing.txt", "type": "file_not_found"},
}
"""``AfterTool``'s ``tool_response`` of a ``read_file`` whose file is missing, as Gemini CLI 0.61.0 sent it."""


def test_a_tool_that_answered_with_an_error_failed() -> None:
    observer = RecordingObserver()
    hooks = observed(GeminiCliHooks, UNATTENDED, observer)
    hooks.handle(real("BeforeAgent"))
    read = {"file_path": "missing.txt"}
    for _ in range(2):
        assert hooks.handle(real("BeforeTool", tool_name="read_file", tool_input=read)) is None
        hooks.handle(
            real("AfterTool", tool_name="read_file", tool_input=read, tool_response=READ_FILE_NOT_FOUND)
        )
    assert observer.outcomes == ["failed", "failed"]


def test_a_warning_after_a_call_reaches_the_model_as_additional_context() -> None:
    hooks = GeminiCliHooks(GuardConfig(signature_key="k"))  # interactive: warns, never refuses
    hooks.handle(real("BeforeAgent"))
    answers = []
    for number in range(6):
        assert hooks.handle(real("BeforeTool")) is None
        answers.append(hooks.handle(after(number)))
    warned = [answer for answer in answers if answer is not None]
    assert warned and answers[0] is None
    for answer in warned:
        (specific,) = answer.values()
        assert set(answer) == {"hookSpecificOutput"} and set(specific) == {
            "hookEventName",
            "additionalContext",
        }
        assert specific["hookEventName"] == "AfterTool" and specific["additionalContext"].startswith(
            "run_shell_command"
        )


def test_the_agent_label_is_gemini_cli() -> None:
    assert GeminiCliHooks(UNATTENDED).sessions.session("x").main.agent == "gemini-cli"


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    running = start_starter_serve(tmp_path)
    yield running
    stop_process(running.process)


def test_the_sidecar_takes_every_payload_gemini_cli_sent(serve: Serve) -> None:
    answers = {
        path.stem: serve.post("/v1/hooks/gemini-cli", json.loads(path.read_text()))
        for path in sorted(PAYLOADS.iterdir())
    }
    assert answers == {event: None for event in answers}
    status, body = serve.request("POST", "/v1/hooks/gemini-cli", {"hook_event_name": "BeforeTool"})
    assert status == 400 and body.startswith(b"session_id")
