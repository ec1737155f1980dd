"""The real Claude Code (npm, pinned) run offline against a scripted model, guarded by otelguard.

The model asks again and again for the same failing command. With the hooks installed exactly as
``otelguard hook claude-code --print-settings`` prints them and the starter config's sidecar: the
command runs, is then refused with otelguard's message reaching the model as the call's result, and
the run is stopped within one model request of the block; the sidecar's ``/metrics`` counts it all.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import parser as prometheus_client_parser

from otelguard.coding_agents.settings import starter_config
from tests.e2e import http_get, stop_process
from tests.scripted_anthropic import MODEL, result_text, scripted_model, tool_results
from tests.side_clients import claude_code
from tests.test_claude_code_model_turns import start_serve as start_serve_with
from tests.test_claude_code_stop import start_starter_serve
from tests.test_cli_serve import Serve

COMMAND = "ls /nonexistent-dir"
MAX_CALLS = 40
"""The scripted model's calls before it gives up by itself: far past the block."""
RUN_TIMEOUT = 600.0


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    running = start_starter_serve(tmp_path)
    yield running
    stop_process(running.process)


def client_env(home: Path, model_url: str, sidecar_url: str) -> dict[str, str]:
    """The environment Claude Code runs in: a temp home, the scripted model, nothing sent elsewhere.
    Variables of a Claude Code this test itself may run inside are left out."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE", "OTELGUARD_"))}
    return {
        **env,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "ANTHROPIC_BASE_URL": model_url,
        "ANTHROPIC_API_KEY": "sk-ant-scripted",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "OTELGUARD_URL": sidecar_url,
    }


def install_hooks(project: Path) -> dict[str, Any]:
    """``.claude/settings.json`` of the project: the block ``--print-settings`` prints, as printed
    (with a deadline far above the default: a loaded machine must not make a hook fail open)."""
    printed = subprocess.run(
        [sys.executable, "-m", "otelguard", "hook", "claude-code", "--print-settings", "--timeout", "20"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    (project / ".claude").mkdir(parents=True)
    (project / ".claude" / "settings.json").write_bytes(printed.stdout)
    block: dict[str, Any] = json.loads(printed.stdout)
    return block


def stream(stdout: bytes) -> list[dict[str, Any]]:
    """The stream-json lines Claude Code printed."""
    return [json.loads(line) for line in stdout.splitlines() if line.strip().startswith(b"{")]


def test_claude_code_runs_then_refuses_then_stops(tmp_path: Path, serve: Serve) -> None:
    claude = claude_code()
    project, home = tmp_path / "project", tmp_path / "home"
    home.mkdir()
    assert "PostToolBatch" in install_hooks(project)["hooks"]
    sidecar = f"http://127.0.0.1:{serve.port}"
    with scripted_model(COMMAND, MAX_CALLS) as model:
        run = subprocess.run(
            [str(claude), "-p", "List /nonexistent-dir", "--output-format", "stream-json", "--verbose",
             "--allowedTools", "Bash", "--model", MODEL],
            cwd=project, env=client_env(home, model.url, sidecar), stdin=subprocess.DEVNULL,
            capture_output=True, timeout=RUN_TIMEOUT,
        )  # fmt: skip
        loop = list(model.loop_requests)
    shown = f"exit {run.returncode}; stderr: {run.stderr.decode(errors='replace')[-2000:]}"
    assert run.returncode == 0, shown
    texts: list[str] = []
    errors: list[bool] = []
    for body in loop[1:]:  # each step of the loop reports the call of the step before
        (result,) = tool_results(body)
        texts.append(result_text(result))
        errors.append(result.get("is_error") is True)
    # first it runs: the command's own failure comes back to the model
    ran = [n for n, text in enumerate(texts) if "No such file or directory" in text]
    refused = [n for n, text in enumerate(texts) if text.startswith("Not run: Bash")]
    assert ran[:1] == [0] and refused, (texts, shown)
    # then it is refused: otelguard's message is the call's result, an error, with no argument in it
    assert max(ran) < min(refused) and all(errors[n] for n in refused)
    assert "Not run: Bash already failed 5 times" in texts[refused[0]]
    assert not any("nonexistent" in texts[n] for n in refused)
    # then stopped: the blocked call's batch ends the run, at most one model request later
    series = metric_values(http_get(f"{sidecar}/metrics").decode())
    assert series[("decisions", "exact_failure_block")] == 1, series
    blocked_call = int(series[("tool_calls", "failed")] + series[("tool_calls", "rejected")]) + 1
    assert len(loop) <= blocked_call + 1, f"asked {len(loop)} times; call {blocked_call} was blocked"
    assert series.get(("decisions", "turn_halted"), 0) <= 1, series
    assert (series[("tool_calls", "failed")], series[("tool_calls", "rejected")]) == (len(ran), len(refused))
    assert series[("turns", "halted")] == 1, series
    # what the user gets: a run that ended on a tool call, the stop's reason in the session's transcript
    (final,) = [line for line in stream(run.stdout) if line.get("type") == "result"]
    assert final["stop_reason"] == "tool_use", final
    (stop,) = stop_shown(home)
    assert stop.startswith(
        "otelguard stopped this turn (exact_failure_block): Not run: Bash already failed 5"
    )
    assert "nonexistent" not in stop


def metric_values(exposition: str) -> dict[tuple[str, str], float]:
    """``(family, outcome or code)`` → value, for otelguard's series of the ``claude-code`` agent."""
    values: dict[tuple[str, str], float] = {}
    for family in prometheus_client_parser.text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.labels.get("agent") != "claude-code":
                continue
            name = sample.name.removeprefix("otelguard_").removesuffix("_total")
            key = sample.labels.get("outcome") or sample.labels.get("code")
            if name in ("tool_calls", "decisions", "turns") and key:
                values[(name, key)] = values.get((name, key), 0) + sample.value
    return values


