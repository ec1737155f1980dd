"""Copilot CLI's hook payloads → the guard → the answers Copilot CLI honours (the mapping in process,
and through a real ``otelguard hook copilot-cli --event EVENT`` and the sidecar with the payloads
Copilot CLI 1.0.102 sent: ``tests/data/copilot_cli_payloads``)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from otelguard import GuardConfig
from otelguard.coding_agents.copilot_cli import CopilotCliHooks, comparable, exit_code
from otelguard.coding_agents.hook import _with_event
from otelguard.coding_agents.off_notice import notice
from otelguard.testing import RecordingObserver
from tests.e2e import stop_process
from tests.hook_observers import observed
from tests.test_claude_code_stop import start_starter_serve
from tests.test_cli_serve import Serve

PAYLOADS = Path(__file__).parent / "data" / "copilot_cli_payloads"
UNATTENDED = GuardConfig(mode="unattended", signature_key="k")
STOPPED = "otelguard stopped this turn ("


def real(event: str, **changes: Any) -> dict[str, Any]:
    """A recorded payload with the event the hook command writes in."""
    body: dict[str, Any] = json.loads((PAYLOADS / f"{event}.json").read_text())
    return {"hookName": event, **body, **changes}


def after(number: int, code: int = 2) -> dict[str, Any]:
    """The recorded ``postToolUse`` of attempt ``number``: a new description and shell number each time."""
    body = real("postToolUse")
    text = body["toolResult"]["textResultForLlm"].replace("<shellId: 0 ", f"<shellId: {number} ")
    text = text.replace("exit code 2>", f"exit code {code}>")
    args = {**body["toolArgs"], "description": f"Attempt {number}"}
    return {**body, "toolArgs": args, "toolResult": {**body["toolResult"], "textResultForLlm": text}}


def play(hooks: CopilotCliHooks, calls: int, code: int = 2) -> list[dict[str, Any] | None]:
    """One prompt, then ``calls`` times the same command: the answers to each ``preToolUse``."""
    hooks.handle(real("userPromptSubmitted"))
    answers = []
    for number in range(calls):
        args = {**real("preToolUse")["toolArgs"], "description": f"Attempt {number}"}
        answer = hooks.handle(real("preToolUse", toolArgs=args))
        answers.append(answer)
        if answer is None:
            hooks.handle(after(number, code))
    return answers


def test_a_refusal_is_a_deny_and_every_call_after_the_block_is_denied_with_the_stop() -> None:
    observer = RecordingObserver()
    answers = play(observed(CopilotCliHooks, UNATTENDED, observer), 20)
    assert answers[:5] == [None] * 5  # ran, and failed: the exit code read from the text
    assert observer.outcomes[:5] == ["failed"] * 5
    refused = [answer for answer in answers if answer is not None]
    assert all(set(answer) == {"permissionDecision", "permissionDecisionReason"} for answer in refused)
    assert all(answer["permissionDecision"] == "deny" for answer in refused)
    reasons = [answer["permissionDecisionReason"] for answer in refused]
    first_stop = next(n for n, reason in enumerate(reasons) if reason.startswith(STOPPED))
    assert first_stop > 0 and all(reason.startswith("Not run:") for reason in reasons[:first_stop])
    assert reasons[first_stop].startswith(f"{STOPPED}exact_failure_block): ")
    assert set(reasons[first_stop:]) == {reasons[first_stop]}  # every later call: the same stop


def test_the_exit_code_line_decides_the_failure_and_the_shell_number_is_left_out() -> None:
    assert exit_code(after(1)["toolResult"]["textResultForLlm"]) == 2
    assert exit_code("fine\n<shellId: 7 completed with exit code 0>") == 0
    assert exit_code("no status here") is None
    assert comparable("x\n<shellId: 3 completed with exit code 0>") == comparable(
        "x\n<shellId: 4 completed with exit code 0>"
    )
    observer = RecordingObserver()
    play(observed(CopilotCliHooks, UNATTENDED, observer), 6, code=0)
    # four runs with the same output but four shell numbers: the same result each time, so the
    # fifth identical call (its description aside) is refused
    assert observer.outcomes[:5] == ["ok"] * 4 + ["rejected"], observer.outcomes
    assert observer.decisions[4].code == "identical_call_reject"


def test_a_failure_result_type_is_a_failure_whatever_the_text() -> None:
    observer = RecordingObserver()
    hooks = observed(CopilotCliHooks, UNATTENDED, observer)
    hooks.handle(real("userPromptSubmitted"))
    hooks.handle(real("preToolUse"))
    result = {"resultType": "failure", "textResultForLlm": "permission denied"}
    hooks.handle(real("postToolUse", toolArgs=real("preToolUse")["toolArgs"], toolResult=result))
    assert observer.outcomes == ["failed"]


def test_a_warning_after_a_call_reaches_the_model_as_additional_context() -> None:
    hooks = CopilotCliHooks(GuardConfig(signature_key="k"))  # interactive: warns, never refuses
    hooks.handle(real("userPromptSubmitted"))
    answers = []
    for number in range(6):
        assert hooks.handle(real("preToolUse")) is None
        answers.append(hooks.handle(after(number)))
    warned = [answer for answer in answers if answer is not None]
    assert warned and answers[0] is None
    assert all(set(answer) == {"additionalContext"} for answer in warned)
    assert all(answer["additionalContext"].startswith("bash") for answer in warned)


def test_the_agent_label_is_copilot_cli() -> None:
    assert CopilotCliHooks(UNATTENDED).sessions.session("x").main.agent == "copilot-cli"


def test_the_hook_writes_the_event_in_as_the_first_field() -> None:
    assert json.loads(_with_event(b' {"a": 1}', "preToolUse")) == {"hookName": "preToolUse", "a": 1}
    assert json.loads(_with_event(b"{ }", "agentStop")) == {"hookName": "agentStop"}
    assert _with_event(b"[1]", "preToolUse") == b"[1]"  # left to the sidecar to refuse
    # a hookName of the payload's own (permissionRequest's) comes later and wins
    assert (
        json.loads(_with_event(b'{"hookName": "permissionRequest"}', "x"))["hookName"] == "permissionRequest"
    )


def test_the_guard_off_notice_is_shown_under_a_call_once() -> None:
    body = json.dumps(real("postToolUse", sessionId="notice-test-session")).encode()
    before = json.dumps(real("preToolUse", sessionId="notice-test-session")).encode()
    assert notice(before, "sidecar down") == ""  # Copilot CLI shows nothing of a preToolUse answer
    shown = json.loads(notice(body, "sidecar down"))
    assert set(shown) == {"additionalContext"} and "otelguard is not guarding" in shown["additionalContext"]
    assert notice(body, "sidecar down") == ""  # once per session


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    running = start_starter_serve(tmp_path)
    yield running
    stop_process(running.process)


def hook(serve: Serve, event: str, raw: bytes, *extra: str) -> subprocess.CompletedProcess[bytes]:
    url = f"http://127.0.0.1:{serve.port}"
    return subprocess.run(
        [sys.executable, "-m", "otelguard", "hook", "copilot-cli", "--url", url, "--timeout", "20",
         "--event", event, *extra],
        input=raw, capture_output=True, timeout=60,
    )  # fmt: skip


def test_the_sidecar_takes_every_payload_copilot_cli_sent(serve: Serve) -> None:
    for path in sorted(PAYLOADS.iterdir()):
        ran = hook(serve, path.stem, path.read_bytes())
        assert (ran.returncode, ran.stdout, ran.stderr) == (0, b"", b""), path.stem
    status, body = serve.request("POST", "/v1/hooks/copilot-cli", {"sessionId": "s"})
    assert status == 400 and body.startswith(b"hookName")
    status, body = serve.request("POST", "/v1/hooks/copilot-cli", {"hookName": "preToolUse"})
    assert status == 400 and body.startswith(b"sessionId")


def test_a_bad_event_fails_open(serve: Serve) -> None:
    ran = hook(serve, "pre tool use", (PAYLOADS / "preToolUse.json").read_bytes())
    assert (ran.returncode, ran.stdout) == (0, b"") and b"--event" in ran.stderr
    codex = subprocess.run(
        [sys.executable, "-m", "otelguard", "hook", "codex", "--event", "preToolUse"],
        input=b"{}", capture_output=True, timeout=60,
    )  # fmt: skip
    assert (codex.returncode, codex.stdout) == (0, b"") and b"--event" in codex.stderr


def test_with_a_key_a_copilot_payload_carries_the_session_digest_for_affinity(tmp_path: Path) -> None:
    """Copilot CLI's ``sessionId`` is keyed for ``X-Otelguard-Session`` as Claude Code's ``session_id``."""
    import os

    from otelguard.core.session_keys import key_bytes, session_digest
    from otelguard.serving.http_server import HttpServer, Request, Response

    seen: list[dict[str, str]] = []

    def record(request: Request) -> Response:
        seen.append(dict(request.headers))
        return Response(200, b"")

    env = {**os.environ, "OTELGUARD_SIGNATURE_KEY": "fleet-key", "XDG_CACHE_HOME": str(tmp_path)}
    with HttpServer(record) as server:
        ran = subprocess.run(
            [sys.executable, "-m", "otelguard", "hook", "copilot-cli", "--url",
             f"http://127.0.0.1:{server.port}", "--event", "preToolUse"],
            input=(PAYLOADS / "preToolUse.json").read_bytes(), capture_output=True, timeout=60, env=env,
        )  # fmt: skip
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, b"", b"")
    (headers,) = seen
    expected = session_digest(real("preToolUse")["sessionId"], key_bytes("fleet-key"))
    assert headers["x-otelguard-session"] == expected
