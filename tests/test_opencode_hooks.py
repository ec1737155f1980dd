"""What otelguard's OpenCode plugin posts → the guard → the answer the plugin acts on (the mapping in
process, and through the sidecar with bodies made as the plugin makes them from the hook arguments
OpenCode 1.18.33 passed: ``tests/data/opencode_payloads``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from otelguard import GuardConfig
from otelguard.coding_agents.opencode import OpenCodeHooks
from otelguard.testing import RecordingObserver
from tests.e2e import stop_process
from tests.hook_observers import observed
from tests.test_claude_code_stop import start_starter_serve
from tests.test_cli_serve import Serve

PAYLOADS = Path(__file__).parent / "data" / "opencode_payloads"
UNATTENDED = GuardConfig(mode="unattended", signature_key="k")
STOPPED = "otelguard stopped this turn ("


def recorded(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((PAYLOADS / f"{name}.json").read_text())
    return loaded


def before(number: int) -> dict[str, Any]:
    """The plugin's body for the recorded ``tool.execute.before``, a new call id and description each time."""
    hook = recorded("tool.execute.before")
    args = {**hook["output"]["args"], "description": f"Attempt {number}"}
    return {"event": "tool.execute.before", "session_id": hook["input"]["sessionID"],
            "tool": hook["input"]["tool"], "call_id": f"toolu_{number}", "args": args}  # fmt: skip


def after(number: int, code: int = 2) -> dict[str, Any]:
    hook = recorded("tool.execute.after")
    args = {**hook["input"]["args"], "description": f"Attempt {number}"}
    return {"event": "tool.execute.after", "session_id": hook["input"]["sessionID"],
            "tool": hook["input"]["tool"], "call_id": f"toolu_{number}", "args": args,
            "output": hook["output"]["output"], "exit": code}  # fmt: skip


def prompt() -> dict[str, Any]:
    return {"event": "chat.message", "session_id": recorded("tool.execute.before")["input"]["sessionID"]}


def play(hooks: OpenCodeHooks, calls: int, code: int = 2) -> list[dict[str, Any] | None]:
    hooks.handle(prompt())
    answers = []
    for number in range(calls):
        answer = hooks.handle(before(number))
        answers.append(answer)
        if answer == {"action": "allow"}:
            hooks.handle(after(number, code))
    return answers


def test_a_refusal_is_a_deny_and_the_block_and_every_later_call_a_stop() -> None:
    observer = RecordingObserver()
    answers = play(observed(OpenCodeHooks, UNATTENDED, observer), 20)
    assert answers[:5] == [{"action": "allow"}] * 5
    assert observer.outcomes[:5] == ["failed"] * 5  # output.metadata.exit 2
    refused = [answer for answer in answers if answer != {"action": "allow"}]
    first_stop = next(n for n, answer in enumerate(refused) if answer.get("stop"))  # type: ignore[union-attr]
    denies, stops = refused[:first_stop], refused[first_stop:]
    assert denies and all(set(a or {}) == {"action", "message"} for a in denies)
    assert all(a and a["action"] == "deny" and a["message"].startswith("Not run: bash") for a in denies)
    assert all(a == stops[0] for a in stops) and stops[0] is not None
    assert stops[0]["message"].startswith(f"{STOPPED}exact_failure_block): ")


def test_an_exit_status_of_zero_is_no_failure_and_a_warning_is_an_allow_with_a_message() -> None:
    observer = RecordingObserver()
    hooks = observed(OpenCodeHooks, GuardConfig(signature_key="k"), observer)  # interactive: warns
    hooks.handle(prompt())
    warned = []
    for number in range(6):
        assert hooks.handle(before(number)) == {"action": "allow"}
        warned.append(hooks.handle(after(number, code=0)))
    assert observer.outcomes[:6] == ["ok"] * 6
    messages = [answer for answer in warned if answer is not None]
    assert messages and all(set(a) == {"action", "message"} and a["action"] == "allow" for a in messages)


def test_the_agent_label_is_opencode() -> None:
    assert OpenCodeHooks(UNATTENDED).sessions.session("x").main.agent == "opencode"


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    running = start_starter_serve(tmp_path)
    yield running
    stop_process(running.process)


def test_the_sidecar_answers_the_plugin(serve: Serve) -> None:
    assert serve.post("/v1/hooks/opencode", prompt()) is None
    assert serve.post("/v1/hooks/opencode", before(1)) == {"action": "allow"}
    assert serve.post("/v1/hooks/opencode", after(1)) is None
    idle = recorded("event.session.idle")["event"]
    assert serve.post("/v1/hooks/opencode", {"event": idle["type"], **{"session_id": "s"}}) is None
    assert serve.post("/v1/hooks/opencode", {"event": "session.deleted", "session_id": "s"}) is None
    status, body = serve.request("POST", "/v1/hooks/opencode", {"session_id": "s"})
    assert status == 400 and body.startswith(b"event")
    status, body = serve.request(
        "POST", "/v1/hooks/opencode", {"event": "tool.execute.before", "session_id": "s"}
    )
    assert status == 400 and body.startswith(b"tool")
