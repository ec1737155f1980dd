"""Session caps shared through a real redis-server: atomic charges, refunds, keys, TTLs, and outages.

Outages are real (the server killed, or stopped with SIGSTOP); the back-off runs on a clock the test
moves, so what is asserted is how many commands reached Redis, never how long anything took.
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from otelguard import Guard, GuardConfig, Telemetry
from otelguard.config import StateSettings
from otelguard.core import decisions as codes
from otelguard.core.caps import CapRefusal, ChargeAnswer, LocalSessionCaps
from otelguard.core.session_keys import key_bytes, session_digest
from otelguard.hosting import session_cap_store
from otelguard.state.redis_caps import (
    FIRST_BACKOFF_SECONDS,
    MARKER,
    MAX_BACKOFF_SECONDS,
    RedisLink,
    RedisSessionCaps,
    session_key,
)
from otelguard.state.reports import StateReport
from otelguard.testing import RecordingObserver
from tests.e2e import wait_until
from tests.redis_e2e import RedisServer

KEY = "redis-test-key"
SESSION = "raw-session-canary-7f3a"
PATIENT_MS = 2000
"""The timeout of tests that are not about timeouts: a loaded machine must not make them fail over."""


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def guard_config(url: str, session: dict[str, int] | None = None, **state: Any) -> GuardConfig:
    caps = {
        "turn": {"web_search": 0, "subagents": 0},
        "session": session or {"web_search": 10, "subagents": 0},
    }
    return GuardConfig.from_mapping(
        {"signature_key": KEY, "mode": "unattended", "caps": caps, "state": {"url": url, **state}}
    )


def store_on(
    server: RedisServer,
    clock: Clock | None = None,
    session_id: str = SESSION,
    listener: Callable[[StateReport], None] | None = None,
    **state: Any,
) -> RedisSessionCaps:
    settings = StateSettings(url=server.url, **{"timeout_ms": PATIENT_MS, **state})
    link = RedisLink(settings, clock=clock or time.monotonic)
    key = session_key(settings, key_bytes(KEY), session_id)
    return RedisSessionCaps(link, key, settings.ttl_seconds, listener)


def counts(server: RedisServer, key: str | bytes) -> dict[bytes, bytes]:
    """A session's hash in Redis without the marker field (which tells one hash from a later one)."""
    return {field: value for field, value in server.client.hgetall(key).items() if field != MARKER}


def search(guard: Guard, n: int) -> codes.Decision:
    decision = guard.before_call("web_search", {"q": f"q{n}"}, call_id=f"c{n}")
    if decision.allows_execution:
        guard.after_call("web_search", {"q": f"q{n}"}, "results", failed=False, call_id=f"c{n}")
    return decision


# -- charging ------------------------------------------------------------------------------------


def test_a_charge_is_all_or_nothing_and_batch_aware(redis_server: RedisServer) -> None:
    """A batch of 3 spawns with 2 left is refused whole; the first cap over (in order) is named; Redis
    holds exactly what was charged."""
    store = store_on(redis_server)
    caps = [("web_search", 5), ("subagents", 4)]
    assert store.charge(caps, 2).refusal is None
    assert store.charge(caps, 3).refusal == CapRefusal("subagents", 2, 4)
    assert store.charge([("web_search", 4), ("subagents", 4)], 3).refusal == CapRefusal("web_search", 2, 4)
    assert store.charge(caps, 2).refusal is None
    assert store.charge(caps, 1).refusal == CapRefusal("subagents", 4, 4)
    assert counts(redis_server, store.key) == {b"web_search": b"4", b"subagents": b"4"}
    assert store.usage() == {"web_search": 4, "subagents": 4}


def test_two_stores_of_one_session_share_one_count(redis_server: RedisServer) -> None:
    """Two processes' stores (two links) of the same session id charge one hash; another id has its own."""
    first, second = store_on(redis_server), store_on(redis_server)
    other = store_on(redis_server, session_id="another-session")
    caps = [("web_search", 3)]
    assert [first.charge(caps, 1).refusal, second.charge(caps, 1).refusal, first.charge(caps, 1).refusal] == [
        None
    ] * 3
    assert second.charge(caps, 1).refusal == CapRefusal("web_search", 3, 3)
    assert other.charge(caps, 3).refusal is None
    # the count each process keeps follows what Redis answered, other processes' charges included
    assert second.usage() == {"web_search": 3}


