"""otelguard: stop LLM agents from looping on tool calls, and make every decision observable."""

from otelguard._version import __version__
from otelguard.config import GuardConfig, TelemetrySettings
from otelguard.decisions import Decision, Signature, TurnSummary
from otelguard.errors import ConfigError, OtelGuardError
from otelguard.guard import Guard
from otelguard.observers import CallEvent, GuardObserver, TurnInfo
from otelguard.tool_calls import GuardedCall

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
    "TelemetrySettings",
    "TurnInfo",
    "TurnSummary",
    "__version__",
]
