"""End to end against real binaries: `otelguard demo` scraped every second by Prometheus loaded with
the shipped rules, alerts routed to a real Alertmanager.

Every panel expression of the committed dashboard (Grafana variables replaced by the demo's label
values) must return data; every recording rule must have values; the runaway-search and
runaway-delegation alerts must reach `firing` and arrive at Alertmanager.

To see `firing` within a minute the test loads a temp copy of the shipped rules file in which every
`for:` is rewritten to 2s (the rules and windows are otherwise untouched). The real `for:` durations
are pinned by the promtool unit tests in tests/test_rules.py.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e import (
    Prometheus,
    free_port,
    get_json,
    http_get,
    require_binary,
    run_prometheus,
    stop_process,
    wait_until,
)
from tests.test_dashboards import DASHBOARD_JSON, RULES_YAML, walk

pytestmark = pytest.mark.e2e

FAST_FOR = "2s"
RUNAWAY_ALERTS = {
    "OtelguardRunawaySearchLoop",
    "OtelguardRunawayDelegationLoop",
    "OtelguardRunawayTokens",
    "OtelguardModelStalled",
}
# Grafana's floor for $__rate_interval is four scrape intervals; the test scrapes every second.
RATE_INTERVAL = "4s"
# Panels whose healthy value is 0: they must return series, not necessarily a positive number.
ZERO_IS_HEALTHY = {"Internal errors / min", "Internal errors per minute by stage"}
# Panels and rules of the shared state: the demo has none; a serve replica on a real Redis has.
STATE_PANELS = {"Shared state: errors and fallbacks per minute", "Shared state up by instance"}
STATE_RECORD_PREFIX = "otelguard:state_"


def fast_rules_copy(tmp_path: Path) -> Path:
    """The shipped rules with every `for:` shortened, so a test sees `firing` in seconds."""
    text, count = re.subn(r"(?m)^(\s+for:) \S+$", rf"\1 {FAST_FOR}", RULES_YAML.read_text(encoding="utf-8"))
    assert count == 9
    path = tmp_path / "otelguard-rules-fast.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@contextmanager
def running(args: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as log_file:
        process = subprocess.Popen(args, stdout=log_file, stderr=subprocess.STDOUT)
    try:
        yield process
    finally:
        stop_process(process)


@contextmanager
def run_demo(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    # The package has no __main__ module; the CLI package has.
    args = [sys.executable, "-m", "otelguard.cli", "demo", "--duration", "120", "--port", str(port)]
    with running(args, tmp_path / "demo.log"):
        target = f"127.0.0.1:{port}"
        wait_until(lambda: http_get(f"http://{target}/metrics"), 15, what="otelguard demo /metrics")
        yield target


@contextmanager
def run_alertmanager(tmp_path: Path) -> Iterator[str]:
    binary = require_binary("prometheus-alertmanager")
    config = tmp_path / "alertmanager.yml"
    config.write_text(yaml.safe_dump({"route": {"receiver": "null"}, "receivers": [{"name": "null"}]}))
    address = f"127.0.0.1:{free_port()}"
    args = [
        binary,
        f"--config.file={config}",
        f"--storage.path={tmp_path / 'alertmanager-data'}",
        f"--web.listen-address={address}",
        "--cluster.listen-address=",  # no gossip port: a single instance on loopback
    ]
    with running(args, tmp_path / "alertmanager.log"):
        wait_until(lambda: http_get(f"http://{address}/-/ready"), 20, what="alertmanager ready")
        yield address


def firing_alerts(prom: Prometheus) -> set[str]:
    alerts = prom.api("/api/v1/alerts")["data"]["alerts"]
    return {a["labels"]["alertname"] for a in alerts if a["state"] == "firing"}


def alertmanager_alerts(address: str) -> set[str]:
    return {a["labels"]["alertname"] for a in get_json(f"http://{address}/api/v2/alerts")}


def label_values(prom: Prometheus, label: str, match: str) -> list[str]:
    values: list[str] = prom.api(f"/api/v1/label/{label}/values", **{"match[]": match})["data"]
    return values


def demo_variables(prom: Prometheus, started: float) -> dict[str, str]:
    """The dashboard variables as Grafana would fill them with every value the demo exposes."""
    values = {
        "job": label_values(prom, "job", "otelguard_build_info"),
        "instance": label_values(prom, "instance", "otelguard_build_info"),
        "agent": label_values(prom, "agent", "otelguard_tool_calls_total"),
        "tool": label_values(prom, "tool", "otelguard_tool_calls_total"),
    }
    for name, found in values.items():
        assert found, f"no values for ${name}"
    variables = {name: walk.grafana_regex(found) for name, found in values.items()}
    variables["__rate_interval"] = RATE_INTERVAL
    variables["__range"] = f"{math.ceil(time.time() - started) + 5}s"
    return variables


def samples(prom: Prometheus, expr: str, *, instant: bool, start: float) -> list[float]:
    if instant:
        result = prom.query(expr)
        return [float(series["value"][1]) for series in result]
    end = time.time()
    body = prom.api("/api/v1/query_range", query=expr, start=str(start), end=str(end), step="1")
    assert body["status"] == "success", body
    return [float(value) for series in body["data"]["result"] for _, value in series["values"]]


def panel_problems(
    prom: Prometheus, dashboard: dict[str, Any], started: float, *, state: bool = False
) -> list[str]:
    """What is still wrong with the dashboard's panels against the live Prometheus (empty: all good):
    the shared-state panels with ``state``, every other panel without."""
    variables = demo_variables(prom, started)
    problems: list[str] = []
    for target in walk.targets(dashboard):
        if (target.panel_title in STATE_PANELS) != state:
            continue
        expr = walk.substitute(target.expr, variables)
        finite = [v for v in samples(prom, expr, instant=target.instant, start=started) if math.isfinite(v)]
        if not finite:
            problems.append(f"panel {target.panel_title!r} returned no data: {expr}")
        elif max(finite) <= 0 and target.panel_title not in ZERO_IS_HEALTHY:
            problems.append(f"panel {target.panel_title!r} stayed at 0: {expr}")
        elif (
            target.exemplar
            and not prom.api(
                "/api/v1/query_exemplars", query=expr, start=str(started - 60), end=str(time.time())
            )["data"]
        ):
            problems.append(f"panel {target.panel_title!r} shows exemplars but none were stored: {expr}")
    for variable in dashboard["templating"]["list"][1:]:
        inner = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["query"])
        assert inner is not None
        if not label_values(prom, inner.group(2), walk.substitute(inner.group(1), variables)):
            problems.append(f"variable ${variable['name']} resolves to nothing")
    return problems


def test_demo_prometheus_alertmanager_dashboard_and_rules(tmp_path: Path) -> None:
    dashboard: dict[str, Any] = json.loads(DASHBOARD_JSON.read_text(encoding="utf-8"))
    rules = fast_rules_copy(tmp_path)
    records = [
        r["record"] for g in yaml.safe_load(rules.read_text())["groups"] for r in g["rules"] if "record" in r
    ]
    with (
        run_alertmanager(tmp_path) as alertmanager,
        run_demo(tmp_path) as target,
        run_prometheus(tmp_path, [target], rule_files=[rules], alertmanager=alertmanager) as prom,
    ):
        started = time.time()
        wait_until(prom.targets_up, 20, what="demo target scraped")
        wait_until(lambda: firing_alerts(prom) >= RUNAWAY_ALERTS, 45, what=f"{RUNAWAY_ALERTS} firing")
        wait_until(
            lambda: alertmanager_alerts(alertmanager) >= RUNAWAY_ALERTS, 20, what="alerts at Alertmanager"
        )

        for record in records:
            if not record.startswith(STATE_RECORD_PREFIX):
                assert prom.query(record), f"recording rule {record} has no value"

        # A decision series is born at its first increment, which rate() cannot see: give the demo
        # a few more scrapes until every panel has something to show, then report what is missing.
        deadline = time.monotonic() + 40
        problems = panel_problems(prom, dashboard, started)
        while problems and time.monotonic() < deadline:
            time.sleep(2)
            problems = panel_problems(prom, dashboard, started)
        assert not problems, "\n".join(problems)


def test_shared_state_panels_rules_and_alert_against_a_real_redis_outage(tmp_path: Path) -> None:
    """A serve replica on a real Redis, scraped by Prometheus with the shipped rules: its Redis is
    killed under traffic, the shared-state panels and rules show it and OtelguardSharedStateDown fires."""
    import threading

    from tests.redis_e2e import run_redis
    from tests.test_sidecar_state import call, start_replica

    dashboard: dict[str, Any] = json.loads(DASHBOARD_JSON.read_text(encoding="utf-8"))
    rules = fast_rules_copy(tmp_path)
    stop = threading.Event()
    with run_redis(tmp_path) as redis:
        serve = start_replica(tmp_path, "--state", redis.url)

        def traffic() -> None:
            n = 0
            while not stop.wait(0.05):
                call(serve, f"conversation-{n // 5}", n)
                n += 1

        driver = threading.Thread(target=traffic)
        try:
            with run_prometheus(tmp_path, [f"127.0.0.1:{serve.port}"], rule_files=[rules]) as prom:
                started = time.time()
                driver.start()
                wait_until(prom.targets_up, 20, what="serve scraped")
                wait_until(lambda: prom.query("otelguard_state_up == 1"), 20, what="state up in Prometheus")
                redis.kill()
                wait_until(
                    lambda: "OtelguardSharedStateDown" in firing_alerts(prom), 60, what="the alert firing"
                )
                for record in ("otelguard:state_errors:rate5m", "otelguard:state_fallback:rate5m"):
                    assert prom.query(f"{record} > 0"), f"recording rule {record} shows no outage"
                deadline = time.monotonic() + 30
                problems = panel_problems(prom, dashboard, started, state=True)
                while problems and time.monotonic() < deadline:
                    time.sleep(2)
                    problems = panel_problems(prom, dashboard, started, state=True)
                assert not problems, "\n".join(problems)
        finally:
            stop.set()
            if driver.is_alive():
                driver.join(10)
            stop_process(serve.process)
