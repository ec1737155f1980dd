"""The one error family of otelguard.

    OtelGuardError
     └── ConfigError      bad configuration: names the key path, the value and what is allowed

Guard decisions are return values, never exceptions.
"""

from __future__ import annotations

__all__ = ["ConfigError", "OtelGuardError"]


class OtelGuardError(Exception):
    """Base class of every error otelguard raises."""


class ConfigError(OtelGuardError, ValueError):
    """A configuration value is invalid.

    ``key`` is the dotted key path (``warn_after.exact_failure``), ``value`` the offending value.
    """

    def __init__(self, key: str, value: object, allowed: str) -> None:
        self.key = key
        self.value = value
        self.allowed = allowed
        super().__init__(f"{key}: {value!r} is not allowed; {allowed}")
