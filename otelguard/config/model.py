"""The guard's configuration, ``GuardConfig``: what each field holds, how it is made from keyword
arguments, a mapping or a file, and how it reads back as plain data (docs/configuration.md).

The values given become fields in ``_merged_fields``: partial mappings merged over the defaults,
lists made tuples, sections parsed, every value checked. Every error is a ``ConfigError`` naming the
dotted key path, the bad value and what is allowed; one error names every problem of a config, in
the order of the fields. The public constructors warn (``ConfigWarning``) at their caller's line.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, TypeAlias

from otelguard.config.checks import (
    NO_KEYS,
    NO_NAMES,
    Problems,
    argument_keys,
    as_mapping,
    boolean,
    choice,
    integer,
    tool_names,
    unknown_keys,
)
from otelguard.config.defaults import (
    DEFAULT_HARD_STOP_AFTER,
    DEFAULT_IGNORE_ARGS,
    DEFAULT_REJECTS_BEFORE_STOP,
    DEFAULT_SPAWN_TOOLS,
    DEFAULT_TOOL_GROUPS,
    DEFAULT_VOLATILE_RESULT_KEYS,
    DEFAULT_WARN_AFTER,
    KNOWN_GLOBS,
    KNOWN_NAMES,
)
from otelguard.config.delegation import DelegationSettings
from otelguard.config.file import load_config_file
from otelguard.config.names import TOKENS, is_glob, near_misses
from otelguard.config.sections import CAP_SCOPES, TOOL_LISTS, CapsConfig, ToolClasses
from otelguard.config.state import StateSettings, check_state_ready, effective_state
from otelguard.config.telemetry import TelemetrySettings
from otelguard.errors import ConfigError, ConfigWarning

__all__ = ["MODES", "Dialect", "GuardConfig"]

Dialect: TypeAlias = Callable[[dict[str, Any]], dict[str, Any]]
"""Another tool's config dialect, translated into otelguard's keys before they are read (hermes-agent's
is ``otelguard.integrations.hermes.hermes_dialect``); its errors are ``ConfigError`` as otelguard's."""

MODES: Final = ("interactive", "unattended")

SHOWN_AS: Final = "shown_as"
"""Field metadata: how ``to_mapping`` shows a value that is not shown as it is (a secret)."""


def _set_or_none(value: object) -> str | None:
    return "<set>" if value else None


_DEFAULT_CAPS: Final = CapsConfig()
_DEFAULT_TOOLS: Final = ToolClasses()
_DEFAULT_TELEMETRY: Final = TelemetrySettings()
_DEFAULT_STATE: Final = StateSettings()
_DEFAULT_DELEGATION: Final = DelegationSettings()


