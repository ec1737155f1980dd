"""The shipped delegation-tree histories (otelguard/data/examples/delegation-tree/), backtested with the
config beside them against Debian's real prometheus and promtool: where each conversation's tree runs
away, ``OtelguardRunawayDelegationTree`` fires (and only it); the healthy trees stay quiet; without
tree caps the same runaway goes unseen, since every agent stays under its own caps."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.backtest_fleet import TREE_CONFIG, TREES, tree_history
from otelguard.cli import main
from tests.e2e import require_binary

CONFIG = TREES / "otelguard.yaml"
TREE_ALERT = "OtelguardRunawayDelegationTree"


@pytest.fixture(autouse=True)
def _binaries() -> None:
    require_binary("prometheus")
    require_binary("promtool")


def backtest(*arguments: str) -> tuple[int, dict[str, Any]]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["backtest", *arguments, "--json"])
    return code, json.loads(out.getvalue())


def test_the_shipped_tree_histories_are_what_the_generator_writes() -> None:
    assert CONFIG.read_text(encoding="utf-8") == TREE_CONFIG
    for kind, runaway in (("runaway", True), ("healthy", False)):
        written = tree_history(runaway)
        directory: Path = TREES / kind
        assert {p.name for p in directory.glob("*.jsonl")} == set(written)
        for name, text in written.items():
            assert (directory / name).read_text(encoding="utf-8") == text, name


def test_a_runaway_tree_fires_the_tree_alert_and_nothing_else() -> None:
    code, document = backtest(str(TREES / "runaway"), "--config", str(CONFIG))
    assert code == 1
    assert document["fired"] == [TREE_ALERT]
    [entry] = [a for a in document["alerts"] if a["alert"] == TREE_ALERT]
    [interval] = entry["intervals"]
    assert interval["labels"]["severity"] == "critical"
    # the subagents refused are the ones of sidechains too: the tree spans the main agent and its subagents
    quiet = {a["alert"]: a["why_quiet"] for a in document["alerts"] if not a["fired"]}
    assert "short of its for: 10m" in quiet["OtelguardRunawayDelegationLoop"]
    assert document["replay"]["errors"] == []


def test_the_healthy_trees_stay_quiet() -> None:
    code, document = backtest(str(TREES / "healthy"), "--config", str(CONFIG))
    assert code == 0 and document["fired"] == []
    [entry] = [a for a in document["alerts"] if a["alert"] == TREE_ALERT]
    assert entry["why_quiet"] == "its condition never held (for: 5m)"


def test_without_tree_caps_the_runaway_goes_unseen() -> None:
    """Every agent of a runaway tree stays under its own turn and session caps: only a budget across
    the tree (the main session and its subagents' sidechains, one tree) sees it."""
    code, document = backtest(str(TREES / "runaway"))
    assert code == 0 and document["fired"] == []
