"""One transcript line stamped far from the rest (``0``, or ``1e11`` read as milliseconds: 1973) must
not make a 55-year period: ``replay --openmetrics`` and ``backtest`` refuse it before any work, as
real processes, and name the line."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from benchmarks.backtest_fleet import DAY, SessionWriter
from tests.e2e import require_binary

GENEROUS = 120  # the old code ran for hours: a bound, not a timing assert


def transcript_with_one_odd_stamp(directory: Path, stamp: float) -> tuple[Path, int]:
    """20 calls on one day, and a last call whose result line is stamped ``stamp``; the call's line."""
    writer = SessionWriter("odd-stamp-session")
    writer.prompt(DAY)
    for index in range(21):
        writer.call(DAY + timedelta(minutes=index), "Read", {"path": f"/f{index}"}, "text")
    writer.lines[-1]["timestamp"] = stamp
    return writer.write(directory), len(writer.lines) - 1  # the tool_use line before its result


def otelguard(*arguments: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("OTELGUARD_") or k == "OTELGUARD_REQUIRE_E2E"
    }
    return subprocess.run(
        [sys.executable, "-m", "otelguard", *arguments],
        capture_output=True,
        text=True,
        timeout=GENEROUS,
        env=env,
        check=False,
    )


@pytest.mark.parametrize("stamp", [0, 1e11], ids=["zero", "1e11-milliseconds"])
def test_replay_openmetrics_refuses_a_55_year_period_and_names_the_line(tmp_path: Path, stamp: float) -> None:
    path, line = transcript_with_one_odd_stamp(tmp_path, stamp)
    out = tmp_path / "samples.om"
    done = otelguard("replay", str(path), "--openmetrics", str(out))
    assert done.returncode != 0
    assert f"{path}:{line}: stamped 19" in done.stderr
    assert "pass --since and --until" in done.stderr
    assert not out.exists() or out.stat().st_size < 1000


def test_replay_openmetrics_with_since_and_until_plays_the_period_asked_for(tmp_path: Path) -> None:
    path, _line = transcript_with_one_odd_stamp(tmp_path, 0)
    out = tmp_path / "samples.om"
    since, until = DAY.isoformat(), (DAY + timedelta(days=1)).isoformat()
    done = otelguard("replay", str(path), "--openmetrics", str(out), "--since", since, "--until", until)
    assert done.returncode == 0, done.stderr
    assert "otelguard_tool_calls_total" in out.read_text()


def test_backtest_refuses_a_55_year_period_before_writing_a_block(tmp_path: Path) -> None:
    require_binary("prometheus")
    require_binary("promtool")
    path, line = transcript_with_one_odd_stamp(tmp_path, 0)
    done = otelguard("backtest", str(path))
    assert done.returncode == 2
    assert f"{path}:{line}: stamped 1970-01-01T00:00:00Z" in done.stderr
    assert "blocks" not in done.stderr.lower().replace("before writing", "")
