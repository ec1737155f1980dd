"""Prometheus metric families (docs/telemetry.md), bounded label values and the bounded signature series.

Families are created once per registry and shared by every ``Telemetry`` that uses the registry,
so creating two ``Telemetry()`` objects on the default registry does not register the names twice.
Label bounds and the cache of metric children live in a ``LabelSpace``, one per ``Telemetry`` (and
per ``max_tool_values``). The counters bumped on every call are ``tallies`` (one C call per
increment); the hot path is a tuple, a dict lookup and that call.
"""

from __future__ import annotations

import re
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, cast

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from otelguard._version import __version__
from otelguard.core.bounded_map import BoundedMap
from otelguard.core.signatures import MAX_NAME_CHARS, bounded_name
from otelguard.telemetry import attributes as attr
from otelguard.telemetry.tallies import CounterChildren, CounterFamily, Exemplar, Series, counter_family

if TYPE_CHECKING:
    from otelguard.state.reports import StateReport

__all__ = [
    "LabelBound",
    "LabelSpace",
    "MetricFamilies",
    "SeriesBound",
    "StateFamilies",
    "families_for",
    "valid_utf8",
]

SignatureLabels = tuple[str, str, str, str]


class SignatureSeries:
    """``otelguard_loop_signature_hits_total`` with at most ``limit`` series per registry.

    Kept per registry, not per ``Telemetry``, so the bound holds for the whole process; when a hit
    would exceed the bound, the least recently hit series is removed from the family.
    """

    def __init__(self, counter: CounterFamily | CounterChildren) -> None:
        self._counter = counter
        self._series: BoundedMap[SignatureLabels, Series] = BoundedMap(1, self._remove)
        self._lock = threading.Lock()

    def hit(self, labels: SignatureLabels, limit: int, exemplar: Exemplar) -> None:
        with self._lock:
            series = self._series
            child = series.use(labels)
            if child is None:
                child = self._counter.labels(*labels)
                series.max_size = limit  # each Telemetry's own bound, on the registry's one family
                series.put(labels, child)
            # inside the lock: an increment must never land on a child that was just removed
            child.inc(1, exemplar)

    def _remove(self, labels: SignatureLabels, _child: object) -> None:
        self._counter.remove(*labels)

    def __len__(self) -> int:
        return len(self._series)


def _build_info(registry: CollectorRegistry) -> Gauge:
    """``otelguard_build_info``, at 1 for this process's otelguard version."""
    # "max" keeps the gauge free of a pid label when PROMETHEUS_MULTIPROC_DIR is set
    gauge = Gauge(
        attr.BUILD_INFO,
        "otelguard build information.",
        (attr.LABEL_VERSION,),
        registry=registry,
        multiprocess_mode="max",
    )
    gauge.labels(__version__).set(1)
    return gauge


