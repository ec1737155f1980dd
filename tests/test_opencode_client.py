"""The real OpenCode (npm, pinned) run offline against a scripted model, guarded by otelguard's plugin.

The model asks again and again for the same failing command. With the plugin exactly as ``otelguard
hook opencode --print-plugin`` prints it and the starter config's sidecar: the command runs, is then
refused with otelguard's message reaching the model as the call's error, and at the block the plugin
aborts the run: no further model request, the stop's message on stderr. The sidecar's ``/metrics``
counts it all under ``agent="opencode"``. With the sidecar down, every call goes ahead and the user
is told once.

OpenCode installs ``@opencode-ai/plugin`` into ``.opencode`` on its first start with a local plugin
(from npm): the folder is prepared from the cache beforehand, so the run stays offline.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import free_port, http_get, stop_process
from tests.scripted_anthropic import MODEL, result_text, scripted_model, tool_results
from tests.side_clients import opencode, opencode_plugin_folder
from tests.test_claude_code_stop import start_starter_serve
from tests.test_cli_serve import Serve
from tests.test_codex_client import metric_values

COMMAND = "ls /nonexistent-dir"
MAX_CALLS = 24
"""The scripted model's calls before it gives up by itself: far past the block."""
RUN_TIMEOUT = 600.0
RAN = "No such file or directory"
"""What the model reads of a call that ran (the failing command's own output)."""
STOPPED = "otelguard stopped this turn ("
NOTICE = "otelguard is not guarding this session"


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    running = start_starter_serve(tmp_path)
    yield running
    stop_process(running.process)