@dataclass(frozen=True, init=False)
class GuardConfig:
    """Everything a ``Guard`` needs to know. Frozen, keyword-only; partial mappings merge with defaults.

    ``hard_stop=None`` follows ``mode`` (``interactive`` → off, ``unattended`` → on); read the
    effective value from ``hard_stop_enabled``.
    """

    mode: str
    hard_stop: bool | None
    warnings: bool
    warn_after: Mapping[str, int]
    hard_stop_after: Mapping[str, int]
    caps: CapsConfig
    tool_groups: Mapping[str, tuple[str, ...]]
    tools: ToolClasses
    spawn_tools: Mapping[str, str | None]
    ignore_args: Mapping[str, tuple[str, ...]]
    volatile_result_keys: tuple[str, ...]
    max_tracked_signatures: int
    rejects_before_stop: int
    signature_key: str | None = field(repr=False, metadata={SHOWN_AS: _set_or_none})
    telemetry: TelemetrySettings
    state: StateSettings
    delegation: DelegationSettings

    config_warnings: tuple[str, ...] = field(init=False, repr=False, compare=False)
    """Keys that are valid but probably typos (a cap on ``web_serch``), one line each naming the key
    and the name it is one edit away from. Each is also a ``ConfigWarning`` (``warnings.warn``) when
    the config is made, pointing at the caller's line; the command line prints them itself."""

    def __init__(
        self,
        *,
        mode: str = "interactive",
        hard_stop: bool | None = None,
        warnings: bool = True,
        warn_after: Mapping[str, int] = DEFAULT_WARN_AFTER,
        hard_stop_after: Mapping[str, int] = DEFAULT_HARD_STOP_AFTER,
        caps: CapsConfig | Mapping[str, Any] = _DEFAULT_CAPS,
        tool_groups: Mapping[str, Collection[str]] = DEFAULT_TOOL_GROUPS,
        tools: ToolClasses | Mapping[str, Any] = _DEFAULT_TOOLS,
        spawn_tools: Mapping[str, str | None] = DEFAULT_SPAWN_TOOLS,
        ignore_args: Mapping[str, Sequence[str]] = DEFAULT_IGNORE_ARGS,
        volatile_result_keys: Sequence[str] = DEFAULT_VOLATILE_RESULT_KEYS,
        max_tracked_signatures: int = 4096,
        rejects_before_stop: int = DEFAULT_REJECTS_BEFORE_STOP,
        signature_key: str | None = None,
        telemetry: TelemetrySettings | Mapping[str, Any] = _DEFAULT_TELEMETRY,
        state: StateSettings | Mapping[str, Any] | None = _DEFAULT_STATE,
        delegation: DelegationSettings | Mapping[str, Any] = _DEFAULT_DELEGATION,
    ) -> None:
        """Sections and partial mappings are merged over the defaults and checked: a ``ConfigError``
        names every problem at once; a ``ConfigWarning`` points at this call for each probable typo."""
        given = {name: value for name, value in locals().items() if name != "self"}
        _fill(self, given)
        _warn(self.config_warnings, stacklevel=3)

    @classmethod
    def _made(cls, given: Mapping[str, Any]) -> GuardConfig:
        """A config of ``given`` (the fields it names) over the defaults, without warning."""
        config = cls.__new__(cls)
        _fill(config, {**_INIT_DEFAULTS, **given})
        return config

    @property
    def hard_stop_enabled(self) -> bool:
        if self.hard_stop is not None:
            return self.hard_stop
        return self.mode == "unattended"

    def effective_state(self) -> StateSettings:
        """The ``state`` this process uses: ``OTELGUARD_STATE_URL`` over ``state.url``
        (``ConfigError`` for a bad one)."""
        return effective_state(self.state, self.signature_key)

    def with_changes(self, **changes: Any) -> GuardConfig:
        """This config with some fields changed (keyword arguments as for ``GuardConfig(...)``);
        a probable typo it did not have already is a ``ConfigWarning`` at the caller's line."""
        unknown = sorted(set(changes) - set(_INIT_DEFAULTS))
        if unknown:
            raise TypeError(f"GuardConfig has no field {unknown[0]!r}")
        current = {name: getattr(self, name) for name in _INIT_DEFAULTS}
        config = self._made({**current, **changes})
        _warn([line for line in config.config_warnings if line not in self.config_warnings], stacklevel=3)
        return config

    @classmethod
    def from_mapping(
        cls, mapping: Mapping[str, Any] | None, *, dialect: Dialect | None = None
    ) -> GuardConfig:
        """Build a config from a parsed YAML/JSON section in otelguard's keys, or in another tool's
        dialect translated by ``dialect`` (hermes-agent's: ``otelguard.integrations.hermes``)."""
        config = cls._parsed(mapping, dialect)
        _warn(config.config_warnings, stacklevel=3)
        return config

    @classmethod
    def from_file(cls, path: str | Path, *, dialect: Dialect | None = None) -> GuardConfig:
        """Read a YAML (or JSON) file. An empty file gives the defaults. A hostile file (too big, not
        UTF-8, a FIFO or device, an alias bomb, too deep) is a ``ConfigError``: see ``otelguard.config.file``."""
        try:
            config = cls._parsed(load_config_file(path), dialect)
        except ConfigError as exc:
            raise ConfigError.collected([exc], source=str(path)) from None
        _warn(config.config_warnings, stacklevel=3)
        return config

    @classmethod
    def _parsed(cls, mapping: Mapping[str, Any] | None, dialect: Dialect | None = None) -> GuardConfig:
        if mapping is None:
            return cls._made({})
        section = dict(as_mapping("", mapping))
        if dialect is not None:
            section = dialect(section)
        problems = Problems()
        problems.found += unknown_keys("", section, _INIT_DEFAULTS)
        known = {key: value for key, value in section.items() if key in _INIT_DEFAULTS}
        config = problems.attempt(cls._made, known, fallback=None)
        problems.raise_any()
        assert config is not None
        return config

    def to_mapping(self) -> dict[str, Any]:
        """The effective configuration as plain data, one entry per field (the signature key is never
        included, a state URL's password is masked), and ``hard_stop_enabled`` beside ``hard_stop``."""
        mapping: dict[str, Any] = {}
        for each in fields(self):
            if not each.init:
                continue
            value = getattr(self, each.name)
            shown_as: Callable[[Any], Any] | None = each.metadata.get(SHOWN_AS)
            mapping[each.name] = shown_as(value) if shown_as is not None else _plain(value)
            if each.name == "hard_stop":
                mapping["hard_stop_enabled"] = self.hard_stop_enabled  # the effective value
        return mapping


