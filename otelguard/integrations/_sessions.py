"""What every framework adapter does the same way: one ``Guard`` per conversation, held in a bounded
``SessionPool``, and a clear ``ImportError`` when the framework is missing."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Final

from otelguard.config import GuardConfig
from otelguard.guard import DEFAULT_AGENT, Guard
from otelguard.sessions import DEFAULT_MAX_SESSIONS, SessionPool

__all__ = ["DEFAULT_SESSION", "CallIds", "GuardSessions", "Session", "error_result", "missing_framework"]

DEFAULT_SESSION: Final = "default"
MAX_TRACKED_CALLS: Final = 4096
"""The session key used when the framework gives the adapter no conversation id."""


def missing_framework(framework: str, extra: str) -> ImportError:
    """The error an adapter raises when its framework is not installed."""
    return ImportError(
        f'otelguard\'s {framework} adapter needs the {framework} package: pip install "otelguard[{extra}]"'
    )


def error_result(error: BaseException) -> str:
    """What a failed call returned when its result is an exception: compared with other failures'
    results (the same error again), never exported."""
    return f"{type(error).__name__}: {error}"


class CallIds:
    """A bounded map of call id to a note, for what an adapter learns in one hook of a call and
    needs in a later one. Calls that never reach the later hook must not pile up: the oldest are
    forgotten first."""

    def __init__(self, limit: int = MAX_TRACKED_CALLS) -> None:
        self._notes: OrderedDict[str, str] = OrderedDict()
        self._limit = limit
        self._lock = threading.Lock()

    def add(self, call_id: object, note: str = "") -> None:
        if isinstance(call_id, str):
            with self._lock:
                self._notes[call_id] = note
                while len(self._notes) > self._limit:
                    self._notes.popitem(last=False)

    def take(self, call_id: object) -> str | None:
        """The note added for ``call_id`` (``None`` when there is none); it is forgotten."""
        if not isinstance(call_id, str):
            return None
        with self._lock:
            return self._notes.pop(call_id, None)


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

    def pop(self, session_id: str) -> Session | None:
        """Forget a session whose conversation ended."""
        return self._pool.pop(session_id)

    def __len__(self) -> int:
        return len(self._pool)
