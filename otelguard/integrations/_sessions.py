"""What every framework adapter does the same way: one ``Guard`` per conversation, held in a bounded
``SessionPool``, and a clear ``ImportError`` when the framework is missing."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Final

from otelguard.config import GuardConfig
from otelguard.guard import DEFAULT_AGENT, Guard
from otelguard.sessions import DEFAULT_MAX_SESSIONS, SessionPool

__all__ = ["DEFAULT_SESSION", "CallIds", "GuardSessions", "Session", "missing_framework"]

DEFAULT_SESSION: Final = "default"
MAX_TRACKED_CALLS: Final = 4096
"""The session key used when the framework gives the adapter no conversation id."""


def missing_framework(framework: str, extra: str) -> ImportError:
    """The error an adapter raises when its framework is not installed."""
    return ImportError(
        f'otelguard\'s {framework} adapter needs the {framework} package: pip install "otelguard[{extra}]"'
    )


class CallIds:
    """A bounded set of call ids an adapter must remember between two hooks of one call (calls
    that never reach the second hook must not pile up: the oldest are forgotten first)."""

    def __init__(self, limit: int = MAX_TRACKED_CALLS) -> None:
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._limit = limit
        self._lock = threading.Lock()

    def add(self, call_id: object) -> None:
        if isinstance(call_id, str):
            with self._lock:
                self._ids[call_id] = None
                while len(self._ids) > self._limit:
                    self._ids.popitem(last=False)

    def take(self, call_id: object) -> bool:
        """Whether ``call_id`` was added (and not taken since); it is forgotten either way."""
        with self._lock:
            if not isinstance(call_id, str) or call_id not in self._ids:
                return False
            del self._ids[call_id]
            return True


class Session:
    """One conversation's guard, and which run of the framework its current turn belongs to."""

    __slots__ = ("guard", "lock", "paused", "run")

    def __init__(self, guard: Guard) -> None:
        self.guard = guard
        self.run: object = None
        self.lock = threading.Lock()
        self.paused = CallIds()  # calls interrupted by the framework that will run again when resumed

    def enter_run(self, run: object, turn_id: str | None = None) -> bool:
        """Start a turn when ``run`` is not the run the current turn belongs to; ``True`` if it did."""
        with self.lock:
            if run is not None and run == self.run:
                return False
            self.run = run
        self.guard.start_turn(turn_id=turn_id)
        return True

    def leave_run(self, run: object) -> None:
        """End the turn of ``run`` (a later run of the session starts the next one)."""
        with self.lock:
            if run != self.run:
                return
            self.run = None
        self.guard.end_turn()


class GuardSessions:
    """A guard per session id, made on first use from one config and one telemetry.

    Constructor arguments are those every adapter takes; ``telemetry`` is as for ``Guard``
    (``None``, ``True`` or a ``Telemetry``).
    """

    def __init__(
        self,
        config: GuardConfig | None = None,
        *,
        telemetry: Any = None,
        agent: str | None = None,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
    ) -> None:
        self.config = config if config is not None else GuardConfig()
        self.telemetry = telemetry
        self.agent = agent or DEFAULT_AGENT
        self.max_sessions = max_sessions
        self._pool: SessionPool[Session] = SessionPool(self._new_session, max_sessions=max_sessions)

    def _new_session(self, session_id: str) -> Session:
        return Session(Guard(self.config, self.telemetry, agent=self.agent))

    def session(self, session_id: object) -> Session:
        key = (
            session_id
            if isinstance(session_id, str)
            else DEFAULT_SESSION
            if session_id is None
            else str(session_id)
        )
        return self._pool.get(key)

    def peek(self, session_id: str) -> Session | None:
        return self._pool.peek(session_id)

    def __len__(self) -> int:
        return len(self._pool)
