"""Shared session caps under the faults a deployment meets, against real redis-server processes: a
Redis restarted without its data, a Redis Cluster of three nodes, a key of the wrong type, more
threads than connections, a password kept out of the URL, and the memory a session costs.
"""

from __future__ import annotations

import multiprocessing
import threading
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from prometheus_client import CollectorRegistry

from otelguard import Guard, Telemetry
from otelguard.config import StateSettings
from otelguard.core import decisions as codes
from otelguard.core.caps import CapRefusal
from otelguard.core.session_keys import key_bytes
from otelguard.hosting import session_cap_store
from otelguard.state.redis_caps import MARKER, RedisLink, RedisSessionCaps, session_key
from otelguard.state.reports import StateReport
from otelguard.testing import RecordingObserver
from tests.redis_e2e import RedisServer, run_redis
from tests.test_state_redis import KEY, PATIENT_MS, SESSION, Clock, guard_config, search, store_on


def _store(
    link: RedisLink, session_id: str = SESSION, listener: Callable[[StateReport], None] | None = None
) -> RedisSessionCaps:
    key = session_key(link.state, key_bytes(KEY), session_id)
    return RedisSessionCaps(link, key, link.state.ttl_seconds, listener)


# -- a Redis restarted without its data ------------------------------------------------------------


def test_a_redis_restarted_empty_never_hands_a_session_a_fresh_cap(redis_server: RedisServer) -> None:
    """Ten searches of a cap of ten, then Redis restarts with no persistence: the process does not
    take Redis's empty hash for the truth; it writes its count back and the next ten are refused."""
    clock = Clock()
    store = store_on(redis_server, clock)
    guard = Guard(guard_config(redis_server.url), session_id=SESSION, session_caps=store)
    assert [search(guard, n).action for n in range(10)] == ["allow"] * 10
    redis_server.restart()
    assert search(guard, 10).code == codes.CAP_SESSION
    refusals = []
    for _ in range(10):
        clock.advance(10)  # any back-off after the restart is over: every call asks Redis
        refusals.append(store.charge([("web_search", 10)], 1).refusal)
    assert all(refusal is not None for refusal in refusals)
    assert store.link.failures == 0
    assert redis_server.client.hget(store.key, "web_search") == b"10"
    # another process, new to the session, reads the count written back
    assert store_on(redis_server).charge([("web_search", 10)], 1).refusal is not None


def test_a_process_raises_a_hash_another_process_made_after_the_restart(redis_server: RedisServer) -> None:
    """A process that never saw the session charges first after the restart (Redis: 1); the process
    that saw 9 raises that to its 9 before checking (the higher count, never the sum: it cannot tell
    the other's charges from its own), so the session overshoots by the newcomer's charge at most."""
    store = store_on(redis_server)
    assert store.charge([("web_search", 10)], 9).refusal is None
    redis_server.restart()
    newcomer = store_on(redis_server)
    assert newcomer.charge([("web_search", 10)], 1).refusal is None  # Redis knew nothing: 1
    assert store.charge([("web_search", 10)], 1).refusal is None  # 9 written back, +1
    assert redis_server.client.hget(store.key, "web_search") == b"10"
    assert store.charge([("web_search", 10)], 1).refusal == CapRefusal("web_search", 10, 10)
    assert newcomer.charge([("web_search", 10)], 1).refusal == CapRefusal("web_search", 10, 10)


def test_while_the_hash_lives_on_redis_holds_the_count_refunds_of_other_processes_included(
    redis_server: RedisServer,
) -> None:
    """The floor applies only to a hash the process has not seen: another process's refund stands."""
    first, second = store_on(redis_server), store_on(redis_server)
    assert first.charge([("web_search", 10)], 5).refusal is None
    second.refund(["web_search"], 3)  # Redis: 2; the first process still believes 5
    assert first.charge([("web_search", 10)], 1).refusal is None
    assert redis_server.client.hget(first.key, "web_search") == b"3"
    assert MARKER in redis_server.client.hgetall(first.key)


# -- a Redis Cluster ------------------------------------------------------------------------------


def _charge_sessions_in_a_process(url: str, sessions: int, tries: int, queue: Any) -> None:
    link = RedisLink(StateSettings(url=url, timeout_ms=PATIENT_MS))
    granted = {}
    for n in range(sessions):
        store = _store(link, f"cluster-session-{n}")
        granted[n] = sum(store.charge([("web_search", 5)], 1).refusal is None for _ in range(tries))
    queue.put((granted, link.failures, link.key_errors))