def _charge_in_a_process(url: str, amounts: list[int], limit: int, queue: Any) -> None:
    settings = StateSettings(url=url, timeout_ms=PATIENT_MS)
    store = RedisSessionCaps(RedisLink(settings), session_key(settings, key_bytes(KEY), SESSION), 3600)
    granted = [amount for amount in amounts if store.charge([("subagents", limit)], amount).refusal is None]
    queue.put((sum(granted), store.link.failures))


def test_parallel_processes_charging_one_session_never_overshoot(redis_server: RedisServer) -> None:
    """Four real processes charge batches of 1 to 3 against one cap of 100 at once: together they are
    granted no more than 100, and stop short of it by less than one batch."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    limit = 100
    plans = [[1 + (i * 7 + p) % 3 for i in range(60)] for p in range(4)]  # 480 asked for in all
    processes = [
        context.Process(target=_charge_in_a_process, args=(redis_server.url, plan, limit, queue))
        for plan in plans
    ]
    for process in processes:
        process.start()
    results = [queue.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(30)
    granted = sum(total for total, _ in results)
    assert [failures for _, failures in results] == [0, 0, 0, 0]  # every decision came from Redis
    assert limit - 2 <= granted <= limit
    store = store_on(redis_server)
    assert int(redis_server.client.hget(store.key, "subagents") or 0) == granted


def test_a_guard_makes_one_command_per_capped_call_and_none_for_other_tools(
    redis_server: RedisServer,
) -> None:
    """A call with a session cap costs one Redis command on its way to an allow; a tool with no
    session cap costs none; the 11th search of a cap of 10 is refused from Redis's count."""
    store = store_on(redis_server)
    guard = Guard(guard_config(redis_server.url), session_id=SESSION, session_caps=store)
    for n in range(5):
        guard.before_call("read_file", {"path": f"f{n}"})
        guard.after_call("read_file", {"path": f"f{n}"}, "text", failed=False)
    assert store.link.commands == 0
    decisions = [search(guard, n) for n in range(11)]
    assert store.link.commands == 11
    assert [d.action for d in decisions] == ["allow"] * 10 + ["block"]
    assert (decisions[-1].code, decisions[-1].count, decisions[-1].limit) == (codes.CAP_SESSION, 10, 10)
    assert guard.end_turn().session_cap_usage == {"web_search": 10}


