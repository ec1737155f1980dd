"""The ``delegation:`` section of the config: how deep a delegation tree may grow and whether
delegating back into an agent already on the path is a loop (docs/delegation-trees.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from otelguard.config.checks import Problems, as_mapping, boolean, unknown_keys
from otelguard.errors import ConfigError

__all__ = ["MAX_DEPTH_LIMIT", "DelegationSettings"]

MAX_DEPTH_LIMIT: Final = 32
"""The deepest ``max_depth`` allowed: the path rides in a request header, one short digest per level,
so the header stays small whatever the config says."""

_KEYS: Final = ("max_depth", "cycles")


@dataclass(frozen=True, kw_only=True)
class DelegationSettings:
    """``max_depth``: an agent at this depth (the root is 0) may not delegate. ``cycles``: delegating
    to an agent already on the path, or a handoff ping-pong A<->B, is warned, refused and stopped."""

    max_depth: int = 4
    cycles: bool = True

    def __post_init__(self) -> None:
        problems = Problems()
        depth = self.max_depth
        if isinstance(depth, bool) or not isinstance(depth, int) or not 0 <= depth <= MAX_DEPTH_LIMIT:
            problems.found.append(
                ConfigError("delegation.max_depth", depth, f"expected an integer from 0 to {MAX_DEPTH_LIMIT}")
            )
        problems.attempt(boolean, "delegation.cycles", self.cycles, fallback=True)
        problems.raise_any()

    @classmethod
    def parse(cls, value: Any, path: str = "delegation") -> DelegationSettings:
        if isinstance(value, DelegationSettings):
            return value
        section = as_mapping(path, value)
        problems = Problems()
        problems.found += unknown_keys(path, section, _KEYS)
        defaults = cls()
        settings = problems.attempt(
            cls,
            fallback=defaults,
            max_depth=section.get("max_depth", defaults.max_depth),
            cycles=section.get("cycles", defaults.cycles),
        )
        problems.raise_any()
        return settings