class StateFamilies:
    """The shared-state families: registered on a registry only once a store is in use, so a process
    without ``state.url`` exports none of them."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.errors = Counter(
            attr.STATE_ERRORS,
            "Failed commands to the shared session-cap store (Redis), by operation.",
            (attr.LABEL_OP,),
            registry=registry,
        )
        self.error_children = {op: self.errors.labels(op) for op in attr.STATE_OPS}
        self.fallback = Counter(
            attr.STATE_FALLBACKS,
            "Tool calls whose session caps were decided from the process's own counts, without the shared store.",
            registry=registry,
        )
        # "livemin": with PROMETHEUS_MULTIPROC_DIR, 0 as long as one live worker cannot reach the store
        self.up = Gauge(
            attr.STATE_UP,
            "1 when the last command to the shared session-cap store succeeded, 0 when it failed.",
            registry=registry,
            multiprocess_mode="livemin",
        )

    def record(self, report: StateReport) -> None:
        if report.error is not None:
            self.error_children[report.error].inc()
        if report.sent:  # an error about one key came from a store that answered: still up
            self.up.set(0 if report.error is not None and not report.key_error else 1)
        if report.fell_back:
            self.fallback.inc()


class MetricFamilies:
    """Every otelguard metric family on one registry (one owner per metric name)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry
        self._state: StateFamilies | None = None
        # the families bumped on every call or decision are tallies (see otelguard.telemetry.tallies)
        self.tool_calls = counter_family(
            attr.TOOL_CALLS,
            "Guarded tool calls by outcome.",
            (attr.LABEL_AGENT, attr.LABEL_TOOL, attr.LABEL_OUTCOME),
            registry,
        )
        self.decisions = counter_family(
            attr.DECISIONS,
            "Non-allow guard decisions by action and code.",
            (attr.LABEL_AGENT, attr.LABEL_TOOL, attr.LABEL_ACTION, attr.LABEL_CODE),
            registry,
        )
        self.turns = Counter(
            attr.TURNS, "Agent turns by outcome.", (attr.LABEL_AGENT, attr.LABEL_OUTCOME), registry=registry
        )
        self.cap_hits = counter_family(
            attr.CAP_HITS,
            "Calls refused by a per-turn or per-session cap.",
            (attr.LABEL_AGENT, attr.LABEL_CAP, attr.LABEL_SCOPE),
            registry,
        )
        self.subagent_spawns = Counter(
            attr.SUBAGENT_SPAWNS,
            "Subagents spawned by calls that ran.",
            (attr.LABEL_AGENT,),
            registry=registry,
        )
        self.turn_tool_calls = Histogram(
            attr.TURN_TOOL_CALLS_HISTOGRAM,
            "Tool calls per turn.",
            (attr.LABEL_AGENT,),
            buckets=attr.TURN_TOOL_CALLS_BUCKETS,
            registry=registry,
        )
        self.turn_cap_usage_ratio = Histogram(
            attr.TURN_CAP_USAGE_RATIO,
            "Highest used/limit of each turn cap reached in a turn.",
            (attr.LABEL_AGENT, attr.LABEL_CAP),
            buckets=attr.CAP_USAGE_BUCKETS,
            registry=registry,
        )
        self.loop_signature_hits = counter_family(
            attr.LOOP_SIGNATURE_HITS,
            "Loop-detector decisions by call signature (bounded; least recently hit series removed first).",
            (attr.LABEL_AGENT, attr.LABEL_TOOL, attr.LABEL_CODE, attr.LABEL_SIGNATURE),
            registry,
        )
        self.delegations = Counter(
            attr.DELEGATIONS,
            "Delegations by agents in a delegation tree (spawns and named handoffs), started or refused.",
            (attr.LABEL_AGENT, attr.LABEL_OUTCOME),
            registry=registry,
        )
        self.delegation_depth = Histogram(
            attr.DELEGATION_DEPTH_HISTOGRAM,
            "Depth of the agent each delegation starts (or would have started, when refused).",
            (attr.LABEL_AGENT,),
            buckets=attr.DELEGATION_DEPTH_BUCKETS,
            registry=registry,
        )
        self.model_calls = Counter(
            attr.MODEL_CALLS,
            "Model replies by what they asked for: valid tool calls, an invalid one only, or none.",
            (attr.LABEL_AGENT, attr.LABEL_OUTCOME),
            registry=registry,
        )
        self.model_tokens = Counter(
            attr.MODEL_TOKENS,
            "Tokens of model calls as the provider reported them, input and output.",
            (attr.LABEL_AGENT, attr.LABEL_KIND),
            registry=registry,
        )
        self.internal_errors = Counter(
            attr.INTERNAL_ERRORS,
            "Internal guard errors (the call was allowed).",
            (attr.LABEL_STAGE,),
            registry=registry,
        )
        self.build_info = _build_info(registry)
        self.internal_error_children = {stage: self.internal_errors.labels(stage) for stage in attr.STAGES}
        self.signatures = SignatureSeries(self.loop_signature_hits)
        self.series = {family: SeriesBound() for family in _BOUNDED_FAMILIES}

    def state(self) -> StateFamilies:
        """The shared-state families, registered on first use."""
        state = self._state
        if state is None:
            with _FAMILIES_LOCK:
                if self._state is None:
                    self._state = StateFamilies(self._registry)
                state = self._state
        return state

    def internal_error(self, stage: str) -> None:
        child = self.internal_error_children.get(stage)
        if child is None:  # a stage name the guard added later: still a code constant, never raw data
            child = self.internal_errors.labels(stage)
        child.inc()


