"""The shared-state figures (``otelguard bench --sidecar``): capped calls per second through two
``otelguard serve`` replicas on one local Redis, against the same replicas with memory state; the
added cost of one capped call in process; and what a call costs while Redis is killed or hung.

Real processes: Debian's ``redis-server`` on a free loopback port (no persistence) and real serve
replicas. Without ``redis-server`` on the PATH the figures are left out, with the reason.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Final

from otelguard.bench.serving import CLIENTS, free_port, pairs_per_second, serve
from otelguard.config import GuardConfig
from otelguard.core.caps import LocalSessionCaps, SessionCapStore
from otelguard.core.guard import Guard
from otelguard.core.session_keys import key_bytes
from otelguard.state.redis_caps import RedisLink, RedisSessionCaps, session_key

__all__ = ["SHARED_STATE_TARGETS", "run_shared_state_bench"]

SHARED_STATE_TARGETS: Final = {"shared_state_capped_calls_per_s": 1500.0}
"""A lower bound: before+after pairs of a capped tool per second, two replicas on one Redis."""

_KEY: Final = "otelguard-bench"
_CONFIG: Final = (
    f"signature_key: {_KEY}\ncaps:\n  turn: {{web_search: 0}}\n  session: {{web_search: 1000000000}}\n"
)
_ROUNDS: Final = 2
_BLOCK: Final = 200


def run_shared_state_bench(
    pairs_per_client: int, calls: int, progress: Callable[[str], None]
) -> dict[str, Any]:
    binary = shutil.which("redis-server")
    if binary is None:
        return {"skipped": "redis-server not found on PATH (apt-get install redis-server)"}
    with tempfile.TemporaryDirectory(prefix="otelguard-bench-") as directory, ExitStack() as stack:
        config = Path(directory) / "otelguard.yaml"
        config.write_text(_CONFIG)
        redis = stack.enter_context(_redis_server(binary, Path(directory)))
        progress(f"shared state: two replicas, {pairs_per_client:,} capped pairs per client, Redis vs memory")
        throughput = _replica_throughput(config, redis.url, pairs_per_client)
        progress(f"shared state: {calls:,} capped calls in process, Redis vs memory")
        added = _added_cost(redis.url, calls)
        progress("shared state: calls while Redis is killed, then hung (SIGSTOP)")
        outages = {outage: _fail_open(redis, outage, calls) for outage in ("killed", "hung")}
    rate = throughput["redis"]
    target = SHARED_STATE_TARGETS["shared_state_capped_calls_per_s"]
    capped_call_us = {name: round(value, 1) for name, value in added.items()}
    return {
        "shared_state_capped_calls_per_s": round(rate, 1),
        "memory_state_capped_calls_per_s": round(throughput["memory"], 1),
        # from the rounded figures, so the document adds up as printed
        "added_us_per_capped_call": round(capped_call_us["redis"] - capped_call_us["memory"], 1),
        "capped_call_us": capped_call_us,
        "fail_open": outages,
        "targets": [
            {
                "name": "shared_state_capped_calls_per_s",
                "value": round(rate, 1),
                "target": f">= {target:g}",
                "met": rate >= target,
            },
        ],
    }


class _Redis:
    def __init__(self, binary: str, directory: Path) -> None:
        self.binary, self.directory = binary, directory
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [self.binary, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
             "--appendonly", "no", "--dir", str(self.directory)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 15
        while not self._answers():
            if time.monotonic() > deadline:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.05)

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as probe:
                probe.sendall(b"PING\r\n")
                return probe.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)
            self.process.terminate()
            self.process.wait(10)


@contextmanager
def _redis_server(binary: str, directory: Path) -> Iterator[_Redis]:
    redis = _Redis(binary, directory)
    redis.start()
    try:
        yield redis
    finally:
        redis.stop()


def _replica_throughput(config: Path, url: str, pairs: int) -> dict[str, float]:
    """Best of alternating rounds (the least disturbed by the machine's other work)."""
    best = {"memory": 0.0, "redis": 0.0}
    for _ in range(_ROUNDS):
        for name, extra in (("memory", ()), ("redis", ("--state", url))):
            with (
                serve(10_000, "--config", str(config), *extra) as (first, _),
                serve(10_000, "--config", str(config), *extra) as (second, _),
            ):
                best[name] = max(best[name], _capped_pairs_per_second([first, second], pairs))
    return best


def _requests(client: int, pairs: int) -> list[bytes]:
    """Every request of one client, built before the clock starts: the figure is the replicas'."""
    built = []
    for n in range(pairs):
        body = {"session_id": f"bench-{client}", "tool_name": "web_search", "args": {"query": f"q{n}"},
                "call_id": f"c{n}"}  # fmt: skip
        for path, payload in (
            ("/v1/before_call", body),
            ("/v1/after_call", {**body, "result": f"results {n}", "failed": False}),
        ):
            data = json.dumps(payload).encode()
            head = f"POST {path} HTTP/1.1\r\nHost: bench\r\nContent-Length: {len(data)}\r\n\r\n"
            built.append(head.encode() + data)
    return built


def _capped_pairs_per_second(ports: list[int], pairs: int) -> float:
    """Before+after pairs of a capped tool per second from ``CLIENTS`` keep-alive clients, client
    ``i`` on ``ports[i % len(ports)]``, each in a session of its own."""
    requests = [_requests(client, pairs) for client in range(CLIENTS)]

    def client(index: int) -> None:
        with socket.create_connection(("127.0.0.1", ports[index % len(ports)]), timeout=30) as sock:
            answers = sock.makefile("rb")
            for request in requests[index]:
                sock.sendall(request)
                if b" 200 " not in answers.readline():
                    raise RuntimeError("otelguard serve did not answer 200")
                length = 0
                while (line := answers.readline()) not in (b"\r\n", b""):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                answers.read(length)

    return pairs_per_second(client, pairs)


def _state(url: str, timeout_ms: int = 50) -> GuardConfig:
    return GuardConfig.from_mapping(
        {"signature_key": _KEY, "caps": {"turn": {"web_search": 0}, "session": {"web_search": 10**9}},
         "state": {"url": url, "timeout_ms": timeout_ms}}
    )  # fmt: skip


def _redis_store(config: GuardConfig, session: str) -> RedisSessionCaps:
    state = config.state
    return RedisSessionCaps(RedisLink(state), session_key(state, key_bytes(_KEY), session), state.ttl_seconds)


def _timed_calls(guard: Guard, count: int, offset: int) -> list[float]:
    """Microseconds of each before+after pair of a capped call."""
    times = []
    clock = time.perf_counter
    for n in range(offset, offset + count):
        args = {"query": f"q{n}"}
        start = clock()
        guard.before_call("web_search", args, call_id=f"c{n}")
        guard.after_call("web_search", args, "results", failed=False, call_id=f"c{n}")
        times.append((clock() - start) * 1e6)
    return times


def _added_cost(url: str, calls: int) -> dict[str, float]:
    """Median µs of a capped call with each store, in alternating blocks of the same calls."""
    config = _state(url)
    stores: dict[str, SessionCapStore] = {
        "memory": LocalSessionCaps(),
        "redis": _redis_store(config, "added"),
    }
    guards = {name: Guard(config, session_id="added", session_caps=store) for name, store in stores.items()}
    times: dict[str, list[float]] = {name: [] for name in guards}
    for block in range(max(1, calls // _BLOCK)):
        for name, guard in guards.items():
            guard.start_turn()
            times[name] += _timed_calls(guard, _BLOCK, block * _BLOCK)
    return {name: statistics.median(values) for name, values in times.items()}


def _fail_open(redis: _Redis, outage: str, calls: int) -> dict[str, Any]:
    """Per-call µs of capped calls while Redis is down (killed) or hung (SIGSTOP), and how many of
    them tried Redis; Redis is back afterwards."""
    config = _state(redis.url)
    store = _redis_store(config, f"outage-{outage}")
    guard = Guard(config, session_id=f"outage-{outage}", session_caps=store)
    _timed_calls(guard, 50, 0)  # a warm connection, as in a running process
    assert redis.process is not None
    if outage == "killed":
        redis.process.kill()
        redis.process.wait(10)
    else:
        os.kill(redis.process.pid, signal.SIGSTOP)
    sent = store.link.commands
    try:
        times = sorted(_timed_calls(guard, calls, 50))
    finally:
        if outage == "killed":
            redis.start()
        else:
            os.kill(redis.process.pid, signal.SIGCONT)
    return {
        "calls": calls,
        "median_us": round(statistics.median(times), 1),
        "p99_us": round(times[min(len(times) - 1, int(len(times) * 0.99))], 1),
        "max_us": round(times[-1], 1),
        "redis_attempts": store.link.commands - sent,
        "timeout_ms": config.state.timeout_ms,
    }
