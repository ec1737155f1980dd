"""Real binaries for end-to-end tests: Prometheus, Alertmanager, Pushgateway, promtool.

A missing binary skips the test locally with a clear reason; with OTELGUARD_REQUIRE_E2E=1 (set by
.ci/run) it fails instead, so CI can never pass by skipping.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from otelguard.config.environment import OTELGUARD_REQUIRE_E2E


def require_binary(
    name: str, packages: str = "prometheus prometheus-pushgateway prometheus-alertmanager"
) -> str:
    path = shutil.which(name)
    if path is None:
        reason = f"{name} not found on PATH (apt-get install {packages})"
        if os.environ.get(OTELGUARD_REQUIRE_E2E) == "1":
            pytest.fail(f"{reason}; {OTELGUARD_REQUIRE_E2E}=1 forbids skipping", pytrace=False)
        pytest.skip(reason)
    return path


def stop_process(process: subprocess.Popen[bytes], grace_seconds: float = 10) -> None:
    """SIGTERM, then SIGKILL after ``grace_seconds``: a test never leaves a server behind."""
    if process.poll() is None:
        process.terminate()
    try:
        process.wait(grace_seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_until(predicate: Any, timeout: float, interval: float = 0.25, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # still starting
            last_exc = exc
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last error: {last_exc!r})")


def http_get(url: str, timeout: float = 5.0, headers: dict[str, str] | None = None) -> bytes:
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        body: bytes = response.read()
        return body


def get_json(url: str, **params: str) -> Any:
    if params:
        url = f"{url}?{urllib.parse.urlencode(params)}"
    return json.loads(http_get(url))


class Prometheus:
    def __init__(self, url: str, process: subprocess.Popen[bytes], log: Path) -> None:
        self.url = url
        self.process = process
        self.log = log

    def query(self, expr: str, time_: float | None = None) -> list[dict[str, Any]]:
        params = {"query": expr}
        if time_ is not None:
            params["time"] = str(time_)
        body = get_json(f"{self.url}/api/v1/query", **params)
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def api(self, path: str, **params: str) -> Any:
        return get_json(f"{self.url}{path}", **params)

    def targets_up(self) -> bool:
        data = self.api("/api/v1/targets")["data"]["activeTargets"]
        return bool(data) and all(t["health"] == "up" for t in data)


@contextmanager
def run_prometheus(
    tmp_path: Path,
    scrape_targets: list[str],
    *,
    scrape_interval: str = "1s",
    rule_files: list[Path] | None = None,
    alertmanager: str | None = None,
    evaluation_interval: str = "1s",
    extra_args: tuple[str, ...] = ("--enable-feature=exemplar-storage",),
    scheme: str = "http",
) -> Iterator[Prometheus]:
    """Start Debian's prometheus on loopback with a temp data dir, scraping ``scrape_targets``."""
    binary = require_binary("prometheus")
    port = free_port()
    config: dict[str, Any] = {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": evaluation_interval},
        "scrape_configs": [
            {"job_name": "otelguard", "scheme": scheme, "static_configs": [{"targets": scrape_targets}]}
        ],
    }
    if rule_files:
        config["rule_files"] = [str(p) for p in rule_files]
    if alertmanager:
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]}
    config_path = tmp_path / "prometheus.yml"
    config_path.write_text(json.dumps(config))
    log = tmp_path / "prometheus.log"
    with log.open("wb") as log_file:
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={config_path}",
                f"--storage.tsdb.path={tmp_path / 'prom-data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                *extra_args,
            ],
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    prom = Prometheus(f"http://127.0.0.1:{port}", process, log)
    try:
        wait_until(lambda: http_get(f"{prom.url}/-/ready") is not None, 30, what="prometheus ready")
        yield prom
    finally:
        stop_process(process)


class Demo:
    """A running ``otelguard demo`` subprocess (see ``run_demo``)."""

    def __init__(self, process: subprocess.Popen[bytes], port: int, stdout: Path, stderr: Path) -> None:
        self.process = process
        self.port = port
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.target = f"127.0.0.1:{port}"
        self._stdout = stdout
        self._stderr = stderr

    def metrics(self, openmetrics: bool = False) -> str:
        accept = "application/openmetrics-text; version=1.0.0" if openmetrics else ""
        return http_get(self.url, headers={"Accept": accept} if accept else None).decode()

    def stdout(self) -> str:
        return self._stdout.read_text()

    def stderr(self) -> str:
        return self._stderr.read_text()


def demo_command() -> list[str]:
    """``python -m otelguard demo`` (``otelguard.cli`` while the package has no ``__main__``)."""
    import importlib.util
    import sys

    module = "otelguard" if importlib.util.find_spec("otelguard.__main__") else "otelguard.cli"
    return [sys.executable, "-m", module, "demo"]


@contextmanager
def run_demo(
    tmp_path: Path,
    port: int | None = None,
    duration: float = 30,
    *,
    extra_args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    wait_for_metrics: bool = True,
) -> Iterator[Demo]:
    """Start ``otelguard demo --duration ... --port ...`` and wait until ``/metrics`` answers.

    On exit the demo gets SIGTERM if still running. ``demo.process.returncode`` tells how it ended.
    """
    port = port or free_port()
    stdout, stderr = tmp_path / f"demo-{port}.out", tmp_path / f"demo-{port}.err"
    command = [*demo_command(), "--duration", str(duration), "--port", str(port), *extra_args]
    with stdout.open("wb") as out, stderr.open("wb") as err:
        process = subprocess.Popen(command, stdout=out, stderr=err, env={**os.environ, **(env or {})})
    demo = Demo(process, port, stdout, stderr)
    try:
        if wait_for_metrics:
            wait_until(lambda: demo.metrics(), 20, what=f"otelguard demo /metrics on port {port}")
        yield demo
    finally:
        stop_process(process, grace_seconds=15)


def self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    """A throwaway certificate for 127.0.0.1 and localhost, and its key (the openssl binary makes them)."""
    openssl = require_binary("openssl")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key