def run_opencode(root: Path, model_url: str, sidecar_url: str) -> subprocess.CompletedProcess[bytes]:
    """OpenCode in a temp home, its project holding the plugin as ``--print-plugin`` prints it (with
    a deadline far above the default: a loaded machine must not make the plugin fail open), the
    dependencies OpenCode would fetch, and the scripted model as its Anthropic provider."""
    project, home = root / "project", root / "home"
    plugins = project / ".opencode" / "plugin"
    plugins.mkdir(parents=True)
    home.mkdir()
    printed = subprocess.run(
        [sys.executable, "-m", "otelguard", "hook", "opencode", "--print-plugin", "--timeout", "20"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    (plugins / "otelguard.js").write_bytes(printed.stdout)
    prepared = opencode_plugin_folder()
    for name in ("package.json", "package-lock.json"):
        shutil.copy(prepared / name, project / ".opencode" / name)
    (project / ".opencode" / "node_modules").symlink_to(prepared / "node_modules")
    config = {
        "model": f"anthropic/{MODEL}",
        "provider": {
            "anthropic": {
                "npm": "@ai-sdk/anthropic",
                "name": "Anthropic",
                "options": {"baseURL": f"{model_url}/v1", "apiKey": "sk-ant-scripted"},
                "models": {MODEL: {"name": MODEL, "tool_call": True}},
            }
        },
        "permission": {"bash": "allow", "edit": "allow"},
        "autoupdate": False,
        "share": "disabled",
    }
    (project / "opencode.json").write_text(json.dumps(config))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENCODE", "ANTHROPIC_", "OTELGUARD_"))}
    env.update(
        HOME=str(home), PWD=str(project), XDG_CACHE_HOME=str(home / ".cache"),
        XDG_CONFIG_HOME=str(home / ".config"), XDG_DATA_HOME=str(home / ".local" / "share"),
        XDG_STATE_HOME=str(home / ".local" / "state"), OPENCODE_DISABLE_MODELS_FETCH="true",
        OPENCODE_DISABLE_AUTOUPDATE="true", OPENCODE_DISABLE_SHARE="true",
        OPENCODE_DISABLE_LSP_DOWNLOAD="true", OPENCODE_DISABLE_DEFAULT_PLUGINS="true",
        OTELGUARD_URL=sidecar_url,
    )  # fmt: skip
    return subprocess.run(
        [str(opencode()), "run", "List /nonexistent-dir", "--format", "json"],
        cwd=project, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=RUN_TIMEOUT,
    )  # fmt: skip


def results_of_each_call(loop: list[dict[str, Any]]) -> list[tuple[str, bool]]:
    """What the model read of each call, in order, and whether it was an error: each step of the
    loop reports the call before."""
    blocks = [tool_results(body)[-1] for body in loop[1:]]
    return [(result_text(block), block.get("is_error") is True) for block in blocks]


def test_the_printed_plugin_is_a_module_with_the_settings_filled_in() -> None:
    printed = subprocess.run(
        [sys.executable, "-m", "otelguard", "hook", "opencode", "--print-plugin", "--url", "http://h:1"],
        check=True, capture_output=True, timeout=60, text=True,
    )  # fmt: skip
    assert "export const Otelguard" in printed.stdout and "__OTELGUARD" not in printed.stdout
    assert 'const WRITTEN_URL = "http://h:1";' in printed.stdout
    checked = subprocess.run(
        ["node", "--check", "--input-type=module"],
        input=printed.stdout,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert checked.returncode == 0, checked.stderr


def test_opencode_runs_then_refuses_then_stops(tmp_path: Path, serve: Serve) -> None:
    sidecar = f"http://127.0.0.1:{serve.port}"
    with scripted_model(COMMAND, MAX_CALLS, tool="bash") as model:
        run = run_opencode(tmp_path, model.url, sidecar)
        loop = list(model.loop_requests)
    shown = f"exit {run.returncode}; stdout: {run.stdout.decode(errors='replace')[-1500:]}; stderr: {run.stderr.decode(errors='replace')[-1500:]}"
    results = results_of_each_call(loop)
    ran = [n for n, (text, error) in enumerate(results) if RAN in text and not error]
    refused = [n for n, (text, error) in enumerate(results) if error and RAN not in text]
    # first it runs, then it is refused with otelguard's message as the call's error
    assert ran[:1] == [0] and refused, (results, shown)
    assert sorted(ran + refused) == list(range(len(results))) and max(ran) < min(refused), results
    assert results[refused[0]][0].startswith("Not run: bash"), results
    assert all("nonexistent" not in results[n][0] for n in refused)  # no argument value
    # then stopped: the plugin aborts the run at the blocked call, no model request after it
    series = metric_values(http_get(f"{sidecar}/metrics").decode(), agent="opencode")
    blocks = [code for family, code in series if family == "decisions" and code.endswith("_block")]
    assert len(blocks) == 1 and series[("decisions", blocks[0])] == 1, series
    assert len(loop) == len(results) + 1 < MAX_CALLS, (len(loop), shown)
    assert series[("tool_calls", "failed")] == len(ran) and series[("tool_calls", "rejected")] == len(refused)
    assert series[("tool_calls", "blocked")] == 1 and series[("turns", "halted")] == 1, series
    # what the user reads: the stop's reason on stderr, and the run aborted
    assert f"{STOPPED}{blocks[0]})" in run.stderr.decode(errors="replace"), shown
    assert b"MessageAbortedError" in run.stdout and run.returncode == 1, shown


def test_with_the_sidecar_down_every_opencode_call_goes_ahead(tmp_path: Path) -> None:
    """Fail open: the plugin cannot reach a sidecar, and every call runs as if otelguard were absent;
    the user is told once."""
    calls = 6
    with scripted_model(COMMAND, calls, tool="bash") as model:
        run = run_opencode(tmp_path, model.url, f"http://127.0.0.1:{free_port()}")
        loop = list(model.loop_requests)
    assert run.returncode == 0, run.stderr.decode(errors="replace")[-2000:]
    results = results_of_each_call(loop)
    assert len(results) == calls and all(RAN in text and not error for text, error in results), results
    shown = run.stderr.decode(errors="replace")
    assert shown.count(NOTICE) == 1, shown[-2000:]
