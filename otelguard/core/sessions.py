"""The session host: every conversation a host serves, its guards and its turns, in one bounded pool.

A session is the main agent's guard, one guard per subagent (a turn stream of its own that shares
the session's caps: ``Guard.subagent_guard``) and a turn counter. ``SessionHost`` keeps the
sessions of one host (a framework adapter, ``otelguard serve``) in a ``SessionPool``: at most
``max_sessions``, least recently used dropped first, and a session idle for ``idle_seconds`` is
forgotten. A session that leaves the pool that way has its open turns ended, so they are counted
(``otelguard_turns_total``) like any other (one whose run an exception may have ended, as
``errored``: ``Session.unsettle``). Memory stays flat whatever the number of session ids.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Final, Generic, TypeVar

from otelguard.config import GuardConfig
from otelguard.core.bounded_map import BoundedMap
from otelguard.core.decisions import TurnSummary
from otelguard.core.edges import NO_EDGES, Edges
from otelguard.core.guard import DEFAULT_AGENT, Guard
from otelguard.errors import ConfigError

__all__ = [
    "DEFAULT_IDLE_SECONDS",
    "DEFAULT_MAX_SESSIONS",
    "DEFAULT_MAX_SIGNATURES",
    "DEFAULT_SESSION",
    "MAX_SUBAGENTS_PER_SESSION",
    "MIN_SIGNATURES_PER_SUBAGENT",
    "Session",
    "SessionHost",
    "SessionPool",
    "subagent_budget",
]

DEFAULT_MAX_SESSIONS: Final = 10_000
DEFAULT_MAX_SIGNATURES: Final = 1_000_000
"""Signatures ``otelguard serve`` tracks across all its sessions (about 350 bytes each): each session
tracks at most this divided by ``max_sessions`` (100 with the defaults)."""
MIN_SIGNATURES_PER_SESSION: Final = 16
DEFAULT_IDLE_SECONDS: Final = 3600.0
DEFAULT_SESSION: Final = "default"
"""The session id of a host that gets none (a framework run without a conversation id)."""
MAX_SUBAGENTS_PER_SESSION: Final = 64
"""Subagents of one session held at most at once; the least recently active is ended first. A
session whose budget is smaller holds fewer (see ``subagent_budget``)."""
MIN_SIGNATURES_PER_SUBAGENT: Final = 16

T = TypeVar("T")


class SessionPool(Generic[T]):
    """``get(session_id)`` returns the session's object, made by ``factory(session_id)`` on first use.

    Thread-safe. ``factory`` runs under the pool's lock, so one session id never gets two objects.
    ``on_evict(session_id, value)`` hears of every object the pool drops by itself (least recently
    used past ``max_sessions``, or idle too long), after the pool's lock is released; ``pop`` is
    the caller's own doing and is not reported.
    """

    def __init__(
        self,
        factory: Callable[[str], T],
        *,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        idle_seconds: float = DEFAULT_IDLE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        on_evict: Callable[[str, T], object] | None = None,
    ) -> None:
        if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or max_sessions < 1:
            raise ConfigError("max_sessions", max_sessions, "a whole number of at least 1")
        if isinstance(idle_seconds, bool) or not isinstance(idle_seconds, (int, float)) or idle_seconds <= 0:
            raise ConfigError("idle_seconds", idle_seconds, "a number of seconds above 0")
        self._factory = factory
        self.max_sessions = max_sessions
        self.idle_seconds = float(idle_seconds)
        self._clock = clock
        self._on_evict = on_evict
        self._lock = threading.Lock()
        self._entries: BoundedMap[str, tuple[T, float]] = BoundedMap(max_sessions)

    def get(self, session_id: str, factory: Callable[[str], T] | None = None) -> T:
        """``factory``: what makes the object if the session is new (``None``: the pool's own)."""
        now = self._clock()
        with self._lock:
            entries = self._entries
            entry = entries.pop(session_id, None)
            dropped: list[tuple[str, tuple[T, float]]] = []
            if entry is not None and now - entry[1] > self.idle_seconds:
                dropped.append((session_id, entry))
                entry = None
            value = entry[0] if entry is not None else (factory or self._factory)(session_id)
            dropped.extend(entries.put(session_id, (value, now)))
            self._expire_locked(now, dropped)
        self._report(dropped)
        return value

    def peek(self, session_id: str) -> T | None:
        """The session's object if the pool holds it, without making one or touching its age."""
        with self._lock:
            entry = self._entries.get(session_id)
            return None if entry is None else entry[0]

    def pop(self, session_id: str) -> T | None:
        """Forget a session (the conversation ended); returns its object if it was held."""
        with self._lock:
            entry = self._entries.pop(session_id, None)
            return None if entry is None else entry[0]

    def expire(self) -> int:
        """Drop the sessions idle for longer than ``idle_seconds`` now; how many were dropped.
        (``get`` does this too: a host with traffic need not call it.)"""
        dropped: list[tuple[str, tuple[T, float]]] = []
        with self._lock:
            self._expire_locked(self._clock(), dropped)
        self._report(dropped)
        return len(dropped)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def _expire_locked(self, now: float, dropped: list[tuple[str, tuple[T, float]]]) -> None:
        # Least recently used first: the oldest entry is the first to have gone idle.
        entries = self._entries
        while (oldest := entries.oldest()) is not None and now - oldest[1][1] > self.idle_seconds:
            dropped.extend(entries.evict(1))

    def _report(self, dropped: list[tuple[str, tuple[T, float]]]) -> None:
        on_evict = self._on_evict
        if on_evict is not None:
            for session_id, (value, _used) in dropped:
                on_evict(session_id, value)


class Session:
    """One conversation: the main agent's guard, one guard per subagent, and its turns. Thread-safe.

    ``run`` is the framework run the main agent's open turn belongs to (adapters whose hooks see
    one run several times start its turn once). An adapter that sees an exception leave one of the
    run's calls but not whether it left the run marks the run ``unsettle(run)`` until it sees the
    run go on (``settle(run)``); a turn still unsettled when the next run begins or the session
    closes ends as ``errored``. A subagent (``guard(agent_id)``) is a turn stream
    of its own that shares the session caps; at most ``max_subagents`` are held, the least
    recently active ended first.
    """

    __slots__ = (
        "_lock",
        "_subagent_config",
        "_subagents",
        "_unsettled",
        "main",
        "run",
        "session_id",
        "turns",
    )

    def __init__(
        self,
        main: Guard,
        max_subagents: int | None = None,
        subagent_config: GuardConfig | None = None,
    ) -> None:
        """``max_subagents`` and ``subagent_config``: by default ``subagent_budget(main.config)`` (a
        host making many sessions passes the ones it computed once)."""
        self.main = main
        self.session_id = main.session_id
        self.run: object = None
        self.turns = 0
        self._unsettled = False
        self._lock = threading.Lock()
        if max_subagents is None or subagent_config is None:
            held, config = subagent_budget(main.config)
            max_subagents = held if max_subagents is None else max_subagents
            subagent_config = config if subagent_config is None else subagent_config
        self._subagent_config = subagent_config
        self._subagents: BoundedMap[str, Guard] = BoundedMap(max_subagents)

    # the main agent's turns ------------------------------------------------------------------

    def start_turn(self, turn_id: str | None = None, agent: str | None = None) -> None:
        """Begin the main agent's next turn (ending its open one) and count it. Its id is
        ``turn_id``, else its number in the session (``"1"``, ``"2"``, ...)."""
        self.enter_run(None, turn_id, agent)

    def enter_run(self, run: object, turn_id: str | None = None, agent: str | None = None) -> bool:
        """Begin the turn of the framework run ``run`` as ``start_turn`` does, unless the open turn
        already is that run's (``None`` is no run: always begins); ``True`` if it began. An open
        turn still unsettled (see ``unsettle``) ends as ``errored`` first."""
        with self._lock:
            if run is not None and run == self.run:
                return False
            raised, self._unsettled = self._unsettled, False
            self.run = run
            self.turns += 1
            number = self.turns
        if raised:
            self.main.end_turn(errored=True)
        self.main.start_turn(turn_id=str(number) if turn_id is None else turn_id, agent=agent)
        return True

    def end_turn(self, errored: bool = False) -> TurnSummary:
        """End the main agent's open turn and summarise it (``errored``: its run ended in an
        exception, see ``Guard.end_turn``)."""
        with self._lock:
            self.run = None
            self._unsettled = False
        return self.main.end_turn(errored)

    def leave_run(self, run: object, errored: bool = False) -> TurnSummary | None:
        """End the turn of run ``run`` as ``end_turn`` does; nothing when that turn has ended already
        or a later run has begun a turn of its own."""
        with self._lock:
            if run != self.run:
                return None
            self.run = None
            self._unsettled = False
        return self.main.end_turn(errored)

    def unsettle(self, run: object) -> None:
        """An exception left a call of run ``run``, and may have left the run too: unless the run is
        seen to go on (``settle``) or its turn ends, the next run's ``enter_run`` or the session's
        ``close`` ends that turn as ``errored``. Nothing when ``run`` is not the open turn's run."""
        with self._lock:
            if run is not None and run == self.run:
                self._unsettled = True

    def settle(self, run: object) -> None:
        """Run ``run`` went on after the exceptions that left its calls (see ``unsettle``)."""
        with self._lock:
            if run == self.run:
                self._unsettled = False

    @property
    def unsettled(self) -> bool:
        """Whether the open turn's run is unsettled (see ``unsettle``)."""
        return self._unsettled

    # subagents -------------------------------------------------------------------------------

    def guard(self, agent_id: str | None = None, agent: str | None = None) -> Guard:
        """The main agent's guard, or subagent ``agent_id``'s (made on first use, labelled ``agent``)."""
        if agent_id is None:
            return self.main
        with self._lock:
            guard = self._subagents.use(agent_id)
            if guard is not None:
                return guard
            guard = self.main.subagent_guard(agent, config=self._subagent_config)
            evicted = self._subagents.put(agent_id, guard)
        for _agent_id, dropped in evicted:
            dropped.end_turn()
        return guard

    def end_subagent(self, agent_id: str) -> TurnSummary | None:
        """A subagent finished: end its turn and forget its guard (the same id later starts afresh)."""
        with self._lock:
            guard = self._subagents.pop(agent_id, None)
        return guard.end_turn() if guard is not None else None

    def close(self) -> None:
        """End every open turn of the session, subagents' first; the session is over. The main
        agent's turn ends as ``errored`` when its run is unsettled (see ``unsettle``)."""
        with self._lock:
            subagents = list(self._subagents.values())
            self._subagents.clear()
            self.run = None
            raised, self._unsettled = self._unsettled, False
        for guard in subagents:
            guard.end_turn()
        self.main.end_turn(errored=raised)


class SessionHost:
    """The sessions of one host, made on first use from one config, the host's edges and agent label.

    ``edges`` is as for ``Guard``: each guard's own observer, the store of a session's caps
    (``otelguard.hosting.session_host`` makes a host from the ``telemetry=`` conveniences). A session the pool
    drops (least recently used past ``max_sessions``, or idle for ``idle_seconds``) is closed: its
    open turns end and are counted (``errored`` for an unsettled run: ``Session.unsettle``).

    ``max_signatures`` bounds the signatures tracked across all sessions: each session's guards
    track at most ``max_signatures // max_sessions`` (and never more than the config's
    ``max_tracked_signatures``), so a full host holds at most that many however busy each session
    is. ``None``: each session tracks ``max_tracked_signatures``.

    The host's default session is never shared: its guard is handed no session id, so its caps stay
    in process whatever the edges. ``guard_class``: the class of its guards (``otelguard.hosting``
    hands the public ``Guard``), which takes ``Guard``'s keywords.
    """

    def __init__(
        self,
        config: GuardConfig | None = None,
        *,
        edges: Edges = NO_EDGES,
        agent: str | None = None,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        idle_seconds: float = DEFAULT_IDLE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        max_signatures: int | None = None,
        guard_class: type[Guard] = Guard,
    ) -> None:
        self.config = _within_budget(
            config if config is not None else GuardConfig(), max_signatures, max_sessions
        )
        # an OTELGUARD_STATE_URL without a signature key is a ConfigError here, not at a first call
        self.config.effective_state()
        self.edges = edges
        self._guard_class = guard_class
        self.agent = agent or DEFAULT_AGENT
        self.max_sessions = max_sessions
        self._max_subagents, self._subagent_config = subagent_budget(self.config)
        self._pool: SessionPool[Session] = SessionPool(
            self._new_session,
            max_sessions=max_sessions,
            idle_seconds=idle_seconds,
            clock=clock,
            on_evict=_close,
        )

    def _new_session(self, session_id: str, agent: str | None = None) -> Session:
        # The default session is this host's alone: shared state would merge it with every other
        # process's default session.
        shared_id = None if session_id == DEFAULT_SESSION else session_id
        guard = self._guard_class(
            self.config, agent=agent or self.agent, session_id=shared_id, edges=self.edges
        )
        return Session(guard, self._max_subagents, self._subagent_config)

    def session(self, session_id: object = None, agent: str | None = None) -> Session:
        """The session ``session_id`` (``None``: the host's one default session), made on first use.
        ``agent``: the label of a session made now (``None``: the host's); one host serves sessions
        of several agents (the sidecar: every coding-agent CLI's)."""
        if agent is None or agent == self.agent:
            return self._pool.get(_key(session_id))
        return self._pool.get(_key(session_id), lambda key: self._new_session(key, agent))

    def peek(self, session_id: object = None) -> Session | None:
        """The session if the host holds it, without making one or touching its age."""
        return self._pool.peek(_key(session_id))

    def end_session(self, session_id: object = None) -> Session | None:
        """The conversation ended: close the session (its open turns end) and forget it."""
        session = self._pool.pop(_key(session_id))
        if session is not None:
            session.close()
        return session

    def expire(self) -> int:
        """Close and forget the sessions idle too long now; how many."""
        return self._pool.expire()

    def __len__(self) -> int:
        return len(self._pool)


def _within_budget(config: GuardConfig, max_signatures: int | None, max_sessions: int) -> GuardConfig:
    """The config each session's guards use: ``max_tracked_signatures`` lowered to the session's
    share of ``max_signatures``."""
    if max_signatures is None:
        return config
    if isinstance(max_signatures, bool) or not isinstance(max_signatures, int) or max_signatures < 1:
        raise ConfigError("max_signatures", max_signatures, "a whole number of at least 1")
    if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or max_sessions < 1:
        return config  # the pool names max_sessions
    share = max_signatures // max_sessions
    if share < MIN_SIGNATURES_PER_SESSION:
        least = MIN_SIGNATURES_PER_SESSION * max_sessions
        raise ConfigError(
            "max_signatures",
            max_signatures,
            f"at least {MIN_SIGNATURES_PER_SESSION} per session: {least:,} or more for {max_sessions:,} "
            "sessions (or fewer max_sessions)",
        )
    if share >= config.max_tracked_signatures:
        return config
    return config.with_changes(max_tracked_signatures=share)


def subagent_budget(config: GuardConfig) -> tuple[int, GuardConfig]:
    """How many subagents a session whose main guard has ``config`` holds at once, and the config
    of each: together they track no more signatures than the main guard, so a whole session tracks
    at most twice ``max_tracked_signatures`` (with its results held in proportion: see ``Guard``)
    whatever the number of subagent ids. Each tracks ``max_tracked_signatures // 64`` signatures
    but at least 16, and the session holds as many such subagents as fit, 64 at most (64 of 64 with
    the default 4,096; 6 of 16 with the sidecar's share of 100)."""
    share = config.max_tracked_signatures
    each = max(MIN_SIGNATURES_PER_SUBAGENT, share // MAX_SUBAGENTS_PER_SESSION)
    held = max(1, min(MAX_SUBAGENTS_PER_SESSION, share // each))
    return held, config if each >= share else config.with_changes(max_tracked_signatures=each)


def _key(session_id: object) -> str:
    if isinstance(session_id, str):
        return session_id
    return DEFAULT_SESSION if session_id is None else str(session_id)


def _close(_session_id: str, session: Session) -> None:
    session.close()
