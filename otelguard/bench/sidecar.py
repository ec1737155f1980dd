"""The sidecar's figures: guard calls per second through ``otelguard serve``, the cost of one hook
process, and the memory of serve under a flood of sessions. Real processes on loopback; opt-in
(``otelguard bench --sidecar``) because they take seconds, not milliseconds.
"""

from __future__ import annotations

import http.client
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from otelguard.bench.serving import CLIENTS, pairs_per_second, request, serve
from otelguard.bench.tricks import PAYS
from otelguard.coding_agents.settings import LAUNCH

__all__ = ["SIDECAR_TARGETS", "SidecarOptions", "run_sidecar_bench"]

SIDECAR_TARGETS: Final = {"sidecar_calls_per_s": 2000.0, "hook_roundtrip_ratio": 1.5}
"""``sidecar_calls_per_s`` is a lower bound; ``hook_roundtrip_ratio`` an upper bound."""

_PRE_TOOL_USE: Final = {
    "session_id": "bench-hook",
    "transcript_path": "/tmp/bench.jsonl",
    "cwd": "/tmp",
    "hook_event_name": "PreToolUse",
    "tool_name": "Read",
    "tool_input": {"file_path": "/etc/hostname"},
    "tool_use_id": "toolu_bench",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class SidecarOptions:
    pairs_per_client: int = 1000
    hook_runs: int = 21
    sessions: int = 100_000
    max_sessions: int = 10_000
    state_calls: int = 4000
    """Capped calls timed in process per store, and per outage, for the shared-state figures."""


def run_sidecar_bench(options: SidecarOptions, progress: Callable[[str], None]) -> dict[str, Any]:
    with serve(options.max_sessions) as (port, _):
        progress(f"sidecar: {CLIENTS} keep-alive clients x {options.pairs_per_client:,} before+after pairs")
        calls_per_s = _pairs_per_second(port, options.pairs_per_client)
        progress(f"sidecar: {options.hook_runs} hook processes vs python -c pass")
        hook_ms, python_ms = _hook_round_trip(port, options.hook_runs)
    progress("sidecar: the request-head cache, serve's CPU per request with and without it")
    head_cache = _head_cache(options.max_sessions, max(1, options.pairs_per_client // 4))
    with serve(options.max_sessions) as (port, pid):
        progress(
            f"sidecar: memory after {options.sessions:,} distinct sessions (max {options.max_sessions:,})"
        )
        memory = _memory_under_session_flood(port, pid, options.sessions, options.max_sessions)
    ratio = hook_ms / python_ms if python_ms else float("inf")
    from otelguard.bench.shared_state import run_shared_state_bench  # loads the redis client

    shared = run_shared_state_bench(options.pairs_per_client, options.state_calls, progress)
    return {
        "sidecar_calls_per_s": round(calls_per_s, 1),
        "hook_median_ms": round(hook_ms, 2),
        "python_pass_median_ms": round(python_ms, 2),
        "hook_roundtrip_ratio": round(ratio, 3),
        "hot_path_tricks": {"request_head_cache": head_cache},
        **memory,
        "targets": [
            {
                "name": "sidecar_calls_per_s",
                "value": round(calls_per_s, 1),
                "target": f">= {SIDECAR_TARGETS['sidecar_calls_per_s']:g}",
                "met": calls_per_s >= SIDECAR_TARGETS["sidecar_calls_per_s"],
            },
            {
                "name": "hook_roundtrip_ratio",
                "value": round(ratio, 3),
                "target": f"<= {SIDECAR_TARGETS['hook_roundtrip_ratio']:g}",
                "met": ratio <= SIDECAR_TARGETS["hook_roundtrip_ratio"],
            },
            *shared.get("targets", ()),
        ],
        "shared_state": {key: value for key, value in shared.items() if key != "targets"},
    }


def _pairs_per_second(port: int, pairs: int) -> float:
    def client(index: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for call in range(pairs):
            body: dict[str, object] = {"session_id": f"bench-{index}", "tool_name": "read_file",
                                       "args": {"path": f"f{call % 50}"}, "call_id": f"c{call}"}  # fmt: skip
            request(connection, "POST", "/v1/before_call", json.dumps(body).encode())
            body["result"], body["failed"] = f"content {call}", False
            request(connection, "POST", "/v1/after_call", json.dumps(body).encode())
        connection.close()

    return pairs_per_second(client, pairs)


# serve with its request-head cache off: every head goes through h11
_WITHOUT_HEAD_CACHE: Final = (
    "import sys; from otelguard.serving import http_server as h; "
    "h._Connection._known_request = lambda self: False; h.HttpServer.remember = lambda self, head, known: None; "
    "from otelguard.cli import main; sys.exit(main(sys.argv[1:]))"
)
_HEAD_CACHE_ROUNDS: Final = 6


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _head_cache(max_sessions: int, pairs: int) -> dict[str, Any]:
    """serve's CPU µs per request (user + system, from /proc: the clients' share of the machine
    left out) with the request-head cache and without it: two servers, loaded in turn, in a rotating
    order; the median of the rounds after the first, the share the cache saves, and whether it pays."""
    with serve(max_sessions) as (port, pid), serve(max_sessions, launch=("-c", _WITHOUT_HEAD_CACHE)) as other:
        servers = {"with": (port, pid), "without": other}
        per_request: dict[str, list[float]] = {name: [] for name in servers}
        for index in range(_HEAD_CACHE_ROUNDS):
            for name in list(servers)[:: 1 if index % 2 else -1]:
                port, pid = servers[name]
                before = _cpu_seconds(pid)
                _pairs_per_second(port, pairs)
                if index:  # the first round warms both
                    per_request[name].append((_cpu_seconds(pid) - before) / (2 * CLIENTS * pairs) * 1e6)
    with_us, without_us = (statistics.median(per_request[name]) for name in ("with", "without"))
    saving = (without_us - with_us) / without_us if without_us else 0.0
    return {
        "path": "sidecar_request",
        "with_us": round(with_us, 1),
        "without_us": round(without_us, 1),
        "saving": round(saving, 3),
        "pays": saving >= PAYS,
    }


def _hook_round_trip(port: int, runs: int) -> tuple[float, float]:
    """Median wall milliseconds of a hook process answering PreToolUse, and of ``python -c pass``,
    interleaved so both see the same machine."""
    payload = json.dumps(_PRE_TOOL_USE).encode()
    # as --print-settings writes the command
    hook = [sys.executable, "-c", LAUNCH, "hook", "claude-code", "--url", f"http://127.0.0.1:{port}"]
    floor = [sys.executable, "-c", "pass"]
    hook_ms: list[float] = []
    floor_ms: list[float] = []
    for _ in range(runs):
        for command, into, data in ((hook, hook_ms, payload), (floor, floor_ms, b"")):
            start = time.perf_counter()
            subprocess.run(command, input=data, capture_output=True, check=True)
            into.append((time.perf_counter() - start) * 1000)
    return statistics.median(hook_ms), statistics.median(floor_ms)


def _memory_under_session_flood(port: int, pid: int, sessions: int, max_sessions: int) -> dict[str, Any]:
    """RSS of serve at start, once the pool is full, and after ``sessions`` distinct session ids."""

    def flood(first: int, count: int) -> None:
        per_client = max(1, count // CLIENTS)

        def client(index: int) -> None:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            start = first + index * per_client
            for number in range(start, start + per_client):
                body = {"session_id": f"flood-{number}", "tool_name": "read_file", "args": {"n": number}}
                request(connection, "POST", "/v1/before_call", json.dumps(body).encode())
            connection.close()

        threads = [threading.Thread(target=client, args=(index,)) for index in range(CLIENTS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    start_rss = _rss_kib(pid)
    flood(0, max_sessions)
    full_rss = _rss_kib(pid)
    flood(max_sessions, max(0, sessions - max_sessions))
    health = json.loads(
        request(http.client.HTTPConnection("127.0.0.1", port, timeout=5), "GET", "/healthz", None)
    )
    return {
        "serve_sessions_sent": sessions,
        "serve_max_sessions": max_sessions,
        "serve_sessions_held": health["sessions"],
        "serve_rss_kib_at_start": start_rss,
        "serve_rss_kib_pool_full": full_rss,
        "serve_rss_kib_after_flood": _rss_kib(pid),
    }


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return -1
