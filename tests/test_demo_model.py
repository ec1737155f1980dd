"""The demo's model scenarios: a model stalled, saying the same again without acting, and a token runaway,
each played through a real guard until it stops them, and shown by a real ``otelguard demo``."""

from __future__ import annotations

import threading
from pathlib import Path

from otelguard import Guard, GuardConfig
from otelguard.demo.simulation import (
    DEMO_TOKEN_CAP,
    STALLED_SCENARIO,
    TOKENS_SCENARIO,
    DemoStats,
    SimulatedAgent,
)
from tests.e2e import run_demo

CONFIG = GuardConfig.from_mapping(
    {"mode": "unattended", "signature_key": "demo", "caps": {"turn": {"tokens": DEMO_TOKEN_CAP}}}
)


def played(scenario: str, config: GuardConfig = CONFIG) -> DemoStats:
    stats = DemoStats()
    agent = SimulatedAgent("coder", 0, config, None, stats, threading.Event(), seed=7, interval=0)
    agent.run_turn(Guard(config, agent="coder"), scenario)
    return stats


def test_a_stalled_model_is_warned_then_halted_on_its_replies() -> None:
    stats = played(STALLED_SCENARIO)
    rows = stats.snapshot()["recent"]
    assert [row.code for row in rows] == ["repeated_reply_warn"] * 3 + ["repeated_reply_halt"]
    assert {row.tool_name for row in rows} == {"model"}
    assert stats.halted_turns == 1 and stats.calls == 0  # no tool call was ever made


def test_a_token_runaway_is_stopped_by_the_turn_token_cap() -> None:
    stats = played(TOKENS_SCENARIO)
    (stop,) = [row for row in stats.snapshot()["recent"] if row.code == "cap_turn"]
    assert (stop.tool_name, stop.limit) == ("model", DEMO_TOKEN_CAP)
    assert stop.action in ("halt", "block") and stop.count >= DEMO_TOKEN_CAP
    assert stats.halted_turns == 1 and 0 < stats.calls < 60  # a handful of pages, then no more requests


def test_without_a_token_cap_the_runaway_runs_to_the_demos_own_bound() -> None:
    """A ``--config`` without a token cap: the runaway is never stopped by one (the demo's own
    bound on a turn's steps ends it)."""
    config = GuardConfig.from_mapping({"mode": "unattended", "signature_key": "demo"})
    stats = played(TOKENS_SCENARIO, config)
    assert "cap_turn" not in stats.snapshot()["codes"]


def test_the_demo_plays_both_model_scenarios(tmp_path: Path) -> None:
    """A real ``otelguard demo``: its closing summary counts the stalled model's warnings and halts,
    and its ``/metrics`` carry the token cap's series from the start."""
    with run_demo(tmp_path, duration=12, extra_args=("--rate", "200", "--seed", "3")) as demo:
        body = demo.metrics()
        assert 'cap="tokens"' in body
        assert demo.process.wait(60) == 0
    summary = demo.stdout().splitlines()[-1]
    assert "repeated_reply_warn" in summary and "repeated_reply_halt" in summary, summary
