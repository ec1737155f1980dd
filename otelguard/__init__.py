"""otelguard: stop LLM agents from looping on tool calls, and make every decision observable.

Importing the package loads nothing but this file and the version: every name below is imported on
first use. The Claude Code hook command starts on every tool call and must not pay for the core,
OpenTelemetry or prometheus_client. ``Guard`` is the one of ``otelguard.hosting``: the core's guard
with the ``telemetry=`` conveniences resolved into what the core takes.
"""

from otelguard._version import __version__

# Not ``typing.TYPE_CHECKING``: importing typing (and the re and enum it pulls in) would be a third of
# the hook command's own startup time. Type checkers treat any constant of this name as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from otelguard.config import GuardConfig, TelemetrySettings
    from otelguard.core.decisions import Decision, Signature, TurnSummary
    from otelguard.core.observers import CallEvent, GuardObserver, TurnInfo
    from otelguard.core.tool_calls import GuardedCall
    from otelguard.errors import ConfigError, GuardHalted, OtelGuardError
    from otelguard.hosting import Guard
    from otelguard.serving.metrics_server import serve_metrics
    from otelguard.telemetry import Telemetry
del TYPE_CHECKING  # not part of the package's namespace


__all__ = [
    "CallEvent",
    "ConfigError",
    "Decision",
    "Guard",
    "GuardConfig",
    "GuardHalted",
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

_HOMES: dict[str, str] = {
    "CallEvent": "otelguard.core.observers",
    "ConfigError": "otelguard.errors",
    "Decision": "otelguard.core.decisions",
    "Guard": "otelguard.hosting",
    "GuardConfig": "otelguard.config",
    "GuardHalted": "otelguard.errors",
    "GuardObserver": "otelguard.core.observers",
    "GuardedCall": "otelguard.core.tool_calls",
    "OtelGuardError": "otelguard.errors",
    "Signature": "otelguard.core.decisions",
    "Telemetry": "otelguard.telemetry",
    "TelemetrySettings": "otelguard.config",
    "TurnInfo": "otelguard.core.observers",
    "TurnSummary": "otelguard.core.decisions",
    "serve_metrics": "otelguard.serving.metrics_server",
}


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'otelguard' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
