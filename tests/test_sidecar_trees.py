"""One delegation tree across two real ``otelguard serve`` processes on one real redis-server: the
calls of the tree, split between them by their ``baggage`` header, hold ``caps.tree`` exactly under
concurrent load."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from otelguard import Guard, GuardConfig, propagation
from otelguard.core.session_keys import key_bytes
from otelguard.core.tree import tree_digest
from tests.e2e import stop_process
from tests.redis_e2e import RedisServer
from tests.test_cli_serve import Serve
from tests.test_sidecar_state import start_replica

KEY = "replica-key"
LIMIT = 40
CONFIG = (
    f"signature_key: {KEY}\n"
    "mode: unattended\n"  # hard stops on: a cycle is refused, then stopped
    "caps:\n"
    "  on_hit: reject\n"
    "  turn: {web_search: 0}\n"
    "  session: {web_search: 0}\n"
    f"  tree: {{web_search: {LIMIT}}}\n"
    "state:\n  timeout_ms: 1000\n"  # a loaded machine must not fail over where no outage is meant
)
ROOT = "root-conversation-7731"


@pytest.fixture
def replicas(redis_server: RedisServer, tmp_path: Path) -> Iterator[tuple[Serve, Serve]]:
    first = start_replica(tmp_path, "--state", redis_server.url, config=CONFIG)
    second = start_replica(tmp_path, "--state", redis_server.url, config=CONFIG)
    yield first, second
    stop_process(first.process)
    stop_process(second.process)


def tree_headers() -> dict[str, str]:
    """The headers the root agent sends its delegates: its tree in ``baggage``."""
    root = Guard(GuardConfig(signature_key=KEY, caps={"tree": {"web_search": LIMIT}}), session_id=ROOT)
    headers: dict[str, str] = {"content-type": "application/json"}
    propagation.inject(headers, root)
    assert ROOT not in headers["baggage"]
    return headers


def call(serve: Serve, session: str, n: int, headers: dict[str, str]) -> str:
    body = {
        "session_id": session,
        "tool_name": "web_search",
        "args": {"q": f"q{n}"},
        "call_id": f"{session}-{n}",
    }
    decision: dict[str, Any] = serve.post("/v1/before_call", body, headers=headers)
    if decision["action"] == "allow":
        serve.post("/v1/after_call", {**body, "result": "results", "failed": False}, headers=headers)
    return str(decision["code"])


def burst(replicas: tuple[Serve, Serve], headers: dict[str, str], start: int, calls: int) -> Counter[str]:
    """``calls`` calls of eight delegated agents (sessions of their own), in parallel, alternating
    between the replicas."""

    def one(n: int) -> str:
        return call(replicas[n % 2], f"delegate-{n % 8}", start + n, headers)

    with ThreadPoolExecutor(max_workers=8) as pool:
        return Counter(pool.map(one, range(calls)))


def test_two_replicas_hold_a_tree_cap_exactly_under_concurrent_load(
    replicas: tuple[Serve, Serve], redis_server: RedisServer
) -> None:
    headers = tree_headers()
    # no false refusal: the tree's first LIMIT calls, in parallel over both replicas, all run
    assert burst(replicas, headers, 0, LIMIT) == Counter({"allow": LIMIT})
    # no overshoot: every later call of the tree is refused, whichever replica it reaches
    assert burst(replicas, headers, LIMIT, 24) == Counter({"cap_tree": 24})
    key = f"otelguard:tree:{{{tree_digest(ROOT, key_bytes(KEY))}}}"
    assert int(redis_server.client.hget(key, "web_search")) == LIMIT
    assert 0 < redis_server.client.ttl(key) <= 3600  # expires as a session's key does
    for name in redis_server.client.keys("*"):
        assert ROOT.encode() not in name and b"delegate-" not in name
    # a session that carries no tree is in none: its calls are not the tree's
    assert call(replicas[0], "unrelated", 0, {"content-type": "application/json"}) == "allow"


def test_bad_baggage_on_the_sidecar_is_ignored_and_never_refuses(replicas: tuple[Serve, Serve]) -> None:
    forged = {
        "baggage": f"otelguard.tree={'a' * 32},otelguard.depth=0,otelguard.path={'0' * 12}%2C{'1' * 12}"
    }
    for n in range(3):
        assert call(replicas[n % 2], "forged", n, forged) == "allow"
    status, _ = replicas[0].request(
        "POST", "/v1/before_call", {"session_id": "x", "tool_name": "t"}, {"baggage": "%%%"}
    )
    assert status == 200


def test_a_guard_in_a_tree_falls_back_to_its_own_counts_when_redis_is_down(redis_server: RedisServer) -> None:
    """Redis killed: the tree's calls are decided from this process's counts (kept all along), the
    guard never raises, and the cap still holds within the process."""
    cfg = GuardConfig(
        signature_key=KEY,
        caps={"on_hit": "reject", "tree": {"web_search": 3}, "session": {"web_search": 0}},
        state={"url": redis_server.url, "timeout_ms": 200},
    )
    guard = Guard(cfg, session_id="outage-root")
    assert guard.before_call("web_search", {"q": 0}).action == "allow"
    key = f"otelguard:tree:{{{tree_digest('outage-root', key_bytes(KEY))}}}"
    assert int(redis_server.client.hget(key, "web_search")) == 1
    redis_server.kill()
    codes = [guard.subagent_guard("w").before_call("web_search", {"q": n}).code for n in range(1, 5)]
    assert codes == ["allow", "allow", "cap_tree", "cap_tree"]


def test_a_handoff_ping_pong_across_two_replicas_is_warned_refused_then_stopped(
    replicas: tuple[Serve, Serve],
) -> None:
    """``delegate_to`` on ``/v1/before_call``: the path in the baggage shows the cycle, whichever
    replica serves the agent that closes it."""
    config = GuardConfig(signature_key=KEY, caps={"tree": {"web_search": LIMIT}})
    planner = Guard(config, agent="planner", session_id="cycle-conversation")
    headers: dict[str, str] = {"content-type": "application/json"}
    propagation.inject(headers, planner)  # the planner's tree: its path is [planner]

    def handoff(serve: Serve, session: str, to: str, n: int, sent: dict[str, str]) -> str:
        body = {
            "session_id": session,
            "tool_name": f"transfer_to_{to}",
            "call_id": f"h{n}",
            "delegate_to": to,
        }
        decision: dict[str, Any] = serve.post("/v1/before_call", body, headers=sent)
        return str(decision["code"])

    # the agent served by replica 0 is one level below the planner: handing back to it is the first return
    assert handoff(replicas[0], "cycle-researcher", "planner", 0, headers) == "delegation_cycle_warn"
    with propagation.extract(headers):
        researcher = Guard(config, agent="researcher", session_id="cycle-local")
    back: dict[str, str] = {"content-type": "application/json"}
    propagation.inject(back, researcher.subagent_guard("planner"))  # the path: planner, researcher, planner
    assert handoff(replicas[1], "cycle-planner-2", "researcher", 1, back) == "delegation_cycle_reject"
    assert handoff(replicas[1], "cycle-planner-2", "researcher", 2, back) == "delegation_cycle_block"
    status, _ = replicas[0].request(
        "POST", "/v1/before_call", {"session_id": "x", "tool_name": "t", "delegate_to": 7}, headers
    )
    assert status == 400  # a delegate_to that is not a string is named, never served
