"""The real Prometheus engine, driven from a private temporary directory: ``promtool`` builds and
backfills TSDB blocks, a ``prometheus`` on loopback answers range queries over them.

Everything runs with the temporary directory as its working directory and every rule file under the
same relative name, so the evaluation offsets Prometheus derives from a rule file's path do not move
from one run to the next. ``Engine.close`` stops the server (SIGTERM, then SIGKILL) and is called on
success, on error and on Ctrl-C; a ``promtool`` still running when an exception arrives is killed by
``subprocess.run`` itself.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

import yaml

from otelguard.backtest.rules import RULE_FILE_NAME
from otelguard.errors import BacktestError
from otelguard.readers.times import format_duration

__all__ = ["DEBIAN_PACKAGE", "BacktestError", "Binaries", "Engine", "MissingBinary", "Series"]

DEBIAN_PACKAGE: Final = "prometheus"
"""The Debian/Ubuntu package that installs both ``prometheus`` and ``promtool``."""
MAX_POINTS_PER_QUERY: Final = 10_000
"""Prometheus refuses a range query of more than 11,000 points per series; longer periods are split."""
RULES_CHUNK_SECONDS: Final = 86400
"""Period backfilled per promtool run (a whole number of its 2-hour blocks)."""
_READY_TIMEOUT_S: Final = 120.0
_QUERY_TIMEOUT_S: Final = 300.0
_STOP_GRACE_S: Final = 10.0
_LOG_TAIL_BYTES: Final = 2000
_LOOPBACK: Final = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""The opener of every query to the private prometheus: loopback never goes through ``http_proxy``
or ``HTTPS_PROXY`` (a proxy cannot reach this machine's loopback, and would hear the queries)."""

Series = tuple[dict[str, str], list[tuple[float, float]]]
"""One series of a range query: its labels and its ``(time, value)`` points."""


class MissingBinary(BacktestError):
    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(
            f"{name} not found on PATH; install the Debian/Ubuntu package {DEBIAN_PACKAGE!r} "
            f"(apt-get install {DEBIAN_PACKAGE}), which provides prometheus and promtool"
        )


@dataclass(frozen=True, slots=True)
class Binaries:
    prometheus: str
    promtool: str

    @classmethod
    def find(cls) -> Binaries:
        found = {name: shutil.which(name) for name in ("prometheus", "promtool")}
        for name, path in found.items():
            if path is None:
                raise MissingBinary(name)
        return cls(str(found["prometheus"]), str(found["promtool"]))


