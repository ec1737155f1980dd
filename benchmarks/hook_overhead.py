"""What one hook process costs each coding-agent CLI per tool call, against ``python -c pass``.

    python -m benchmarks.hook_overhead [--runs 31] [--python PATH] [--json]

Against one real ``otelguard serve`` on loopback, each CLI's hook command is run exactly as
``--print-settings`` writes it (``python -c LAUNCH hook CLI``, Copilot CLI's with ``--event``) on
that CLI's real payloads (``tests/data/<cli>_payloads``) of the two events every tool call fires: the
one before the tool and the one after it. Every run of every command is interleaved with a run of
``python -c pass`` so load drift hits all alike; the figure is the median wall time of each, and the
ratio of each command's median to the floor's, and the median of the ratios of each run to the floor's
run beside it (``paired_ratio``: what load drift moves least). The target is a paired ratio of at most 1.3.

The commands run as installed: with their bytecode compiled (a package install compiles it), so
``PYTHONDONTWRITEBYTECODE`` is dropped from their environment and each runs once before the timing
(an editable checkout would otherwise compile the hook module from source on every call).
``--python`` runs the hooks and the floor under another interpreter, e.g. a fresh virtualenv's with
nothing installed (the hook needs only the standard library; otelguard is put on its path): its
startup loads no site-packages, so the floor is lower and the same hook costs a larger ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Final

import otelguard
from otelguard.bench.serving import serve
from otelguard.coding_agents.settings import LAUNCH

PAYLOADS: Final = Path(__file__).resolve().parent.parent / "tests" / "data"
TARGET_RATIO: Final = 1.3
# (cli, payload folder, event before the tool, event after it)
CLIS: Final = (
    ("claude-code", "claude_code_payloads", "PreToolUse", "PostToolUse"),
    ("codex", "codex_payloads", "PreToolUse", "PostToolUse"),
    ("gemini-cli", "gemini_cli_payloads", "BeforeTool", "AfterTool"),
    ("copilot-cli", "copilot_cli_payloads", "preToolUse", "postToolUse"),
)


def commands(port: int, python: str) -> dict[str, tuple[list[str], bytes]]:
    """``"cli event"`` → the hook command as the CLI runs it, and the payload it reads on stdin."""
    found: dict[str, tuple[list[str], bytes]] = {}
    for cli, folder, *events in CLIS:
        for event in events:
            command = [python, "-c", LAUNCH, "hook", cli, "--url", f"http://127.0.0.1:{port}"]
            if cli == "copilot-cli":  # its payloads name no event: each event has its own command
                command += ["--event", event]
            found[f"{cli} {event}"] = (command, (PAYLOADS / folder / f"{event}.json").read_bytes())
    return found


def measure(runs: int, python: str = sys.executable) -> dict[str, Any]:
    floor = [python, "-c", "pass"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    source = str(Path(otelguard.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (source, env.get("PYTHONPATH")) if p)
    with serve(10_000) as (port, _pid):
        hooks = commands(port, python)
        for command, payload in hooks.values():  # writes the bytecode an install would have
            subprocess.run(command, input=payload, capture_output=True, check=True, timeout=60, env=env)
        times: dict[str, list[float]] = {name: [] for name in ["python -c pass", *hooks]}
        ratios: dict[str, list[float]] = {name: [] for name in hooks}
        for _ in range(runs):
            for name, (command, payload) in hooks.items():
                floor_ms = _timed(floor, b"", env)
                hook_ms = _timed(command, payload, env, name)
                times["python -c pass"].append(floor_ms)
                times[name].append(hook_ms)
                ratios[name].append(hook_ms / floor_ms)
    floor_ms = statistics.median(times["python -c pass"])
    figures = {
        name: {
            "median_ms": round(statistics.median(times[name]), 2),
            "ratio": round(statistics.median(times[name]) / floor_ms, 3),
            "paired_ratio": round(statistics.median(ratios[name]), 3),
        }
        for name in hooks
    }
    return {
        "runs": runs,
        "python": python,
        "python_pass_median_ms": round(floor_ms, 2),
        "hooks": figures,
        "target_ratio": TARGET_RATIO,
        "met": all(f["paired_ratio"] <= TARGET_RATIO for f in figures.values()),
    }


def _timed(argv: list[str], data: bytes, env: dict[str, str], hook: str | None = None) -> float:
    """Wall milliseconds of one run; a hook that wrote a warning failed open, which is no figure."""
    start = time.perf_counter()
    ran = subprocess.run(argv, input=data, capture_output=True, check=True, timeout=60, env=env)
    elapsed = (time.perf_counter() - start) * 1000
    if hook is not None and ran.stderr:
        raise RuntimeError(f"{hook}: {ran.stderr.decode(errors='replace')[:200]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=31)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    result = measure(options.runs, options.python)
    if options.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"python -c pass: {result['python_pass_median_ms']} ms (median of {result['runs'] * len(result['hooks'])})"
    )
    for name, figure in result["hooks"].items():
        print(
            f"{name:26} {figure['median_ms']:8.2f} ms  x{figure['ratio']:.3f}  paired x{figure['paired_ratio']:.3f}"
        )
    print(f"all within x{TARGET_RATIO}: {result['met']}")


if __name__ == "__main__":
    main()
