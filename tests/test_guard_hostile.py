"""Small but real: turns begun from many threads are each ended and counted once, and a tool result
that cannot be read never makes the guard raise."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry

from otelguard import Guard, GuardConfig
from otelguard.telemetry import Telemetry


def test_start_turn_from_8_threads_ends_and_counts_every_turn() -> None:
    registry = CollectorRegistry()
    guard = Guard(GuardConfig(), telemetry=Telemetry(registry=registry))
    barrier = threading.Barrier(8)

    def worker() -> None:
        barrier.wait()
        for _ in range(2000):
            guard.start_turn()

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    guard.end_turn()
    completed = registry.get_sample_value(
        "otelguard_turns_total", {"agent": "default", "outcome": "completed"}
    )
    assert completed == 16_000
    assert registry.get_sample_value("otelguard_internal_errors_total", {"stage": "start_turn"}) == 0


class _UnreadableResult(Mapping[str, Any]):
    """A Mapping whose every read fails, as a lazy or remote result object might."""

    def __getitem__(self, key: str) -> Any:
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(["error", "output"])

    def __len__(self) -> int:
        return 2


def test_wrap_on_a_tool_returning_an_unreadable_mapping_never_raises() -> None:
    guard = Guard(GuardConfig())
    result = _UnreadableResult()

    @guard.wrap
    def flaky(query: str) -> Any:
        return result

    returned = [flaky("same") for _ in range(4)]  # identical calls: warnings from the third on
    assert all(r is result for r in returned)


def test_annotate_never_raises_on_an_unreadable_mapping() -> None:
    guard = Guard(GuardConfig())
    decision = None
    for _ in range(3):
        decision = guard.before_call("search", {"q": 1})
        decision = guard.after_call("search", {"q": 1}, "Error: x", failed=True)
    assert decision is not None and decision.action == "warn"
    result = _UnreadableResult()
    assert decision.annotate(result) is result
