"""A real ``redis-server`` (Debian's package) on loopback for the shared-state tests.

Started with no persistence (``--save ''``, ``--appendonly no``) in a temp directory. Missing, it
skips the test with the reason; under OTELGUARD_REQUIRE_E2E=1 it fails instead (``require_binary``).
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

from tests.e2e import free_port, require_binary, stop_process, wait_until


class RedisServer:
    """One redis-server process on ``127.0.0.1:port``; ``kill``, ``hang``/``resume`` and ``restart``
    (same port, empty) simulate the outages a guard must survive."""

    def __init__(self, binary: str, directory: Path) -> None:
        self.binary = binary
        self.directory = directory
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None
        self.client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)

    def start(self) -> None:
        log = (self.directory / "redis.log").open("ab")
        self.process = subprocess.Popen(
            [self.binary, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
             "--appendonly", "no", "--dir", str(self.directory), "--protected-mode", "yes"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()
        wait_until(self.client.ping, 15, interval=0.05, what=f"redis-server on port {self.port}")

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(10)

    def hang(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGCONT)

    def restart(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.kill()
        self.start()

    def stop(self) -> None:
        if self.process is not None:
            if self.process.poll() is None:
                self.resume()  # a stopped process cannot act on SIGTERM
            stop_process(self.process)
        self.client.close()


@contextmanager
def run_redis(directory: Path) -> Iterator[RedisServer]:
    server = RedisServer(require_binary("redis-server", "redis-server"), directory)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    with run_redis(tmp_path) as server:
        yield server
