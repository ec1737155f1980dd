"""What the adapters' model-turn tests share: the config that keeps the scripts short, and reading
the guard's model decisions back from the metrics."""

from __future__ import annotations

from collections import Counter
from typing import Any

from otelguard import GuardConfig
from tests.integrations.conftest import Rig

NO_ACTION_WARN = 2
NO_ACTION_HALT = 4


def stalls() -> GuardConfig:
    """Replies without a valid call: warned at the 2nd, stopped at the 4th."""
    return GuardConfig(
        mode="unattended",
        warn_after={"no_action": NO_ACTION_WARN},
        hard_stop_after={"no_action": NO_ACTION_HALT},
    )


REPLY_TOKENS = 500  # every scripted reply reports 400 input + 100 output tokens
INPUT_TOKENS, OUTPUT_TOKENS = 400, 100


def token_caps(turn: int = 0, session: int = 0) -> GuardConfig:
    caps: dict[str, Any] = {}
    if turn:
        caps["turn"] = {"tokens": turn}
    if session:
        caps["session"] = {"tokens": session}
    return GuardConfig(mode="unattended", caps=caps)


def decisions(rig: Rig, tool: str | None = None) -> Counter[str]:
    """Decision codes counted in ``otelguard_decisions_total`` (of ``tool`` when given)."""
    counted: Counter[str] = Counter()
    for family in rig.registry.collect():
        for sample in family.samples:
            if sample.name != "otelguard_decisions_total":
                continue
            if tool is None or sample.labels.get("tool") == tool:
                counted[sample.labels["code"]] += int(sample.value)
    return +counted


def model_calls(rig: Rig, agent: str = "default") -> dict[str, float]:
    return {
        outcome: rig.sample("otelguard_model_calls_total", agent=agent, outcome=outcome)
        for outcome in ("tool_calls", "invalid_tool_call", "no_tool_call")
    }
