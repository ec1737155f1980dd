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
from hypothesis import given, settings
from hypothesis import strategies as st

from otelguard import GuardConfig
from otelguard.integrations.hermes import HermesGuardPlugin
from tests.e2e import free_port
from tests.integrations.test_hermes import _Hooks, _sample
from tests.side_venvs import hermes_python

SIDE = Path(__file__).resolve().parent.parent / "side"
SCRIPT = SIDE / "hermes_delegation_run.py"
LOOP_SCRIPT = SIDE / "hermes_delegate_loop_run.py"
CONFIG = """\
mode: unattended
caps:
  tree: {subagents: 5}
delegation: {max_depth: 3}
telemetry: {turn_spans: true}
"""


def side_run(script: Path, config_text: str, work: Path) -> dict[str, Any]:
    """Run ``script`` in the hermes side venv with the otelguard config ``config_text``."""
    python = hermes_python()
    config = work / "otelguard.yaml"
    config.write_text(config_text)
    env = {
        **os.environ,
        "OTELGUARD_CONFIG": str(config),
        "OTELGUARD_METRICS_PORT": str(free_port()),
        "OTELGUARD_SIGNATURE_KEY": "hermes-test-key",
        "PYTHONPATH": "",
    }
    done = subprocess.run(
        [str(python), str(script), str(work)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.fixture(scope="module")
def tree_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return side_run(SCRIPT, CONFIG, tmp_path_factory.mktemp("hermes-tree"))


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


# -- a real hermes AIAgent loop: each orchestrator child delegates the task on -----------------

LOOP_CONFIG = """\
mode: unattended
caps:
  tree: {subagents: 50}
delegation: {max_depth: %d, cycles: %s}
telemetry: {turn_spans: true}
"""


@pytest.fixture(scope="module")
def loop_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return side_run(LOOP_SCRIPT, LOOP_CONFIG % (3, "true"), tmp_path_factory.mktemp("hermes-loop"))


@pytest.fixture(scope="module")
def deep_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return side_run(LOOP_SCRIPT, LOOP_CONFIG % (2, "false"), tmp_path_factory.mktemp("hermes-deep"))


def test_a_real_delegate_task_loop_is_warned_then_refused_then_stopped(loop_run: dict[str, Any]) -> None:
    """A real hermes run whose model delegates to an orchestrator that delegates to an orchestrator
    again and again: the second orchestrator's delegation goes back to a role on the path (warned,
    it runs); the third would go back a second time (refused: its model reads why), and its next try
    stops that child's turn. The first orchestrator gets its child's summary and answers."""
    metrics = loop_run["metrics"]
    orchestrator = {"agent": "hermes/orchestrator", "tool": "delegate_task"}
    assert _sample(metrics, "otelguard_decisions_total", code="delegation_cycle_warn", **orchestrator) == 1
    assert _sample(metrics, "otelguard_decisions_total", code="delegation_cycle_reject", **orchestrator) == 1
    assert _sample(metrics, "otelguard_decisions_total", code="delegation_cycle_block", **orchestrator) == 1
    shown = loop_run["shown"]
    assert any("delegation_cycle_reject" in text for text in shown)  # the refusal reached the model
    assert any("delegation_cycle_block" in text for text in shown)
    assert any('"summary": "done 2"' in text for text in shown)  # orchestrator(1) read its child's answer
    assert _sample(metrics, "otelguard_turns_total", agent="hermes/orchestrator", outcome="halted") == 1
    assert _sample(metrics, "otelguard_turns_total", agent="hermes/orchestrator", outcome="completed") == 1


def test_a_real_delegate_task_loop_stops_at_the_depth_limit(deep_run: dict[str, Any]) -> None:
    """With cycles off, the orchestrator at ``max_depth: 2`` may not delegate (only that call is
    refused: ``delegation_depth``); it answers, and its delegator gets the answer."""
    metrics = deep_run["metrics"]
    assert (
        _sample(metrics, "otelguard_decisions_total", agent="hermes/orchestrator", code="delegation_depth")
        == 1
    )
    shown = deep_run["shown"]
    assert any("delegation_depth" in text for text in shown)
    assert any('"summary": "done 2"' in text for text in shown)
    assert _sample(metrics, "otelguard_turns_total", agent="hermes/orchestrator", outcome="completed") == 2


# -- in process: the hooks hermes hands anything ---------------------------------------------

TREE = GuardConfig.from_mapping(
    {"signature_key": "k", "mode": "unattended", "caps": {"tree": {"subagents": 3}}}
)
anything = st.one_of(st.none(), st.text(max_size=8), st.integers(), st.lists(st.text(max_size=3), max_size=2))


@settings(max_examples=200, deadline=None)
@given(
    parent=anything,
    child=anything,
    role=anything,
    args=st.one_of(anything, st.dictionaries(st.text(max_size=5), anything, max_size=3)),
)
def test_the_delegation_hooks_never_raise_whatever_hermes_sends(
    parent: Any, child: Any, role: Any, args: Any
) -> None:
    plugin = HermesGuardPlugin(TREE)
    registry = _Hooks()
    plugin.register(registry)
    hooks = registry.hooks
    hooks["pre_llm_call"](session_id="root", turn_id="t")
    hooks["subagent_start"](parent_session_id=parent, child_session_id=child, child_role=role)
    session = child if isinstance(child, str) else ""
    hooks["pre_tool_call"](
        tool_name="delegate_task", args=args, session_id=session, tool_call_id="c", turn_id="t"
    )
    hooks["post_tool_call"](
        tool_name="delegate_task", args=args, result="{}", session_id=session, tool_call_id="c", status="ok"
    )
    hooks["subagent_stop"](child_session_id=child)


def test_children_beyond_the_bound_have_their_turns_ended_first_started_first() -> None:
    """At most ``MAX_CHILDREN`` children held: past it the least recently started child's turn
    ends (counted) and its guard is forgotten."""
    from prometheus_client import CollectorRegistry

    from otelguard import Telemetry
    from otelguard.integrations import hermes

    registry = CollectorRegistry()
    plugin = HermesGuardPlugin(TREE, telemetry=Telemetry(registry=registry))
    plugin.on_pre_llm_call(session_id="root", turn_id="t")
    for i in range(hermes.MAX_CHILDREN + 1):
        plugin.on_subagent_start(parent_session_id="root", child_session_id=f"c{i}", child_role="leaf")
    ended = registry.get_sample_value(
        "otelguard_turns_total", {"agent": "hermes/leaf", "outcome": "completed"}
    )
    assert ended == 1  # the first child's turn, ended when the bound was passed
    assert plugin._child("c0") is None
    assert plugin._child(f"c{hermes.MAX_CHILDREN}") is not None


def test_a_real_delegate_task_loop_is_one_trace(loop_run: dict[str, Any]) -> None:
    """hermes runs the children in its thread pool (the top-level delegation in the background):
    each child's ``invoke_agent`` span is still under the ``delegate_task`` call that started it."""
    spans = loop_run["spans"]
    assert len({s["trace_id"] for s in spans}) == 1
    by_id = {s["span_id"]: s for s in spans}
    children = [s for s in spans if s["name"].startswith("invoke_agent") and s["depth"]]
    assert sorted(s["depth"] for s in children) == [1, 2]  # the third was refused
    for child in children:
        call = by_id[child["parent"]]
        assert call["tool"] == "delegate_task"
        assert by_id[call["parent"]]["depth"] == child["depth"] - 1
