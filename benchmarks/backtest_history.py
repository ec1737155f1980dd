"""Time and peak memory of ``otelguard backtest`` on a generated history (figures in docs/backtest.md).

Run from a checkout: ``python -m benchmarks.backtest_history [--sessions 10000] [--days 1]`` (or
``--examples`` for the shipped examples). The history is timestamped Claude Code sessions from
``benchmarks/backtest_fleet.py``: healthy sessions spread over the days, plus a 20-minute web-search runaway
and a 20-minute delegation runaway. The backtest runs as a child process; its whole process tree
(python, promtool, prometheus) is sampled from ``/proc`` every 50 ms for the peak of their summed RSS,
and ``wait4`` gives the largest single process's peak. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from itertools import chain
from pathlib import Path

from benchmarks.backtest_fleet import DAY, healthy_sessions, runaway_minutes, write_fleet

EXAMPLES = Path(__file__).resolve().parent.parent / "otelguard" / "data" / "examples"
_PAGE = os.sysconf("SC_PAGE_SIZE")


def generate(directory: Path, sessions: int, days: float) -> int:
    runaways = 40
    span = timedelta(days=days)
    every = span / max(1, sessions - runaways)
    fleet = chain(
        healthy_sessions("ok", DAY, DAY + span, every),
        runaway_minutes("search", DAY + span * 0.4, 20, "WebSearch"),
        runaway_minutes("delegate", DAY + span * 0.6, 20, "Task"),
    )
    return len(write_fleet(directory, fleet))


def tree_rss(root: int) -> int:
    """Bytes resident in ``root`` and all its descendants now."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat[stat.rindex(")") + 2 :].split()[1])
    members, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in members:
                members.add(pid)
                frontier.append(pid)
    total = 0
    for pid in members:
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE
        except OSError:
            continue
    return total


def measure(paths: list[str]) -> dict[str, object]:
    with tempfile.TemporaryFile() as out:
        started = time.monotonic()
        process = subprocess.Popen(
            [sys.executable, "-m", "otelguard", "backtest", *paths, "--json"],
            stdout=out,
            stderr=subprocess.DEVNULL,
        )
        peak = 0
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            peak = max(peak, tree_rss(process.pid))
            time.sleep(0.05)
        elapsed = time.monotonic() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        document = json.loads(out.read())
    return {
        "exit_code": process.returncode,
        "seconds": round(elapsed, 1),
        "peak_tree_rss_mb": round(peak / 2**20),
        "largest_process_rss_mb": round(usage.ru_maxrss / 1024),
        "sessions": document["replay"]["totals"]["sessions"],
        "tool_calls": document["replay"]["totals"]["tool_calls"],
        "period": document["period"],
        "samples": document["samples"],
        "fired": document["fired"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--days", type=float, default=1.0)
    parser.add_argument("--examples", action="store_true", help="backtest the shipped examples instead")
    args = parser.parse_args()
    if args.examples:
        print(json.dumps(measure([str(EXAMPLES)]), indent=2))
        return
    with tempfile.TemporaryDirectory(prefix="otelguard-history-") as directory:
        generate(Path(directory), args.sessions, args.days)
        print(json.dumps(measure([directory]), indent=2))


if __name__ == "__main__":
    main()
