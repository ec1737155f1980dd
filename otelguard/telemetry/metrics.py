"""Prometheus metric families (docs/telemetry.md), bounded label values and the bounded signature series.

Families are created once per registry and shared by every ``Telemetry`` that uses the registry,
so creating two ``Telemetry()`` objects on the default registry does not register the names twice.
Label bounds and the cache of metric children live in a ``LabelSpace``, one per ``Telemetry`` (and
per ``max_tool_values``). The hot path is a tuple, a dict lookup and an ``inc``.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from otelguard._version import __version__
from otelguard.telemetry import attributes as attr

__all__ = ["LabelBound", "LabelSpace", "MetricFamilies", "families_for"]

Exemplar = dict[str, str] | None
SignatureLabels = tuple[str, str, str, str]


class SignatureSeries:
    """``otelguard_loop_signature_hits_total`` with at most ``limit`` series per registry.

    Kept per registry, not per ``Telemetry``, so the bound holds for the whole process; when a hit
    would exceed the bound, the least recently hit series is removed from the family.
    """

    def __init__(self, counter: Counter) -> None:
        self._counter = counter
        self._series: OrderedDict[SignatureLabels, Any] = OrderedDict()
        self._lock = threading.Lock()

    def hit(self, labels: SignatureLabels, limit: int, exemplar: Exemplar) -> None:
        with self._lock:
            child = self._series.get(labels)
            if child is None:
                child = self._counter.labels(*labels)
                self._series[labels] = child
                while len(self._series) > limit:
                    evicted, _ = self._series.popitem(last=False)
                    self._counter.remove(*evicted)
            else:
                self._series.move_to_end(labels)
            # inside the lock: an increment must never land on a child that was just removed
            child.inc(1, exemplar)

    def __len__(self) -> int:
        return len(self._series)


class MetricFamilies:
    """Every otelguard metric family on one registry (one owner per metric name)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.tool_calls = Counter(
            attr.TOOL_CALLS, "Guarded tool calls by outcome.", ("agent", "tool", "outcome"), registry=registry
        )
        self.decisions = Counter(
            attr.DECISIONS,
            "Non-allow guard decisions by action and code.",
            ("agent", "tool", "action", "code"),
            registry=registry,
        )
        self.turns = Counter(attr.TURNS, "Agent turns by outcome.", ("agent", "outcome"), registry=registry)
        self.cap_hits = Counter(
            attr.CAP_HITS,
            "Calls refused by a per-turn or per-session cap.",
            ("agent", "cap", "scope"),
            registry=registry,
        )
        self.subagent_spawns = Counter(
            attr.SUBAGENT_SPAWNS, "Subagents spawned by calls that ran.", ("agent",), registry=registry
        )
        self.turn_tool_calls = Histogram(
            attr.TURN_TOOL_CALLS_HISTOGRAM,
            "Tool calls per turn.",
            ("agent",),
            buckets=attr.TURN_TOOL_CALLS_BUCKETS,
            registry=registry,
        )
        self.turn_cap_usage_ratio = Histogram(
            attr.TURN_CAP_USAGE_RATIO,
            "Highest used/limit of each turn cap reached in a turn.",
            ("agent", "cap"),
            buckets=attr.CAP_USAGE_BUCKETS,
            registry=registry,
        )
        self.loop_signature_hits = Counter(
            attr.LOOP_SIGNATURE_HITS,
            "Loop-detector decisions by call signature (bounded; least recently hit series removed first).",
            ("agent", "tool", "code", "signature"),
            registry=registry,
        )
        self.internal_errors = Counter(
            attr.INTERNAL_ERRORS,
            "Internal guard errors (the call was allowed).",
            ("stage",),
            registry=registry,
        )
        # "max" keeps the gauge free of a pid label when PROMETHEUS_MULTIPROC_DIR is set
        self.build_info = Gauge(
            attr.BUILD_INFO,
            "otelguard build information.",
            ("version",),
            registry=registry,
            multiprocess_mode="max",
        )
        self.build_info.labels(__version__).set(1)
        self.internal_error_children = {stage: self.internal_errors.labels(stage) for stage in attr.STAGES}
        self.signatures = SignatureSeries(self.loop_signature_hits)

    def internal_error(self, stage: str) -> None:
        child = self.internal_error_children.get(stage)
        if child is None:  # a stage name the guard added later: still a code constant, never raw data
            child = self.internal_errors.labels(stage)
        child.inc()


_FAMILIES: Final[weakref.WeakKeyDictionary[CollectorRegistry, MetricFamilies]] = weakref.WeakKeyDictionary()
_FAMILIES_LOCK: Final = threading.Lock()


