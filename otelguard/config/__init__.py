"""The configuration: ``GuardConfig`` and its sections, the defaults, and how a config is read.

One job per module: ``model`` (``GuardConfig``: its fields, made from what is given and checked),
``sections`` (``tools:`` and ``caps:``), ``telemetry`` and ``state`` (those sections: a state URL
is held as present, its grammar is ``otelguard.state.urls``'), ``defaults`` (thresholds and the tool
catalogue), ``checks`` (the checks every value goes through), ``file`` (reading a possibly hostile file), ``names`` (probable typos) and
``environment`` (every environment variable otelguard reads).

Each name below is imported on first use: the Claude Code hook command reads
``otelguard.config.environment`` and must not load the rest (nor typing, re or yaml).
"""

# Not ``typing.TYPE_CHECKING``: see ``otelguard/__init__.py``.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from otelguard.config.defaults import (
        DEFAULT_FAILURE_TOLERANT,
        DEFAULT_HARD_STOP_AFTER,
        DEFAULT_IGNORE_ARGS,
        DEFAULT_POLL_TOOLS,
        DEFAULT_READ_TOOLS,
        DEFAULT_SHELL_TOOLS,
        DEFAULT_SPAWN_TOOLS,
        DEFAULT_TOOL_GROUPS,
        DEFAULT_VOLATILE_RESULT_KEYS,
        DEFAULT_WARN_AFTER,
        DEFAULT_WRITE_TOOLS,
    )
    from otelguard.config.model import MODES, GuardConfig
    from otelguard.config.sections import ON_HIT, CapsConfig, ToolClasses
    from otelguard.config.state import StateSettings, mask_url
    from otelguard.config.telemetry import SPAN_MODES, TelemetrySettings
del TYPE_CHECKING  # not part of the package's namespace

__all__ = [
    "DEFAULT_FAILURE_TOLERANT",
    "DEFAULT_HARD_STOP_AFTER",
    "DEFAULT_IGNORE_ARGS",
    "DEFAULT_POLL_TOOLS",
    "DEFAULT_READ_TOOLS",
    "DEFAULT_SHELL_TOOLS",
    "DEFAULT_SPAWN_TOOLS",
    "DEFAULT_TOOL_GROUPS",
    "DEFAULT_VOLATILE_RESULT_KEYS",
    "DEFAULT_WARN_AFTER",
    "DEFAULT_WRITE_TOOLS",
    "MODES",
    "ON_HIT",
    "SPAN_MODES",
    "CapsConfig",
    "GuardConfig",
    "StateSettings",
    "TelemetrySettings",
    "ToolClasses",
    "mask_url",
]

_HOMES: dict[str, str] = {
    **dict.fromkeys([name for name in __all__ if name.startswith("DEFAULT_")], "otelguard.config.defaults"),
    "MODES": "otelguard.config.model",
    "ON_HIT": "otelguard.config.sections",
    "SPAN_MODES": "otelguard.config.telemetry",
    "CapsConfig": "otelguard.config.sections",
    "GuardConfig": "otelguard.config.model",
    "StateSettings": "otelguard.config.state",
    "TelemetrySettings": "otelguard.config.telemetry",
    "ToolClasses": "otelguard.config.sections",
    "mask_url": "otelguard.config.state",
}


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'otelguard.config' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
