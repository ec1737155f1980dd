"""The one error family of otelguard.

    OtelGuardError
     ├── ConfigError      bad configuration: names the key path, the value and what is allowed
     ├── GuardHalted      raised by a framework adapter whose framework can only stop a run by raising
     ├── UsageError       a command-line input that cannot be used at all (the CLI exits 2)
     ├── BacktestError    the backtest engine failed (a promtool or prometheus error, a refused query)
     └── HookPayloadError a hook payload Claude Code would not send (also a ``ValueError``)

    ConfigWarning (a ``UserWarning``)  a valid config key that is probably a typo (``warnings.warn``)

Guard decisions are return values, never exceptions; ``GuardHalted`` only carries one out of a
framework that has no other way to end a run.
"""

from __future__ import annotations

import reprlib
from typing import TYPE_CHECKING, Any, Final, Protocol

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "BacktestError",
    "ConfigError",
    "ConfigWarning",
    "GuardHalted",
    "HaltingDecision",
    "HookPayloadError",
    "OtelGuardError",
    "UsageError",
]


def _bounded_repr() -> reprlib.Repr:
    """A bad value is quoted in the message, but a value read from a hostile file can be huge or
    deeply nested: its repr is cut to a few elements and characters (``reprlib`` does no work past
    the cut)."""
    bounded = reprlib.Repr()
    bounded.maxlevel = 3
    bounded.maxstring = bounded.maxother = 80
    bounded.maxlist = bounded.maxtuple = bounded.maxdict = bounded.maxset = bounded.maxfrozenset = 6
    return bounded


_VALUE_REPR: Final = _bounded_repr()
_MAX_KEY_CHARS: Final = 120


class OtelGuardError(Exception):
    """Base class of every error otelguard raises."""


class ConfigWarning(UserWarning):
    """A config that is valid but probably not what was meant: a cap or tool name one edit away from a
    known one (``caps.turn.websearch``: did you mean ``web_search``?). Its message is one line of
    ``GuardConfig.config_warnings``; filter it with ``warnings.filterwarnings("ignore",
    category=ConfigWarning)``."""


class ConfigError(OtelGuardError, ValueError):
    """A configuration value is invalid.

    ``key`` is the dotted key path (``warn_after.exact_failure``), ``value`` the offending value,
    ``allowed`` what is allowed, ``source`` the file it came from (when it came from one). A config
    with several problems raises one ``ConfigError`` for all of them: ``errors`` holds each problem
    (one ``ConfigError`` each; just this one when there is one), ``str()`` gives one line per
    problem, and ``key``/``value``/``allowed`` are the first problem's.
    """

    FILE_KEY: Final = "<file>"
    """``key`` of a problem with the file itself (unreadable, not YAML): its line is ``file: what``."""

    def __init__(self, key: str, value: object, allowed: str, *, source: str | None = None) -> None:
        self.key = key
        self.value = value
        self.allowed = allowed
        self.source = source
        self.errors: tuple[ConfigError, ...] = (self,)
        super().__init__(self.line)

    @property
    def line(self) -> str:
        """This problem alone, on one line."""
        if self.key == self.FILE_KEY:
            return f"{self.source or self.value}: {self.allowed}"
        shown_key = self.key if len(self.key) <= _MAX_KEY_CHARS else f"{self.key[:_MAX_KEY_CHARS]}..."
        where = f"{self.source}: " if self.source else ""
        return f"{where}{shown_key}: {_VALUE_REPR.repr(self.value)} is not allowed; {self.allowed}"

    @classmethod
    def collected(cls, errors: Sequence[ConfigError], *, source: str | None = None) -> ConfigError:
        """One error for every problem of ``errors`` (at least one), each named with ``source`` when
        given: the error itself when there is one problem."""
        problems = [
            problem if source is None or problem.source else _with_source(problem, source)
            for error in errors
            for problem in error.errors
        ]
        if not problems:
            raise ValueError("ConfigError.collected needs at least one error")
        if len(problems) == 1:
            return problems[0]
        first = problems[0]
        combined = cls(first.key, first.value, first.allowed, source=first.source)
        combined.errors = tuple(problems)
        combined.args = ("\n".join(problem.line for problem in problems),)
        return combined


def _with_source(problem: ConfigError, source: str) -> ConfigError:
    named = ConfigError(problem.key, problem.value, problem.allowed, source=source)
    named.__cause__ = problem.__cause__
    return named


class HaltingDecision(Protocol):
    """What ``GuardHalted.decision`` holds: an ``otelguard.Decision``, described by what it offers so
    that this module imports nothing of the package (every module may import the errors)."""

    @property
    def action(self) -> str: ...
    @property
    def code(self) -> str: ...
    @property
    def message(self) -> str: ...
    @property
    def tool_name(self) -> str: ...
    @property
    def count(self) -> int: ...
    @property
    def limit(self) -> int: ...
    @property
    def cap(self) -> str | None: ...
    @property
    def allows_execution(self) -> bool: ...
    @property
    def should_halt(self) -> bool: ...
    def to_metadata(self) -> dict[str, Any]: ...
    def synthetic_result(self) -> str: ...


class GuardHalted(OtelGuardError):
    """The guard stopped the turn; ``decision`` is the ``block``/``halt`` decision (an
    ``otelguard.Decision``) that did it.

    The message is the decision's message, written for the model and the user: it names the tool and
    the counts, never argument values or results.
    """

    def __init__(self, decision: HaltingDecision) -> None:
        self.decision = decision
        super().__init__(decision.message)


class UsageError(OtelGuardError):
    """A command-line input that cannot be used at all (exit 2)."""


class BacktestError(OtelGuardError):
    """The backtest engine failed (a promtool or prometheus error, a query the server refused)."""


class HookPayloadError(OtelGuardError, ValueError):
    """A payload Claude Code would not send: names the field and what it should be, never its value."""

    def __init__(self, field: str, expected: str) -> None:
        super().__init__(f"{field}: expected {expected}")
        self.field = field