def stop_shown(home: Path) -> list[str]:
    """The stop messages Claude Code recorded in the session's transcript (where its UI reads them)."""
    shown = []
    for transcript in (home / ".claude" / "projects").glob("*/*.jsonl"):
        for line in transcript.read_text(encoding="utf-8").splitlines():
            attachment = json.loads(line).get("attachment") or {}
            if attachment.get("type") == "hook_stopped_continuation":
                shown.append(attachment.get("message"))
    return shown


TOKEN_CAP = 10_000
BURN = {"input_tokens": 1_000, "output_tokens": 500}
"""What each reply of the burning model costs: its seventh reply reaches the cap."""


def test_claude_code_burning_tokens_is_stopped_at_the_session_token_cap(tmp_path: Path) -> None:
    """A model that asks for a new command every time (no loop a tool call shows) and reports 1,500
    tokens a reply, under ``caps.session.tokens: 10000``: the sidecar reads each reply's usage from the
    transcript Claude Code names, and the batch after the seventh reply (10,500 tokens) ends the run."""
    claude = claude_code()
    project, home = tmp_path / "project", tmp_path / "home"
    home.mkdir()
    install_hooks(project)
    config = starter_config().replace(
        "session: {web_search: 200, subagents: 200}",
        f"session: {{web_search: 200, subagents: 200, tokens: {TOKEN_CAP}}}",
    )
    assert f"tokens: {TOKEN_CAP}" in config
    running = start_serve_with(tmp_path, config)
    sidecar = f"http://127.0.0.1:{running.port}"
    try:
        with scripted_model("echo burn", MAX_CALLS, usage=BURN, numbered=True) as model:
            run = subprocess.run(
                [str(claude), "-p", "Echo until told to stop", "--output-format", "stream-json",
                 "--verbose", "--allowedTools", "Bash", "--model", MODEL],
                cwd=project, env=client_env(home, model.url, sidecar), stdin=subprocess.DEVNULL,
                capture_output=True, timeout=RUN_TIMEOUT,
            )  # fmt: skip
            loop = list(model.loop_requests)
    finally:
        stop_process(running.process)
    shown = f"exit {run.returncode}; stderr: {run.stderr.decode(errors='replace')[-2000:]}"
    assert run.returncode == 0, shown
    # every command ran (no tool loop to refuse), and the model was asked no more after the 7th reply
    texts = [result_text(result) for body in loop[1:] for result in tool_results(body)]
    assert all(text.startswith("burn ") for text in texts), texts
    assert len(loop) == 7, f"asked {len(loop)} times; {shown}"
    (final,) = [line for line in stream(run.stdout) if line.get("type") == "result"]
    assert final["stop_reason"] == "tool_use", final
    (stop,) = stop_shown(home)
    assert stop.startswith("otelguard stopped this turn (cap_session): "), stop
