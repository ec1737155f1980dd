"""`otelguard backtest` as a real process beside its real prometheus: proxies in the environment are
never used for loopback, and a closed terminal (SIGHUP) cleans up as Ctrl-C does."""

from __future__ import annotations

import signal
import socket
import sys
import threading
from pathlib import Path

import pytest

from benchmarks.backtest_fleet import runaway_minutes, write_fleet
from tests.e2e import require_binary
from tests.test_backtest_e2e import LOOP_MINUTES, SEARCH_START, backtest_stopped_by, running_backtest


@pytest.fixture(autouse=True)
def _binaries() -> None:
    require_binary("prometheus")
    require_binary("promtool")


class ProxyTrap:
    """A listening socket where ``http_proxy`` points: counts who connects, answers nothing."""

    def __init__(self) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.port = self.socket.getsockname()[1]
        self.connections = 0
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            self.connections += 1
            connection.close()

    def close(self) -> None:
        self.socket.close()


def test_a_proxy_in_the_environment_is_not_used_for_the_loopback_prometheus(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet"
    write_fleet(fleet, runaway_minutes("search", SEARCH_START, LOOP_MINUTES, "WebSearch"))
    trap = ProxyTrap()
    proxy = f"http://127.0.0.1:{trap.port}"
    env = {name: proxy for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy")}
    env |= {"no_proxy": "", "NO_PROXY": ""}
    try:
        with running_backtest([str(fleet)], env) as process:
            code = process.wait(300)
            assert process.stderr is not None
            stderr = process.stderr.read()
    finally:
        trap.close()
    assert code == 1, stderr  # the runaway's alert fired: every query reached prometheus
    assert "not ready" not in stderr
    assert trap.connections == 0


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_sighup_stops_prometheus_and_removes_the_temporary_directory(tmp_path: Path) -> None:
    backtest_stopped_by(tmp_path, signal.SIGHUP)
