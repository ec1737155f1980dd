"""Counter families whose series cost one C call per increment, exposed as prometheus_client's.

A ``prometheus_client.Counter`` child takes about six Python calls and a lock per ``inc``, and a
whole ``Counter`` object per new series; the counters a guard bumps on every call (tool calls,
decisions, cap hits, looping signatures) are kept here instead, as ``Tally`` series, and turned into
metric families only when the registry is collected. The exposition is prometheus_client's own for
the same increments: the same names, help, labels, ``_total`` and ``_created`` samples, in the order
the series were created, with the same exemplars.

With ``PROMETHEUS_MULTIPROC_DIR`` the values must go to prometheus_client's per-process files, so
``counter_family`` hands out a family backed by a real ``Counter`` then (``CounterChildren``); it
does the same on a Python without the GIL, where a ``Tally`` increment would not be atomic.
"""

from __future__ import annotations

import itertools
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import Final, Protocol

from opentelemetry.trace import SpanContext
from prometheus_client import CollectorRegistry, Counter
from prometheus_client import metrics as _prometheus_metrics
from prometheus_client import values as _prometheus_values
from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Exemplar as PrometheusExemplar

__all__ = [
    "TALLIES",
    "CounterChildren",
    "CounterFamily",
    "Exemplar",
    "Series",
    "Tally",
    "counter_family",
    "exemplar_labels",
]

Exemplar = SpanContext | None
"""What an increment's exemplar is made of: the recording span's context (formatted at scrape)."""

_COUNT_REPR_PREFIX: Final = len("count(")


def _gil_enabled() -> bool:
    check: Callable[[], bool] | None = getattr(sys, "_is_gil_enabled", None)
    return True if check is None else check()


TALLIES: Final = _prometheus_values.ValueClass is _prometheus_values.MutexValue and _gil_enabled()
"""Whether counters are kept as tallies: prometheus_client keeps its values in the process (no
``PROMETHEUS_MULTIPROC_DIR``) and ``next()`` on an ``itertools.count`` is atomic (the GIL)."""


def exemplar_labels(exemplar: Exemplar) -> dict[str, str] | None:
    """The exemplar's labels as exported: ``trace_id`` and ``span_id`` in hex."""
    return None if exemplar is None else _span_ids(exemplar)


def _span_ids(context: SpanContext) -> dict[str, str]:
    return {"trace_id": format(context.trace_id, "032x"), "span_id": format(context.span_id, "016x")}


class Series(Protocol):
    """One labelled series of a counter family, as ``LabelSpace`` hands it out."""

    add: Callable[[], object]
    """Count one (the hot path: a bound C method for a ``Tally``)."""

    def inc(self, amount: float = 1, exemplar: Exemplar = None) -> None: ...


class Tally:
    """A series counted by an ``itertools.count``: ``add()`` is a single C call, atomic under the
    GIL, so threads need no lock to count; the value is read back (from the count's repr, the only
    way ``itertools.count`` gives it) only at scrape time."""

    __slots__ = ("_count", "add", "created", "exemplar")

    def __init__(self) -> None:
        self._count = itertools.count()
        self.add: Callable[[], object] = self._count.__next__
        self.created = time.time()
        self.exemplar: tuple[SpanContext, float] | None = None
        """The last exemplar's span context and when it was counted (one tuple: set atomically)."""

    def inc(self, amount: float = 1, exemplar: Exemplar = None) -> None:
        """Count one, with an exemplar when a span was recording."""
        if amount != 1:
            raise ValueError("a tally counts one at a time")
        self.add()
        if exemplar is not None:
            self.exemplar = (exemplar, time.time())

    @property
    def value(self) -> int:
        return int(repr(self._count)[_COUNT_REPR_PREFIX:-1])


class CounterFamily:
    """A counter family of ``Tally`` series; a collector on its registry, like a ``Counter``.

    ``name`` is given without ``_total`` (as to ``Counter``). Label values are the caller's, already
    bounded and valid: the family stores them as given.
    """

    def __init__(
        self, name: str, documentation: str, labelnames: tuple[str, ...], registry: CollectorRegistry
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = labelnames
        self._series: dict[tuple[str, ...], Tally] = {}
        self._lock = threading.Lock()
        registry.register(self)

    def labels(self, *values: str) -> Tally:
        """The series for these label values, created at 0 on first use."""
        tally = self._series.get(values)
        if tally is None:
            with self._lock:
                tally = self._series.get(values)
                if tally is None:
                    tally = self._series[values] = Tally()
        return tally

    def remove(self, *values: str) -> None:
        with self._lock:
            self._series.pop(values, None)

    def describe(self) -> list[Metric]:
        return [Metric(self.name, self.documentation, "counter")]

    def collect(self) -> list[Metric]:
        """The family as ``Counter.collect`` builds it: per series ``_total`` (with its exemplar)
        then ``_created``, in the order the series were created."""
        metric = Metric(self.name, self.documentation, "counter")
        with self._lock:
            series = list(self._series.items())
        total, created = self.name + "_total", self.name + "_created"
        with_created = getattr(_prometheus_metrics, "_use_created", True)  # disable_created_metrics()
        names = self.labelnames
        for values, tally in series:
            labels = dict(zip(names, values, strict=True))
            exemplar = None
            if tally.exemplar is not None:
                context, when = tally.exemplar
                exemplar = PrometheusExemplar(_span_ids(context), 1, when)
            metric.add_sample(total, labels, float(tally.value), None, exemplar)
            if with_created:
                metric.add_sample(created, dict(labels), tally.created)
        return [metric]


class _CounterChild:
    """A ``Counter`` child as a ``Series``."""

    __slots__ = ("_child", "add")

    def __init__(self, child: Counter) -> None:
        self._child = child
        self.add: Callable[[], object] = child.inc

    def inc(self, amount: float = 1, exemplar: Exemplar = None) -> None:
        self._child.inc(amount, exemplar_labels(exemplar))


class CounterChildren:
    """The same family backed by a real ``Counter`` (multi-process mode, or no GIL)."""

    def __init__(
        self, name: str, documentation: str, labelnames: tuple[str, ...], registry: CollectorRegistry
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = labelnames
        self.counter = Counter(name, documentation, labelnames, registry=registry)

    def labels(self, *values: str) -> _CounterChild:
        return _CounterChild(self.counter.labels(*values))

    def remove(self, *values: str) -> None:
        self.counter.remove(*values)

    def describe(self) -> Iterable[Metric]:
        return self.counter.describe()

    def collect(self) -> Iterable[Metric]:
        return self.counter.collect()


def counter_family(
    name: str, documentation: str, labelnames: tuple[str, ...], registry: CollectorRegistry
) -> CounterFamily | CounterChildren:
    """A counter family on ``registry``: of tallies when ``TALLIES``, else of ``Counter`` children."""
    family = CounterFamily if TALLIES else CounterChildren
    return family(name, documentation, labelnames, registry)
