"""Guard configuration: defaults, merging, hermes-agent aliases, and validation (docs/configuration.md).

Every error is a ``ConfigError`` naming the dotted key path, the bad value and what is allowed.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from otelguard.config_checks import (
    NO_KEYS,
    NO_NAMES,
    Problems,
    argument_keys,
    as_mapping,
    boolean,
    check_keys,
    choice,
    integer,
    tool_names,
    unknown_keys,
)
from otelguard.config_file import load_config_file
from otelguard.config_names import is_glob, near_misses
from otelguard.config_state import StateSettings, check_state_ready, effective_state, mask_url
from otelguard.config_telemetry import SPAN_MODES, TelemetrySettings
from otelguard.errors import ConfigError, ConfigWarning

__all__ = [
    "DEFAULT_HARD_STOP_AFTER",
    "DEFAULT_IGNORE_ARGS",
    "DEFAULT_WARN_AFTER",
    "SPAN_MODES",
    "CapsConfig",
    "GuardConfig",
    "StateSettings",
    "TelemetrySettings",
    "ToolClasses",
    "mask_url",
]

MODES: Final = ("interactive", "unattended")
ON_HIT: Final = ("block", "reject")

DEFAULT_WARN_AFTER: Final[Mapping[str, int]] = MappingProxyType(
    {
        "exact_failure": 2,
        "same_tool_failure": 3,
        "refusal": 2,
        "no_progress": 2,
        "identical_call": 3,
        "cycle": 2,
        "read_only_streak": 40,
        "write_streak": 30,
        "same_error": 3,
        "cross_turn_failure": 4,
    }
)
DEFAULT_HARD_STOP_AFTER: Final[Mapping[str, int]] = MappingProxyType(
    {
        "exact_failure": 5,
        "same_tool_failure": 8,
        "refusal": 6,
        "no_progress": 5,
        "identical_call": 5,
        "cycle": 3,
        "same_error": 6,
        "cross_turn_failure": 7,
    }
)

DEFAULT_READ_TOOLS: Final = (
    # hermes-agent, butler-style and generic agents
    "read_file", "search_files", "grep", "glob", "list_directory", "list_files", "ls", "cat",
    "find_files", "file_search", "web_search", "web_fetch", "web_extract", "web_crawl",
    "browser_snapshot", "browser_get_images", "browser_vision", "vision_analyze",
    "session_search", "skill_view", "skills_list",
    "mcp_*_read_*", "mcp_*_list_*", "mcp_*_search*", "mcp_*_get_*",
    # Claude Code
    "Read", "Grep", "Glob", "LS", "WebFetch", "WebSearch", "NotebookRead",
    # SWE-agent's own searches
    "search_file", "search_dir", "find_file", "filemap",
)  # fmt: skip
DEFAULT_WRITE_TOOLS: Final = (
    "write_file", "patch", "edit_file", "delete_file", "move_file",
    "create_directory", "browser_click", "browser_type", "browser_navigate", "browser_press",
    "browser_scroll", "delegate_task", "spawn_agent", "send_message", "memory", "cronjob",
    "git_*", "mcp_*_write_*", "mcp_*_create_*", "mcp_*_update_*", "mcp_*_delete_*",
    # Claude Code
    "Edit", "MultiEdit", "Write", "NotebookEdit", "Task", "Agent",
    # the file editors of the coding agents: OpenHands and SWE-agent, Anthropic's text editor tool,
    # Codex, Gemini CLI, SWE-agent's own commands
    "str_replace_editor", "str_replace_based_edit_tool", "text_editor", "apply_patch", "replace",
    "edit", "create", "insert",
)  # fmt: skip
# A shell can read, edit or run the tests: write-like for the resets, failure-tolerant, and outside
# write_streak (docs/detectors-same-error.md, "Shells and file editors").
DEFAULT_SHELL_TOOLS: Final = (
    # hermes-agent
    "terminal", "execute_code",
    # Claude Code
    "Bash",
    # SWE-agent and mini-swe-agent, OpenHands, Codex, Gemini CLI, Cline, Cursor, and others
    "bash", "execute_bash", "shell", "local_shell", "run_shell_command", "execute_command",
    "run_terminal_cmd", "exec_command",
)  # fmt: skip
DEFAULT_POLL_TOOLS: Final = (
    "process", "*_poll", "*_get_result", "BashOutput", "TaskOutput",
    # SWE-agent's file viewer moving through a file: showing the same window again is normal
    "open", "goto", "scroll_up", "scroll_down",
)  # fmt: skip
DEFAULT_FAILURE_TOLERANT: Final = ("terminal", "execute_code", "process")

DEFAULT_TOOL_GROUPS: Final[Mapping[str, tuple[str, ...]]] = MappingProxyType(
    {
        "web_search": ("web_search", "WebSearch", "*web_search*"),
        "subagents": ("delegate_task", "Task", "Agent", "spawn_agent"),
    }
)
DEFAULT_SPAWN_TOOLS: Final[Mapping[str, str | None]] = MappingProxyType(
    {"delegate_task": "tasks", "Task": None, "Agent": None, "spawn_agent": None}
)
DEFAULT_IGNORE_ARGS: Final[Mapping[str, tuple[str, ...]]] = MappingProxyType(
    # Claude Code's free-text labels: the same command retried with a new description is the same call.
    {"Bash": ("description",), "Task": ("description",), "Agent": ("description",)}
)
DEFAULT_VOLATILE_RESULT_KEYS: Final = (
    "duration_seconds",
    "duration_ms",
    "elapsed",
    "timestamp",
    "execution_count",
)

_TOP_KEYS: Final = (
    "mode", "hard_stop", "warnings", "warn_after", "hard_stop_after", "caps", "tool_groups", "tools",
    "spawn_tools", "ignore_args", "volatile_result_keys", "max_tracked_signatures", "signature_key",
    "rejects_before_stop",
    "telemetry", "state",
)  # fmt: skip
_HERMES_FLAT: Final = {
    "exact_failure_warn_after": ("warn_after", "exact_failure"),
    "exact_failure_block_after": ("hard_stop_after", "exact_failure"),
    "same_tool_failure_warn_after": ("warn_after", "same_tool_failure"),
    "same_tool_failure_halt_after": ("hard_stop_after", "same_tool_failure"),
    "no_progress_warn_after": ("warn_after", "no_progress"),
    "no_progress_block_after": ("hard_stop_after", "no_progress"),
}
_HERMES_KEYS: Final = (
    "warnings_enabled", "hard_stop_enabled", "non_interactive_hard_stop_enabled", "loop_caps",
    "idempotent_no_progress", *_HERMES_FLAT,
)  # fmt: skip


_TOOL_LISTS: Final = ("read", "write", "shell", "poll", "failure_tolerant")


@dataclass(frozen=True, kw_only=True)
class ToolClasses:
    """Tool names and fnmatch globs per class. ``shell`` wins over ``write``, ``write`` over ``poll``,
    ``poll`` over ``read``."""

    read: tuple[str, ...] = DEFAULT_READ_TOOLS
    write: tuple[str, ...] = DEFAULT_WRITE_TOOLS
    shell: tuple[str, ...] = DEFAULT_SHELL_TOOLS
    poll: tuple[str, ...] = DEFAULT_POLL_TOOLS
    failure_tolerant: tuple[str, ...] = DEFAULT_FAILURE_TOLERANT

    @classmethod
    def parse(cls, value: Any, path: str = "tools") -> ToolClasses:
        if isinstance(value, ToolClasses):
            return value
        section = as_mapping(path, value)
        problems = Problems()
        problems.found += unknown_keys(path, section, (*_TOOL_LISTS, "replace"))
        replace_all = problems.attempt(
            boolean, f"{path}.replace", section.get("replace", False), fallback=False
        )
        defaults = cls(**dict.fromkeys(_TOOL_LISTS, ())) if replace_all else cls()
        lists = {}
        for name in _TOOL_LISTS:
            extra = problems.attempt(tool_names, f"{path}.{name}", section.get(name, ()), fallback=NO_NAMES)
            base: tuple[str, ...] = getattr(defaults, name)
            lists[name] = base + tuple(n for n in extra if n not in base)
        problems.raise_any()
        return cls(**lists)


@dataclass(frozen=True, kw_only=True)
class CapsConfig:
    """Per-turn and per-session caps: cap key (group, tool name or glob) → limit (0 = unlimited)."""

    on_hit: str = "block"
    turn: Mapping[str, int] = field(
        default_factory=lambda: MappingProxyType({"web_search": 50, "subagents": 50})
    )
    session: Mapping[str, int] = field(
        default_factory=lambda: MappingProxyType({"web_search": 200, "subagents": 200})
    )

    def __post_init__(self) -> None:
        problems = Problems()
        problems.attempt(choice, "caps.on_hit", self.on_hit, ON_HIT, fallback="")
        for scope in ("turn", "session"):
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
        problems.found += unknown_keys(path, section, ("on_hit", "turn", "session"))
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
        )
        problems.raise_any()
        return caps


@dataclass(frozen=True, kw_only=True)
class GuardConfig:
    """Everything a ``Guard`` needs to know. Frozen, keyword-only; partial mappings merge with defaults.

    ``hard_stop=None`` follows ``mode`` (``interactive`` → off, ``unattended`` → on); read the
    effective value from ``hard_stop_enabled``.
    """

    mode: str = "interactive"
    hard_stop: bool | None = None
    warnings: bool = True
    warn_after: Mapping[str, int] = field(default_factory=lambda: DEFAULT_WARN_AFTER)
    hard_stop_after: Mapping[str, int] = field(default_factory=lambda: DEFAULT_HARD_STOP_AFTER)
    caps: CapsConfig = field(default_factory=CapsConfig)
    tool_groups: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: DEFAULT_TOOL_GROUPS)
    tools: ToolClasses = field(default_factory=ToolClasses)
    spawn_tools: Mapping[str, str | None] = field(default_factory=lambda: DEFAULT_SPAWN_TOOLS)
    ignore_args: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: DEFAULT_IGNORE_ARGS)
    volatile_result_keys: tuple[str, ...] = DEFAULT_VOLATILE_RESULT_KEYS
    max_tracked_signatures: int = 4096
    rejects_before_stop: int = 1
    signature_key: str | None = field(default=None, repr=False)
    telemetry: TelemetrySettings = field(default_factory=TelemetrySettings)
    state: StateSettings = field(default_factory=StateSettings)

    config_warnings: tuple[str, ...] = field(init=False, repr=False, compare=False, default=())
    """Keys that are valid but probably typos (a cap on ``web_serch``), one line each naming the key
    and the name it is one edit away from. Each is also a ``ConfigWarning`` (``warnings.warn``) when
    the config is made, pointing at the caller's line; the command line prints them itself."""

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        problems = Problems()
        problems.attempt(choice, "mode", self.mode, MODES, fallback="")
        if self.hard_stop is not None:
            problems.attempt(boolean, "hard_stop", self.hard_stop, fallback=False)
        problems.attempt(boolean, "warnings", self.warnings, fallback=True)
        self._set_thresholds(problems)
        set_(self, "caps", problems.attempt(CapsConfig.parse, self.caps, fallback=CapsConfig()))
        groups = problems.attempt(as_mapping, "tool_groups", self.tool_groups, fallback=NO_KEYS)
        merged_groups = {
            **DEFAULT_TOOL_GROUPS,
            **{
                k: problems.attempt(tool_names, f"tool_groups.{k}", v, fallback=NO_NAMES)
                for k, v in groups.items()
            },
        }
        set_(self, "tool_groups", MappingProxyType(merged_groups))
        set_(self, "tools", problems.attempt(ToolClasses.parse, self.tools, fallback=ToolClasses()))
        spawn = problems.attempt(as_mapping, "spawn_tools", self.spawn_tools, fallback=NO_KEYS)
        for key, arg in spawn.items():
            if arg is not None and (not isinstance(arg, str) or not arg):
                problems.found.append(
                    ConfigError(
                        f"spawn_tools.{key}", arg, "expected the name of the batch-list argument, or null"
                    )
                )
        set_(self, "spawn_tools", MappingProxyType({**DEFAULT_SPAWN_TOOLS, **spawn}))
        ignore = problems.attempt(as_mapping, "ignore_args", self.ignore_args, fallback=NO_KEYS)
        if "" in ignore:
            problems.found.append(
                ConfigError("ignore_args", "", "expected tool names or fnmatch globs as keys")
            )
        merged_ignore = {
            **DEFAULT_IGNORE_ARGS,
            **{
                k: problems.attempt(argument_keys, f"ignore_args.{k}", v, fallback=NO_NAMES)
                for k, v in ignore.items()
            },
        }
        set_(self, "ignore_args", MappingProxyType(merged_ignore))
        keys = self.volatile_result_keys
        if (
            isinstance(keys, str)
            or not isinstance(keys, (list, tuple))
            or not all(isinstance(k, str) for k in keys)
        ):
            problems.found.append(ConfigError("volatile_result_keys", keys, "expected a list of key names"))
            keys = DEFAULT_VOLATILE_RESULT_KEYS
        set_(self, "volatile_result_keys", tuple(keys))
        problems.attempt(integer, "max_tracked_signatures", self.max_tracked_signatures, 1, fallback=1)
        problems.attempt(integer, "rejects_before_stop", self.rejects_before_stop, 0, fallback=0)
        if self.signature_key is not None and (
            not isinstance(self.signature_key, str) or not self.signature_key
        ):
            problems.found.append(
                ConfigError("signature_key", "<hidden>", "expected a non-empty string or null")
            )
        set_(
            self,
            "telemetry",
            problems.attempt(TelemetrySettings.parse, self.telemetry, fallback=TelemetrySettings()),
        )
        set_(self, "state", problems.attempt(StateSettings.parse, self.state, fallback=StateSettings()))
        if self.state.url is not None:
            problems.attempt(
                check_state_ready, "state.url", self.state.url, self.signature_key, fallback=None
            )
        problems.raise_any()
        set_(self, "config_warnings", self._near_misses())
        for line in self.config_warnings:
            warnings.warn(line, ConfigWarning, stacklevel=_caller_stacklevel())

    def _set_thresholds(self, problems: Problems) -> None:
        """Merge ``warn_after`` and ``hard_stop_after`` over the defaults; a warning never comes after its stop."""
        set_ = object.__setattr__
        stop_set_by_user = set(
            problems.attempt(as_mapping, "hard_stop_after", self.hard_stop_after, fallback=NO_KEYS)
        )
        warn_set_by_user = set(problems.attempt(as_mapping, "warn_after", self.warn_after, fallback=NO_KEYS))
        if self.warn_after is DEFAULT_WARN_AFTER:
            warn_set_by_user = set()
        before = len(problems.found)
        for name, defaults in (
            ("warn_after", DEFAULT_WARN_AFTER),
            ("hard_stop_after", DEFAULT_HARD_STOP_AFTER),
        ):
            merged = problems.attempt(
                self._thresholds, name, getattr(self, name), defaults, fallback=defaults
            )
            set_(self, name, merged)
        if len(problems.found) > before:
            return  # the order of thresholds that did not parse means nothing
        for name, stop_at in self.hard_stop_after.items():
            warn_at = self.warn_after[name]
            if warn_at <= stop_at:
                continue
            if name in stop_set_by_user and name not in warn_set_by_user:  # name the key the user set
                problems.found.append(
                    ConfigError(
                        f"hard_stop_after.{name}", stop_at, f"must be >= warn_after.{name} ({warn_at})"
                    )
                )
            else:
                problems.found.append(
                    ConfigError(
                        f"warn_after.{name}", warn_at, f"must be <= hard_stop_after.{name} ({stop_at})"
                    )
                )

    def _near_misses(self) -> tuple[str, ...]:
        """Tool names the user wrote that are probably typos (see ``otelguard.config_names``)."""
        members = [name for names in self.tool_groups.values() for name in names]
        known = (*_DEFAULT_NAMES, *self.tool_groups, *(n for n in members if not is_glob(n)))
        globs = (*_DEFAULT_GLOBS, *(n for n in members if is_glob(n)))
        named = [
            (f"caps.{scope}.{key}", key) for scope in ("turn", "session") for key in getattr(self.caps, scope)
        ]
        for name in _TOOL_LISTS:
            default_names = set(getattr(_DEFAULT_TOOL_CLASSES, name))
            named += [
                (f"tools.{name}", tool) for tool in getattr(self.tools, name) if tool not in default_names
            ]
        named += [(f"ignore_args.{key}", key) for key in self.ignore_args if key not in DEFAULT_IGNORE_ARGS]
        return near_misses(named, known, globs)

    @staticmethod
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
        return replace(self, **changes)

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any] | None) -> GuardConfig:
        """Build a config from a parsed YAML/JSON section (otelguard's keys or hermes' aliases)."""
        if mapping is None:
            return cls()
        section = dict(as_mapping("", mapping))
        if set(section) == {"tool_loop_guardrails"}:
            section = dict(as_mapping("tool_loop_guardrails", section["tool_loop_guardrails"]))
        section = _apply_hermes_aliases(section)
        problems = Problems()
        problems.found += unknown_keys("", section, _TOP_KEYS)
        known = {key: value for key, value in section.items() if key in _TOP_KEYS}
        config = problems.attempt(cls, fallback=None, **known)
        problems.raise_any()
        assert config is not None
        return config

    @classmethod
    def from_file(cls, path: str | Path) -> GuardConfig:
        """Read a YAML (or JSON) file. An empty file gives the defaults. A hostile file (too big, not
        UTF-8, a FIFO or device, an alias bomb, too deep) is a ``ConfigError``: see ``otelguard.config_file``."""
        try:
            return cls.from_mapping(load_config_file(path))
        except ConfigError as exc:
            raise ConfigError.collected([exc], source=str(path)) from None

    def to_mapping(self) -> dict[str, Any]:
        """The effective configuration as plain data (the signature key is never included)."""
        return {
            "mode": self.mode,
            "hard_stop": self.hard_stop,
            "hard_stop_enabled": self.hard_stop_enabled,
            "warnings": self.warnings,
            "warn_after": dict(self.warn_after),
            "hard_stop_after": dict(self.hard_stop_after),
            "caps": {
                "on_hit": self.caps.on_hit,
                "turn": dict(self.caps.turn),
                "session": dict(self.caps.session),
            },
            "tool_groups": {k: list(v) for k, v in self.tool_groups.items()},
            "tools": {
                "read": list(self.tools.read),
                "write": list(self.tools.write),
                "shell": list(self.tools.shell),
                "poll": list(self.tools.poll),
                "failure_tolerant": list(self.tools.failure_tolerant),
            },
            "spawn_tools": dict(self.spawn_tools),
            "ignore_args": {k: list(v) for k, v in self.ignore_args.items()},
            "volatile_result_keys": list(self.volatile_result_keys),
            "max_tracked_signatures": self.max_tracked_signatures,
            "rejects_before_stop": self.rejects_before_stop,
            "signature_key": "<set>" if self.signature_key else None,
            "telemetry": {f.name: getattr(self.telemetry, f.name) for f in fields(self.telemetry)},
            "state": self.state.to_mapping(),
        }


