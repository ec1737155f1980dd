"""The hot-path tricks, each measured against its plain alternative on the path it sits on.

A trick keeps its place only while it pays: at least ``PAYS`` of the per-call cost of that path.
Each is timed with the trick and with its plain alternative side by side in one process, interleaved
turn by turn in a rotating order (as every bench timing is), on the path where it runs:

* ``allow_decision_twin``: the allow decision built on a slotted twin of ``Decision``
  (``otelguard.core.decisions.slotted_twin``) against the frozen dataclass's own constructor; the
  guard alone, where it is built on every allowed call.
* ``call_event_twin``: the call event built the same way (``observers.new_call_event``) against
  ``CallEvent``'s own constructor; the guard with metrics, the cheapest path that builds events.

The sidecar's request-head cache is measured with the sidecar (``otelguard bench --sidecar``,
``otelguard.bench.sidecar``), on real processes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final

from prometheus_client import CollectorRegistry

from otelguard.bench.measure import percentile
from otelguard.bench.runners import TURNS_PER_SESSION, guard_alone, metrics_guard, run_turn
from otelguard.core import decisions, observers
from otelguard.core.scripted import ScriptedCall
from otelguard.hosting import Guard

__all__ = ["PAYS", "TRICKS", "Trick", "measure_trick", "plain_alternatives"]

PAYS: Final = 0.05
"""The share of its path's per-call cost a trick must save to keep its place."""

_WARMUP_TURNS = 2

Swap = tuple[Any, str, Any]
"""(module, name, plain alternative): what the guard reads from that module on every call."""


class Trick:
    """One trick: the path it sits on (a guard factory) and its plain alternatives."""

    def __init__(self, path: str, guards: Callable[[], Callable[[], Guard]], plain: Callable[[], list[Swap]]):
        self.path = path
        self.guards = guards
        self.plain = plain


def _alone() -> Callable[[], Guard]:
    return guard_alone


def _with_metrics() -> Callable[[], Guard]:
    registry = CollectorRegistry()  # one per measurement, shared by its guards as a host's are
    return lambda: metrics_guard(registry)


TRICKS: Final[dict[str, Trick]] = {
    "allow_decision_twin": Trick(
        "guard_alone", _alone, lambda: [(decisions, "allow_decision", decisions.plain_allow_decision)]
    ),
    "call_event_twin": Trick(
        "guard_metrics", _with_metrics, lambda: [(observers, "new_call_event", observers.CallEvent)]
    ),
}


@contextmanager
def plain_alternatives(swaps: Sequence[Swap]) -> Iterator[None]:
    """The trick's module attributes replaced by their plain alternatives for the block, then put back."""
    saved = [(module, name, getattr(module, name)) for module, name, _ in swaps]
    for module, name, plain in swaps:
        setattr(module, name, plain)
    try:
        yield
    finally:
        for module, name, kept in saved:
            setattr(module, name, kept)


def measure_trick(trick: Trick, turns: Sequence[Sequence[ScriptedCall]]) -> dict[str, Any]:
    """Per-call µs of the trick's path with the trick and with its plain alternative (median of the
    rounds), the share the trick saves, and whether that pays."""
    make = trick.guards()
    swaps = trick.plain()
    guards = {"with": make(), "without": make()}
    per_call: dict[str, list[float]] = {name: [] for name in guards}
    names = list(guards)
    for index, turn in enumerate(turns):
        for offset in range(len(names)):
            name = names[(index + offset) % len(names)]
            if index % TURNS_PER_SESSION == 0:
                guards[name] = make()
            with plain_alternatives(swaps if name == "without" else ()):
                start = time.perf_counter_ns()
                run_turn(guards[name], turn)
                elapsed = time.perf_counter_ns() - start
            if index >= _WARMUP_TURNS and turn:
                per_call[name].append(elapsed / len(turn))
    figures: dict[str, Any] = {"path": trick.path}
    if not per_call["with"]:
        return {**figures, "with_us": None, "without_us": None, "saving": None, "pays": None}
    with_ns, without_ns = (percentile(per_call[name], 0.5) for name in ("with", "without"))
    saving = (without_ns - with_ns) / without_ns if without_ns else 0.0
    return {
        **figures,
        "with_us": round(with_ns / 1000.0, 3),
        "without_us": round(without_ns / 1000.0, 3),
        "saving": round(saving, 3),
        "pays": saving >= PAYS,
    }