_INIT_DEFAULTS: Final[Mapping[str, Any]] = GuardConfig.__init__.__kwdefaults__ or {}
"""The keyword arguments of ``GuardConfig(...)`` and their defaults: the keys of a config mapping."""


def _fill(config: GuardConfig, given: Mapping[str, Any]) -> None:
    """Give a new ``config`` its fields: ``given`` (every keyword argument) merged and checked."""
    values = _merged_fields(given)
    values["config_warnings"] = _near_miss_lines(values)
    for name, value in values.items():
        object.__setattr__(config, name, value)  # frozen: this is where a config gets its fields


def _plain(value: Any) -> Any:
    """``value`` as plain data (dicts, lists, scalars): a section by its own ``to_mapping`` if it has
    one, else field by field."""
    to_mapping = getattr(value, "to_mapping", None)
    if to_mapping is not None:
        return to_mapping()
    if is_dataclass(value) and not isinstance(value, type):
        return {each.name: _plain(getattr(value, each.name)) for each in fields(value)}
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    return value


def _warn(lines: Sequence[str], *, stacklevel: int) -> None:
    """A ``ConfigWarning`` per line, at ``stacklevel`` as ``warnings.warn`` counts it from here (1 is
    this function, 2 its caller): 3 is the line that called the public constructor calling this."""
    for line in lines:
        warnings.warn(line, ConfigWarning, stacklevel=stacklevel)


def _merged_fields(given: Mapping[str, Any]) -> dict[str, Any]:
    """The field values of a ``GuardConfig`` made with ``given`` (every field named), checked and
    merged over the defaults; a ``ConfigError`` naming every problem."""
    problems = Problems()
    out = dict(given)
    problems.attempt(choice, "mode", given["mode"], MODES, fallback="")
    if given["hard_stop"] is not None:
        problems.attempt(boolean, "hard_stop", given["hard_stop"], fallback=False)
    problems.attempt(boolean, "warnings", given["warnings"], fallback=True)
    out["warn_after"], out["hard_stop_after"] = _checked_thresholds(
        given["warn_after"], given["hard_stop_after"], problems
    )
    out["caps"] = problems.attempt(CapsConfig.parse, given["caps"], fallback=_DEFAULT_CAPS)
    out["tool_groups"] = _merged_names("tool_groups", given["tool_groups"], DEFAULT_TOOL_GROUPS, problems)
    if TOKENS in out["tool_groups"]:
        problems.found.append(
            ConfigError(
                f"tool_groups.{TOKENS}",
                list(out["tool_groups"][TOKENS]),
                "`tokens` is the cap key of the model's tokens: give the group another name",
            )
        )
    out["tools"] = problems.attempt(ToolClasses.parse, given["tools"], fallback=_DEFAULT_TOOLS)
    out["spawn_tools"] = _spawn_tools(given["spawn_tools"], problems)
    out["ignore_args"] = _ignore_args(given["ignore_args"], problems)
    out["volatile_result_keys"] = _volatile_result_keys(given["volatile_result_keys"], problems)
    problems.attempt(integer, "max_tracked_signatures", given["max_tracked_signatures"], 1, fallback=1)
    problems.attempt(integer, "rejects_before_stop", given["rejects_before_stop"], 0, fallback=0)
    signature_key = given["signature_key"]
    if signature_key is not None and (not isinstance(signature_key, str) or not signature_key):
        problems.found.append(ConfigError("signature_key", "<hidden>", "expected a non-empty string or null"))
    out["telemetry"] = problems.attempt(
        TelemetrySettings.parse, given["telemetry"], fallback=_DEFAULT_TELEMETRY
    )
    state = out["state"] = problems.attempt(StateSettings.parse, given["state"], fallback=_DEFAULT_STATE)
    if state.url is not None:
        problems.attempt(check_state_ready, "state.url", state.url, signature_key, fallback=None)
    out["delegation"] = problems.attempt(
        DelegationSettings.parse, given["delegation"], fallback=_DEFAULT_DELEGATION
    )
    problems.raise_any()
    return out


def _near_miss_lines(values: Mapping[str, Any]) -> tuple[str, ...]:
    """Tool names of a config's field ``values`` that are probably typos (see ``otelguard.config.names``)."""
    tool_groups: Mapping[str, tuple[str, ...]] = values["tool_groups"]
    caps: CapsConfig = values["caps"]
    tools: ToolClasses = values["tools"]
    members = [name for names in tool_groups.values() for name in names]
    known = (*KNOWN_NAMES, *tool_groups, *(n for n in members if not is_glob(n)), TOKENS)
    globs = (*KNOWN_GLOBS, *(n for n in members if is_glob(n)))
    named = [(f"caps.{scope}.{key}", key) for scope in CAP_SCOPES for key in getattr(caps, scope)]
    for name in TOOL_LISTS:
        default_names = set(getattr(_DEFAULT_TOOLS, name))
        named += [(f"tools.{name}", tool) for tool in getattr(tools, name) if tool not in default_names]
    named += [(f"ignore_args.{key}", key) for key in values["ignore_args"] if key not in DEFAULT_IGNORE_ARGS]
    return near_misses(named, known, globs)


