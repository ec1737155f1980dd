"""The real Gemini CLI (npm, pinned) run offline against a scripted model, guarded by otelguard.

The model asks again and again for the same failing command. With the hooks installed exactly as
``otelguard hook gemini-cli --print-settings`` prints them and the starter config's sidecar: the
command runs, is then refused with otelguard's message reaching the model as the call's error, and
the run is stopped at the block: no further model request. The sidecar's ``/metrics`` counts it all
under ``agent="gemini-cli"``. With the sidecar down, every call goes ahead.
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

from otelguard.coding_agents.settings import starter_config
from tests.e2e import free_port, http_get, stop_process
from tests.scripted_gemini import MODEL, function_responses, scripted_gemini
from tests.side_clients import gemini_cli
from tests.test_claude_code_model_turns import start_serve as start_serve_with
from tests.test_claude_code_stop import start_starter_serve
from tests.test_cli_serve import Serve
from tests.test_codex_client import metric_values

COMMAND = "ls /nonexistent-dir"
MAX_CALLS = 30
"""The scripted model's calls before it gives up by itself: far past the block."""
RUN_TIMEOUT = 600.0
DENIED = "Tool execution blocked: "
"""How Gemini CLI hands the model a call its hook denied: this, then the hook's reason."""


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    running = start_starter_serve(tmp_path)
    yield running
    stop_process(running.process)