_BOUNDED_FAMILIES: Final = (
    "tool_calls",
    "decisions",
    "turns",
    "cap_hits",
    "subagent_spawns",
    "turn_tool_calls",
    "turn_cap_usage_ratio",
    "delegations",
    "delegation_depth",
    "model_calls",
    "model_tokens",
)
"""Families labelled by host-chosen values; the signature family has its own (smaller) bound."""

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


_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def valid_utf8(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD. A model can emit one in a tool name
    (``json.loads('"\\udce9"')``); exported as is, it would make every scrape and every OTLP batch
    holding it fail to encode."""
    return text if text.isascii() else _SURROGATE.sub("\ufffd", text)


class LabelBound:
    """Maps raw label values to themselves (made valid UTF-8) for the first ``limit`` distinct values,
    then to ``_other``. A value is bounded in length as the guard bounds names where a call enters it
    (``bounded_name``: a no-op on the names the guard hands over), so a label and a span attribute
    show one same name."""

    __slots__ = ("_known", "_limit", "_lock")

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._known: dict[str, str] = {}
        self._lock = threading.Lock()

    def __call__(self, value: str) -> str:
        label = self._known.get(value)
        if label is not None:
            return label
        if len(value) > MAX_NAME_CHARS:
            value = bounded_name(value)
        with self._lock:
            label = self._known.get(value)
            if label is not None:
                return label
            if len(self._known) < self._limit:
                label = valid_utf8(value)
                self._known[value] = label
                return label
        return attr.OTHER

    def __len__(self) -> int:
        return len(self._known)


class SeriesBound:
    """At most ``limit`` label sets in one family, the ``_other`` ones included.

    Past the bound, a new label set has its host-chosen values (agent, tool, cap) replaced by
    ``_other`` and keeps its code-constant ones (outcome, action, code, scope), so counts are never
    lost. Room for those ``_other`` sets is kept aside as the constants they need are first seen, and
    one more slot for the set that is ``_other`` throughout: it takes a count whose ``_other`` set
    found no room (constants first seen once the family was full), so the bound holds exactly
    whatever the mix, down to a limit of 1.
    """

    __slots__ = ("_admitted", "_lock", "_owed")

    def __init__(self) -> None:
        self._admitted: set[tuple[str, ...]] = set()
        self._owed: set[tuple[str, ...]] = set()  # label sets promised a slot, not yet admitted
        self._lock = threading.Lock()

    def admit(self, labels: tuple[str, ...], host_chosen: int, limit: int) -> tuple[str, ...]:
        if labels in self._admitted:
            return labels
        other = (attr.OTHER,) * host_chosen + labels[host_chosen:]
        with self._lock:
            if labels in self._admitted:
                return labels
            owed = self._owed
            if not self._admitted and not owed:
                owed.add((attr.OTHER,) * len(labels))
            if labels != other:
                need = 1 if other in self._admitted or other in owed else 2
                if len(self._admitted) + len(owed) + need <= limit:
                    self._admitted.add(labels)
                    if other not in self._admitted:
                        owed.add(other)
                    return labels
            if other in self._admitted:
                return other
            if other not in owed and len(self._admitted) + len(owed) >= limit:
                other = (attr.OTHER,) * len(labels)  # its slot was kept from the start
            owed.discard(other)
            self._admitted.add(other)
            return other

    def __len__(self) -> int:
        return len(self._admitted)


class LabelSpace:
    """Bounded label values and cached metric children for one ``Telemetry`` and bound.

    Children are cached by the raw values only while every value is within its bound (they map to
    themselves), so the caches stay as bounded as the label values and the series per family.
    """

    def __init__(self, families: MetricFamilies, limit: int, max_series: int = 2000) -> None:
        self.families = families
        self.max_series = max_series
        self.agent = LabelBound(limit)
        self.tool = LabelBound(limit)
        self.cap = LabelBound(limit)
        self._children: dict[tuple[str, ...], Any] = {}
        self.call_counters: dict[tuple[str, str, str], Callable[[], object]] = {}
        """``(agent, tool, outcome)`` -> what counts one such call: the hot path is one lookup and
        one call (``count_call`` fills it)."""

    def count_call(self, agent: str, tool: str, outcome: str) -> None:
        """Count one call in ``otelguard_tool_calls_total`` (the lookup the observer does inline)."""
        key = (agent, tool, outcome)
        add = self.call_counters.get(key)
        if add is None:
            series: Series = self._child("tool_calls", (self.agent, self.tool), (agent, tool), (outcome,))
            add = series.add
            if ("tool_calls", *key) in self._children:  # cached: every value was within its bound
                self.call_counters[key] = add
        add()

    def tool_calls(self, agent: str, tool: str, outcome: str) -> Series:
        return cast("Series", self._child("tool_calls", (self.agent, self.tool), (agent, tool), (outcome,)))

    def decisions(self, agent: str, tool: str, action: str, code: str) -> Series:
        child = self._children.get(("decisions", agent, tool, action, code))
        if child is None:
            child = self._child("decisions", (self.agent, self.tool), (agent, tool), (action, code))
        return cast("Series", child)

    def per_agent(self, family: str, agent: str) -> Any:
        """Child of a family labelled by ``agent`` only (``subagent_spawns``, ``turn_tool_calls``)."""
        return self._child(family, (self.agent,), (agent,), ())

    def turns(self, agent: str, outcome: str) -> Any:
        return self._child("turns", (self.agent,), (agent,), (outcome,))

    def cap_hits(self, agent: str, cap: str, scope: str) -> Series:
        return cast("Series", self._child("cap_hits", (self.agent, self.cap), (agent, cap), (scope,)))

    def delegations(self, agent: str, outcome: str) -> Any:
        return self._child("delegations", (self.agent,), (agent,), (outcome,))

    def model_calls(self, agent: str, outcome: str) -> Any:
        return self._child("model_calls", (self.agent,), (agent,), (outcome,))

    def model_tokens(self, agent: str, kind: str) -> Any:
        return self._child("model_tokens", (self.agent,), (agent,), (kind,))

    def cap_usage(self, agent: str, cap: str) -> Any:
        return self._child("turn_cap_usage_ratio", (self.agent, self.cap), (agent, cap), ())

    def _child(
        self,
        family: str,
        bounds: tuple[LabelBound, ...],
        host_chosen: tuple[str, ...],
        constants: tuple[str, ...],
    ) -> Any:
        """The child for host-chosen values (each bounded by its ``LabelBound``) followed by code
        constants, within the family's series bound; cached while nothing was replaced."""
        key = (family, *host_chosen, *constants)
        child = self._children.get(key)
        if child is not None:
            return child
        bounded = tuple(bound(value) for bound, value in zip(bounds, host_chosen, strict=True))
        labels = self.families.series[family].admit((*bounded, *constants), len(bounded), self.max_series)
        child = getattr(self.families, family).labels(*labels)
        if labels == (*host_chosen, *constants):
            self._children[key] = child
        return child

    def signature_hit(
        self, agent: str, tool: str, code: str, args_hash: str, limit: int, exemplar: Exemplar
    ) -> None:
        labels = (self.agent(agent), self.tool(tool), code, args_hash)
        self.families.signatures.hit(labels, limit, exemplar)