class Engine:
    """promtool and one prometheus over ``workdir/data``. Use as a context manager."""

    def __init__(self, binaries: Binaries, workdir: Path, *, lookback: float, retention_days: int) -> None:
        self.binaries = binaries
        self.workdir = workdir
        self.data = workdir / "data"
        self.data.mkdir(exist_ok=True)
        self._lookback = lookback
        self._retention_days = retention_days
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.url = ""

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # promtool ---------------------------------------------------------------------------------

    def check_rules(self, path: str) -> None:
        """``promtool check rules``: the PromQL and templates as Prometheus itself reads them."""
        self._promtool(["check", "rules", os.path.abspath(path)], "the rules file does not load")

    def create_blocks(self, openmetrics: Path) -> None:
        self._promtool(
            ["tsdb", "create-blocks-from", "openmetrics", "--quiet", openmetrics.name, str(self.data)],
            "promtool could not build blocks from the replay's samples",
        )

    def backfill_rules(self, document: dict[str, Any], start: float, end: float, interval: float) -> None:
        """Backfill one level of recording rules (the server must be running over the levels below);
        the new blocks go to a staging directory and join the data when the server is stopped.

        One promtool run per day of the period: promtool keeps what it allocated for every block of
        a rule until the rule is done, so a week in one run took 600 MB. Each run ends a second
        before the next day, as promtool ends each of its own 2-hour blocks."""
        (self.workdir / RULE_FILE_NAME).write_text(
            yaml.safe_dump(document, sort_keys=False), encoding="utf-8"
        )
        staging = self.workdir / "rule-blocks"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        first, last = math.floor(start), math.ceil(end)
        day = first - first % RULES_CHUNK_SECONDS
        while day <= last:
            self._promtool(
                [
                    "tsdb",
                    "create-blocks-from",
                    "rules",
                    "--quiet",
                    f"--url={self.url}",
                    f"--start={max(first, day)}",
                    f"--end={min(last, day + RULES_CHUNK_SECONDS - 1)}",
                    f"--eval-interval={format_duration(interval)}",
                    f"--output-dir={staging.name}",
                    RULE_FILE_NAME,  # relative, from workdir: the evaluation offsets depend on this path
                ],
                "promtool could not backfill the recording rules",
            )
            day += RULES_CHUNK_SECONDS
        self.stop()
        for block in staging.iterdir():
            block.rename(self.data / block.name)
        staging.rmdir()

    def _promtool(self, arguments: list[str], what: str) -> None:
        done = subprocess.run(
            [self.binaries.promtool, *arguments],
            cwd=self.workdir,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=False,
        )
        if done.returncode != 0:
            output = (done.stderr or done.stdout).decode("utf-8", "replace").strip()
            raise BacktestError(f"{what}: {' '.join(output[-_LOG_TAIL_BYTES:].split())}")

    # prometheus -------------------------------------------------------------------------------

    def start(self) -> None:
        """Start prometheus on a free loopback port and wait until it serves queries."""
        if self._process is not None:
            return
        config = self.workdir / "prometheus.yml"
        config.write_text("global: {}\n", encoding="utf-8")
        port = _free_port()
        self._log = (self.workdir / "prometheus.log").open("ab")
        self._process = subprocess.Popen(
            [
                self.binaries.prometheus,
                f"--config.file={config.name}",
                f"--storage.tsdb.path={self.data.name}",
                f"--storage.tsdb.retention.time={self._retention_days}d",
                f"--query.lookback-delta={format_duration(self._lookback)}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            cwd=self.workdir,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.url = f"http://127.0.0.1:{port}"
        self._wait_ready()

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            if process.poll() is None:
                process.terminate()
            try:
                process.wait(_STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def close(self) -> None:
        self.stop()

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[Series]:
        """``expr`` at ``start``, ``start + step``, ... up to ``end``; split into queries Prometheus
        accepts. The series of every part are merged by their labels."""
        merged: dict[tuple[tuple[str, str], ...], Series] = {}
        chunk = step * (MAX_POINTS_PER_QUERY - 1)
        part_start = start
        while part_start <= end:
            part_end = min(end, part_start + chunk)
            for labels, points in self._query_part(expr, part_start, part_end, step):
                key = tuple(sorted(labels.items()))
                merged.setdefault(key, (labels, []))[1].extend(points)
            part_start = part_end + step
        return list(merged.values())

    def _query_part(self, expr: str, start: float, end: float, step: float) -> list[Series]:
        body = urllib.parse.urlencode(
            {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:.3f}"}
        ).encode()
        request = urllib.request.Request(f"{self.url}/api/v1/query_range", data=body, method="POST")
        try:
            with _LOOPBACK.open(request, timeout=_QUERY_TIMEOUT_S) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            answer = _json_or_none(exc.read())
            if answer is None:
                raise BacktestError(f"prometheus refused the query {expr!r}: HTTP {exc.code}") from None
        except (OSError, ValueError) as exc:
            raise BacktestError(f"prometheus did not answer the query {expr!r}: {exc}") from None
        if answer.get("status") != "success":
            raise BacktestError(
                f"prometheus refused the query {expr!r}: {answer.get('error', 'no reason given')}"
            )
        data = answer.get("data", {})
        if data.get("resultType") != "matrix":
            raise BacktestError(f"the query {expr!r} gives a {data.get('resultType')}, not a vector")
        return [
            (dict(item["metric"]), [(float(t), float(v)) for t, v in item["values"]])
            for item in data.get("result", [])
        ]

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while time.monotonic() < deadline:
            process = self._process
            if process is None or process.poll() is not None:
                raise BacktestError(f"prometheus exited while starting: {self._log_tail()}")
            try:
                with _LOOPBACK.open(f"{self.url}/-/ready", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise BacktestError(f"prometheus was not ready after {_READY_TIMEOUT_S:.0f}s: {self._log_tail()}")

    def _log_tail(self) -> str:
        try:
            text = (self.workdir / "prometheus.log").read_bytes()[-_LOG_TAIL_BYTES:]
        except OSError:
            return "no log"
        return " ".join(text.decode("utf-8", "replace").split()) or "no log"


def _json_or_none(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
