"""A real ``otelguard serve`` for the sidecar figures, and the threads that load it."""

from __future__ import annotations

import http.client
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final

__all__ = ["CLIENTS", "free_port", "pairs_per_second", "request", "serve"]

CLIENTS: Final = 8
"""Keep-alive clients sending at once."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def serve(
    max_sessions: int, *extra: str, launch: tuple[str, ...] = ("-m", "otelguard")
) -> Iterator[tuple[int, int]]:
    """A real ``otelguard serve`` on a free loopback port: ``(port, pid)`` once it answers.
    ``launch``: what the interpreter runs to reach otelguard's command line."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, *launch, "serve", "--port", str(port),
         "--max-sessions", str(max_sessions), *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                request(http.client.HTTPConnection("127.0.0.1", port, timeout=5), "GET", "/healthz", None)
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("otelguard serve did not start") from None
                time.sleep(0.05)
        yield port, process.pid
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def request(connection: http.client.HTTPConnection, method: str, path: str, body: bytes | None) -> bytes:
    connection.request(method, path, body=body, headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    data = response.read()
    if response.status != 200:
        raise RuntimeError(f"otelguard serve answered {response.status} on {path}")
    return data


def pairs_per_second(client: Callable[[int], None], pairs: int) -> float:
    """Run ``client(index)`` in ``CLIENTS`` threads at once (each sends ``pairs`` before+after
    pairs); the pairs per second of them all."""
    threads = [threading.Thread(target=client, args=(index,)) for index in range(CLIENTS)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return CLIENTS * pairs / (time.perf_counter() - start)
