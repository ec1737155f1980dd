"""BoundedMap: the bound, least-recently-used order, on_evict, and what counts as a use."""

from __future__ import annotations

import gc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from otelguard.core.bounded_map import BoundedMap, HeldTable
from otelguard.errors import ConfigError


def test_put_keeps_at_most_max_size_entries_dropping_the_least_recently_used() -> None:
    m: BoundedMap[str, int] = BoundedMap(3)
    for key, value in zip("abcd", range(4), strict=True):
        m.put(key, value)
    assert list(m.items()) == [("b", 1), ("c", 2), ("d", 3)]


def test_put_use_and_touch_count_as_uses() -> None:
    """A key put again, read with ``use`` or ``touch`` becomes the most recently used."""
    m: BoundedMap[str, int] = BoundedMap(3)
    for key in "abc":
        m.put(key, 0)
    m.put("a", 1)  # a is newest now
    assert m.use("b") == 0  # then b
    m.put("d", 0)  # evicts c
    assert list(m) == ["a", "b", "d"]
    assert m.touch("a", int) == 1
    m.put("e", 0)  # evicts b
    assert list(m) == ["d", "a", "e"]


def test_plain_reads_change_no_order() -> None:
    """``get``, ``in`` and iteration leave the order alone: only a use protects an entry."""
    m: BoundedMap[str, int] = BoundedMap(2)
    m.put("a", 1)
    m.put("b", 2)
    assert m.get("a") == 1 and "a" in m
    m.put("c", 3)
    assert "a" not in m and list(m) == ["b", "c"]


def test_touch_makes_missing_values_with_the_factory_once() -> None:
    made = []
    m: BoundedMap[str, list[int]] = BoundedMap(2)
    first = m.touch("a", lambda: made.append(1) or [])
    assert m.touch("a", list) is first and made == [1]


def test_on_evict_hears_every_evicted_entry_oldest_first_and_put_returns_them() -> None:
    evicted: list[tuple[str, int]] = []
    m: BoundedMap[str, int] = BoundedMap(2, lambda key, value: evicted.append((key, value)))
    assert m.put("a", 1) == () and m.put("b", 2) == ()
    assert m.put("c", 3) == (("a", 1),)
    m.touch("d", lambda: 4)
    assert evicted == [("a", 1), ("b", 2)]


def test_pop_and_clear_are_not_evictions() -> None:
    evicted: list[str] = []
    m: BoundedMap[str, int] = BoundedMap(2, lambda key, _value: evicted.append(key))
    m.put("a", 1)
    m.put("b", 2)
    assert m.pop("a") == 1
    m.clear()
    assert evicted == [] and len(m) == 0


def test_evict_and_oldest() -> None:
    evicted: list[str] = []
    m: BoundedMap[str, int] = BoundedMap(5, lambda key, _value: evicted.append(key))
    assert m.oldest() is None and m.evict(3) == ()
    for key in "abc":
        m.put(key, ord(key))
    assert m.oldest() == ("a", 97)
    assert m.evict(2) == (("a", 97), ("b", 98)) and evicted == ["a", "b"]
    assert m.evict(9) == (("c", 99),) and len(m) == 0


def test_a_smaller_bound_applies_at_the_next_write() -> None:
    m: BoundedMap[int, int] = BoundedMap(4)
    for key in range(4):
        m.put(key, key)
    m.max_size = 2
    m.put(9, 9)
    assert list(m) == [3, 9]


@pytest.mark.parametrize("size", [0, -1, True, 2.5, "3"])
def test_a_bad_size_is_a_config_error(size: object) -> None:
    with pytest.raises(ConfigError, match="max_size"):
        BoundedMap(size)  # type: ignore[arg-type]


@given(st.integers(1, 8), st.lists(st.tuples(st.sampled_from(["put", "use", "touch"]), st.integers(0, 12))))
def test_it_behaves_like_a_reference_lru(size: int, operations: list[tuple[str, int]]) -> None:
    """Against a plain list model of an LRU cache: same keys, same order, same evictions."""
    evicted: list[int] = []
    m: BoundedMap[int, int] = BoundedMap(size, lambda key, _value: evicted.append(key))
    order: list[int] = []
    expected_evicted: list[int] = []
    for operation, key in operations:
        if operation == "use":
            m.use(key)
            if key in order:
                order.remove(key)
                order.append(key)
            continue
        if operation == "put":
            m.put(key, key)
        else:
            m.touch(key, lambda key=key: key)  # type: ignore[misc]
        if key in order:
            order.remove(key)
        order.append(key)
        while len(order) > size:
            expected_evicted.append(order.pop(0))
    assert list(m) == order and evicted == expected_evicted and len(m) <= size


class _Counters:
    """A value that accepts weak references, as the tables' stores do."""


def test_a_held_table_hands_out_one_value_per_key_while_anyone_holds_it() -> None:
    table: HeldTable[str, _Counters] = HeldTable(2)
    made: list[str] = []

    def make(key: str) -> _Counters:
        made.append(key)
        return _Counters()

    held = table.get("held", lambda: make("held"))
    table.get("gone", lambda: make("gone"))  # nobody keeps this one
    for n in range(10):  # far past the bound: neither is among the recent ones
        table.get(f"k{n}", _Counters)
    gc.collect()
    assert len(table) == 2 and table.held() == 3  # the recent two, and the one still held
    assert table.get("held", lambda: make("held")) is held  # no second value for a key in use
    table.get("gone", lambda: make("gone"))  # forgotten: made afresh
    assert made == ["held", "gone", "gone"]


def test_a_held_table_replaces_a_value_its_owner_no_longer_accepts() -> None:
    table: HeldTable[str, _Counters] = HeldTable(4)
    first = table.get("k", _Counters)
    second = table.get("k", _Counters, lambda value: value is not first)
    assert second is not first and table.get("k", _Counters) is second
