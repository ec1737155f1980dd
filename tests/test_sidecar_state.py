"""Two real ``otelguard serve`` replicas sharing session caps through one real redis-server, its
outages seen in their ``/metrics``, and what ``--state`` accepts."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import free_port, stop_process, wait_until
from tests.redis_e2e import RedisServer
from tests.test_cli_serve import Serve

CONFIG = (
    "signature_key: replica-key\n"
    "caps:\n  turn: {web_search: 0}\n  session: {web_search: 10}\n"
    "state:\n  timeout_ms: 1000\n"  # a loaded machine must not fail over where no outage is meant
)


def start_replica(
    tmp_path: Path, *extra: str, config: str = CONFIG, env_extra: dict[str, str] | None = None
) -> Serve:
    path = tmp_path / f"otelguard-{free_port()}.yaml"
    path.write_text(config)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTELGUARD_")} | (env_extra or {})
    process = subprocess.Popen(
        [sys.executable, "-m", "otelguard", "serve", "--port", str(port), "--config", str(path), *extra],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / f"serve-{port}.err").open("wb"),
        env=env,
    )
    serve = Serve(process, port)
    wait_until(lambda: serve.request("GET", "/healthz")[0] == 200, 30, 0.05, "otelguard serve to listen")
    return serve


def stderr_of(tmp_path: Path, serve: Serve) -> str:
    return (tmp_path / f"serve-{serve.port}.err").read_text()


@pytest.fixture
def replicas(redis_server: RedisServer, tmp_path: Path) -> Iterator[tuple[Serve, Serve]]:
    first = start_replica(tmp_path, "--state", redis_server.url)
    second = start_replica(tmp_path, "--state", redis_server.url)
    yield first, second
    stop_process(first.process)
    stop_process(second.process)


def call(serve: Serve, session: str, n: int, tool: str = "web_search") -> dict[str, Any]:
    body = {"session_id": session, "tool_name": tool, "args": {"q": f"q{n}"}, "call_id": f"{session}-{n}"}
    decision: dict[str, Any] = serve.post("/v1/before_call", body)
    if decision["action"] in ("allow", "warn"):
        serve.post("/v1/after_call", {**body, "result": "results", "failed": False})
    return decision


def metric(serve: Serve, name: str) -> float | None:
    status, body = serve.request("GET", "/metrics")
    assert status == 200
    match = re.search(rf"^{re.escape(name)} (\S+)$", body.decode(), flags=re.M)
    return float(match.group(1)) if match else None


def test_two_replicas_refuse_the_eleventh_call_of_a_cap_of_ten_across_them(
    replicas: tuple[Serve, Serve], redis_server: RedisServer
) -> None:
    first, second = replicas
    decisions = [call((first, second)[n % 2], "conversation-1", n) for n in range(11)]
    assert [d["action"] for d in decisions] == ["allow"] * 10 + ["block"]
    assert (decisions[-1]["code"], decisions[-1]["count"], decisions[-1]["limit"]) == ("cap_session", 10, 10)
    # another session has its own count; a tool without a session cap costs no command
    assert call(second, "conversation-2", 0)["action"] == "allow"
    before = redis_server.client.info("commandstats")["cmdstat_evalsha"]["calls"]
    assert call(first, "conversation-2", 1, tool="read_file")["action"] == "allow"
    assert redis_server.client.info("commandstats")["cmdstat_evalsha"]["calls"] == before
    for serve in replicas:
        assert metric(serve, "otelguard_state_up") == 1
        assert metric(serve, 'otelguard_state_errors_total{op="connect"}') == 0
        assert metric(serve, "otelguard_state_fallback_total") == 0


@pytest.mark.parametrize("outage", ["killed", "hung"])
def test_an_outage_shows_in_metrics_keeps_answering_and_recovers(
    replicas: tuple[Serve, Serve], redis_server: RedisServer, tmp_path: Path, outage: str
) -> None:
    """Down or hung, Redis costs one failed command per back-off and the replicas answer every call
    from their own counts; once it is back they use it again within the back-off (at most 5 s)."""
    first, _second = replicas
    for n in range(3):
        assert call(first, "conversation-3", n)["action"] == "allow"
    if outage == "killed":
        redis_server.kill()
    else:
        redis_server.hang()
    try:
        decisions = [call(first, "conversation-3", n) for n in range(3, 60)]
    finally:
        if outage == "hung":
            redis_server.resume()
    # from the local count of 3: seven more allowed, then refused (the turn stops at the first)
    assert [d["action"] for d in decisions[:8]] == ["allow"] * 7 + ["block"]
    op = "connect" if outage == "killed" else "charge"
    errors = metric(first, f'otelguard_state_errors_total{{op="{op}"}}')
    fallbacks = metric(first, "otelguard_state_fallback_total")
    assert metric(first, "otelguard_state_up") == 0
    assert errors is not None and errors >= 1
    assert fallbacks == 8  # every capped decision of the outage (the later calls: turn_halted)
    if outage == "killed":
        redis_server.restart()

    def recovered() -> bool:
        call(first, "conversation-4", int(metric(first, "otelguard_state_fallback_total") or 0))
        return metric(first, "otelguard_state_up") == 1

    wait_until(recovered, 15, interval=0.5, what="the replica to use Redis again")
    log = stderr_of(tmp_path, first)
    assert log.count("shared state at redis://127.0.0.1") == 3  # at start, outage start, outage end
    assert "answers again" in log and "conversation" not in log


def test_a_replica_starts_while_redis_is_down_and_uses_it_once_it_is_up(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    redis_server.kill()
    serve = start_replica(tmp_path, "--state", redis_server.url)
    try:
        assert metric(serve, "otelguard_state_up") == 0
        assert metric(serve, 'otelguard_state_errors_total{op="connect"}') == 1
        assert call(serve, "conversation-5", 0)["action"] == "allow"
        redis_server.restart()
        wait_until(
            lambda: call(serve, "conversation-5", 1) and metric(serve, "otelguard_state_up") == 1,
            15,
            interval=0.5,
            what="the replica to use Redis",
        )
        assert "does not answer yet" in stderr_of(tmp_path, serve)
    finally:
        stop_process(serve.process)


def test_without_state_a_replica_exports_no_state_metrics(tmp_path: Path) -> None:
    serve = start_replica(tmp_path, config=CONFIG.split("state:")[0])
    try:
        assert call(serve, "conversation-6", 0)["action"] == "allow"
        status, body = serve.request("GET", "/metrics")
        assert status == 200 and b"otelguard_state" not in body
    finally:
        stop_process(serve.process)


@pytest.mark.parametrize(
    ("args", "config", "expected"),
    [
        (("--state", "memcached://cache:11211"), CONFIG, "OTELGUARD_STATE_URL"),
        (("--state", "redis://127.0.0.1:1/0"), "caps: {session: {web_search: 10}}\n", "signature_key"),
        ((), CONFIG + "  url: redis://:s3cr3t-canary@cache:bad/0\n", "state.url"),
    ],
)
def test_a_bad_state_exits_2_with_one_line_naming_it(
    tmp_path: Path, args: tuple[str, ...], config: str, expected: str
) -> None:
    done = serve_once(tmp_path, config, *args)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1
    assert expected in done.stderr and "s3cr3t-canary" not in done.stderr


def serve_once(tmp_path: Path, config: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``otelguard serve`` with ``config`` (and no OTELGUARD_ variable) that is expected to exit at once."""
    path = tmp_path / "otelguard.yaml"
    path.write_text(config)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTELGUARD_")}
    command = [sys.executable, "-m", "otelguard", "serve", "--port", str(free_port()), "--config", str(path)]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=60, env=env, check=False)


