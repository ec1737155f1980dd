"""The hermes-agent plugin, run by hermes' own plugin manager and tool dispatch in a side venv.

hermes-agent is never installed into the project's environment (it installs top-level ``agent``,
``tools`` and ``utils`` modules); the side venv is built once and cached (``tests/side_venvs.py``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from otelguard import GuardConfig
from otelguard.integrations.hermes import HermesGuardPlugin
from tests.e2e import free_port
from tests.side_venvs import hermes_python

SCRIPT = Path(__file__).resolve().parent.parent / "side" / "hermes_agent_run.py"


def _sample(metrics: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in metrics.splitlines():
        if not line.startswith(name + "{"):
            continue
        if all(f'{key}="{value}"' in line for key, value in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.fixture(scope="module")
def hermes_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    python = hermes_python()
    work = tmp_path_factory.mktemp("hermes")
    config = work / "otelguard.yaml"
    config.write_text("mode: unattended\n")
    env = {
        **os.environ,
        "OTELGUARD_CONFIG": str(config),
        "OTELGUARD_METRICS_PORT": str(free_port()),
        "OTELGUARD_SIGNATURE_KEY": "hermes-test-key",
        "PYTHONPATH": "",
    }
    done = subprocess.run(
        [str(python), str(SCRIPT), str(work)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_hermes_discovers_the_plugin_by_entry_point(hermes_run: dict[str, Any]) -> None:
    """hermes' plugin manager finds otelguard in the hermes_agent.plugins group and loads it."""
    (plugin,) = hermes_run["plugin"]
    assert plugin["source"] == "entrypoint"
    assert plugin["enabled"] is True and plugin["error"] is None
    assert plugin["hooks"] >= 3


def _guard_code(result: str) -> str | None:
    """The guard's decision code when hermes returned the guard's refusal as the tool result."""
    try:
        refusal = json.loads(json.loads(result)["error"])
    except (ValueError, KeyError, TypeError):
        return None
    code: str = refusal["otelguard"]["code"]
    return code


def test_a_failing_call_repeated_runs_five_times_then_is_blocked(hermes_run: dict[str, Any]) -> None:
    """exact_failure under mode unattended: five calls run (hermes' own read-loop notice counts as the
    failure it reports), then the guard refuses the sixth and the six after it (rejects: they do not
    run, the turn goes on) and, sent again after those, blocks the 13th: the turn stops."""
    codes = [_guard_code(r) for r in hermes_run["looping"]]
    assert codes == [None] * 5 + ["exact_failure_reject"] * 7 + ["exact_failure_block"]
    assert "read_file" in json.loads(hermes_run["looping"][5])["error"]


def test_warnings_reach_the_model_through_transform_tool_result(hermes_run: dict[str, Any]) -> None:
    """From the second identical failure on, hermes hands the model the result with the guard's warning."""
    results = hermes_run["looping"]
    assert "exact_failure_warn" not in results[0]
    assert all("[otelguard warn: exact_failure_warn]" in r for r in results[1:5])


def test_sessions_and_turns_are_separate(hermes_run: dict[str, Any]) -> None:
    """Another session is not blocked, and a new turn of the halted session starts clean."""
    assert _guard_code(hermes_run["other_session"]) is None
    assert _guard_code(hermes_run["next_turn"]) is None


def test_metrics_are_served_from_the_hermes_process(hermes_run: dict[str, Any]) -> None:
    """OTELGUARD_METRICS_PORT serves the decisions, outcomes and turns of the hermes run."""
    metrics = hermes_run["metrics"]
    agent = {"agent": "hermes"}
    assert _sample(metrics, "otelguard_tool_calls_total", outcome="failed", tool="read_file", **agent) == 7
    assert _sample(metrics, "otelguard_tool_calls_total", outcome="rejected", tool="read_file", **agent) == 7
    assert _sample(metrics, "otelguard_tool_calls_total", outcome="blocked", tool="read_file", **agent) == 1
    assert (
        _sample(metrics, "otelguard_tool_calls_total", outcome="refused", tool="send_message", **agent) == 1
    )
    assert _sample(metrics, "otelguard_decisions_total", code="exact_failure_block", **agent) == 1
    assert _sample(metrics, "otelguard_decisions_total", code="exact_failure_warn", **agent) == 4
    assert _sample(metrics, "otelguard_turns_total", outcome="halted", **agent) == 1
    assert _sample(metrics, "otelguard_turns_total", outcome="completed", **agent) >= 1
    assert _sample(metrics, "otelguard_turns_total", outcome="errored", **agent) == 1
    assert not re.search(r"no-such-file", metrics)