def test_a_redis_cluster_of_three_nodes_holds_caps_exactly_across_two_processes(
    redis_cluster: list[RedisServer],
) -> None:
    """redis+cluster:// names one node; the client follows the slot map. Two real processes charge
    the same 60 sessions (cap 5, 8 tries each): every session is granted exactly 5, no command
    fails, and the sessions' keys are spread over all three nodes."""
    url = f"redis+cluster://127.0.0.1:{redis_cluster[0].port}"
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    processes = [
        context.Process(target=_charge_sessions_in_a_process, args=(url, 60, 8, queue)) for _ in range(2)
    ]
    for process in processes:
        process.start()
    results = [queue.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(30)
    assert [(failures, key_errors) for _, failures, key_errors in results] == [(0, 0), (0, 0)]
    totals = [results[0][0][n] + results[1][0][n] for n in range(60)]
    assert totals == [5] * 60
    keys_per_node = [node.client.dbsize() for node in redis_cluster]
    assert sum(keys_per_node) == 60 and all(keys > 0 for keys in keys_per_node)


def test_a_guard_on_a_cluster_url_decides_every_call_from_redis(redis_cluster: list[RedisServer]) -> None:
    url = f"redis+cluster://127.0.0.1:{redis_cluster[1].port}"
    recorder = RecordingObserver()
    fell_back = 0
    for n in range(12):
        config = guard_config(url, {"web_search": 3, "subagents": 0}, timeout_ms=PATIENT_MS)
        guard = Guard(
            config,
            session_id=f"s{n}",
            session_caps=session_cap_store(config, f"s{n}", listener=recorder.on_state),
            observers=(recorder,),
        )
        assert [search(guard, c).action for c in range(4)] == ["allow"] * 3 + ["block"]
    fell_back = sum(event.state_fallback for event in recorder.calls)
    assert fell_back == 0
    assert all(report == StateReport(True, None, False) for report in recorder.state_reports)


# -- a key of the wrong type -----------------------------------------------------------------------


def test_a_key_of_the_wrong_type_is_that_sessions_problem_only(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """One session's key holds a string: its calls are decided locally and counted as errors; the
    other sessions' calls all go on using Redis, and the link never backs off."""
    clock = Clock()  # never moved: a back-off, once started, would last the whole test
    link = RedisLink(StateSettings(url=redis_server.url, timeout_ms=PATIENT_MS), clock=clock)
    heard_bad: list[StateReport] = []
    heard_garbled: list[StateReport] = []
    bad = _store(link, "the-broken-session", heard_bad.append)
    redis_server.client.set(bad.key, "not a hash")
    garbled = _store(link, "a-garbled-session", heard_garbled.append)
    redis_server.client.hset(garbled.key, "web_search", "many")  # not a count
    recorder = RecordingObserver()
    guards = [
        Guard(guard_config(redis_server.url), session_id=f"s{n}", session_caps=_store(link, f"s{n}", recorder.on_state),
              observers=(recorder,))
        for n in range(20)
    ]  # fmt: skip
    broken = Guard(guard_config(redis_server.url), session_id="the-broken-session", session_caps=bad)
    for n in range(5):
        assert bad.charge([("web_search", 10)], 1) == (None, True)
        assert heard_bad[-1] == StateReport(True, "charge", True, key_error=True)
        # refused once; then the process's own count (1) is written over what is not a number
        garbled_report = (
            StateReport(True, "charge", True, key_error=True) if n == 0 else StateReport(True, None, False)
        )
        assert garbled.charge([("web_search", 10)], 1) == (None, garbled_report.fell_back)
        assert heard_garbled[-1] == garbled_report
        assert search(broken, n).action == "allow"  # decided from the process's own counts
        for guard in guards:
            search(guard, n)
    assert link.healthy and link.failures == 0 and link.key_errors == 11
    assert redis_server.client.hget(garbled.key, "web_search") == b"5"
    assert sum(event.state_fallback for event in recorder.calls) == 0
    for n in range(20):
        assert redis_server.client.hget(_store(link, f"s{n}").key, "web_search") == b"5"
    lines = [r.getMessage() for r in caplog.records if "another type" in r.getMessage()]
    assert len(lines) == 1


# -- more threads than connections --------------------------------------------------------------


def test_more_threads_than_connections_wait_for_one_and_never_start_an_outage(
    redis_server: RedisServer,
) -> None:
    """128 threads charge at once through one link of 64 connections: a thread that finds every
    connection in use waits for one (at most timeout_ms), so every charge is Redis's."""
    link = RedisLink(StateSettings(url=redis_server.url, timeout_ms=PATIENT_MS))
    threads, calls = 128, 16
    start = threading.Barrier(threads)
    reports: list[StateReport] = []
    lock = threading.Lock()

    def charge(n: int) -> None:
        mine: list[StateReport] = []
        store = _store(link, f"thread-{n}", mine.append)
        start.wait()
        for _ in range(calls):
            store.charge([("web_search", 1000)], 1)
        with lock:
            reports.extend(mine)

    workers = [threading.Thread(target=charge, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    assert link.failures == 0 and link.healthy and link.busy == 0
    assert reports == [StateReport(True, None, False)] * (threads * calls)
    total = sum(int(redis_server.client.hget(_store(link, f"thread-{n}").key, "web_search") or 0)
                for n in range(threads))  # fmt: skip
    assert total == threads * calls


# -- a password kept out of the URL -----------------------------------------------------------------


PASSWORD = "b64/+sEcr#t?=@:canary"


def test_the_password_may_come_from_a_file_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A Redis with a password holding '/', '#', '?' and '@': reached through state.password_file,
    OTELGUARD_STATE_PASSWORD, or the URL with the password percent-encoded; a wrong one is an outage
    whose log line never shows it."""
    from urllib.parse import quote

    monkeypatch.delenv("OTELGUARD_STATE_PASSWORD", raising=False)
    secret = tmp_path / "redis-password"
    secret.write_text(PASSWORD + "\n")
    with run_redis(tmp_path, password=PASSWORD) as server:
        plain = f"redis://127.0.0.1:{server.port}/0"
        from_file = RedisLink(StateSettings(url=plain, password_file=str(secret), timeout_ms=PATIENT_MS))
        assert _store(from_file).charge([("web_search", 10)], 1).refusal is None
        encoded = f"redis://:{quote(PASSWORD, safe='')}@127.0.0.1:{server.port}/0"
        assert (
            _store(RedisLink(StateSettings(url=encoded, timeout_ms=PATIENT_MS)))
            .charge([("web_search", 10)], 1)
            .refusal
            is None
        )
        monkeypatch.setenv("OTELGUARD_STATE_PASSWORD", PASSWORD)
        from_env = RedisLink(
            StateSettings(url=f"redis://:wrong@127.0.0.1:{server.port}/0", timeout_ms=PATIENT_MS)
        )
        assert _store(from_env).charge([("web_search", 10)], 1).refusal is None  # the variable wins
        assert int(server.client.hget(_store(from_env).key, "web_search") or 0) == 3
        monkeypatch.delenv("OTELGUARD_STATE_PASSWORD")
        wrong = RedisLink(
            StateSettings(url=f"redis://:wrong-canary@127.0.0.1:{server.port}/0", timeout_ms=PATIENT_MS)
        )
        assert _store(wrong).charge([("web_search", 10)], 1).fell_back
        assert not wrong.healthy
        assert "canary" not in caplog.text and PASSWORD not in caplog.text


# -- memory ----------------------------------------------------------------------------------------


def test_a_session_store_keeps_no_command_whatever_it_charged(redis_server: RedisServer) -> None:
    """A session charged with 300 different (caps, amount) combinations holds no more than one
    charged once: a couple of KiB, never a cache of packed commands."""
    link = RedisLink(StateSettings(url=redis_server.url, timeout_ms=PATIENT_MS))
    stores = []
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(20):
            store = _store(link, f"memory-{n}")
            for amount in range(1, 301):
                store.charge([("web_search", 10**9), ("subagents", 10**9)], amount)
            stores.append(store)
        per_session = (tracemalloc.get_traced_memory()[0] - before) / len(stores)
    finally:
        tracemalloc.stop()
    assert per_session < 4096, per_session
    assert redis.Redis  # the client stays importable: this test is about what a store keeps


def test_an_error_about_one_key_leaves_the_state_up_gauge_at_1(redis_server: RedisServer) -> None:
    """``otelguard_state_up`` says whether the store answers: a key of another type is an error
    (counted) of a store that answered, so the gauge stays 1; a killed Redis makes it 0."""
    registry = CollectorRegistry()
    telemetry = Telemetry(registry=registry, span_mode="off")
    link = RedisLink(StateSettings(url=redis_server.url, timeout_ms=PATIENT_MS), clock=Clock())
    store = _store(link, "the-broken-session", telemetry.state_reported)  # the host wires the listener
    redis_server.client.set(store.key, "not a hash")
    guard = Guard(
        guard_config(redis_server.url), telemetry, session_id="the-broken-session", session_caps=store
    )
    search(guard, 0)
    assert registry.get_sample_value("otelguard_state_errors_total", {"op": "charge"}) == 1
    assert registry.get_sample_value("otelguard_state_up") == 1
    redis_server.kill()
    search(guard, 1)
    assert registry.get_sample_value("otelguard_state_up") == 0
