"""A real ``redis-server`` (Debian's package) on loopback for the shared-state tests, alone or as a
Redis Cluster of three nodes (made with ``redis-cli --cluster create``, from redis-tools, which the
redis-server package depends on).

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

    def __init__(self, binary: str, directory: Path, *args: str, password: str | None = None) -> None:
        self.binary = binary
        self.directory = directory
        self.args = args
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None
        self.password = password
        if password is not None:
            self.args += ("--requirepass", password)
        self.client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5, password=password)

    def start(self) -> None:
        log = (self.directory / f"redis-{self.port}.log").open("ab")
        self.process = subprocess.Popen(
            [self.binary, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
             "--appendonly", "no", "--dir", str(self.directory), "--protected-mode", "yes", *self.args],
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
def run_redis(directory: Path, password: str | None = None) -> Iterator[RedisServer]:
    server = RedisServer(require_binary("redis-server", "redis-server"), directory, password=password)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    with run_redis(tmp_path) as server:
        yield server


@contextmanager
def run_redis_cluster(directory: Path, nodes: int = 3) -> Iterator[list[RedisServer]]:
    """``nodes`` redis-server processes made one Redis Cluster (no replicas), every slot covered."""
    binary = require_binary("redis-server", "redis-server")
    cli = require_binary("redis-cli", "redis-tools")
    servers: list[RedisServer] = []
    try:
        for n in range(nodes):
            node_dir = directory / f"node{n}"
            node_dir.mkdir()
            server = RedisServer(binary, node_dir, "--cluster-enabled", "yes", "--cluster-config-file",
                                 str(node_dir / "nodes.conf"), "--cluster-port", str(free_port()))  # fmt: skip
            while server.port > 55535:  # redis-server refuses higher ones in a cluster
                server.port = free_port()
            server.url = f"redis://127.0.0.1:{server.port}/0"
            server.client = redis.Redis(host="127.0.0.1", port=server.port, socket_timeout=5)
            server.start()
            servers.append(server)
        addresses = [f"127.0.0.1:{server.port}" for server in servers]
        subprocess.run(
            [cli, "--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip

        def ready() -> bool:
            return all(
                b"cluster_state:ok" in server.client.execute_command("CLUSTER", "INFO") for server in servers
            )

        wait_until(ready, 30, interval=0.1, what="the cluster's slots to be served")
        yield servers
    finally:
        for server in servers:
            server.stop()


@pytest.fixture
def redis_cluster(tmp_path: Path) -> Iterator[list[RedisServer]]:
    with run_redis_cluster(tmp_path) as servers:
        yield servers
