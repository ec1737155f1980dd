"""Parity on the real clients: a run guarded by the hooks halts where ``otelguard replay`` of the
transcript that CLI wrote for that run halts, with the same config.

One real Codex run and one real Gemini CLI run, each exactly as the real-client tests make it (the
pinned CLI offline against the scripted model, the hooks as ``--print-settings`` prints them, the
starter config's sidecar). Where the hooks halted is read from what the model was told (the first call
refused with the stop's message; for Gemini CLI, whose stop ends the run, the call after the last one
the model heard of) and from the sidecar's ``/metrics``; then the transcript the CLI kept (Codex's
rollout under ``$CODEX_HOME/sessions``, Gemini CLI's chat under ``~/.gemini/tmp/<project>/chats``) is
replayed with the sidecar's config. A call the hooks refused never ran, and the transcript records the
CLI's refusal text for it: replay reads that as a refusal, and its own guard refuses the call at the
same point anyway, so the decisions match call for call, not only the halt.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import http_get, stop_process
from tests.scripted_gemini import scripted_gemini
from tests.scripted_openai import scripted_responses
from tests.test_claude_code_stop import start_starter_serve
from tests.test_cli_serve import Serve
from tests.test_codex_client import STOPPED, guard_reason, metric_values, outputs_of_each_call, run_codex
from tests.test_gemini_cli_client import responses_of_each_call, run_gemini

COMMAND = "ls /nonexistent-dir"
TIMEOUT = 120.0
Halt = tuple[int, int, str]  # turn, call, code


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    running = start_starter_serve(tmp_path)
    yield running
    stop_process(running.process)


def replay(transcript: Path, config: Path) -> dict[str, Any]:
    ran = subprocess.run(
        [sys.executable, "-m", "otelguard", "replay", str(transcript), "--config", str(config), "--json"],
        capture_output=True, timeout=TIMEOUT,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr.decode(errors="replace")[-2000:]
    document: dict[str, Any] = json.loads(ran.stdout)
    assert document["errors"] == [], document["errors"]
    return document


def replay_halts(document: dict[str, Any]) -> list[Halt]:
    return [(h["turn"], h["call"], h["code"]) for s in document["sessions"] for h in s["halts"]]


def decisions(series: dict[tuple[str, str], float]) -> dict[str, int]:
    """The sidecar's decisions by code, but ``turn_halted``: the calls after a halt, which replay
    counts as prevented instead of feeding them to the guard."""
    return {
        code: int(n)
        for (family, code), n in series.items()
        if family == "decisions" and code != "turn_halted"
    }


def only(paths: list[Path]) -> Path:
    assert len(paths) == 1, paths
    return paths[0]


def test_a_guarded_codex_run_and_replay_of_its_rollout_halt_alike(tmp_path: Path, serve: Serve) -> None:
    sidecar = f"http://127.0.0.1:{serve.port}"
    with scripted_responses(COMMAND, 24) as model:
        run = run_codex(tmp_path, model.url, sidecar)
        loop = list(model.loop_requests)
    assert run.returncode == 0, run.stderr.decode(errors="replace")[-2000:]
    outputs = outputs_of_each_call(loop)
    block = next(n for n, text in enumerate(outputs) if STOPPED in text)
    code = guard_reason(outputs[block]).removeprefix(STOPPED).split(")")[0]
    series = metric_values(http_get(f"{sidecar}/metrics").decode())
    assert series[("decisions", code)] == 1, series

    rollout = only(sorted((tmp_path / "codex-home" / "sessions").rglob("rollout-*.jsonl")))
    document = replay(rollout, tmp_path / "otelguard.yaml")
    assert document["inputs"][0]["format"] == "codex"
    assert replay_halts(document) == [(1, block + 1, code)]
    assert document["totals"]["decisions"] == decisions(series)
    assert document["totals"]["tool_calls"] == len(outputs)


def test_a_guarded_gemini_cli_run_and_replay_of_its_chat_halt_alike(tmp_path: Path, serve: Serve) -> None:
    sidecar = f"http://127.0.0.1:{serve.port}"
    with scripted_gemini(COMMAND, 30) as model:
        run = run_gemini(tmp_path, model.url, sidecar)
        loop = list(model.loop_requests)
    responses = responses_of_each_call(loop)
    series = metric_values(http_get(f"{sidecar}/metrics").decode(), agent="gemini-cli")
    (code,) = [c for family, c in series if family == "decisions" and c.endswith("_block")]
    # the stopped call ended the run: the model never heard of it
    assert f"otelguard stopped this turn ({code})" in (run.stdout + run.stderr).decode(errors="replace")
    stopped_call = len(responses) + 1

    chat = only(sorted((tmp_path / "home" / ".gemini" / "tmp").glob("*/chats/session-*.json*")))
    document = replay(chat, tmp_path / "otelguard.yaml")
    assert document["inputs"][0]["format"] == "gemini-cli"
    assert replay_halts(document) == [(1, stopped_call, code)]
    assert document["totals"]["decisions"] == decisions(series)
    assert document["totals"]["tool_calls"] == stopped_call
