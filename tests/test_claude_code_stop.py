"""Claude Code's stop: answered on ``PostToolBatch``, the one place ``-p`` mode honours ``continue: false``.

Real processes (``otelguard serve`` with the starter config, ``otelguard hook claude-code`` per event)
fed the payloads Claude Code 2.1.197 sent (``tests/data/claude_code_payloads``): the same failing
``ls`` sent again and again is refused, then blocked; from the batch of the blocked call on, every
``PostToolBatch`` answers the stop, and none before it does.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from otelguard.coding_agents.claude_code import settings_block
from otelguard.coding_agents.settings import starter_config
from tests.e2e import free_port, stop_process, wait_until
from tests.test_cli_serve import Serve

PAYLOADS = Path(__file__).parent / "data" / "claude_code_payloads"
TIMEOUT = 60.0
MAX_CALLS = 30


def payload(event: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((PAYLOADS / f"{event}.json").read_text())
    return loaded


def start_starter_serve(tmp_path: Path) -> Serve:
    """``otelguard serve`` with the starter config ``--print-config`` prints (unattended)."""
    config = tmp_path / "otelguard.yaml"
    config.write_text(starter_config())
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "otelguard", "serve", "--port", str(port), "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    serve = Serve(process, port)
    wait_until(lambda: serve.request("GET", "/healthz")[0] == 200, 30, 0.05, "otelguard serve to listen")
    return serve


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    running = start_starter_serve(tmp_path)
    yield running
    stop_process(running.process)


def hook(serve: Serve, body: dict[str, Any], tmp_path: Path) -> dict[str, Any] | None:
    """One event through a real ``otelguard hook claude-code`` process; its output, ``None`` for none."""
    ran = subprocess.run(
        [sys.executable, "-m", "otelguard", "hook", "claude-code", "--url", f"http://127.0.0.1:{serve.port}",
         "--timeout", "30"],
        input=json.dumps(body).encode(), capture_output=True, timeout=TIMEOUT,
        env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")},
    )  # fmt: skip
    assert (ran.returncode, ran.stderr) == (0, b""), ran.stderr
    return json.loads(ran.stdout) if ran.stdout else None


def attempt(event: str, number: int) -> dict[str, Any]:
    """The recorded payload of ``event`` for the ``number``-th attempt, as Claude Code varies it."""
    body = copy.deepcopy(payload(event))
    call_id = f"toolu_{number:024x}"
    calls = body.get("tool_calls", [body])
    for call in calls:
        call["tool_input"]["description"] = f"Attempt {number}"
        call["tool_use_id"] = call_id
    return body


def test_the_settings_install_post_tool_batch() -> None:
    block = json.loads(settings_block(None))["hooks"]
    assert "PostToolBatch" in block and "matcher" not in block["PostToolBatch"][0]


def test_post_tool_batch_stops_the_turn_once_it_is_blocked(serve: Serve, tmp_path: Path) -> None:
    assert hook(serve, payload("UserPromptSubmit"), tmp_path) is None
    refused: list[str] = []
    halt: dict[str, Any] | None = None
    batch: dict[str, Any] | None = None
    for number in range(1, MAX_CALLS + 1):
        pre = hook(serve, attempt("PreToolUse", number), tmp_path)
        if pre is None:  # allowed: it runs and fails
            post = hook(serve, attempt("PostToolUseFailure", number), tmp_path)
            halt = post if post is not None and "continue" in post else None
        else:
            assert pre["hookSpecificOutput"]["permissionDecision"] == "deny"
            refused.append(pre["hookSpecificOutput"]["permissionDecisionReason"])
            halt = pre if "continue" in pre else None
        batch = hook(serve, attempt("PostToolBatch", number), tmp_path)  # a denied call's batch too
        if halt is not None:
            break
        assert batch is None, f"the batch of call {number} stopped a turn the guard did not stop"
    assert halt is not None, f"no stop in {MAX_CALLS} calls; refused: {refused}"
    assert len(refused) >= 2, "refused before it was stopped"
    assert halt["continue"] is False
    assert batch == {"continue": False, "stopReason": halt["stopReason"]}
    assert batch["stopReason"].startswith("otelguard stopped this turn (exact_failure_block): Not run: Bash ")
    assert "nonexistent" not in batch["stopReason"]  # names the tool and counts, never the arguments
    # every later batch of the turn says the same
    assert hook(serve, attempt("PostToolBatch", MAX_CALLS + 1), tmp_path) == batch
    # the next prompt is a new turn: its batches go on
    assert hook(serve, payload("UserPromptSubmit"), tmp_path) is None
    assert hook(serve, attempt("PostToolBatch", MAX_CALLS + 2), tmp_path) is None


def test_another_session_is_not_stopped(serve: Serve, tmp_path: Path) -> None:
    """A batch of a session the guard never saw goes on; one naming no session is a 400 naming the field."""
    fresh = {**attempt("PostToolBatch", 1), "session_id": "another-session"}
    assert hook(serve, fresh, tmp_path) is None
    status, body = serve.request("POST", "/v1/hooks/claude-code", {"hook_event_name": "PostToolBatch"})
    assert status == 400 and b"session_id" in body