_DEFAULT_TOOL_CLASSES: Final = ToolClasses()
_DEFAULT_TOOL_NAMES: Final = (
    *DEFAULT_READ_TOOLS, *DEFAULT_WRITE_TOOLS, *DEFAULT_SHELL_TOOLS, *DEFAULT_POLL_TOOLS,
    *DEFAULT_FAILURE_TOLERANT, *DEFAULT_SPAWN_TOOLS, *DEFAULT_IGNORE_ARGS,
)  # fmt: skip
_DEFAULT_NAMES: Final = tuple(dict.fromkeys(n for n in _DEFAULT_TOOL_NAMES if not is_glob(n)))
_DEFAULT_GLOBS: Final = tuple(dict.fromkeys(n for n in _DEFAULT_TOOL_NAMES if is_glob(n)))


def _apply_hermes_aliases(section: dict[str, Any]) -> dict[str, Any]:
    """Translate hermes-agent ``tool_loop_guardrails`` keys into otelguard's."""
    if not any(key in section for key in _HERMES_KEYS):
        return _rename_no_progress(section)
    out = dict(section)
    for hermes_key, key in (("warnings_enabled", "warnings"), ("hard_stop_enabled", "hard_stop")):
        if hermes_key in out:
            value = out.pop(hermes_key)
            if key in out:
                raise ConfigError(hermes_key, value, f"set either {hermes_key} or {key}, not both")
            out[key] = value
    if "non_interactive_hard_stop_enabled" in out:
        value = boolean("non_interactive_hard_stop_enabled", out.pop("non_interactive_hard_stop_enabled"))
        if value is False and out.get("hard_stop") is None:
            out["hard_stop"] = False
    if "loop_caps" in out:
        loop_caps = as_mapping("loop_caps", out.pop("loop_caps"))
        check_keys("loop_caps", loop_caps, ("max_web_searches", "max_subagents"))
        caps = dict(as_mapping("caps", out.get("caps", {})))
        turn = dict(as_mapping("caps.turn", caps.get("turn", {})))
        for hermes_key, cap_key in (("max_web_searches", "web_search"), ("max_subagents", "subagents")):
            if hermes_key in loop_caps:
                turn[cap_key] = integer(f"loop_caps.{hermes_key}", loop_caps[hermes_key], 0)
        caps["turn"] = turn
        out["caps"] = caps
    if "idempotent_no_progress" in out:
        nested = as_mapping("idempotent_no_progress", out.pop("idempotent_no_progress"))
        check_keys("idempotent_no_progress", nested, ("warn_after", "block_after", "hard_stop_after"))
        for nested_key, target in (("warn_after", "warn_after"), ("block_after", "hard_stop_after"),
                                   ("hard_stop_after", "hard_stop_after")):  # fmt: skip
            if nested_key in nested:
                out[target] = {**as_mapping(target, out.get(target, {})), "no_progress": nested[nested_key]}
    for flat, (target, detector) in _HERMES_FLAT.items():
        if flat in out:
            out[target] = {**as_mapping(target, out.get(target, {})), detector: out.pop(flat)}
    return _rename_no_progress(out)


def _rename_no_progress(section: dict[str, Any]) -> dict[str, Any]:
    """hermes names the no-progress detector ``idempotent_no_progress`` inside the threshold maps."""
    for target in ("warn_after", "hard_stop_after"):
        thresholds = section.get(target)
        if isinstance(thresholds, Mapping) and "idempotent_no_progress" in thresholds:
            renamed = {k: v for k, v in thresholds.items() if k != "idempotent_no_progress"}
            renamed.setdefault("no_progress", thresholds["idempotent_no_progress"])
            section = {**section, target: renamed}
    return section


_PACKAGE_DIR: Final = os.path.dirname(os.path.abspath(__file__))


def _caller_stacklevel() -> int:
    """The ``stacklevel`` that points a warning raised in ``__post_init__`` at the first frame outside
    otelguard (the dataclass ``__init__``, ``from_mapping`` and ``from_file`` are skipped)."""
    level = 2  # 1 is __post_init__, which calls warnings.warn
    frame = sys._getframe(2)
    while frame is not None and (
        frame.f_code.co_filename.startswith(_PACKAGE_DIR) or frame.f_code.co_filename == "<string>"
    ):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level
