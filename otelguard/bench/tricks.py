"""The hot-path tricks, each measured against its plain alternative on the path it sits on.

A trick keeps its place only while it pays: at least ``PAYS`` of the per-call cost of that path. The
one measured here is the slotted twins (``otelguard.core.decisions.slotted_twin``): the allow decision and the call
event built on every call, against the classes' own frozen-dataclass constructors. Both run side by
side in one process, interleaved turn by turn in a rotating order (as every bench timing is), on the
guard alone, where the constructors are the largest share of the path.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final

from otelguard.bench.measure import percentile
from otelguard.bench.runners import TURNS_PER_SESSION, guard_alone, run_turn
from otelguard.core import decisions, observers
from otelguard.core.observers import CallEvent
from otelguard.core.scripted import ScriptedCall

__all__ = ["PAYS", "slotted_twins"]

PAYS: Final = 0.05
"""The share of its path's per-call cost a trick must save to keep its place."""

_WARMUP_TURNS = 2


@contextmanager
def _constructors(allow: Callable[..., Any], event: Callable[..., Any]) -> Iterator[None]:
    """The guard's hot-path constructors replaced for the block (the guard reads both from their
    modules on every call), then put back."""
    saved = decisions.allow_decision, observers.new_call_event
    decisions.allow_decision, observers.new_call_event = allow, event  # type: ignore[misc]
    try:
        yield
    finally:
        decisions.allow_decision, observers.new_call_event = saved  # type: ignore[misc]


def slotted_twins(turns: Sequence[Sequence[ScriptedCall]]) -> dict[str, Any]:
    """Per-call µs of the guard alone with the twins and with the classes' own constructors (median
    of the rounds), the share the twins save, and whether that pays."""
    variants = {
        "with": (decisions.allow_decision, observers.new_call_event),
        "without": (decisions.plain_allow_decision, CallEvent),
    }
    guards = {name: guard_alone() for name in variants}
    per_call: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for index, turn in enumerate(turns):
        for offset in range(len(names)):
            name = names[(index + offset) % len(names)]
            if index % TURNS_PER_SESSION == 0:
                guards[name] = guard_alone()
            with _constructors(*variants[name]):
                start = time.perf_counter_ns()
                run_turn(guards[name], turn)
                elapsed = time.perf_counter_ns() - start
            if index >= _WARMUP_TURNS and turn:
                per_call[name].append(elapsed / len(turn))
    if not per_call["with"]:
        return {"with_us": None, "without_us": None, "saving": None, "pays": None}
    with_ns, without_ns = (percentile(per_call[name], 0.5) for name in ("with", "without"))
    saving = (without_ns - with_ns) / without_ns if without_ns else 0.0
    return {
        "with_us": round(with_ns / 1000.0, 3),
        "without_us": round(without_ns / 1000.0, 3),
        "saving": round(saving, 3),
        "pays": saving >= PAYS,
    }
