"""The hermes-agent row of ``python -m benchmarks.integrations_overhead``: a real hermes ``AIAgent``
loop in the side venv, with and without the plugin. No timing is asserted: the document's shape,
and that each arm ran the loop it claims to (the plugin's guards saw every call in the guarded
arms and none in the plain one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.integrations_overhead import ARMS, HERMES, main, measure
from tests.side_venvs import hermes_python, hermes_venv

CALLS = 2


def test_each_arm_runs_hermes_own_loop_and_only_the_guarded_ones_reach_the_guard() -> None:
    hermes_python()  # builds the side venv, installs this checkout into it, or skips with the reason

    figure = measure(HERMES, calls=CALLS, rounds=1)

    assert "skipped" not in figure, figure
    assert figure["framework"] == HERMES and figure["calls"] == CALLS
    for name in (
        "plain_per_call_us",
        *(f"{arm}_{key}" for arm in ARMS[1:] for key in ("added_per_call_us", "ratio")),
    ):
        assert isinstance(figure[name], float), name
    assert figure["plain_per_call_us"] > 0
    runs = figure["runs"]
    assert set(runs) == set(ARMS)
    for arm in ARMS:
        # hermes ran every call the scripted model asked for and took its final answer, in every arm
        assert runs[arm]["tool_results"] == [CALLS] and runs[arm]["finals"] == ["done"], (arm, runs[arm])
    assert runs["plain"]["guard_calls"] == [0] and runs["plain"]["guard_model_requests"] == [0]
    for arm in ARMS[1:]:
        assert runs[arm]["guard_calls"] == [CALLS], (arm, runs[arm])
        assert runs[arm]["guard_model_requests"] == [CALLS + 1], (arm, runs[arm])  # the answer's request too


def test_without_the_side_venv_hermes_is_skipped_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OTELGUARD_SIDE_VENVS", str(tmp_path))
    assert hermes_venv().parent == tmp_path

    assert measure(HERMES, calls=CALLS, rounds=1) == {
        "framework": HERMES,
        "skipped": f"no hermes-agent side venv at {hermes_venv()} (python -m tests.side_venvs builds it)",
    }
    assert main(["--framework", HERMES, "--calls", "1", "--rounds", "1"]) == 0
    assert "skipped" in capsys.readouterr().out
