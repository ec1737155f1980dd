"""One failing call sent by several clients at once gets exactly ``rejects_before_stop`` rejects (7)
and then the block, however its copies interleave: a copy let through before the rejects began and
ending after some of them never hands the call its rejects afresh.

On a real ``otelguard serve`` backed by a real redis-server (its calls that charge a session cap
run on the worker pool, so the clients' calls interleave most there), and in process, where the
interleaving is laid out call by call."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from otelguard import Guard, GuardConfig
from otelguard.core import decisions as codes
from tests.e2e import stop_process
from tests.redis_e2e import RedisServer
from tests.test_cli_serve import TIMEOUT, Serve
from tests.test_sidecar_state import start_replica

CLIENTS = 8
ROUNDS = 20
REJECTS = 7  # rejects_before_stop's default
CONFIG = (
    "signature_key: concurrent-key\n"
    "mode: unattended\n"  # hard stops: the repeated failure is rejected, then blocked
    "caps:\n  session: {web_search: 1000000}\n"  # charged in Redis: each call goes to a worker
    "state:\n  timeout_ms: 1000\n"  # a loaded machine must not fail over where no outage is meant
)
SENT = 40  # per client and round: far more than the turn lasts


def one_client(serve: Serve, session: str, client: int, start: threading.Barrier) -> list[str]:
    """The same failing call, resent until the turn stops; the codes it got."""
    connection = http.client.HTTPConnection("127.0.0.1", serve.port, timeout=TIMEOUT)

    def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        connection.request("POST", path, body=json.dumps(body), headers={"content-type": "application/json"})
        response = connection.getresponse()
        answer = response.read()
        assert response.status == 200, answer
        decision: dict[str, Any] = json.loads(answer)
        return decision

    got: list[str] = []
    start.wait()
    try:
        for n in range(SENT):
            call = {
                "session_id": session,
                "tool_name": "web_search",
                "args": {"q": "the same query"},
                "call_id": f"{client}-{n}",
            }
            decision = post("/v1/before_call", call)
            got.append(decision["code"])
            if decision["action"] in ("allow", "warn"):
                post("/v1/after_call", {**call, "result": "error: upstream timed out", "failed": True})
            elif decision["action"] in ("block", "halt"):
                break
    finally:
        connection.close()
    return got


def rounds_of_eight_clients(serve: Serve) -> list[dict[str, int]]:
    """``ROUNDS`` turns, each of ``CLIENTS`` clients sending one failing call at once; each turn's
    decisions as the sidecar counted them."""
    counted = []
    with ThreadPoolExecutor(CLIENTS) as pool:
        for round_ in range(ROUNDS):
            session = f"round-{round_}"
            serve.post("/v1/start_turn", {"session_id": session})
            start = threading.Barrier(CLIENTS)
            clients = [pool.submit(one_client, serve, session, c, start) for c in range(CLIENTS)]
            answers = [client.result() for client in clients]
            summary = serve.post("/v1/end_turn", {"session_id": session})
            got = [code for codes_ in answers for code in codes_]
            assert got.count(codes.EXACT_FAILURE_REJECT) == summary["decisions"].get(
                codes.EXACT_FAILURE_REJECT, 0
            )
            counted.append(summary["decisions"])
    return counted


@pytest.fixture
def redis_serve(redis_server: RedisServer, tmp_path: Path) -> Iterator[Serve]:
    serve = start_replica(tmp_path, "--state", redis_server.url, config=CONFIG)
    yield serve
    stop_process(serve.process)


def test_eight_clients_on_a_redis_backed_sidecar_get_seven_rejects_then_the_block(redis_serve: Serve) -> None:
    for decisions in rounds_of_eight_clients(redis_serve):
        assert decisions[codes.EXACT_FAILURE_REJECT] == REJECTS, decisions
        assert decisions[codes.EXACT_FAILURE_BLOCK] == 1, decisions


def test_a_copy_let_through_before_the_rejects_and_ending_after_them_gives_none_back() -> None:
    """The interleaving laid out: three copies run at once; two fail, which reaches the stop of
    ``exact_failure``... and the third ends only after the call was rejected twice."""
    guard = Guard(GuardConfig(mode="unattended", signature_key="k", hard_stop_after={"exact_failure": 2}))
    guard.start_turn()
    args = {"q": "the same query"}
    for call in ("a", "b", "c"):  # in flight together
        assert guard.before_call("web_search", args, call_id=call).allows_execution
    for call in ("a", "b"):
        guard.after_call("web_search", args, "error: upstream timed out", failed=True, call_id=call)
    got = [guard.before_call("web_search", args, call_id=f"r{n}").code for n in range(2)]
    guard.after_call("web_search", args, "error: upstream timed out", failed=True, call_id="c")
    got += [guard.before_call("web_search", args, call_id=f"s{n}").code for n in range(REJECTS)]
    assert got == [codes.EXACT_FAILURE_REJECT] * REJECTS + [codes.EXACT_FAILURE_BLOCK, codes.TURN_HALTED]
