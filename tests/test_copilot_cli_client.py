"""The real GitHub Copilot CLI (npm, pinned) run offline against a scripted model, guarded by otelguard.

The model asks again and again for the same failing command. With the hooks installed exactly as
``otelguard hook copilot-cli --print-settings`` prints them and the starter config's sidecar: the
command runs, is then refused with otelguard's message reaching the model as the call's result, and,
since nothing a hook answers ends Copilot CLI's run, every later call of the turn is refused with the
stop's message: none runs again. The sidecar's ``/metrics`` counts it all under
``agent="copilot-cli"``. With the sidecar down, every call goes ahead and the user is told once.
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

from tests.e2e import free_port, http_get, stop_process
from tests.scripted_anthropic import result_text, scripted_model, tool_results
from tests.side_clients import copilot_cli
from tests.test_claude_code_stop import start_starter_serve
from tests.test_cli_serve import Serve
from tests.test_codex_client import metric_values

COMMAND = "ls /nonexistent-dir"
MAX_CALLS = 24
"""The scripted model's calls before it gives up by itself: far past the block."""
RUN_TIMEOUT = 600.0
RAN = "completed with exit code 2>"
"""What the model reads of a call that ran (Copilot CLI's own last line of the failing command)."""
DENIED = "Denied by preToolUse hook: "
"""How Copilot CLI hands the model a call its hook denied: this, then the hook's reason."""
STOPPED = "otelguard stopped this turn ("
NOTICE = "otelguard is not guarding this session"


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    running = start_starter_serve(tmp_path)
    yield running
    stop_process(running.process)


def run_copilot(root: Path, model_url: str, sidecar_url: str) -> subprocess.CompletedProcess[bytes]:
    """Copilot CLI in a temp home, its project's ``.github/hooks/otelguard.json`` as
    ``--print-settings`` prints it (with a deadline far above the default: a loaded machine must not
    make a hook fail open), beside what running offline takes."""
    project, home = root / "project", root / "home"
    (project / ".github" / "hooks").mkdir(parents=True)
    home.mkdir()
    printed = subprocess.run(
        [sys.executable, "-m", "otelguard", "hook", "copilot-cli", "--print-settings", "--timeout", "20"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    (project / ".github" / "hooks" / "otelguard.json").write_bytes(printed.stdout)
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("COPILOT_", "GITHUB_", "GH_", "OTELGUARD_"))
    }
    env.update(
        HOME=str(home), XDG_CACHE_HOME=str(root / "cache"), XDG_CONFIG_HOME=str(home / ".config"),
        COPILOT_OFFLINE="true", COPILOT_PROVIDER_BASE_URL=model_url, COPILOT_PROVIDER_TYPE="anthropic",
        COPILOT_PROVIDER_API_KEY="sk-ant-scripted", COPILOT_MODEL="claude-sonnet-4.5",
        COPILOT_AUTO_UPDATE="false", OTELGUARD_URL=sidecar_url,
    )  # fmt: skip
    return subprocess.run(
        [str(copilot_cli()), "-p", "List /nonexistent-dir", "--allow-all-tools", "--trust-folder",
         "--disable-client-telemetry", "--no-auto-update"],
        cwd=project, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=RUN_TIMEOUT,
    )  # fmt: skip


def results_of_each_call(loop: list[dict[str, Any]]) -> list[str]:
    """What the model read of each call, in order: each step of the loop reports the call before."""
    return [result_text(tool_results(body)[-1]) for body in loop[1:]]


def test_the_printed_settings_name_each_event() -> None:
    printed = subprocess.run(
        [sys.executable, "-m", "otelguard", "hook", "copilot-cli", "--print-settings"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    block = json.loads(printed.stdout)
    assert block["version"] == 1
    for event, (handler,) in block["hooks"].items():
        assert handler["type"] == "command" and handler["bash"].endswith(f"copilot-cli --event {event}")
    assert {"preToolUse", "postToolUse", "userPromptSubmitted", "agentStop", "sessionEnd"} == set(
        block["hooks"]
    )


def test_copilot_cli_runs_then_refuses_then_denies_every_later_call(tmp_path: Path, serve: Serve) -> None:
    sidecar = f"http://127.0.0.1:{serve.port}"
    with scripted_model(COMMAND, MAX_CALLS, tool="bash") as model:
        run = run_copilot(tmp_path, model.url, sidecar)
        loop = list(model.loop_requests)
    shown = f"exit {run.returncode}; stdout: {run.stdout.decode(errors='replace')[-1500:]}; stderr: {run.stderr.decode(errors='replace')[-1500:]}"
    assert run.returncode == 0, shown
    results = results_of_each_call(loop)
    assert len(results) == MAX_CALLS, (len(results), shown)
    ran = [n for n, text in enumerate(results) if RAN in text]
    refused = [n for n, text in enumerate(results) if text.startswith(DENIED)]
    assert sorted(ran + refused) == list(range(MAX_CALLS)), results
    # first it runs, then it is refused with otelguard's message as the call's result
    assert ran[:1] == [0] and refused and refused[0] > 0, results
    # then blocked: from the block on no call runs again, each refused with the stop's message
    (block,) = [n for n in refused if STOPPED in results[n] and STOPPED not in results[n - 1]]
    assert max(ran) < block and refused[-1] == MAX_CALLS - 1, results
    reason = results[block].removeprefix(DENIED)
    assert all(results[n].removeprefix(DENIED) == reason for n in range(block, MAX_CALLS))
    assert all("nonexistent" not in results[n].removeprefix(DENIED) for n in refused)  # no argument value
    code = reason.removeprefix(STOPPED).split(")")[0]
    series = metric_values(http_get(f"{sidecar}/metrics").decode(), agent="copilot-cli")
    assert series[("decisions", code)] == 1, series
    assert series[("decisions", "turn_halted")] == MAX_CALLS - 1 - block, series
    assert series[("tool_calls", "blocked")] == MAX_CALLS - block, series
    # the command exited 2, which Copilot CLI reports as a success: read from its exit code line
    assert series[("tool_calls", "failed")] == len(ran) and ("tool_calls", "ok") not in series, series
    assert series[("turns", "halted")] == 1, series
    # what the user reads: the stop's reason under the denied call (wrapped to the terminal's width)
    assert f"{DENIED}{reason}" in " ".join(run.stdout.decode(errors="replace").split()), shown


def test_with_the_sidecar_down_every_copilot_call_goes_ahead(tmp_path: Path) -> None:
    """Fail open: the hooks cannot reach a sidecar, and every call runs as if otelguard were absent;
    the user is told once for the session, under the first call (the one hook output Copilot CLI
    shows)."""
    calls = 6
    with scripted_model(COMMAND, calls, tool="bash") as model:
        run = run_copilot(tmp_path, model.url, f"http://127.0.0.1:{free_port()}")
        loop = list(model.loop_requests)
    assert run.returncode == 0, run.stderr.decode(errors="replace")[-2000:]
    results = results_of_each_call(loop)
    assert len(results) == calls and all(RAN in text for text in results), results
    told = (tmp_path / "cache" / "otelguard" / "hook-notified").read_text().split()
    assert len(told) == 1
    shown = run.stdout.decode(errors="replace")
    assert shown.count(NOTICE) == 1, shown[-2000:]
