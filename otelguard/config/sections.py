"""Two sections of the config: the classes of tools (``tools:``) and the caps (``caps:``).

Each is a frozen dataclass whose ``parse`` reads the section as a user writes it, merged over the
defaults; the ``telemetry:`` and ``state:`` sections have their own modules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from otelguard.config.checks import (
    NO_KEYS,
    NO_NAMES,
    Problems,
    as_mapping,
    boolean,
    choice,
    integer,
    tool_names,
    unknown_keys,
)
from otelguard.config.defaults import (
    DEFAULT_FAILURE_TOLERANT,
    DEFAULT_POLL_TOOLS,
    DEFAULT_READ_TOOLS,
    DEFAULT_SHELL_TOOLS,
    DEFAULT_WRITE_TOOLS,
)

__all__ = ["CAP_SCOPES", "ON_HIT", "TOOL_LISTS", "CapsConfig", "ToolClasses"]

ON_HIT: Final = ("block", "reject")
CAP_SCOPES: Final = ("turn", "session", "tree")

TOOL_LISTS: Final = ("read", "write", "shell", "poll", "failure_tolerant")
_DEFAULT_LISTS: Final = (
    DEFAULT_READ_TOOLS,
    DEFAULT_WRITE_TOOLS,
    DEFAULT_SHELL_TOOLS,
    DEFAULT_POLL_TOOLS,
    DEFAULT_FAILURE_TOLERANT,
)


@dataclass(frozen=True, kw_only=True)
class ToolClasses:
    """Tool names and fnmatch globs per class. ``shell`` wins over ``write``, ``write`` over ``poll``,
    ``poll`` over ``read``."""

    read: tuple[str, ...] = DEFAULT_READ_TOOLS
    write: tuple[str, ...] = DEFAULT_WRITE_TOOLS
    shell: tuple[str, ...] = DEFAULT_SHELL_TOOLS
    poll: tuple[str, ...] = DEFAULT_POLL_TOOLS
    failure_tolerant: tuple[str, ...] = DEFAULT_FAILURE_TOLERANT

    def to_mapping(self) -> dict[str, Any]:
        """The five lists, and ``replace: true`` when one of them lacks a default: read back by
        ``parse``, the mapping gives these lists again, not the defaults followed by them."""
        lists = {name: list(getattr(self, name)) for name in TOOL_LISTS}
        extends = all(
            lists[name][: len(defaults)] == list(defaults)
            for name, defaults in zip(TOOL_LISTS, _DEFAULT_LISTS, strict=True)
        )
        return lists if extends else {**lists, "replace": True}

    @classmethod
    def parse(cls, value: Any, path: str = "tools") -> ToolClasses:
        if isinstance(value, ToolClasses):
            return value
        section = as_mapping(path, value)
        problems = Problems()
        problems.found += unknown_keys(path, section, (*TOOL_LISTS, "replace"))
        replace_all = problems.attempt(
            boolean, f"{path}.replace", section.get("replace", False), fallback=False
        )
        defaults = cls(**dict.fromkeys(TOOL_LISTS, ())) if replace_all else cls()
        lists = {}
        for name in TOOL_LISTS:
            extra = problems.attempt(tool_names, f"{path}.{name}", section.get(name, ()), fallback=NO_NAMES)
            base: tuple[str, ...] = getattr(defaults, name)
            lists[name] = base + tuple(n for n in extra if n not in base)
        problems.raise_any()
        return cls(**lists)


@dataclass(frozen=True, kw_only=True)
class CapsConfig:
    """Per-turn, per-session and per-tree caps: cap key (group, tool name or glob) → limit
    (0 = unlimited). ``tree`` counts across a whole delegation tree; it has no default keys."""

    on_hit: str = "block"
    turn: Mapping[str, int] = field(
        default_factory=lambda: MappingProxyType({"web_search": 50, "subagents": 50})
    )
    session: Mapping[str, int] = field(
        default_factory=lambda: MappingProxyType({"web_search": 200, "subagents": 200})
    )
    tree: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        problems = Problems()
        problems.attempt(choice, "caps.on_hit", self.on_hit, ON_HIT, fallback="")
        for scope in CAP_SCOPES:
            limits = problems.attempt(as_mapping, f"caps.{scope}", getattr(self, scope), fallback=NO_KEYS)
            for key, limit in limits.items():
                problems.attempt(integer, f"caps.{scope}.{key}", limit, 0, fallback=0)
            object.__setattr__(self, scope, MappingProxyType(dict(limits)))
        problems.raise_any()

    @classmethod
    def parse(cls, value: Any, path: str = "caps") -> CapsConfig:
        if isinstance(value, CapsConfig):
            return value
        section = as_mapping(path, value)
        problems = Problems()
        problems.found += unknown_keys(path, section, ("on_hit", *CAP_SCOPES))
        defaults = cls()
        turn = problems.attempt(as_mapping, f"{path}.turn", section.get("turn", {}), fallback=NO_KEYS)
        session = problems.attempt(
            as_mapping, f"{path}.session", section.get("session", {}), fallback=NO_KEYS
        )
        caps = problems.attempt(
            cls,
            fallback=defaults,
            on_hit=section.get("on_hit", defaults.on_hit),
            turn={**defaults.turn, **turn},
            session={**defaults.session, **session},
            tree=problems.attempt(as_mapping, f"{path}.tree", section.get("tree", {}), fallback=NO_KEYS),
        )
        problems.raise_any()
        return caps
