"""Load on ``/metrics``: parallel scrapers, many connections, idle connections (before/after figures).

Run: ``python benchmarks/metrics_server_load.py [--seconds 20] [--module otelguard.serving.metrics_server]``.
The server runs in a child process so its thread count can be read from ``/proc``. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

SERVER = """
import sys, time
from prometheus_client import CollectorRegistry
from otelguard import Guard, GuardConfig
from otelguard.telemetry import Telemetry
module = __import__(sys.argv[1], fromlist=["serve_metrics"])
registry = CollectorRegistry()
guard = Guard(GuardConfig(signature_key="k"), Telemetry(registry=registry), agent="load")
for i in range(200):
    args = {"i": i}
    guard.before_call(f"tool{i % 50}", args)
    guard.after_call(f"tool{i % 50}", args, "ok", failed=False)
server = module.serve_metrics(port=0, registry=registry)
print(server.port, flush=True)
time.sleep(3600)
"""


def threads_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return -1


def scrape(url: str, timeout: float) -> float:
    start = time.perf_counter()
    with urllib.request.urlopen(url, timeout=timeout) as response:
        response.read()
    return time.perf_counter() - start


def parallel_scrapers(url: str, seconds: float, clients: int, timeout: float) -> dict[str, float]:
    latencies: list[float] = []
    failures = [0]
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def client() -> None:
        while time.monotonic() < stop:
            try:
                latency = scrape(url, timeout)
            except OSError:
                with lock:
                    failures[0] += 1
                continue
            with lock:
                latencies.append(latency)

    workers = [threading.Thread(target=client) for _ in range(clients)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    latencies.sort()
    return {
        "scrapes": len(latencies),
        "failures_or_timeouts": failures[0],
        "p50_s": round(statistics.median(latencies), 4) if latencies else -1,
        "p99_s": round(latencies[int(len(latencies) * 0.99) - 1], 4) if latencies else -1,
        "max_s": round(latencies[-1], 4) if latencies else -1,
    }


def listen_drops() -> int:
    for line in Path("/proc/net/netstat").read_text().splitlines():
        if line.startswith("TcpExt:") and "ListenDrops" in line:
            names = line.split()
            break
    else:
        return -1
    values = [ln for ln in Path("/proc/net/netstat").read_text().splitlines() if ln.startswith("TcpExt:")][
        1
    ].split()
    return int(values[names.index("ListenDrops")])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--module", default="otelguard.serving.metrics_server")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--timeout", type=float, default=10.0)
    args = parser.parse_args()
    child = subprocess.Popen([sys.executable, "-c", SERVER, args.module], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        url = f"http://127.0.0.1:{port}/metrics"
        figures: dict[str, object] = {"module": args.module, "threads_at_rest": threads_of(child.pid)}
        drops = listen_drops()
        figures["50_scrapers"] = parallel_scrapers(url, args.seconds, 50, args.timeout)
        figures["listen_drops"] = listen_drops() - drops
        print(json.dumps(figures), file=sys.stderr, flush=True)
        sockets = []
        start = time.monotonic()
        for _ in range(1000):
            try:
                sockets.append(socket.create_connection(("127.0.0.1", port), timeout=10))
            except OSError:
                figures["connect_failures"] = int(figures.get("connect_failures", 0)) + 1  # type: ignore[call-overload]
        figures["seconds_to_open_1000"] = round(time.monotonic() - start, 2)
        time.sleep(1.0)
        figures["threads_with_1000_connections"] = threads_of(child.pid)
        for s in sockets:
            s.close()
        time.sleep(1.0)
        print(json.dumps(figures), file=sys.stderr, flush=True)
        idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(200)]
        time.sleep(1.0)
        figures["threads_with_200_idle"] = threads_of(child.pid)
        try:
            figures["scrape_with_200_idle_s"] = round(scrape(url, args.timeout), 4)
        except OSError as exc:
            figures["scrape_with_200_idle_s"] = f"failed: {type(exc).__name__}"
        for s in idle:
            s.close()
        print(json.dumps(figures, indent=2))
    finally:
        child.terminate()
        child.wait(10)


if __name__ == "__main__":
    main()
