"""A bounded pool of guards, one per conversation, shared by the framework adapters and the sidecar.

A host that serves many conversations keeps one ``Guard`` per session id. The pool holds at most
``max_sessions`` of them, drops the least recently used first, and forgets a session that has been
idle for ``idle_seconds``: memory stays flat whatever the number of session ids a host sees.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Final, Generic, TypeVar

from otelguard.errors import ConfigError

__all__ = ["DEFAULT_IDLE_SECONDS", "DEFAULT_MAX_SESSIONS", "SessionPool"]

DEFAULT_MAX_SESSIONS: Final = 10_000
DEFAULT_IDLE_SECONDS: Final = 3600.0

T = TypeVar("T")


class SessionPool(Generic[T]):
    """``get(session_id)`` returns the session's object, made by ``factory(session_id)`` on first use.

    Thread-safe. ``factory`` runs under the pool's lock, so one session id never gets two objects.
    """

    def __init__(
        self,
        factory: Callable[[str], T],
        *,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        idle_seconds: float = DEFAULT_IDLE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or max_sessions < 1:
            raise ConfigError("max_sessions", max_sessions, "a whole number of at least 1")
        if isinstance(idle_seconds, bool) or not isinstance(idle_seconds, (int, float)) or idle_seconds <= 0:
            raise ConfigError("idle_seconds", idle_seconds, "a number of seconds above 0")
        self._factory = factory
        self.max_sessions = max_sessions
        self.idle_seconds = float(idle_seconds)
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, tuple[T, float]] = OrderedDict()

    def get(self, session_id: str) -> T:
        now = self._clock()
        with self._lock:
            entry = self._entries.pop(session_id, None)
            if entry is not None and now - entry[1] <= self.idle_seconds:
                value = entry[0]
            else:
                value = self._factory(session_id)
            self._entries[session_id] = (value, now)
            self._expire(now)
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

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def _expire(self, now: float) -> None:
        entries = self._entries
        while len(entries) > self.max_sessions:
            entries.popitem(last=False)
        # Least recently used first: the oldest entry is the first to have gone idle.
        while entries:
            oldest_id = next(iter(entries))
            if now - entries[oldest_id][1] <= self.idle_seconds:
                break
            del entries[oldest_id]
