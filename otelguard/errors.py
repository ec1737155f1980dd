"""The one error family of otelguard.

    OtelGuardError
     ├── ConfigError      bad configuration: names the key path, the value and what is allowed
     ├── GuardHalted      raised by a framework adapter whose framework can only stop a run by raising
     └── UsageError       a command-line input that cannot be used at all (the CLI exits 2)

Guard decisions are return values, never exceptions; ``GuardHalted`` only carries one out of a
framework that has no other way to end a run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from otelguard.decisions import Decision

__all__ = ["ConfigError", "GuardHalted", "OtelGuardError", "UsageError"]


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


class GuardHalted(OtelGuardError):
    """The guard stopped the turn; ``decision`` is the ``block``/``halt`` decision that did it.

    The message is the decision's message, written for the model and the user: it names the tool and
    the counts, never argument values or results.
    """

    def __init__(self, decision: Decision) -> None:
        self.decision = decision
        super().__init__(decision.message)


class UsageError(OtelGuardError):
    """A command-line input that cannot be used at all (exit 2)."""
