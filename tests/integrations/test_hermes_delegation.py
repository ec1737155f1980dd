"""hermes-agent's ``delegate_task`` children in a delegation tree: hermes' own plugin manager fires
the hooks of a tree of children (``subagent_start``/``subagent_stop``, the children's calls through
hermes' real tool dispatch) in the side venv, with the otelguard plugin."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import free_port
from tests.integrations.test_hermes import _sample
from tests.side_venvs import hermes_python

SCRIPT = Path(__file__).resolve().parent.parent / "side" / "hermes_delegation_run.py"
CONFIG = """\
mode: unattended
caps:
  tree: {subagents: 5}
delegation: {max_depth: 3}
telemetry: {turn_spans: true}
"""


@pytest.fixture(scope="module")
def tree_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    python = hermes_python()
    work = tmp_path_factory.mktemp("hermes-tree")
    config = work / "otelguard.yaml"
    config.write_text(CONFIG)
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


def code(directive: Any) -> str | None:
    """The guard's decision code in a block directive (``None``: the call runs)."""
    if directive is None:
        return None
    assert directive["action"] == "block"
    found: str = json.loads(directive["message"])["otelguard"]["code"]
    return found


def test_a_child_delegating_back_to_a_role_on_the_path_is_warned_then_refused_then_stopped(
    tree_run: dict[str, Any],
) -> None:
    """root -> orchestrator -> orchestrator goes back to a role on the path: warned, and it runs;
    the second orchestrator handing to an orchestrator again is refused, then its turn stops."""
    assert code(tree_run["root_to_c1"]) is None
    assert code(tree_run["c1_to_c2"]) is None  # warned (a warning runs)
    assert code(tree_run["c2_to_orchestrator"]) == "delegation_cycle_reject"
    assert code(tree_run["c2_again"]) == "delegation_cycle_block"
    metrics = tree_run["metrics"]
    orchestrator = {"agent": "hermes/orchestrator", "tool": "delegate_task"}
    assert _sample(metrics, "otelguard_decisions_total", code="delegation_cycle_warn", **orchestrator) == 1
    assert _sample(metrics, "otelguard_decisions_total", code="delegation_cycle_reject", **orchestrator) == 1
    assert _sample(metrics, "otelguard_decisions_total", code="delegation_cycle_block", **orchestrator) == 1
    assert _sample(metrics, "otelguard_turns_total", agent="hermes/orchestrator", outcome="halted") == 1


def test_only_the_spawn_at_the_depth_limit_is_refused_and_the_child_goes_on(tree_run: dict[str, Any]) -> None:
    """A child at ``max_depth`` may not delegate (its batch is refused: ``delegation_depth``); its
    own tool calls still run through hermes' dispatch."""
    assert code(tree_run["c3_to_c4"]) is None
    assert code(tree_run["c4_batch"]) == "delegation_depth"
    assert "notes" in tree_run["c4_read"] and "otelguard" not in tree_run["c4_read"]
    assert "notes" in tree_run["c1_read"]
    metrics = tree_run["metrics"]
    assert _sample(metrics, "otelguard_decisions_total", agent="hermes/leaf", code="delegation_depth") == 1
    assert _sample(metrics, "otelguard_turns_total", agent="hermes/leaf", outcome="completed") == 2


def test_the_tree_cap_counts_every_childs_spawns(tree_run: dict[str, Any]) -> None:
    """Four spawns by four agents of the tree; the root's batch of two would be the sixth and
    seventh against ``caps.tree.subagents: 5``: refused (``cap_tree``)."""
    assert code(tree_run["root_batch"]) == "cap_tree"
    metrics = tree_run["metrics"]
    assert _sample(metrics, "otelguard_cap_hits_total", agent="hermes", cap="subagents", scope="tree") == 1


def test_a_childs_own_model_calls_and_run_end_start_no_session_of_its_own(tree_run: dict[str, Any]) -> None:
    """hermes fires ``pre_llm_call`` and ``on_session_end`` under a child's session id too: the
    child's turn is its start to its stop, so they make no second session (nor a tree of its own)."""
    metrics = tree_run["metrics"]
    assert _sample(metrics, "otelguard_turns_total", agent="hermes") == 1  # the root's turn alone


def test_the_tree_is_one_trace_each_child_under_the_delegate_task_call_that_started_it(
    tree_run: dict[str, Any],
) -> None:
    spans = tree_run["spans"]
    assert len({s["trace_id"] for s in spans}) == 1
    by_id = {s["span_id"]: s for s in spans}
    turns = [s for s in spans if s["name"].startswith("invoke_agent")]
    assert sorted((s["name"], s["depth"]) for s in turns) == [
        ("invoke_agent hermes", 0),
        ("invoke_agent hermes/leaf", 2),
        ("invoke_agent hermes/leaf", 3),
        ("invoke_agent hermes/orchestrator", 1),
        ("invoke_agent hermes/orchestrator", 2),
    ]
    for child in (s for s in turns if s["depth"]):
        call = by_id[child["parent"]]
        assert call["tool"] == "delegate_task"  # under the delegating call's span
        assert by_id[call["parent"]]["depth"] == child["depth"] - 1  # which is under its delegator
