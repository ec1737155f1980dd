"""The backtest's answer: per alert, the intervals it would have fired, and what else the user must
know (the recorded period, sessions without timestamps, the replay's input errors).

Like the replay report it holds tool names, codes, labels, counts, call ids, session ids and paths:
never argument values, results or error texts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from otelguard.backtest.alerts import FiredInterval, Mark
from otelguard.backtest.rules import AlertRule
from otelguard.readers.events import SessionKey
from otelguard.readers.times import format_duration, iso_utc
from otelguard.replay.report import ReplayReport

__all__ = ["AlertOutcome", "BacktestReport"]


@dataclass(slots=True)
class AlertOutcome:
    rule: AlertRule
    intervals: list[FiredInterval] = field(default_factory=list)
    longest_hold: float | None = None
    """The longest its expression held without a break (``None``: it never held)."""

    @property
    def fired(self) -> bool:
        return bool(self.intervals)

    def why_quiet(self) -> str:
        """Why a quiet alert did not fire: its ``for:`` against how long its condition held."""
        hold = format_duration(self.rule.hold)
        if self.longest_hold is None:
            return f"its condition never held (for: {hold})"
        return f"its condition held {format_duration(self.longest_hold)} at most, short of its for: {hold}"

    def to_json(self) -> dict[str, Any]:
        rule = self.rule
        doc: dict[str, Any] = {
            "alert": rule.name,
            "group": rule.group,
            "for": format_duration(rule.hold),
            "evaluation_interval": format_duration(rule.interval),
            "labels": dict(rule.labels),
            "fired": self.fired,
            "longest_hold": None if self.longest_hold is None else format_duration(self.longest_hold),
            "intervals": [_interval_json(i) for i in self.intervals],
        }
        if not self.fired:
            doc["why_quiet"] = self.why_quiet()
        if rule.keep_firing_for:
            doc["keep_firing_for"] = format_duration(rule.keep_firing_for)
        return doc


@dataclass(slots=True)
class BacktestReport:
    replay: ReplayReport
    rules_path: str
    scrape_interval: float
    alerts: list[AlertOutcome] = field(default_factory=list)
    period_start: float | None = None
    period_end: float | None = None
    untimed_sessions: list[SessionKey] = field(default_factory=list)
    untimed_sessions_total: int = 0
    untimed_events: int = 0
    outside_events: int = 0
    series: int = 0
    samples: int = 0
    blocks: int = 0

    @property
    def fired(self) -> list[AlertOutcome]:
        return [alert for alert in self.alerts if alert.fired]

    @property
    def quiet(self) -> list[AlertOutcome]:
        return [alert for alert in self.alerts if not alert.fired]

    def to_json(self) -> dict[str, Any]:
        period = None
        if self.period_start is not None and self.period_end is not None:
            period = {"start": iso_utc(self.period_start), "end": iso_utc(self.period_end)}
        totals = self.replay.totals()
        doc: dict[str, Any] = {
            "period": period,
            "scrape_interval": format_duration(self.scrape_interval),
            "rules": self.rules_path,
            "alerts": [alert.to_json() for alert in self.alerts],
            "fired": [alert.rule.name for alert in self.fired],
            "quiet": [alert.rule.name for alert in self.quiet],
            "sessions_without_timestamps": [
                {"path": key.path, "session_id": key.session_id} for key in self.untimed_sessions
            ],
            "sessions_without_timestamps_total": self.untimed_sessions_total,
            "events_without_timestamps": self.untimed_events,
            "events_outside_since_until": self.outside_events,
            "samples": {"series": self.series, "samples": self.samples, "blocks": self.blocks},
            "replay": {
                "inputs": [
                    {"path": i.path, "format": i.format, "sessions": i.sessions, "errors": i.errors}
                    for i in self.replay.inputs.values()
                ],
                "totals": totals,
                "errors": [{"path": e.path, "line": e.line, "reason": e.reason} for e in self.replay.errors],
            },
        }
        return doc


def _interval_json(interval: FiredInterval) -> dict[str, Any]:
    return {
        "labels": dict(sorted(interval.labels.items())),
        "pending_since": iso_utc(interval.pending_since),
        "start": iso_utc(interval.start),
        "end": iso_utc(interval.end),
        "resolved": interval.resolved,
        "halts": [mark_json(m) for m in interval.halts],
        "halts_total": interval.halts_total,
        "cap_hits": [mark_json(m) for m in interval.cap_hits],
        "cap_hits_total": interval.cap_hits_total,
    }


def mark_json(mark: Mark) -> dict[str, Any]:
    return {"time": iso_utc(mark.time), **mark.fields}
