"""``BoundedMap``: the one map that forgets its least recently used entries past a size.

Every table otelguard keeps per key of something the agent or the transcript chooses (signatures,
call ids, sessions, subagents, series) must stay bounded whatever the input: this is that map.
Not thread-safe, like the rest of the core: its owner serialises access (most under a lock they
hold anyway).
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Final, Generic, TypeVar

from otelguard.errors import ConfigError

__all__ = ["BoundedMap", "HeldTable"]

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


class HeldTable(Generic[K, V]):
    """One value per key, shared by everyone who asks for that key: the ``max_size`` most recently
    used are kept, and beyond them every value that something else still holds. Thread-safe.

    A plain bounded map would forget a value its holders still use, and the next to ask would get a
    second one: two sets of counters for one key. Here a value is dropped only once it is both past
    the bound and held by nobody, so the table never outgrows ``max_size`` plus what its holders
    hold (each holder bounded by its own owner). Values must accept weak references.
    """

    __slots__ = ("_held", "_lock", "_recent")

    def __init__(self, max_size: int) -> None:
        self._recent: BoundedMap[K, V] = BoundedMap(max_size)
        self._held: weakref.WeakValueDictionary[K, V] = weakref.WeakValueDictionary()
        self._lock = threading.Lock()

    @property
    def max_size(self) -> int:
        return self._recent.max_size

    def get(self, key: K, make: Callable[[], V], usable: Callable[[V], bool] | None = None) -> V:
        """The value of ``key``, marked most recently used; made by ``make`` when the table has none
        (or none that ``usable`` accepts)."""
        with self._lock:
            value = self._recent.use(key)
            if value is not None and (usable is None or usable(value)):
                return value
            value = self._held.get(key)  # past the bound, but a holder still uses it
            if value is None or (usable is not None and not usable(value)):
                value = make()
                self._held[key] = value
            self._recent.put(key, value)
            return value

    def __len__(self) -> int:
        """The values kept as recently used (those only held elsewhere are not counted)."""
        with self._lock:
            return len(self._recent)

    def held(self) -> int:
        """Every value the table can still hand out: the recent ones and those held elsewhere."""
        with self._lock:
            return len(self._held)
