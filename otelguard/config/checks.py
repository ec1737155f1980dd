"""The checks every config value goes through. Each failure is a ``ConfigError`` naming the dotted
key path, the bad value and what is allowed (with a "did you mean" for a misspelt key or word);
``Problems`` collects them, so that one error can name every problem of a config at once."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, Final, TypeVar

from otelguard.errors import ConfigError

__all__ = [
    "NO_KEYS",
    "NO_NAMES",
    "Problems",
    "argument_keys",
    "as_mapping",
    "boolean",
    "check_keys",
    "choice",
    "integer",
    "join",
    "tool_names",
    "unknown_keys",
]

_T = TypeVar("_T")
NO_NAMES: Final[tuple[str, ...]] = ()
NO_KEYS: Final[Mapping[str, Any]] = MappingProxyType({})


class Problems:
    """The problems found while validating one section, so that one ``ConfigError`` names them all."""

    def __init__(self) -> None:
        self.found: list[ConfigError] = []

    def attempt(self, check: Callable[..., _T], *args: Any, fallback: _T, **kwargs: Any) -> _T:
        """``check(*args, **kwargs)``, or ``fallback`` once its error is noted."""
        try:
            return check(*args, **kwargs)
        except ConfigError as exc:
            self.found.append(exc)
            return fallback

    def raise_any(self) -> None:
        if self.found:
            raise ConfigError.collected(self.found)


def did_you_mean(value: object, allowed: Iterable[str]) -> str:
    close = difflib.get_close_matches(value, list(allowed), n=1) if isinstance(value, str) else []
    return f"did you mean {close[0]!r}? " if close else ""


def suggest(key: str, allowed: Iterable[str]) -> str:
    allowed = list(allowed)
    return f"unknown key; {did_you_mean(key, allowed)}allowed keys: {', '.join(sorted(allowed))}"


def unknown_keys(path: str, mapping: Mapping[str, Any], allowed: Iterable[str]) -> list[ConfigError]:
    allowed = tuple(allowed)
    return [
        ConfigError(join(path, str(key)), key, suggest(str(key), allowed))
        for key in mapping
        if key not in allowed
    ]


def check_keys(path: str, mapping: Mapping[str, Any], allowed: Iterable[str]) -> None:
    unknown = unknown_keys(path, mapping, allowed)
    if unknown:
        raise ConfigError.collected(unknown)


def join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def as_mapping(path: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(path or "(top level)", value, "expected a mapping")
    for key in value:
        if not isinstance(key, str):
            raise ConfigError(join(path, str(key)), key, "keys must be strings")
    return value


def boolean(path: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(path, value, "expected true or false")
    return value


def integer(path: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(path, value, f"expected an integer >= {minimum}")
    return value


def tool_names(path: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, (list, tuple, set, frozenset)):
        raise ConfigError(path, value, "expected a list of tool names or fnmatch globs")
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item:
            raise ConfigError(f"{path}[{i}]", item, "expected a non-empty string")
    return tuple(value)


def argument_keys(path: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ConfigError(path, value, "expected a list of top-level argument names")
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item:
            raise ConfigError(f"{path}[{i}]", item, "expected a non-empty argument name")
    return tuple(dict.fromkeys(value))


def choice(path: str, value: Any, allowed: tuple[str, ...]) -> str:
    if isinstance(value, bool):  # what YAML makes of an unquoted yes/no/on/off: say so, not just "True"
        raise ConfigError(
            path,
            value,
            f"YAML read an unquoted yes, no, on, off, true or false as the boolean {str(value).lower()}; "
            f"expected one of {', '.join(allowed)}",
        )
    if value not in allowed:
        raise ConfigError(path, value, f"{did_you_mean(value, allowed)}expected one of {', '.join(allowed)}")
    return str(value)
