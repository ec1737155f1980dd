"""A 200 MB transcript replays in bounded memory: the readers stream, the report does not grow with it."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from otelguard import GuardConfig
from otelguard.replay import ReplayRunner, replay_inputs
from otelguard.replay.report import MAX_LISTED

SIZE_BYTES = 200 * 1024 * 1024
RSS_GROWTH_LIMIT_BYTES = 64 * 1024 * 1024
CALLS_PER_TURN = 26
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def turn_template() -> bytes:
    """One Claude Code turn (``@N@`` is replaced by the turn number so every id is unique): a prompt,
    13 reads with ~2 KB results, then the same failing command 13 times (a would-be halt per turn: the
    6th to 12th rejected, the 13th stopped; from the 8th turn on, the command is refused as a failure
    across turns from its first call, and stopped at its 8th)."""
    lines: list[dict[str, object]] = [
        {
            "type": "user",
            "sessionId": "big",
            "uuid": "u@N@",
            "message": {"role": "user", "content": "task @N@"},
        }
    ]
    pad = "x" * 2000
    for i in range(CALLS_PER_TURN):
        if i < 13:
            tool, args, text, failed = ("Read", {"file_path": f"/src/m{i}.py"}, f"{pad} @N@ {i}", False)
        else:
            tool, args, text, failed = ("Bash", {"command": "make test"}, "FAILED test_login", True)
        call_id = f"toolu@N@-{i}"
        lines.append(
            {
                "type": "assistant",
                "sessionId": "big",
                "message": {
                    "id": f"msg@N@-{i}",
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": call_id, "name": tool, "input": args}],
                },
            }
        )
        result = {"type": "tool_result", "tool_use_id": call_id, "content": text, "is_error": failed}
        lines.append({"type": "user", "sessionId": "big", "message": {"role": "user", "content": [result]}})
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


def write_transcript(path: Path, size: int) -> int:
    template = turn_template()
    written = turns = 0
    with open(path, "wb", buffering=1 << 20) as stream:
        while written < size:
            chunk = template.replace(b"@N@", str(turns).encode())
            stream.write(chunk)
            written += len(chunk)
            turns += 1
    return turns


def current_rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * _PAGE


class PeakRss:
    """Samples this process's resident set while the block runs (ru_maxrss would include the peaks
    of every earlier test in the process)."""

    def __init__(self) -> None:
        self.baseline = self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, current_rss())

    def __enter__(self) -> PeakRss:
        self.baseline = self.peak = current_rss()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, current_rss())


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="needs /proc to sample RSS")
def test_200mb_transcript_replays_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    turns = write_transcript(path, SIZE_BYTES)
    config = GuardConfig(mode="unattended")
    runner = ReplayRunner(config)
    started = time.perf_counter()
    with PeakRss() as rss:
        replay_inputs([str(path)], "auto", runner)
        report = runner.finish()
    elapsed = time.perf_counter() - started
    growth = rss.peak - rss.baseline
    size = path.stat().st_size
    print(
        f"\nreplayed {size / 1e6:.0f} MB ({turns} turns, {turns * CALLS_PER_TURN} calls) in {elapsed:.1f}s "
        f"= {size / 1e6 / elapsed:.0f} MB/s; peak RSS growth {growth / 1e6:.1f} MB"
    )
    totals = report.totals()
    assert totals["turns"] == turns and totals["tool_calls"] == turns * CALLS_PER_TURN
    assert totals["halts"] == turns  # every turn stops on its repeated failing command
    assert totals["errors"] == 0
    [session] = report.sessions
    assert len(session.halts) == MAX_LISTED and session.halts_total == turns
    assert growth < RSS_GROWTH_LIMIT_BYTES, f"peak RSS grew by {growth / 1e6:.1f} MB"