def health(serve: Serve) -> dict[str, Any]:
    status, body = serve.request("GET", "/healthz")
    assert status == 200  # the sidecar serves on without the state: it stays healthy
    answer: dict[str, Any] = json.loads(body)
    return answer


def test_healthz_says_when_the_shared_state_is_down_and_when_it_answers_again(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    serve = start_replica(tmp_path, "--state", redis_server.url)
    try:
        assert health(serve) == {"status": "ok", "sessions": 0, "state": "up"}
        redis_server.kill()  # no tool call since: /healthz itself finds out, with a ping beside it
        wait_until(lambda: health(serve)["state"] == "down", 30, 0.1, "/healthz to see the state down")
        assert metric(serve, "otelguard_state_up") == 0
        assert call(serve, "conversation-1", 0)["action"] == "allow"  # decided here meanwhile
        assert health(serve) == {"status": "ok", "sessions": 1, "state": "down"}
        redis_server.start()
        wait_until(lambda: health(serve)["state"] == "up", 30, 0.1, "/healthz to see the state again")
        assert metric(serve, "otelguard_state_up") == 1
    finally:
        stop_process(serve.process)


def test_healthz_names_no_state_without_one(tmp_path: Path) -> None:
    serve = start_replica(tmp_path)
    try:
        assert health(serve) == {"status": "ok", "sessions": 0}
    finally:
        stop_process(serve.process)


def test_serve_takes_the_redis_password_from_the_environment_or_a_file_and_never_shows_it(
    tmp_path: Path,
) -> None:
    """A Redis with a password holding '/', '#', '?' and '@' (as base64 and generated secrets do):
    one replica gets it from OTELGUARD_STATE_PASSWORD, one from state.password_file; both share the
    cap, say on stderr that Redis answers, and show the password nowhere (stderr, /metrics)."""
    from tests.redis_e2e import run_redis

    password = "b64/+sEcr#t?=@:canary"
    secret = tmp_path / "redis-password"
    secret.write_text(password + "\n")
    with run_redis(tmp_path, password=password) as server:
        url = f"redis://127.0.0.1:{server.port}/0"
        first = start_replica(tmp_path, "--state", url, env_extra={"OTELGUARD_STATE_PASSWORD": password})
        second = start_replica(tmp_path, "--state", url, config=CONFIG + f"  password_file: {secret}\n")
        try:
            decisions = [call((first, second)[n % 2], "conversation-pw", n) for n in range(11)]
            assert [d["action"] for d in decisions] == ["allow"] * 10 + ["block"]
            for serve in (first, second):
                assert metric(serve, "otelguard_state_fallback_total") == 0
                assert "canary" not in serve.request("GET", "/metrics")[1].decode()
        finally:
            stop_process(first.process)
            stop_process(second.process)
        for serve in (first, second):
            err = stderr_of(tmp_path, serve)
            assert f"shared state at {url} answers" in err and "canary" not in err