def _checked_thresholds(
    warn_after: Any, hard_stop_after: Any, problems: Problems
) -> tuple[Mapping[str, int], Mapping[str, int]]:
    """``warn_after`` and ``hard_stop_after`` merged over the defaults; a warning never comes after its stop."""
    stop_set_by_user = set(problems.attempt(as_mapping, "hard_stop_after", hard_stop_after, fallback=NO_KEYS))
    warn_set_by_user = set(problems.attempt(as_mapping, "warn_after", warn_after, fallback=NO_KEYS))
    if warn_after is DEFAULT_WARN_AFTER:
        warn_set_by_user = set()
    before = len(problems.found)
    warn = problems.attempt(
        _thresholds, "warn_after", warn_after, DEFAULT_WARN_AFTER, fallback=DEFAULT_WARN_AFTER
    )
    stop = problems.attempt(
        _thresholds,
        "hard_stop_after",
        hard_stop_after,
        DEFAULT_HARD_STOP_AFTER,
        fallback=DEFAULT_HARD_STOP_AFTER,
    )
    if len(problems.found) > before:
        return warn, stop  # the order of thresholds that did not parse means nothing
    for name, stop_at in stop.items():
        warn_at = warn[name]
        if warn_at <= stop_at:
            continue
        if name in stop_set_by_user and name not in warn_set_by_user:  # name the key the user set
            problems.found.append(
                ConfigError(f"hard_stop_after.{name}", stop_at, f"must be >= warn_after.{name} ({warn_at})")
            )
        else:
            problems.found.append(
                ConfigError(f"warn_after.{name}", warn_at, f"must be <= hard_stop_after.{name} ({stop_at})")
            )
    return warn, stop


def _thresholds(path: str, value: Any, defaults: Mapping[str, int]) -> Mapping[str, int]:
    section = as_mapping(path, value)
    problems = Problems()
    problems.found += unknown_keys(path, section, defaults)
    merged = dict(defaults)
    for key, threshold in section.items():
        if key in defaults:
            merged[key] = problems.attempt(integer, f"{path}.{key}", threshold, 1, fallback=defaults[key])
    problems.raise_any()
    return MappingProxyType(merged)


def _merged_names(
    path: str, value: Any, defaults: Mapping[str, tuple[str, ...]], problems: Problems
) -> Mapping[str, tuple[str, ...]]:
    section = problems.attempt(as_mapping, path, value, fallback=NO_KEYS)
    given = {k: problems.attempt(tool_names, f"{path}.{k}", v, fallback=NO_NAMES) for k, v in section.items()}
    return MappingProxyType({**defaults, **given})


def _spawn_tools(value: Any, problems: Problems) -> Mapping[str, str | None]:
    spawn = problems.attempt(as_mapping, "spawn_tools", value, fallback=NO_KEYS)
    for key, arg in spawn.items():
        if arg is not None and (not isinstance(arg, str) or not arg):
            problems.found.append(
                ConfigError(
                    f"spawn_tools.{key}", arg, "expected the name of the batch-list argument, or null"
                )
            )
    return MappingProxyType({**DEFAULT_SPAWN_TOOLS, **spawn})


def _ignore_args(value: Any, problems: Problems) -> Mapping[str, tuple[str, ...]]:
    ignore = problems.attempt(as_mapping, "ignore_args", value, fallback=NO_KEYS)
    if "" in ignore:
        problems.found.append(ConfigError("ignore_args", "", "expected tool names or fnmatch globs as keys"))
    given = {
        k: problems.attempt(argument_keys, f"ignore_args.{k}", v, fallback=NO_NAMES)
        for k, v in ignore.items()
    }
    return MappingProxyType({**DEFAULT_IGNORE_ARGS, **given})


def _volatile_result_keys(keys: Any, problems: Problems) -> tuple[str, ...]:
    if (
        isinstance(keys, str)
        or not isinstance(keys, (list, tuple))
        or not all(isinstance(k, str) for k in keys)
    ):
        problems.found.append(ConfigError("volatile_result_keys", keys, "expected a list of key names"))
        return DEFAULT_VOLATILE_RESULT_KEYS
    return tuple(keys)