class _Hooks:
    def __init__(self) -> None:
        self.hooks: dict[str, Any] = {}

    def register_hook(self, hook_name: str, callback: Any) -> None:
        self.hooks[hook_name] = callback


def _plugin(**kwargs: Any) -> tuple[HermesGuardPlugin, dict[str, Any]]:
    config = None if "host" in kwargs else GuardConfig(mode="unattended", signature_key="k")
    plugin = HermesGuardPlugin(config, **kwargs)
    registry = _Hooks()
    plugin.register(registry)
    return plugin, registry.hooks


def _call(hooks: dict[str, Any], session: str, call_id: str, status: str = "error") -> Any:
    common = {"tool_name": "read_file", "args": {"path": "/x"}, "session_id": session, "turn_id": "t"}
    directive = hooks["pre_tool_call"](tool_call_id=call_id, **common)
    if directive is None:
        hooks["post_tool_call"](tool_call_id=call_id, result='{"error": "x"}', status=status, **common)
    else:
        hooks["post_tool_call"](
            tool_call_id=call_id, result="{}", status="blocked", error_type="plugin_block", **common
        )
    return directive


def test_own_refusal_echoed_as_blocked_is_not_counted_again() -> None:
    """hermes reports the guard's own block as a blocked post_tool_call: it is not a second refusal."""
    plugin, hooks = _plugin()
    directives = [_call(hooks, "s", f"c{i}") for i in range(8)]
    assert [d is None for d in directives] == [True] * 5 + [False] * 3
    assert directives[5]["action"] == "block" and directives[5]["message"]
    session = plugin.sessions.peek("s")
    assert session is not None and session.main.end_turn().tool_calls == 8


@pytest.mark.parametrize(
    ("ended", "outcome"),
    [
        ({"completed": True, "interrupted": False}, "completed"),
        ({"completed": False, "interrupted": False}, "errored"),
        ({"completed": False, "interrupted": True}, "completed"),  # the user stopped it
        ({}, "completed"),  # a hermes that does not say
    ],
)
def test_a_run_hermes_reports_as_not_completed_is_an_errored_turn(
    ended: dict[str, bool], outcome: str
) -> None:
    from otelguard import Guard
    from otelguard.core.edges import Edges
    from otelguard.core.sessions import SessionHost
    from otelguard.testing import RecordingObserver

    recorder = RecordingObserver()
    edges = Edges(observer=lambda _config: recorder)
    config = GuardConfig(mode="unattended", signature_key="k")
    _, hooks = _plugin(host=SessionHost(config, edges=edges, guard_class=Guard, agent="hermes"))
    hooks["pre_llm_call"](session_id="s", turn_id="t")
    _call(hooks, "s", "c1", status="ok")
    hooks["on_session_end"](session_id="s", turn_id="t", **ended)
    (summary,) = recorder.summaries
    assert summary.outcome == outcome and summary.tool_calls == 1


def test_sessions_are_bounded() -> None:
    """The session pool keeps at most max_sessions guards."""
    plugin, hooks = _plugin(max_sessions=3)
    for i in range(50):
        _call(hooks, f"s{i}", "c", status="ok")
    assert len(plugin.sessions) == 3


def test_environment_names_a_missing_config_file(tmp_path: Path) -> None:
    """A bad OTELGUARD_CONFIG is a ConfigError at register time, not a crash in a hook."""
    from otelguard import ConfigError

    with pytest.raises(ConfigError):
        HermesGuardPlugin.from_environment({"OTELGUARD_CONFIG": str(tmp_path / "missing.yaml")})
    with pytest.raises(ConfigError, match="OTELGUARD_METRICS_PORT"):
        HermesGuardPlugin.from_environment({"OTELGUARD_METRICS_PORT": "http"})


def test_the_plugin_reads_a_config_in_hermes_agents_dialect(tmp_path: Path) -> None:
    """OTELGUARD_CONFIG may hold hermes-agent's own ``tool_loop_guardrails`` section: the plugin reads
    it through the hermes dialect (the core's config reads only otelguard's keys)."""
    path = tmp_path / "guardrails.yaml"
    path.write_text("tool_loop_guardrails:\n  hard_stop_enabled: true\n  loop_caps: {max_web_searches: 3}\n")
    plugin = HermesGuardPlugin.from_environment({"OTELGUARD_CONFIG": str(path)})
    config = plugin.sessions.config
    assert config.hard_stop is True and config.caps.turn["web_search"] == 3


def test_importing_the_plugin_does_not_import_hermes() -> None:
    """The plugin module imports no hermes module (hermes is never in the project's venv)."""
    code = "import sys, otelguard.integrations.hermes; print(sorted(m for m in ('agent','tools','hermes_cli','model_tools') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
