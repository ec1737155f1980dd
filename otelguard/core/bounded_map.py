"""``BoundedMap``: the one map that forgets its least recently used entries past a size.

Every table otelguard keeps per key of something the agent or the transcript chooses (signatures,
call ids, sessions, subagents, series) must stay bounded whatever the input: this is that map.
Not thread-safe, like the rest of the core: its owner serialises access (most under a lock they
hold anyway).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Final, Generic, TypeVar

from otelguard.errors import ConfigError

__all__ = ["BoundedMap"]

K = TypeVar("K")
V = TypeVar("V")

_NONE_EVICTED: Final[tuple[()]] = ()


class BoundedMap(OrderedDict[K, V], Generic[K, V]):
    """At most ``max_size`` entries; past it the least recently used go first, each handed to
    ``on_evict(key, value)`` when given.

    ``put`` and ``touch`` write, count as a use and keep the bound; ``use`` reads and counts as a
    use. ``put`` also returns what it evicted, for owners that must act on it after releasing
    their lock (ending a session's turn runs its observers). The plain mapping reads (``get``, ``in``, ``pop``, iteration, oldest first) are
    ``OrderedDict``'s and change no order. An entry taken out with ``pop`` or ``clear`` is not an
    eviction. Write through ``put``/``touch``: ``map[key] = value`` does not keep the bound.
    """

    def __init__(self, max_size: int, on_evict: Callable[[K, V], object] | None = None) -> None:
        if isinstance(max_size, bool) or not isinstance(max_size, int) or max_size < 1:
            raise ConfigError("max_size", max_size, "a whole number of at least 1")
        super().__init__()
        self.max_size = max_size
        self.on_evict = on_evict

    def put(self, key: K, value: V) -> tuple[tuple[K, V], ...]:
        """Set ``key`` (the most recently used now), then evict past the bound; the evicted entries."""
        self[key] = value
        self.move_to_end(key)
        if len(self) > self.max_size:
            return self.evict(len(self) - self.max_size)
        return _NONE_EVICTED

    def touch(self, key: K, factory: Callable[[], V]) -> V:
        """The value of ``key`` (made by ``factory`` when missing), marked most recently used."""
        value = self.get(key)
        if value is None:
            value = factory()
            self[key] = value
            if len(self) > self.max_size:
                if self.on_evict is None:  # the per-call maps: no one to tell
                    self.popitem(False)  # positional: keyword parsing costs more than the pop
                else:
                    self.evict(1)
        else:
            self.move_to_end(key)
        return value

    def use(self, key: K) -> V | None:
        """The value of ``key``, marked most recently used; ``None`` when missing."""
        value = self.get(key)
        if value is not None:
            self.move_to_end(key)
        return value

    def evict(self, count: int = 1) -> tuple[tuple[K, V], ...]:
        """Drop the ``count`` least recently used entries, each through ``on_evict``; the entries."""
        on_evict = self.on_evict
        evicted = tuple(self.popitem(False) for _ in range(min(count, len(self))))
        if on_evict is not None:
            for key, value in evicted:
                on_evict(key, value)
        return evicted

    def oldest(self) -> tuple[K, V] | None:
        """The least recently used entry, left in place; ``None`` when empty."""
        for key in self:
            return key, self[key]
        return None
