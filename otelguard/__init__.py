"""otelguard: stop LLM agents from looping on tool calls, and make every decision observable."""

import typing as _typing

from otelguard._version import __version__
from otelguard.config import GuardConfig, TelemetrySettings
from otelguard.decisions import Decision, Signature, TurnSummary
from otelguard.errors import ConfigError, OtelGuardError
from otelguard.guard import Guard
from otelguard.observers import CallEvent, GuardObserver, TurnInfo
from otelguard.tool_calls import GuardedCall

if _typing.TYPE_CHECKING:
    from otelguard.exporter import serve_metrics
    from otelguard.telemetry import Telemetry

__all__ = [
    "CallEvent",
    "ConfigError",
    "Decision",
    "Guard",
    "GuardConfig",
    "GuardObserver",
    "GuardedCall",
    "OtelGuardError",
    "Signature",
    "Telemetry",
    "TelemetrySettings",
    "TurnInfo",
    "TurnSummary",
    "__version__",
    "serve_metrics",
]


def __getattr__(name: str) -> object:
    # Telemetry and serve_metrics load OpenTelemetry and prometheus_client: only when asked for.
    if name == "serve_metrics":
        from otelguard.exporter import serve_metrics

        return serve_metrics
    if name == "Telemetry":
        from otelguard.telemetry import Telemetry

        return Telemetry
    raise AttributeError(f"module 'otelguard' has no attribute {name!r}")
