"""Token caps shared through a real redis-server: tokens charged at once from several stores and
several processes are counted exactly, and exactly one reply crosses the cap (docs/model-turns.md)."""

from __future__ import annotations

import multiprocessing
import threading
from typing import Any

from otelguard import Guard, GuardConfig
from otelguard.config import StateSettings
from otelguard.core import decisions as codes
from otelguard.state.redis_caps import RedisLink, RedisSessionCaps
from tests.e2e import free_port
from tests.redis_e2e import RedisServer

KEY = "model-turns-redis-key"
SESSION = "model-turns-redis-session"
PATIENT_MS = 10_000  # a loaded machine must not turn a slow answer into a local decision


def _config(url: str, limit: int) -> GuardConfig:
    return GuardConfig.from_mapping(
        {
            "signature_key": KEY,
            "state": {"url": url, "timeout_ms": PATIENT_MS},
            "caps": {"session": {"tokens": limit}},
        }
    )


def test_two_stores_on_one_redis_add_tokens_exactly(redis_server: RedisServer) -> None:
    """Two stores of one session (two links: as two processes would hold) add from two threads at
    once: every count answered is distinct, the last is the sum, and exactly one add crosses the limit."""
    settings = StateSettings(url=redis_server.url, timeout_ms=PATIENT_MS)
    stores = [RedisSessionCaps(RedisLink(settings), "otelguard:{tokens-exact}", 600) for _ in range(2)]
    adds, amount, limit = 400, 7, 3001
    answers: list[list[int]] = [[], []]
    start = threading.Barrier(2)

    def add(i: int) -> None:
        start.wait(30)
        answers[i].extend(stores[i].add("tokens", amount) for _ in range(adds))

    threads = [threading.Thread(target=add, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    counts = answers[0] + answers[1]
    assert sorted(counts) == [amount * n for n in range(1, 2 * adds + 1)]
    assert sum(1 for used in counts if used - amount < limit <= used) == 1
    assert int(redis_server.client.hget("otelguard:{tokens-exact}", "tokens") or 0) == 2 * adds * amount
    assert [store.link.failures for store in stores] == [0, 0]


def _replies_in_a_process(url: str, limit: int, replies: int, tokens: int, queue: Any) -> None:
    guard = Guard(_config(url, limit), session_id=SESSION)
    seen = []
    for _ in range(replies):
        guard.start_turn()  # a halted turn would answer turn_halted: each reply in a turn of its own
        decision = guard.after_model("a reply", input_tokens=tokens - 1, output_tokens=1)
        seen.append((decision.code, decision.count))
    queue.put(seen)


def test_two_processes_reach_a_session_token_cap_exactly_once(redis_server: RedisServer) -> None:
    """Two guards of one session in two processes: the session's tokens in Redis are exactly what
    both charged, the replies from the limit on halt with ``cap_session``, the ones before it do not,
    and one reply, in one of the processes, is the one that crossed it."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    replies, tokens, limit = 150, 11, 1500
    processes = [
        context.Process(target=_replies_in_a_process, args=(redis_server.url, limit, replies, tokens, queue))
        for _ in range(2)
    ]
    for process in processes:
        process.start()
    results = [queue.get(timeout=180) for _ in processes]
    for process in processes:
        process.join(30)
    decisions = results[0] + results[1]
    counts = sorted(count for _code, count in decisions if count)
    assert counts == [tokens * n for n in range(-(-limit // tokens), 2 * replies + 1)]
    assert all(code == codes.CAP_SESSION for code, count in decisions if count >= limit)
    assert sum(1 for code, _count in decisions if code == codes.ALLOW) == -(-limit // tokens) - 1
    assert sum(1 for _code, count in decisions if count and count - tokens < limit) == 1
    guard = Guard(_config(redis_server.url, limit), session_id=SESSION)
    assert guard.session_caps.add("tokens", 0) == 2 * replies * tokens
    blocked = guard.before_model()  # a third guard of the session: read from Redis, not its own counts
    assert (blocked.action, blocked.code, blocked.cap) == ("block", codes.CAP_SESSION, "tokens")


def test_tokens_are_counted_here_while_redis_does_not_answer() -> None:
    """No Redis on the port: each add is decided from this process's own counts, and the guard's
    token cap still holds (fail open to the local count, never an error in the agent loop)."""
    url = f"redis://127.0.0.1:{free_port()}/0"
    guard = Guard(_config(url, 100), session_id="no-redis-here")
    assert guard.after_model("a", input_tokens=60).code == codes.ALLOW
    assert guard.session_caps.usage()["tokens"] == 60
    crossing = guard.after_model("b", output_tokens=40)
    assert (crossing.code, crossing.count) == (codes.CAP_SESSION, 100)
