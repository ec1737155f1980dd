"""One delegation tree, one budget, on a real ``otelguard serve``: however many newer trees the
process sees, and whichever is forgotten first (the tree's counters or its sessions), the sessions of
a tree with ``caps.tree {web_search: 10}`` make 10 searches between them, not 10 per set of counters."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from otelguard import Guard, GuardConfig, propagation
from otelguard.core.session_keys import key_bytes
from otelguard.core.tree import MAX_TREES, tree_digest
from tests.e2e import stop_process
from tests.redis_e2e import RedisServer
from tests.test_cli_serve import TIMEOUT, Serve
from tests.test_sidecar_state import start_replica

KEY = "tree-budget-key"
LIMIT = 10
CONFIG = (
    f"signature_key: {KEY}\n"
    "caps:\n"
    "  on_hit: reject\n"
    "  turn: {web_search: 0}\n"
    "  session: {web_search: 0}\n"
    f"  tree: {{web_search: {LIMIT}}}\n"
    "state:\n  timeout_ms: 1000\n"  # a loaded machine must not fail over where no outage is meant
)
ROOT = "tree-budget-root"


def tree_headers() -> dict[str, str]:
    """What the tree's root agent sends the agents it delegates to: its tree in ``baggage``."""
    root = Guard(GuardConfig(signature_key=KEY, caps={"tree": {"web_search": LIMIT}}), session_id=ROOT)
    headers = {"content-type": "application/json"}
    propagation.inject(headers, root)
    return headers


def searches(serve: Serve, session: str, calls: int, headers: dict[str, str]) -> int:
    """``calls`` distinct searches by ``session`` (a delegated agent of the tree); how many ran."""
    ran = 0
    for n in range(calls):
        body = {"session_id": session, "tool_name": "web_search", "args": {"q": f"{session}-{n}"}}
        decision: dict[str, Any] = serve.post("/v1/before_call", body, headers=headers)
        assert decision["code"] in ("allow", "cap_tree"), decision
        if decision["action"] == "allow":
            ran += 1
            serve.post("/v1/after_call", {**body, "result": "results", "failed": False}, headers=headers)
    return ran


def newer_trees(serve: Serve, count: int) -> None:
    """``count`` new sessions, each the root of a tree of its own (the config has ``caps.tree``),
    from four keep-alive clients."""

    def client(part: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", serve.port, timeout=TIMEOUT)
        try:
            for n in range(part, count, 4):
                body = json.dumps({"session_id": f"newer-{n}"})
                connection.request("POST", "/v1/start_turn", body=body)
                response = connection.getresponse()
                assert response.status == 200
                response.read()
        finally:
            connection.close()

    with ThreadPoolExecutor(4) as clients:
        list(clients.map(client, range(4)))


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    running = start_replica(tmp_path, config=CONFIG)
    yield running
    stop_process(running.process)


def test_newer_trees_never_give_a_tree_whose_sessions_live_a_second_budget(serve: Serve) -> None:
    headers = tree_headers()
    ran = searches(serve, "member-a", 6, headers) + searches(serve, "member-b", 6, headers)
    assert ran == LIMIT
    newer_trees(serve, MAX_TREES + 64)  # more trees than the process keeps counters of
    # the tree's sessions search again, and so do agents it delegates to now: the one budget is spent
    ran += searches(serve, "member-a", 3, headers) + searches(serve, "member-b", 3, headers)
    ran += searches(serve, "member-c", LIMIT, headers) + searches(serve, "member-d", LIMIT, headers)
    assert ran == LIMIT


def test_a_tree_whose_sessions_were_forgotten_first_keeps_its_count(tmp_path: Path) -> None:
    """The other order: the sessions go (``--max-sessions 2``) while the tree's counters stay."""
    serve = start_replica(tmp_path, "--max-sessions", "2", config=CONFIG)
    try:
        headers = tree_headers()
        ran = searches(serve, "member-a", 6, headers) + searches(serve, "member-b", 6, headers)
        newer_trees(serve, 8)  # members a and b are dropped from the pool
        ran += searches(serve, "member-a", 3, headers) + searches(serve, "member-c", LIMIT, headers)
        assert ran == LIMIT
    finally:
        stop_process(serve.process)


def test_on_redis_the_tree_keeps_one_budget_through_eviction_and_an_outage(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """With ``--state``, Redis holds the tree's count; the process's own counts, which decide while
    Redis is away, are the tree's one set too: an agent joining the tree during an outage, after
    newer trees pushed the tree out of the process's table, finds the tree's budget spent."""
    serve = start_replica(tmp_path, "--state", redis_server.url, config=CONFIG)
    try:
        headers = tree_headers()
        ran = searches(serve, "member-a", 6, headers) + searches(serve, "member-b", 6, headers)
        assert ran == LIMIT
        newer_trees(serve, MAX_TREES + 64)
        ran += searches(serve, "member-a", 2, headers)
        key = f"otelguard:tree:{{{tree_digest(ROOT, key_bytes(KEY))}}}"
        assert ran == int(redis_server.client.hget(key, "web_search")) == LIMIT
        redis_server.kill()
        ran += searches(serve, "member-b", 2, headers) + searches(serve, "member-c", LIMIT, headers)
        assert ran == LIMIT
    finally:
        stop_process(serve.process)
