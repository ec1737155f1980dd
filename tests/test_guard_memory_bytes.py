"""Per-guard memory is bounded in bytes, not only in entries: long tool names and call ids are kept
by digest beyond a length, and pending calls never keep their args alive."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable

from otelguard import Guard, GuardConfig
from otelguard.core.signatures import MAX_NAME_CHARS

MiB = 1024 * 1024


def _retained(work: Callable[[Guard], None]) -> int:
    """Bytes still allocated after ``work`` while the guard lives (the inputs themselves are gone)."""
    guard = Guard(GuardConfig())
    gc.collect()
    tracemalloc.start()
    try:
        work(guard)
        gc.collect()
        current, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert guard is not None
    return current


def test_many_distinct_long_tool_names_are_kept_by_digest() -> None:
    def work(guard: Guard) -> None:
        for i in range(1500):
            name = f"{i:05}" + "n" * 100_000
            guard.before_call(name, {"q": 1})
            guard.after_call(name, {"q": 1}, "ok", failed=False)

    assert _retained(work) < 16 * MiB  # 1,500 names of 100 KB would be 150 MB


def test_pending_calls_without_call_id_do_not_keep_args_alive() -> None:
    def work(guard: Guard) -> None:
        for i in range(1000):
            guard.before_call("fetch", {"blob": "x" * 100_000, "i": i})  # never finished

    assert _retained(work) < 10 * MiB  # 1,000 args of 100 KB would be 100 MB


def test_long_call_ids_are_kept_by_digest() -> None:
    def work(guard: Guard) -> None:
        for i in range(1000):
            guard.before_call("fetch", {"i": i}, call_id=f"{i:05}" + "c" * 100_000)

    assert _retained(work) < 10 * MiB


def test_long_names_stay_distinct_and_bounded_in_decisions() -> None:
    guard = Guard(GuardConfig())
    first, second = "a" * 10_000 + "1", "a" * 10_000 + "2"
    for _ in range(3):
        guard.before_call(first, {})
        decision = guard.after_call(first, {}, "Error: x", failed=True)
    assert decision.action == "warn" and len(decision.tool_name) <= MAX_NAME_CHARS
    guard.before_call(second, {})
    other = guard.after_call(second, {}, "ok", failed=False)
    assert other.action == "allow" and other.tool_name != decision.tool_name


def test_after_call_without_call_id_still_finds_its_before_call_by_args_identity() -> None:
    guard = Guard(GuardConfig.from_mapping({"caps": {"turn": {"search": 1}}}))
    args = {"q": "a"}
    assert guard.before_call("search", args).allows_execution
    guard.after_call("search", args, "ok", failed=False, refusal="permission_denied")  # refunds the cap
    assert guard.before_call("search", {"q": "b"}).allows_execution
