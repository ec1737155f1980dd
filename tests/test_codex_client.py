"""The real Codex (npm, pinned) run offline against a scripted model, guarded by otelguard.

The model asks again and again for the same failing command. With the hooks installed exactly as
``otelguard hook codex --print-settings`` prints them and the starter config's sidecar: the command
runs, is then refused with otelguard's message reaching the model as the call's output, and, since
nothing a hook answers stops ``codex exec``, every later call of the turn is refused with the stop's
message: none runs again. The sidecar's ``/metrics`` counts it all under ``agent="codex"``. With the
sidecar down, every call goes ahead.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import parser as prometheus_client_parser

from tests.e2e import free_port, http_get, stop_process
from tests.scripted_openai import MODEL, call_outputs, scripted_responses
from tests.side_clients import codex
from tests.test_claude_code_stop import start_starter_serve
from tests.test_cli_serve import Serve

COMMAND = "ls /nonexistent-dir"
MAX_CALLS = 24
"""The scripted model's calls before it gives up by itself: far past the block."""
RUN_TIMEOUT = 600.0
RAN = "Process exited with code 2"
"""What the model reads of a call that ran (Codex's own output of the failing command)."""


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    running = start_starter_serve(tmp_path)
    yield running
    stop_process(running.process)


def codex_home(root: Path, model_url: str) -> Path:
    """``CODEX_HOME`` with the scripted model as the provider and the hooks as ``--print-settings``
    prints them (with a deadline far above the default: a loaded machine must not make a hook fail
    open)."""
    home = root / "codex-home"
    home.mkdir(parents=True)
    (home / "config.toml").write_text(
        f'model = "{MODEL}"\n'
        'model_provider = "scripted"\n'
        'approval_policy = "never"\n'
        'sandbox_mode = "danger-full-access"\n'
        "check_for_update_on_startup = false\n"
        "[model_providers.scripted]\n"
        'name = "scripted"\n'
        f'base_url = "{model_url}/v1"\n'
        'wire_api = "responses"\n'
        'env_key = "SCRIPTED_API_KEY"\n'
        "[analytics]\n"
        "enabled = false\n"
    )
    printed = subprocess.run(
        [sys.executable, "-m", "otelguard", "hook", "codex", "--print-settings", "--timeout", "20"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    assert b"--dangerously-bypass-hook-trust" in printed.stderr  # what trusting the hooks takes
    (home / "hooks.json").write_bytes(printed.stdout)
    return home


def run_codex(root: Path, model_url: str, sidecar_url: str) -> subprocess.CompletedProcess[bytes]:
    project = root / "project"
    project.mkdir()
    home = codex_home(root, model_url)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "CODEX_", "OTELGUARD_"))}
    env.update(
        HOME=str(root), XDG_CACHE_HOME=str(root / "cache"), CODEX_HOME=str(home),
        SCRIPTED_API_KEY="sk-scripted", OTELGUARD_URL=sidecar_url,
    )  # fmt: skip
    return subprocess.run(
        [str(codex()), "exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-hook-trust",
         "List /nonexistent-dir"],
        cwd=project, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=RUN_TIMEOUT,
    )  # fmt: skip


def outputs_of_each_call(loop: list[dict[str, Any]]) -> list[str]:
    """What the model read of each call, in order: each step of the loop reports the call before."""
    return [call_outputs(body)[-1] for body in loop[1:]]


def test_codex_runs_then_refuses_then_denies_every_later_call(tmp_path: Path, serve: Serve) -> None:
    sidecar = f"http://127.0.0.1:{serve.port}"
    with scripted_responses(COMMAND, MAX_CALLS) as model:
        run = run_codex(tmp_path, model.url, sidecar)
        loop = list(model.loop_requests)
    shown = f"exit {run.returncode}; stderr: {run.stderr.decode(errors='replace')[-2000:]}"
    assert run.returncode == 0, shown
    outputs = outputs_of_each_call(loop)
    assert len(outputs) == MAX_CALLS, (len(outputs), shown)
    ran = [n for n, text in enumerate(outputs) if RAN in text]
    refused = [n for n, text in enumerate(outputs) if text.startswith(DENIED)]
    assert sorted(ran + refused) == list(range(MAX_CALLS)), outputs
    # first it runs, then it is refused with otelguard's message as the call's output
    assert ran[:1] == [0] and refused and refused[0] > 0, outputs
    # then blocked: from the block on no call runs again, each refused with the stop's message
    (block,) = [n for n in refused if STOPPED in outputs[n] and STOPPED not in outputs[n - 1]]
    assert max(ran) < block and refused[-1] == MAX_CALLS - 1, outputs
    reason = guard_reason(outputs[block])
    assert all(guard_reason(outputs[n]) == reason for n in range(block, MAX_CALLS))
    assert all("nonexistent" not in guard_reason(outputs[n]) for n in refused)  # no argument value
    code = reason.removeprefix(STOPPED).split(")")[0]
    series = metric_values(http_get(f"{sidecar}/metrics").decode())
    assert series[("decisions", code)] == 1, series
    assert series[("decisions", "turn_halted")] == MAX_CALLS - 1 - block, series
    assert series[("tool_calls", "blocked")] == MAX_CALLS - block, series
    assert series[("tool_calls", "ok")] + series.get(("tool_calls", "failed"), 0) == len(ran), series
    assert series[("turns", "halted")] == 1, series


DENIED = "Command blocked by PreToolUse hook: "
"""How Codex hands the model a call its hook denied: this, the hook's reason, then the command."""
STOPPED = "otelguard stopped this turn ("


def guard_reason(output: str) -> str:
    """The hook's reason in what Codex told the model of a denied call (Codex adds the command)."""
    return output.removeprefix(DENIED).rsplit(". Command: ", 1)[0]


def test_with_the_sidecar_down_every_codex_call_goes_ahead(tmp_path: Path) -> None:
    """Fail open: the hooks cannot reach a sidecar, and every call runs as if otelguard were absent;
    the guard being off is noted once for the session (the notice file holds one session)."""
    sidecar = f"http://127.0.0.1:{free_port()}"
    calls = 6
    with scripted_responses(COMMAND, calls) as model:
        run = run_codex(tmp_path, model.url, sidecar)
        loop = list(model.loop_requests)
    assert run.returncode == 0, run.stderr.decode(errors="replace")[-2000:]
    outputs = outputs_of_each_call(loop)
    assert len(outputs) == calls and all(RAN in text for text in outputs), outputs
    told = (tmp_path / "cache" / "otelguard" / "hook-notified").read_text().split()
    assert len(told) == 1


def metric_values(exposition: str, agent: str = "codex") -> dict[tuple[str, str], float]:
    """``(family, outcome or code)`` → value, for otelguard's series of ``agent``."""
    values: dict[tuple[str, str], float] = {}
    for family in prometheus_client_parser.text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.labels.get("agent") != agent:
                continue
            name = sample.name.removeprefix("otelguard_").removesuffix("_total")
            key = sample.labels.get("outcome") or sample.labels.get("code")
            if name in ("tool_calls", "decisions", "turns") and key:
                values[(name, key)] = values.get((name, key), 0) + sample.value
    return values
