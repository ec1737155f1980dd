"""The session host: bounded pool, eviction and expiry ending open turns, subagents, turn counting."""

from __future__ import annotations

import threading

import pytest
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry

from otelguard import GuardConfig, Telemetry
from otelguard.core import decisions as codes
from otelguard.core.edges import Edges
from otelguard.core.sessions import DEFAULT_SESSION, Session, SessionHost, SessionPool
from otelguard.errors import ConfigError
from otelguard.hosting import edges_for
from otelguard.testing import RecordingObserver
from tests.test_session_caps import race

KEY = "test-signature-key"
CAPPED = GuardConfig.from_mapping(
    {"signature_key": KEY, "caps": {"turn": {"web_search": 0}, "session": {"web_search": 10}}}
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def turns(registry: CollectorRegistry, agent: str, outcome: str = "completed") -> float:
    return registry.get_sample_value("otelguard_turns_total", {"agent": agent, "outcome": outcome}) or 0.0


def observed(observer: RecordingObserver) -> Edges:
    """Edges that give every guard of a host one same observer of the host's own."""
    return Edges(observer=lambda _config: observer)


def metered_host(registry: CollectorRegistry, **kwargs: object) -> SessionHost:
    """A host whose guards count their turns in ``registry`` (real prometheus_client samples)."""
    telemetry = Telemetry(TracerProvider(), registry)
    config = GuardConfig(signature_key=KEY, mode="unattended")
    return SessionHost(config, edges=edges_for(telemetry), agent="host", **kwargs)  # type: ignore[arg-type]


# -- the pool ------------------------------------------------------------------------------------


def test_the_pool_makes_one_object_per_session_and_keeps_it() -> None:
    made: list[str] = []
    pool = SessionPool(lambda sid: made.append(sid) or sid.upper(), max_sessions=3)
    assert pool.get("a") == "A" and pool.get("a") == "A"
    assert made == ["a"] and len(pool) == 1


def test_the_pool_drops_the_least_recently_used_past_max_sessions_and_reports_it() -> None:
    """Past ``max_sessions`` the least recently used goes first, through ``on_evict``."""
    evicted: list[tuple[str, str]] = []
    pool = SessionPool(str.upper, max_sessions=2, on_evict=lambda sid, value: evicted.append((sid, value)))
    pool.get("a"), pool.get("b"), pool.get("a"), pool.get("c")
    assert evicted == [("b", "B")]
    assert pool.peek("a") == "A" and pool.peek("b") is None and pool.peek("c") == "C"


def test_peek_neither_makes_nor_refreshes_a_session() -> None:
    evicted: list[str] = []
    pool = SessionPool(str.upper, max_sessions=2, on_evict=lambda sid, _v: evicted.append(sid))
    pool.get("a"), pool.get("b")
    assert pool.peek("a") == "A" and pool.peek("zzz") is None
    pool.get("c")
    assert evicted == ["a"] and len(pool) == 2


def test_idle_sessions_expire_and_are_reported() -> None:
    """A session idle for longer than ``idle_seconds`` is dropped (through ``on_evict``) on the next
    ``get`` of any session, or by ``expire``; asking for it again makes a new one."""
    clock, made, evicted = Clock(), [], []
    pool = SessionPool(
        lambda sid: made.append(sid) or object(),
        idle_seconds=60,
        clock=clock,
        on_evict=lambda sid, _v: evicted.append(sid),
    )
    first = pool.get("old")
    pool.get("kept")
    clock.now += 45
    pool.get("kept")
    clock.now += 30  # "old" idle for 75 s, "kept" for 30 s
    pool.get("new")
    assert evicted == ["old"] and pool.peek("old") is None
    clock.now += 61
    assert pool.expire() == 2 and evicted == ["old", "kept", "new"] and len(pool) == 0
    assert pool.get("old") is not first and made.count("old") == 2


def test_a_session_asked_for_after_its_expiry_is_reported_then_made_anew() -> None:
    clock, evicted = Clock(), []
    pool = SessionPool(
        lambda sid: object(), idle_seconds=10, clock=clock, on_evict=lambda s, v: evicted.append(v)
    )
    first = pool.get("s")
    clock.now += 11
    second = pool.get("s")
    assert evicted == [first] and second is not first


def test_a_popped_session_is_not_reported() -> None:
    evicted: list[str] = []
    pool = SessionPool(str.upper, on_evict=lambda sid, _v: evicted.append(sid))
    pool.get("a")
    assert pool.pop("a") == "A" and pool.pop("a") is None and evicted == []


def test_on_evict_runs_after_the_pool_lock_is_released() -> None:
    """An ``on_evict`` that uses the pool again does not deadlock."""
    seen: list[int] = []
    pools: list[SessionPool[str]] = []
    pool = SessionPool(str.upper, max_sessions=1, on_evict=lambda sid, _v: seen.append(len(pools[0])))
    pools.append(pool)
    pool.get("a"), pool.get("b")
    assert seen == [1]


@pytest.mark.parametrize(("key", "value"), [("max_sessions", 0), ("max_sessions", True), ("idle_seconds", 0)])
def test_bad_bounds_are_config_errors(key: str, value: object) -> None:
    with pytest.raises(ConfigError, match=key):
        SessionPool(str, **{key: value})  # type: ignore[arg-type]


def test_memory_stays_flat_under_a_flood_of_session_ids() -> None:
    host = SessionHost(GuardConfig(signature_key=KEY), max_sessions=50)
    for index in range(2000):
        host.session(f"s{index}").main.before_call("read_file", {"path": index})
    assert len(host) == 50


# -- eviction and expiry end the open turns, and they are counted ---------------------------------


def test_an_evicted_session_ends_its_open_turns_and_they_are_counted() -> None:
    """A session dropped as least recently used has its open turns (main and subagents) ended:
    ``otelguard_turns_total`` counts them, with their outcome."""
    registry = CollectorRegistry()
    host = metered_host(registry, max_sessions=1)
    session = host.session("a")
    session.start_turn()
    session.main.before_call("read_file", {"path": 1})
    sub = session.guard("agent-1", "explorer")
    sub.start_turn()
    assert turns(registry, "host") == turns(registry, "explorer") == 0
    host.session("b")  # "a" is evicted
    assert host.peek("a") is None
    assert turns(registry, "host") == 1 and turns(registry, "explorer") == 1
    assert session.main.turn_id is None and sub.turn_id is None


def test_an_expired_session_ends_its_halted_turn_and_it_is_counted_as_halted() -> None:
    clock, registry = Clock(), CollectorRegistry()
    host = metered_host(registry, idle_seconds=30, clock=clock)
    session = host.session("a")
    session.start_turn()
    for _ in range(13):  # 5 failures, 7 rejects, and the 13th send is blocked: the turn halts
        if session.main.before_call("make", {"t": 1}).allows_execution:
            session.main.after_call("make", {"t": 1}, "boom", failed=True)
    assert session.main.halt_decision is not None
    clock.now += 31
    assert host.expire() == 1
    assert turns(registry, "host", "halted") == 1 and turns(registry, "host") == 0


def test_an_expired_session_is_ended_by_traffic_of_other_sessions_too() -> None:
    clock, registry = Clock(), CollectorRegistry()
    host = metered_host(registry, idle_seconds=30, clock=clock)
    host.session("a").start_turn()
    clock.now += 31
    host.session("b")
    assert turns(registry, "host") == 1


def test_a_session_without_an_open_turn_leaves_quietly() -> None:
    """Eviction ends only open turns: a session whose turn already ended adds nothing."""
    registry = CollectorRegistry()
    host = metered_host(registry, max_sessions=1)
    session = host.session("a")
    session.start_turn()
    session.end_turn()
    host.session("b")
    assert turns(registry, "host") == 1


@pytest.mark.parametrize("leaves", ["evicted", "expired", "ended"])
def test_a_session_whose_run_is_unsettled_ends_its_turn_as_errored_as_it_leaves(leaves: str) -> None:
    """An exception left a call of the run and nothing showed the run went on: the session leaving
    the host (evicted, idle too long, ended) counts that turn errored; its subagents' as they are."""
    clock, registry = Clock(), CollectorRegistry()
    host = metered_host(registry, max_sessions=1, idle_seconds=30, clock=clock)
    session, run = host.session("a"), object()
    session.enter_run(run)
    session.guard("agent-1", "explorer").start_turn()
    session.unsettle(run)
    assert session.unsettled
    if leaves == "evicted":
        host.session("b")
    elif leaves == "expired":
        clock.now += 31
        assert host.expire() == 1
    else:
        host.end_session("a")
    assert host.peek("a") is None
    assert turns(registry, "host", "errored") == 1 and turns(registry, "host") == 0
    assert turns(registry, "explorer") == 1 and turns(registry, "explorer", "errored") == 0


def test_an_unsettled_run_is_errored_when_the_next_run_begins_unless_it_was_settled() -> None:
    registry = CollectorRegistry()
    session = metered_host(registry).session("a")
    first, second, third, fourth = object(), object(), object(), object()
    session.enter_run(first)
    session.unsettle(first)
    session.enter_run(second)  # the exception left the first run
    assert turns(registry, "host", "errored") == 1 and not session.unsettled
    session.unsettle(second)
    session.settle(second)  # the run went on
    session.enter_run(third)
    session.unsettle(second)  # not the open turn's run: nothing
    session.close()
    assert turns(registry, "host", "errored") == 1 and turns(registry, "host") == 2
    session.enter_run(fourth)
    session.unsettle(fourth)
    session.leave_run(fourth)  # the run ended normally after all
    session.close()
    assert turns(registry, "host", "errored") == 1 and turns(registry, "host") == 3


def test_end_session_ends_the_open_turns_and_forgets_the_session() -> None:
    recorder = RecordingObserver()
    host = SessionHost(GuardConfig(signature_key=KEY), edges=observed(recorder))
    session = host.session("a")
    session.start_turn()
    session.guard("x").before_call("read_file", {"path": 1})
    assert host.end_session("a") is session and host.peek("a") is None
    assert len(recorder.summaries) == 2  # the subagent's turn (begun by its call) and the main one
    assert host.end_session("a") is None


# -- one session ---------------------------------------------------------------------------------


def test_turns_are_counted_and_numbered_unless_the_host_names_them() -> None:
    session = SessionHost(GuardConfig(signature_key=KEY)).session("a")
    session.start_turn()
    assert (session.turns, session.main.turn_id) == (1, "1")
    session.start_turn("named")
    assert (session.turns, session.main.turn_id) == (2, "named")
    session.end_turn()
    assert session.main.turn_id is None and session.turns == 2


def test_a_run_seen_again_does_not_start_a_second_turn() -> None:
    """``enter_run`` begins a turn once per run; ``leave_run`` of an older run leaves a newer one alone."""
    session = SessionHost(GuardConfig(signature_key=KEY)).session("a")
    first, second = object(), object()
    assert session.enter_run(first) and not session.enter_run(first)
    assert session.enter_run(second) and session.turns == 2
    assert session.leave_run(first) is None and session.main.turn_id == "2"
    summary = session.leave_run(second)
    assert summary is not None and summary.turn_id == "2" and session.main.turn_id is None


def test_the_host_keys_sessions_by_conversation_id() -> None:
    host = SessionHost(GuardConfig(signature_key=KEY), agent="bot")
    assert host.session(None) is host.session(DEFAULT_SESSION)
    assert host.session(42) is host.session("42") and host.session("a") is not host.session("b")
    assert host.session("a").main.session_id == "a" and host.session("a").main.agent == "bot"


def test_subagents_are_their_own_guards_and_bounded() -> None:
    """A subagent's guard is made once per agent id; past the bound the least recently active
    subagent's turn is ended and its guard forgotten."""
    recorder = RecordingObserver()
    main = SessionHost(GuardConfig(signature_key=KEY), edges=observed(recorder)).session("a").main
    session = Session(main, max_subagents=2)
    one = session.guard("1", "explorer")
    assert session.guard("1") is one and session.guard(None) is main and one is not main
    one.start_turn()
    session.guard("2").start_turn()
    session.guard("1")  # "2" is now the least recently active
    session.guard("3")
    assert [(s.agent, s.turn_id) for s in recorder.summaries] == [(main.agent, None)]
    assert session.guard("1") is one
    assert session.end_subagent("1") is not None and session.guard("1") is not one


def test_a_subagent_that_stops_starts_afresh() -> None:
    session = SessionHost(GuardConfig(signature_key=KEY)).session("a")
    sub = session.guard("x")
    sub.start_turn("t")
    summary = session.end_subagent("x")
    assert summary is not None and summary.turn_id == "t"
    assert session.end_subagent("x") is None


# -- session caps across the session's guards, under threads --------------------------------------


@pytest.mark.usefixtures("fast_switching")
def test_a_hosted_session_and_its_subagents_charge_one_cap_atomically() -> None:
    """The main guard and seven subagents of one hosted session, in eight threads: a session cap of
    10 allows exactly 10 calls, 30 rounds over."""
    for round_ in range(30):
        session = SessionHost(CAPPED).session(f"s{round_}")
        guards = [session.main, *(session.guard(f"sub{i}") for i in range(7))]
        assert race(guards, calls=40) == 10
        refused = session.guard("late").before_call("web_search", {"q": "late"})
        assert refused.code == codes.CAP_SESSION


def test_sessions_do_not_share_caps() -> None:
    host = SessionHost(CAPPED)
    for _ in range(10):
        assert host.session("a").main.before_call("web_search", {"q": object()}).allows_execution
    assert not host.session("a").guard("sub").before_call("web_search", {"q": 1}).allows_execution
    assert host.session("b").main.before_call("web_search", {"q": 1}).allows_execution


def test_session_lookups_from_many_threads_make_one_session_each() -> None:
    host = SessionHost(GuardConfig(signature_key=KEY))
    seen: list[Session] = []
    lock = threading.Lock()

    def look() -> None:
        for index in range(50):
            session = host.session(f"s{index % 5}")
            with lock:
                seen.append(session)

    workers = [threading.Thread(target=look) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert len({id(s) for s in seen}) == 5 and len(host) == 5


def test_a_session_host_is_handed_its_cap_backend() -> None:
    """A host made with edges keeps each session's caps in the store its ``session_caps`` opened for
    that session id, with the guard's config (the default session is never shared: none is opened)."""
    from otelguard.core.caps import LocalSessionCaps

    made: dict[str, LocalSessionCaps] = {}
    config = GuardConfig(caps={"turn": {"web_search": 0}, "session": {"web_search": 2}})

    def opener(given: GuardConfig, session_id: str) -> LocalSessionCaps:
        assert given.caps == config.caps
        made[session_id] = LocalSessionCaps()
        return made[session_id]

    host = SessionHost(config, edges=Edges(session_caps=opener))
    guard = host.session("conversation-1").main
    for n in range(3):
        guard.before_call("web_search", {"q": n})
    assert guard.session_caps is made["conversation-1"]
    assert made["conversation-1"].usage() == {"web_search": 2}
    host.session(None)
    assert set(made) == {"conversation-1"}


def test_a_hosted_session_makes_the_public_guard_with_its_own_observer_each() -> None:
    """``otelguard.hosting.session_host`` resolves ``telemetry=`` once into edges; every guard it makes,
    a subagent's too, is the public ``Guard`` and is bound its own observer (otelguard's telemetry
    keeps a guard's open turn span), while a host's own observer (its edges) is shared as it is."""
    from typing import Any

    import otelguard
    from otelguard.core.observers import GuardObserver
    from otelguard.hosting import session_host

    class Binding(Telemetry):
        def __init__(self) -> None:
            super().__init__(TracerProvider(), CollectorRegistry())
            self.bound: list[GuardObserver] = []

        def bind(self, *args: Any, **kwargs: Any) -> GuardObserver:
            self.bound.append(super().bind(*args, **kwargs))
            return self.bound[-1]

    telemetry = Binding()
    session = session_host(GuardConfig(signature_key=KEY), telemetry=telemetry).session("a")
    sub = session.guard("call-1", "researcher")
    assert isinstance(session.main, otelguard.Guard) and isinstance(sub, otelguard.Guard)
    assert len(telemetry.bound) == 2 and telemetry.bound[0] is not telemetry.bound[1]
    recorder = RecordingObserver()
    host = SessionHost(GuardConfig(signature_key=KEY), edges=observed(recorder), guard_class=otelguard.Guard)
    shared = session_host(host=host).session("b")
    shared.start_turn()
    shared.guard("call-2", "helper").start_turn()
    assert len(recorder.turns_started) == 2