def run_gemini(
    root: Path, model_url: str, sidecar_url: str, prompt: str = "List /nonexistent-dir"
) -> subprocess.CompletedProcess[bytes]:
    """Gemini CLI in a temp home whose ``settings.json`` holds the hooks as ``--print-settings``
    prints them (with a deadline far above the default: a loaded machine must not make a hook fail
    open), beside what running offline takes."""
    project, home = root / "project", root / "home"
    project.mkdir()
    (home / ".gemini").mkdir(parents=True)
    printed = subprocess.run(
        [sys.executable, "-m", "otelguard", "hook", "gemini-cli", "--print-settings", "--timeout", "20"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    settings: dict[str, Any] = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "general": {"disableAutoUpdate": True},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        **json.loads(printed.stdout),
    }
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GEMINI_", "GOOGLE_", "OTELGUARD_"))}
    env.update(
        HOME=str(home), XDG_CACHE_HOME=str(root / "cache"), GOOGLE_GEMINI_BASE_URL=model_url,
        GEMINI_API_KEY="scripted", GEMINI_CLI_TRUST_WORKSPACE="true", OTELGUARD_URL=sidecar_url,
    )  # fmt: skip
    return subprocess.run(
        [str(gemini_cli()), "-p", prompt, "--yolo", "--output-format", "stream-json",
         "-m", MODEL],
        cwd=project, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=RUN_TIMEOUT,
    )  # fmt: skip


def responses_of_each_call(loop: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the model read of each call, in order: each step of the loop reports the call before."""
    return [function_responses(body)[-1] for body in loop[1:]]


def test_gemini_cli_runs_then_refuses_then_stops(tmp_path: Path, serve: Serve) -> None:
    sidecar = f"http://127.0.0.1:{serve.port}"
    with scripted_gemini(COMMAND, MAX_CALLS) as model:
        run = run_gemini(tmp_path, model.url, sidecar)
        loop = list(model.loop_requests)
    shown = f"exit {run.returncode}; stdout: {run.stdout.decode(errors='replace')[-1500:]}; stderr: {run.stderr.decode(errors='replace')[-1500:]}"
    responses = responses_of_each_call(loop)
    ran = [n for n, response in enumerate(responses) if "Exit Code: 2" in str(response.get("output"))]
    refused = [n for n, response in enumerate(responses) if str(response.get("error", "")).startswith(DENIED)]
    # first it runs, then it is refused with otelguard's message as the call's error
    assert ran[:1] == [0] and refused, (responses, shown)
    assert sorted(ran + refused) == list(range(len(responses))) and max(ran) < min(refused), responses
    reason = responses[refused[0]]["error"].removeprefix(DENIED)
    assert reason.startswith("Not run: run_shell_command"), reason
    assert all("nonexistent" not in responses[n]["error"] for n in refused)  # no argument value
    # then stopped: the blocked call ends the run, no model request after it
    series = metric_values(http_get(f"{sidecar}/metrics").decode(), agent="gemini-cli")
    blocks = [code for family, code in series if family == "decisions" and code.endswith("_block")]
    assert len(blocks) == 1 and series[("decisions", blocks[0])] == 1, series
    assert len(loop) == len(responses) + 1 < MAX_CALLS, len(loop)
    assert (series[("tool_calls", "failed")], series[("tool_calls", "rejected")]) == (len(ran), len(refused))
    assert series[("tool_calls", "blocked")] == 1 and series[("turns", "halted")] == 1, series
    # what the user reads: the stop's reason
    assert f"otelguard stopped this turn ({blocks[0]})" in (run.stdout + run.stderr).decode(
        errors="replace"
    ), shown


def test_with_the_sidecar_down_every_gemini_call_goes_ahead(tmp_path: Path) -> None:
    """Fail open: the hooks cannot reach a sidecar, and every call runs as if otelguard were absent;
    the user is told once for the session."""
    calls = 6
    with scripted_gemini(COMMAND, calls) as model:
        run = run_gemini(tmp_path, model.url, f"http://127.0.0.1:{free_port()}")
        loop = list(model.loop_requests)
    assert run.returncode == 0, run.stderr.decode(errors="replace")[-2000:]
    responses = responses_of_each_call(loop)
    assert len(responses) == calls and all("Exit Code: 2" in str(r.get("output")) for r in responses)
    told = (tmp_path / "cache" / "otelguard" / "hook-notified").read_text().split()
    assert len(told) == 1
    # the user read it once, as Gemini CLI shows a hook's systemMessage
    shown = (run.stdout + run.stderr).decode(errors="replace")
    assert shown.count("Hook system message: otelguard is not guarding this session") == 1, shown[-2000:]


TOKEN_CAP = 10_000
BURN = {"promptTokenCount": 1_000, "candidatesTokenCount": 500}
"""What each reply of the burning model costs: its seventh reply reaches the cap."""


def test_gemini_cli_burning_tokens_is_stopped_at_the_session_token_cap(tmp_path: Path) -> None:
    """A model that asks for a new command every time and reports 1,500 tokens a reply, under
    ``caps.session.tokens: 10000``: the sidecar reads each reply's tokens from the chat file Gemini
    CLI names, and the request after the seventh reply (10,500 tokens) is not made: the run ends."""
    config = starter_config().replace(
        "session: {web_search: 200, subagents: 200}",
        f"session: {{web_search: 200, subagents: 200, tokens: {TOKEN_CAP}}}",
    )
    running = start_serve_with(tmp_path, config)
    try:
        with scripted_gemini("echo burn", MAX_CALLS, usage=BURN, numbered=True) as model:
            run = run_gemini(
                tmp_path, model.url, f"http://127.0.0.1:{running.port}", "Echo until told to stop"
            )
            loop = list(model.loop_requests)
    finally:
        stop_process(running.process)
    shown = f"exit {run.returncode}; stderr: {run.stderr.decode(errors='replace')[-1500:]}"
    outputs = [str(response.get("output")) for response in responses_of_each_call(loop)]
    assert all("Output: burn" in output for output in outputs), outputs
    assert len(loop) == 7, f"asked {len(loop)} times; {shown}"
    (result,) = [json.loads(line) for line in run.stdout.splitlines() if b'"type":"result"' in line]
    assert result["stats"]["total_tokens"] == 7 * 1_500, result
    # what the user reads: the stop's reason, as Gemini CLI shows a hook's system message
    shown_all = (run.stdout + run.stderr).decode(errors="replace")
    assert "Hook system message: otelguard stopped this turn (cap_session): " in shown_all, shown
