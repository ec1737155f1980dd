"""otelguard: stop LLM agents from looping on tool calls, and make every decision observable.

Importing the package loads nothing but this file and two leaves (the version and the registry of
defaults): every name below is imported on first use. The Claude Code hook command starts on every
tool call and must not pay for the core, OpenTelemetry or prometheus_client; a submodule import
always runs this file first, so the defaults below are registered before any guard is made.
"""

from otelguard._version import __version__
from otelguard.core import _resolvers

# Not ``typing.TYPE_CHECKING``: importing typing (and the re and enum it pulls in) would be a third of
# the hook command's own startup time. Type checkers treat any constant of this name as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from otelguard.config import GuardConfig, TelemetrySettings
    from otelguard.core.caps import SessionCapStore
    from otelguard.core.decisions import Decision, Signature, TurnSummary
    from otelguard.core.guard import Guard
    from otelguard.core.observers import CallEvent, GuardObserver, TurnInfo
    from otelguard.core.tool_calls import GuardedCall
    from otelguard.core.tree import DelegationTree
    from otelguard.errors import ConfigError, GuardHalted, OtelGuardError
    from otelguard.hosting import TelemetryOption
    from otelguard.serving.metrics_server import serve_metrics
    from otelguard.telemetry import Telemetry
del TYPE_CHECKING  # not part of the package's namespace


def _session_caps_for(
    config: "GuardConfig", session_id: "str | None", telemetry: "TelemetryOption"
) -> "SessionCapStore":
    from otelguard.hosting import session_cap_store

    return session_cap_store(config, session_id, telemetry)


def _observer_for(telemetry: "TelemetryOption", config: "GuardConfig") -> "GuardObserver":
    from otelguard.hosting import observer_for

    return observer_for(telemetry, config)


def _tree_caps_for(config: "GuardConfig", root: str, telemetry: "TelemetryOption") -> "SessionCapStore":
    from otelguard.hosting import tree_cap_store

    return tree_cap_store(config, root, telemetry)


def _current_tree() -> "DelegationTree | None":
    # A tree is current only after otelguard.propagation put it there: checked without importing.
    import sys

    propagation = sys.modules.get("otelguard.propagation")
    return propagation.current_tree() if propagation is not None else None


# The core is handed its edges: a guard made without a session-cap store or with ``telemetry=`` gets
# them from these, which load the edges (redis, OpenTelemetry) only when a guard needs one.
_resolvers.register(session_caps_for=_session_caps_for, observer_for=_observer_for)
_resolvers.register_trees(tree_caps_for=_tree_caps_for, current_tree_for=_current_tree)
del _session_caps_for, _observer_for, _tree_caps_for, _current_tree

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
    "Guard": "otelguard.core.guard",
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