def test_the_session_host_factory_uses_redis_only_with_a_url_and_a_session_id(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OTELGUARD_STATE_URL", raising=False)
    config = guard_config(redis_server.url)
    assert isinstance(session_cap_store(config, SESSION), RedisSessionCaps)
    assert isinstance(session_cap_store(config, None), LocalSessionCaps)
    plain = GuardConfig(signature_key=KEY)
    assert isinstance(session_cap_store(plain, SESSION), LocalSessionCaps)
    monkeypatch.setenv("OTELGUARD_STATE_URL", redis_server.url)
    assert isinstance(session_cap_store(plain, SESSION), RedisSessionCaps)


# -- refunds ----------------------------------------------------------------------------------


def test_refunds_reach_redis_floored_at_zero(redis_server: RedisServer) -> None:
    store = store_on(redis_server)
    assert store.charge([("web_search", 10), ("subagents", 10)], 3).refusal is None
    store.refund(["web_search", "subagents"], 2)
    assert counts(redis_server, store.key) == {b"web_search": b"1", b"subagents": b"1"}
    store.refund(["web_search"], 5)
    assert counts(redis_server, store.key) == {b"web_search": b"0", b"subagents": b"1"}


def test_a_host_refused_or_cancelled_call_is_refunded_in_redis(redis_server: RedisServer) -> None:
    store = store_on(redis_server)
    guard = Guard(guard_config(redis_server.url), session_id=SESSION, session_caps=store)
    for n, how in enumerate(({"refusal": "user_denied"}, {"cancelled": True}, {"failed": False})):
        assert guard.before_call("web_search", {"q": n}, call_id=f"c{n}").action == "allow"
        guard.after_call("web_search", {"q": n}, None, call_id=f"c{n}", **how)
    assert redis_server.client.hget(store.key, "web_search") == b"1"  # only the call that ran
    assert store.link.commands == 5  # three charges, two refunds


def test_a_call_refused_by_a_detector_is_never_charged_in_redis(redis_server: RedisServer) -> None:
    """The hard-stop detectors look before the session cap is charged: a call one refuses costs no
    charge (and no refund), only the calls that ran are counted."""
    store = store_on(redis_server)
    guard = Guard(guard_config(redis_server.url), session_id=SESSION, session_caps=store)
    failing = {"q": "same"}
    decisions = []
    for n in range(13):  # 5 failures, 7 rejects (more than the session cap of 10 if never given back)
        decision = guard.before_call("web_search", failing, call_id=f"c{n}")
        decisions.append(decision)
        if decision.allows_execution:
            guard.after_call("web_search", failing, "Error: backend down", failed=True, call_id=f"c{n}")
    assert [d.code for d in decisions[5:]] == [codes.EXACT_FAILURE_REJECT] * 7 + [codes.EXACT_FAILURE_BLOCK]
    ran = sum(d.allows_execution for d in decisions)
    assert redis_server.client.hget(store.key, "web_search") == str(ran).encode()
    assert store.link.commands == ran  # one charge per call that ran, nothing for the refused


# -- keys and expiry -------------------------------------------------------------------------------


def test_keys_are_a_keyed_digest_in_a_hash_tag_and_nothing_raw_reaches_redis(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """Every command Redis receives (read with MONITOR) names the session by its keyed digest inside
    braces; the raw session id appears in no key, field, value or argument."""
    monitor_log = tmp_path / "monitor.log"
    with monitor_log.open("wb") as out:
        monitor = subprocess.Popen(
            ["redis-cli", "-p", str(redis_server.port), "monitor"], stdout=out, stderr=subprocess.STDOUT
        )
    try:
        wait_until(lambda: monitor_log.read_bytes().startswith(b"OK"), 10, interval=0.05, what="MONITOR")
        guard = Guard(guard_config(redis_server.url, {"web_search": 3, "subagents": 5}), session_id=SESSION)
        for n in range(3):
            search(guard, n)
        guard.before_call("Task", {"prompt": SESSION}, call_id="t")
        guard.after_call("Task", {"prompt": SESSION}, SESSION, refusal="user_denied", call_id="t")
        assert search(guard, 3).code == codes.CAP_SESSION
        wait_until(lambda: monitor_log.read_bytes().count(b'"EVALSHA"') >= 6, 10, what="commands seen")
    finally:
        monitor.terminate()
        monitor.wait(10)
    seen = monitor_log.read_bytes()
    assert SESSION.encode() not in seen
    digest = session_digest(SESSION, key_bytes(KEY))
    assert re.fullmatch(r"[0-9a-f]{32}", digest)
    (key,) = redis_server.client.keys("*")
    assert key == f"otelguard:{{{digest}}}".encode()
    assert counts(redis_server, key) == {b"web_search": b"3", b"subagents": b"0"}


def test_every_charge_and_refund_sets_the_ttl_back_and_idle_sessions_expire(
    redis_server: RedisServer,
) -> None:
    client = redis_server.client
    store = store_on(redis_server, ttl_seconds=600)
    assert store.charge([("web_search", 10)], 1).refusal is None
    assert 590 <= client.ttl(store.key) <= 600
    client.expire(store.key, 30)
    assert store.charge([("web_search", 10)], 1).refusal is None
    assert client.ttl(store.key) > 30
    client.expire(store.key, 30)
    store.refund(["web_search"], 1)
    assert client.ttl(store.key) > 30
    client.expire(store.key, 30)
    assert store.charge([("web_search", 1)], 1).refusal == CapRefusal("web_search", 1, 1)
    assert client.ttl(store.key) <= 30  # a refused charge is not a use of the session

    short = store_on(redis_server, session_id="short-lived", ttl_seconds=1)
    assert short.charge([("web_search", 10)], 4).refusal is None
    wait_until(lambda: not client.exists(short.key), 15, interval=0.1, what="the session key to expire")
    assert short.charge([("web_search", 4)], 4).refusal is None  # an expired session starts from 0


def test_a_refund_after_expiry_does_not_bring_the_key_back(redis_server: RedisServer) -> None:
    store = store_on(redis_server)
    assert store.charge([("web_search", 10)], 2).refusal is None
    redis_server.client.delete(store.key)
    store.refund(["web_search"], 1)
    assert not redis_server.client.exists(store.key)


# -- outages ---------------------------------------------------------------------------------------


def test_client_timeouts_are_timeout_ms_with_no_retries(redis_server: RedisServer) -> None:
    """redis-py's defaults would retry three times with a back-off: each command here is one attempt,
    its connect and its read each bounded by timeout_ms."""
    store = store_on(redis_server, timeout_ms=20)
    assert store.charge([("web_search", 10)], 1).refusal is None
    pool = store.link.client().connection_pool
    connection = pool.get_connection()
    try:
        assert connection.socket_timeout == connection.socket_connect_timeout == 0.02
        assert connection.retry.get_retries() == 0
    finally:
        pool.release(connection)


def _outage_guard(server: RedisServer, clock: Clock) -> tuple[Guard, RedisSessionCaps, RecordingObserver]:
    recorder = RecordingObserver()
    store = store_on(server, clock, timeout_ms=50, listener=recorder.on_state)
    guard = Guard(guard_config(server.url), session_id=SESSION, session_caps=store, observers=(recorder,))
    return guard, store, recorder


@pytest.mark.parametrize("outage", ["killed", "hung"])
def test_an_outage_falls_back_to_local_counts_and_backs_off(
    redis_server: RedisServer, outage: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis killed or stopped (SIGSTOP): the guard never raises; the call that finds it down fails
    one command (connect when it was killed, the read of the charge when it hangs) and every call
    within the back-off decides from the local counts without trying; one log line says so."""
    clock = Clock()
    guard, store, recorder = _outage_guard(redis_server, clock)
    assert [search(guard, n).action for n in range(4)] == ["allow"] * 4
    caplog.set_level(logging.WARNING, logger="otelguard")
    if outage == "killed":
        redis_server.kill()
    else:
        redis_server.hang()
    try:
        decisions = [search(guard, n) for n in range(4, 12)]
    finally:
        if outage == "hung":
            redis_server.resume()
    # the local counts went on from Redis's 4: searches 5-10 allowed, the 11th refused
    assert [d.action for d in decisions] == ["allow"] * 6 + ["block"] * 2
    assert store.link.commands == 5  # 4 before the outage, 1 attempt: the rest backed off
    failed = "connect" if outage == "killed" else "charge"
    reports = recorder.state_reports
    assert reports[4] == StateReport(sent=True, error=failed, fell_back=True)
    assert reports[5:] == (StateReport(sent=False, error=None, fell_back=True),) * 6  # 7th: turn halted
    fallbacks = [event.state_fallback for event in recorder.calls]
    assert fallbacks == [False] * 4 + [True] * 7 + [False]  # the turn_halted call asks no cap
    outage_lines = [r for r in caplog.records if "shared state" in r.getMessage()]
    assert len(outage_lines) == 1 and failed in outage_lines[0].getMessage()
    assert SESSION not in caplog.text


def test_the_back_off_doubles_up_to_five_seconds_and_one_call_probes(redis_server: RedisServer) -> None:
    clock = Clock()
    store = store_on(redis_server, clock)
    redis_server.kill()
    attempts = []
    waited = 0.0
    while waited < 60:
        before = store.link.commands
        store.charge([("web_search", 100)], 1)
        if store.link.commands > before:
            attempts.append(round(waited, 2))
        clock.advance(0.05)
        waited += 0.05
    gaps = [round(b - a, 2) for a, b in itertools.pairwise(attempts)]
    assert gaps[0] == pytest.approx(FIRST_BACKOFF_SECONDS, abs=0.051)
    assert all(later >= earlier - 0.051 for earlier, later in itertools.pairwise(gaps))
    assert max(gaps) == pytest.approx(MAX_BACKOFF_SECONDS, abs=0.051)
    assert len(attempts) < 20  # of 1,200 calls


def test_a_restarted_redis_is_used_again_after_the_back_off(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Restarted (empty), Redis answers the first call after the back-off and gets this process's
    count back (the outage's charges included); the end of the outage is one more log line."""
    clock = Clock()
    guard, store, recorder = _outage_guard(redis_server, clock)
    caplog.set_level(logging.WARNING, logger="otelguard")
    search(guard, 0)
    redis_server.kill()
    search(guard, 1)
    search(guard, 2)
    redis_server.restart()
    search(guard, 3)  # still within the back-off: decided locally, no command
    assert store.link.commands == 2 and not store.link.healthy
    clock.advance(MAX_BACKOFF_SECONDS)
    search(guard, 4)
    # two commands: the first learns that Redis lost the session, the second brings its count
    assert store.link.healthy and store.link.commands == 4
    assert recorder.state_reports[-1] == StateReport(sent=True, error=None, fell_back=False)
    # Redis restarted empty: the process's 4 (1 in Redis, 3 during the outage) and this call
    assert redis_server.client.hget(store.key, "web_search") == b"5"
    lines = [r.getMessage() for r in caplog.records if "shared state" in r.getMessage()]
    assert len(lines) == 2 and "answers again" in lines[1] and "3 calls" in lines[1]


def test_a_charge_made_during_an_outage_is_refunded_locally_not_in_redis(redis_server: RedisServer) -> None:
    """Redis never saw an outage charge: giving it back there would let the fleet overshoot."""
    clock = Clock()
    heard: list[StateReport] = []
    store = store_on(redis_server, clock, listener=heard.append)
    assert store.charge([("web_search", 10)], 1).refusal is None  # in Redis
    redis_server.kill()
    assert store.charge([("web_search", 10)], 1).refusal is None  # here only
    redis_server.restart()
    assert store_on(redis_server).charge([("web_search", 10)], 3).refusal is None  # another process
    clock.advance(MAX_BACKOFF_SECONDS)
    heard.clear()
    store.refund(["web_search"], 1)
    assert heard == []  # the outage's charge: not sent
    assert redis_server.client.hget(store.key, "web_search") == b"3"
    store.refund(["web_search"], 1)
    assert heard == [StateReport(sent=True, error=None, fell_back=False)]
    assert redis_server.client.hget(store.key, "web_search") == b"2"


def test_a_charge_that_timed_out_may_land_late_and_is_then_never_refunded(redis_server: RedisServer) -> None:
    """A hung Redis runs the timed-out charge once it resumes: the count can only be too high, the
    safe side (the refund of that call stays local)."""
    clock = Clock()
    heard: list[StateReport] = []
    store = store_on(redis_server, clock, timeout_ms=50, listener=heard.append)
    assert store.charge([("web_search", 10)], 2).refusal is None
    redis_server.hang()
    try:
        assert store.charge([("web_search", 10)], 1) == ChargeAnswer(None, fell_back=True)
        assert heard[-1] == StateReport(True, "charge", True)
    finally:
        redis_server.resume()
    wait_until(lambda: redis_server.client.hget(store.key, "web_search") == b"3", 10, what="the late charge")
    clock.advance(MAX_BACKOFF_SECONDS)
    heard.clear()
    store.refund(["web_search"], 1)
    assert heard == []
    assert redis_server.client.hget(store.key, "web_search") == b"3"


# -- telemetry ----------------------------------------------------------------------------------


def _samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in registry.collect()
        for sample in family.samples
        if sample.name.startswith("otelguard_state")
    }


@pytest.fixture
def telemetry() -> Iterator[tuple[Telemetry, CollectorRegistry, InMemorySpanExporter]]:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    registry = CollectorRegistry()
    yield Telemetry(tracer_provider=provider, registry=registry, span_mode="own"), registry, spans
    provider.shutdown()


def test_state_metrics_and_the_span_attribute_follow_an_outage(
    redis_server: RedisServer, telemetry: tuple[Telemetry, CollectorRegistry, InMemorySpanExporter]
) -> None:
    tel, registry, spans = telemetry
    clock = Clock()
    store = store_on(redis_server, clock, listener=tel.state_reported)  # the host wires the listener
    guard = Guard(guard_config(redis_server.url), tel, session_id=SESSION, session_caps=store)
    search(guard, 0)
    assert _samples(registry)[("otelguard_state_up", ())] == 1
    redis_server.kill()
    for n in range(1, 4):
        search(guard, n)
    samples = _samples(registry)
    assert samples[("otelguard_state_up", ())] == 0
    assert samples[("otelguard_state_errors_total", (("op", "connect"),))] == 1
    assert samples[("otelguard_state_errors_total", (("op", "charge"),))] == 0
    assert samples[("otelguard_state_errors_total", (("op", "refund"),))] == 0
    assert samples[("otelguard_state_fallback_total", ())] == 3
    states = [span.attributes.get("otelguard.state") for span in spans.get_finished_spans()]
    assert states == [None, "fallback", "fallback", "fallback"]
    redis_server.restart()
    clock.advance(MAX_BACKOFF_SECONDS)
    search(guard, 4)
    assert _samples(registry)[("otelguard_state_up", ())] == 1
    assert spans.get_finished_spans()[-1].attributes.get("otelguard.state") is None


def test_without_a_url_there_are_no_state_metrics_and_no_redis_import() -> None:
    """The memory default: no otelguard_state_* family, and a capped call with a session id loads
    no redis module (checked in a fresh interpreter)."""
    registry = CollectorRegistry()
    guard = Guard(GuardConfig(signature_key=KEY), Telemetry(registry=registry), session_id=SESSION)
    search(guard, 0)
    assert _samples(registry) == {}
    assert not any(family.name.startswith("otelguard_state") for family in registry.collect())
    code = (
        "import sys\n"
        "from otelguard import Guard, GuardConfig\n"
        "g = Guard(GuardConfig(signature_key='k'), telemetry=True, session_id='s')\n"
        "g.before_call('web_search', {'q': 1}); g.after_call('web_search', {'q': 1}, 'r')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'redis' or m.startswith('otelguard.state')))\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "OTELGUARD_STATE_URL"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert done.stdout.strip() == "[]"


def test_any_cap_keys_amounts_and_session_ids_are_charged_without_raising(tmp_path: Path) -> None:
    """Cap keys are config text (lone surrogates included), session ids are the host's: a charge and
    a refund never raise and never read as an outage, and Redis's count is what was granted."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from tests.redis_e2e import run_redis

    with run_redis(tmp_path) as server:
        settings_ = StateSettings(url=server.url, timeout_ms=PATIENT_MS)
        link = RedisLink(settings_)

        @settings(max_examples=60, deadline=None)
        @given(
            session=st.text(max_size=40),
            keys=st.lists(st.text(min_size=1, max_size=20), min_size=1, max_size=4, unique=True),
            limits=st.lists(st.integers(1, 10**12), min_size=4, max_size=4),
            amounts=st.lists(st.integers(1, 5), min_size=1, max_size=6),
        )
        def charge_and_refund(session: str, keys: list[str], limits: list[int], amounts: list[int]) -> None:
            store = RedisSessionCaps(link, session_key(settings_, key_bytes(KEY), session), 60)
            server.client.delete(store.key)
            caps = list(zip(keys, limits, strict=False))
            granted = sum(amount for amount in amounts if store.charge(caps, amount).refusal is None)
            assert link.healthy
            stored = counts(server, store.key)
            for key, _limit in caps:
                assert int(stored.get(key.encode("utf-8", "surrogatepass"), 0)) == granted
            store.refund(keys, 1)
            assert link.healthy

        charge_and_refund()
