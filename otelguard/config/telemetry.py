"""The ``telemetry:`` section of the config (docs/telemetry.md): span mode, the bounds on labels
and series, and whether the OpenTelemetry metrics are on. ``Telemetry(...)`` keyword arguments override it."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Final

from otelguard.config.checks import Problems, as_mapping, boolean, choice, integer, unknown_keys

__all__ = ["SPAN_MODES", "TelemetrySettings"]

SPAN_MODES: Final = ("auto", "own", "event", "decisions", "off")


@dataclass(frozen=True, kw_only=True)
class TelemetrySettings:
    """The ``telemetry:`` section. ``Telemetry(...)`` keyword arguments override these."""

    span_mode: str = "auto"
    turn_spans: bool = False
    max_tool_values: int = 100
    max_signature_series: int = 200
    max_series_per_metric: int = 2000
    otel_metrics: bool = False
    """Also count through the OpenTelemetry Metrics API (docs/telemetry.md); off: nothing extra runs."""

    def __post_init__(self) -> None:
        problems = Problems()
        problems.attempt(choice, "telemetry.span_mode", self.span_mode, SPAN_MODES, fallback="")
        problems.attempt(boolean, "telemetry.turn_spans", self.turn_spans, fallback=False)
        problems.attempt(boolean, "telemetry.otel_metrics", self.otel_metrics, fallback=False)
        for name in ("max_tool_values", "max_signature_series", "max_series_per_metric"):
            problems.attempt(integer, f"telemetry.{name}", getattr(self, name), 1, fallback=1)
        problems.raise_any()

    @classmethod
    def parse(cls, value: Any, path: str = "telemetry") -> TelemetrySettings:
        if isinstance(value, TelemetrySettings):
            return value
        section = as_mapping(path, value)
        names = [f.name for f in fields(cls)]
        problems = Problems()
        problems.found += unknown_keys(path, section, names)
        known = {key: item for key, item in section.items() if key in names}
        settings = problems.attempt(cls, fallback=cls(), **known)
        problems.raise_any()
        return settings