def families_for(registry: CollectorRegistry) -> MetricFamilies:
    """The registry's otelguard families, registering them on first use."""
    with _FAMILIES_LOCK:
        families = _FAMILIES.get(registry)
        if families is None:
            try:
                families = MetricFamilies(registry)
            except ValueError as exc:  # prometheus_client's "Duplicated timeseries"
                raise ValueError(
                    f"the registry already holds otelguard metric names registered outside otelguard ({exc})"
                ) from exc
            _FAMILIES[registry] = families
        return families


MAX_LABEL_LENGTH: Final = 128


class LabelBound:
    """Maps raw label values to themselves for the first ``limit`` distinct values, then to ``_other``.
    A value longer than ``MAX_LABEL_LENGTH`` characters is ``_other`` from the start."""

    __slots__ = ("_known", "_limit", "_lock")

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._known: dict[str, str] = {}
        self._lock = threading.Lock()

    def __call__(self, value: str) -> str:
        label = self._known.get(value)
        if label is not None:
            return label
        with self._lock:
            label = self._known.get(value)
            if label is not None:
                return label
            if len(self._known) < self._limit and len(value) <= MAX_LABEL_LENGTH:
                self._known[value] = value
                return value
        return attr.OTHER

    def __len__(self) -> int:
        return len(self._known)


class LabelSpace:
    """Bounded label values and cached metric children for one ``Telemetry`` and bound.

    Children are cached by the raw values only while both are within their bound (they map to
    themselves), so the caches stay as bounded as the label values.
    """

    def __init__(self, families: MetricFamilies, limit: int) -> None:
        self.families = families
        self.agent = LabelBound(limit)
        self.tool = LabelBound(limit)
        self.cap = LabelBound(limit)
        self._tool_calls: dict[tuple[str, str, str], Any] = {}
        self._decisions: dict[tuple[str, str, str, str], Any] = {}
        self._by_agent: dict[tuple[str, ...], Any] = {}

    def tool_calls(self, agent: str, tool: str, outcome: str) -> Any:
        key = (agent, tool, outcome)
        child = self._tool_calls.get(key)
        if child is None:
            agent_label, tool_label = self.agent(agent), self.tool(tool)
            child = self.families.tool_calls.labels(agent_label, tool_label, outcome)
            if agent_label == agent and tool_label == tool:
                self._tool_calls[key] = child
        return child

    def decisions(self, agent: str, tool: str, action: str, code: str) -> Any:
        key = (agent, tool, action, code)
        child = self._decisions.get(key)
        if child is None:
            agent_label, tool_label = self.agent(agent), self.tool(tool)
            child = self.families.decisions.labels(agent_label, tool_label, action, code)
            if agent_label == agent and tool_label == tool:
                self._decisions[key] = child
        return child

    def per_agent(self, family: str, agent: str) -> Any:
        """Child of a family labelled by ``agent`` only (``subagent_spawns``, ``turn_tool_calls``)."""
        key = (family, agent)
        child = self._by_agent.get(key)
        if child is None:
            agent_label = self.agent(agent)
            child = getattr(self.families, family).labels(agent_label)
            if agent_label == agent:
                self._by_agent[key] = child
        return child

    def turns(self, agent: str, outcome: str) -> Any:
        return self._cached("turns", agent, outcome, self.families.turns, (self.agent, None))

    def cap_hits(self, agent: str, cap: str, scope: str) -> Any:
        return self._cached("cap_hits", agent, cap, self.families.cap_hits, (self.agent, self.cap), scope)

    def cap_usage(self, agent: str, cap: str) -> Any:
        return self._cached(
            "cap_usage", agent, cap, self.families.turn_cap_usage_ratio, (self.agent, self.cap)
        )

    def _cached(
        self, family: str, first: str, second: str, metric: Any, bounds: tuple[Any, Any], *rest: str
    ) -> Any:
        """A child labelled by two bounded values (plus fixed ones), cached while both are in bounds."""
        key = (family, first, second, *rest)
        child = self._by_agent.get(key)
        if child is None:
            first_bound, second_bound = bounds
            first_label = first_bound(first)
            second_label = second_bound(second) if second_bound is not None else second
            child = metric.labels(first_label, second_label, *rest)
            if first_label == first and second_label == second:
                self._by_agent[key] = child
        return child

    def signature_hit(
        self, agent: str, tool: str, code: str, args_hash: str, limit: int, exemplar: Exemplar
    ) -> None:
        labels = (self.agent(agent), self.tool(tool), code, args_hash)
        self.families.signatures.hit(labels, limit, exemplar)
