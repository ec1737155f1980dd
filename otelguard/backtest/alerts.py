"""When an alert would have fired: Prometheus's alerting state machine over a range query's answer.

At each evaluation an alert's ``expr`` returns some label sets. A label set that appears becomes
*pending* at that evaluation; it *fires* at the first evaluation at least ``for`` after it became
pending, and *resolves* at the first evaluation that no longer returns it (or, with
``keep_firing_for``, the first one that long after it stopped being returned). A pending label set
that disappears before firing never fired. The alert's labels are the label set without
``__name__``, plus the rule's own labels and ``alertname``, as Prometheus builds them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from otelguard.backtest.rules import AlertRule

__all__ = ["MATCHED_LABELS", "FiredInterval", "Mark", "firing_intervals", "longest_hold"]

MAX_LISTED_MARKS: Final = 50
"""Halts and cap hits listed per interval (the earliest); the rest are counted."""
MATCHED_LABELS: Final = ("agent", "tool", "code", "cap", "scope")
"""Labels a halt or cap hit must share with an alert to be listed under it (``_other`` matches any)."""
_OTHER: Final = "_other"


@dataclass(slots=True)
class Mark:
    """A halt or a cap hit of the replay, at its transcript time."""

    time: float
    kind: str
    """``halt`` or ``cap_hit``."""
    fields: dict[str, Any]
    """``session_id``, ``path``, ``call_id``, ``agent``, ``tool``, ``action``, ``code`` and, for cap
    hits and cap halts, ``cap`` and ``scope``."""


@dataclass(slots=True)
class FiredInterval:
    alert: str
    labels: dict[str, str]
    pending_since: float
    start: float
    end: float
    resolved: bool
    halts: list[Mark] = field(default_factory=list)
    halts_total: int = 0
    cap_hits: list[Mark] = field(default_factory=list)
    cap_hits_total: int = 0

    def covers(self, mark: Mark) -> bool:
        if not self.start <= mark.time <= self.end:
            return False
        for name in MATCHED_LABELS:
            wanted = self.labels.get(name)
            if wanted is not None and wanted != _OTHER and mark.fields.get(name) != wanted:
                return False
        return True

    def add(self, mark: Mark) -> None:
        if mark.kind == "halt":
            self.halts_total += 1
            if len(self.halts) < MAX_LISTED_MARKS:
                self.halts.append(mark)
        else:
            self.cap_hits_total += 1
            if len(self.cap_hits) < MAX_LISTED_MARKS:
                self.cap_hits.append(mark)


def firing_intervals(
    rule: AlertRule,
    series: Iterable[tuple[dict[str, str], list[tuple[float, float]]]],
    evaluations: list[float],
    period_end: float,
) -> list[FiredInterval]:
    """Every interval during which ``rule`` would have fired, oldest first. ``series`` is the answer
    of ``rule.expr`` at ``evaluations`` (a range query at the group's interval)."""
    position = _positions(evaluations)
    found: list[FiredInterval] = []
    for labels, points in series:
        present = _present(points, position)
        alert_labels = {k: v for k, v in labels.items() if k != "__name__"}
        alert_labels.update(rule.labels)
        alert_labels["alertname"] = rule.name
        for pending, fired, ended, resolved in _states(rule, present, evaluations, period_end):
            found.append(FiredInterval(rule.name, dict(alert_labels), pending, fired, ended, resolved))
    found.sort(key=lambda interval: (interval.start, sorted(interval.labels.items())))
    return found


def longest_hold(
    series: Iterable[tuple[dict[str, str], list[tuple[float, float]]]], evaluations: list[float]
) -> float | None:
    """The longest an alert's expression held without a break, over every label set: from the first
    to the last of consecutive evaluations that returned it (0 for a single one). An alert fires
    once this reaches its ``for:``. ``None`` when the expression never returned anything."""
    position = _positions(evaluations)
    longest: float | None = None
    for _labels, points in series:
        first = previous = -2
        for index in _present(points, position):
            if index != previous + 1:  # a break: the hold starts over
                first = index
            previous = index
            held = evaluations[index] - evaluations[first]
            longest = held if longest is None else max(longest, held)
    return longest


def _positions(evaluations: list[float]) -> dict[int, int]:
    """Evaluation time (whole milliseconds) -> its index."""
    return {round(t * 1000): index for index, t in enumerate(evaluations)}


def _present(points: list[tuple[float, float]], position: dict[int, int]) -> list[int]:
    """The indexes of the evaluations at which a label set was returned, ascending."""
    return sorted({position[key] for t, _value in points if (key := round(t * 1000)) in position})


def _states(
    rule: AlertRule, present: list[int], evaluations: list[float], period_end: float
) -> Iterator[tuple[float, float, float, bool]]:
    """``(pending since, fired at, ended at, resolved)`` for one label set present at the
    evaluations ``present`` (indexes, ascending)."""
    pending: float | None = None
    fired: float | None = None
    missing_since: float | None = None
    following = iter(present)
    upcoming = next(following, None)
    for index, now in enumerate(evaluations):
        if index == upcoming:
            upcoming = next(following, None)
            pending = now if pending is None else pending
            missing_since = None
            if fired is None and now - pending >= rule.hold:
                fired = now
            continue
        if pending is None:
            if upcoming is None:
                return
            continue
        missing_since = now if missing_since is None else missing_since
        if fired is not None and now - missing_since < rule.keep_firing_for:
            continue  # keep_firing_for: still firing for that long after the expr stopped
        if fired is not None:
            yield pending, fired, now, True
        pending = fired = missing_since = None
        if upcoming is None:
            return
    if fired is not None and pending is not None:
        yield pending, fired, period_end, False
