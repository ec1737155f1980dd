"""GuardConfig: defaults, merging, hermes-agent aliases and every ConfigError path (docs/configuration.md)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from otelguard import Guard
from otelguard.config import GuardConfig
from otelguard.core.classify import catalog_for
from otelguard.errors import ConfigError
from otelguard.integrations.hermes import config_from_hermes, hermes_dialect
from otelguard.testing import RecordingObserver

DEFAULT_WARN_AFTER = {
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
    "stagnation": 11,
    "unchanged_check": 5,
    "no_action": 3,
    "repeated_reply": 2,
}
DEFAULT_HARD_STOP_AFTER = {
    "exact_failure": 5,
    "same_tool_failure": 8,
    "refusal": 6,
    "no_progress": 5,
    "identical_call": 5,
    "cycle": 3,
    "same_error": 6,
    "cross_turn_failure": 7,
    "stagnation": 12,
    "unchanged_check": 5,
    "no_action": 8,
    "repeated_reply": 5,
}
DEFAULT_VOLATILE = ["duration_seconds", "duration_ms", "elapsed", "timestamp", "execution_count"]


# -- defaults ------------------------------------------------------------------------------------


def test_default_thresholds_match_the_spec_table() -> None:
    """warn_after and hard_stop_after default to the numbers of the table in docs/detectors.md."""
    config = GuardConfig()
    assert dict(config.warn_after) == DEFAULT_WARN_AFTER
    assert dict(config.hard_stop_after) == DEFAULT_HARD_STOP_AFTER


def test_default_scalars_match_the_spec() -> None:
    """mode interactive, hard_stop null, warnings on, 4096 tracked signatures, no signature key."""
    config = GuardConfig()
    assert config.mode == "interactive"
    assert config.hard_stop is None
    assert config.warnings is True
    assert config.max_tracked_signatures == 4096
    assert config.signature_key is None
    assert list(config.volatile_result_keys) == DEFAULT_VOLATILE


def test_default_caps_groups_and_spawn_tools_match_the_spec() -> None:
    """caps 50/turn and 200/session for web_search and subagents, on_hit block; default groups and spawn tools."""
    config = GuardConfig()
    assert config.caps.on_hit == "block"
    assert dict(config.caps.turn) == {"web_search": 50, "subagents": 50}
    assert dict(config.caps.session) == {"web_search": 200, "subagents": 200}
    assert {k: list(v) for k, v in config.tool_groups.items()} == {
        "web_search": ["web_search", "WebSearch", "*web_search*"],
        "subagents": ["delegate_task", "Task", "Agent", "spawn_agent"],
    }
    assert dict(config.spawn_tools) == {
        "delegate_task": "tasks",
        "Task": None,
        "Agent": None,
        "spawn_agent": None,
    }


def test_default_failure_tolerant_tools() -> None:
    """failure_tolerant defaults to terminal, execute_code and process."""
    assert {"terminal", "execute_code", "process"} <= set(GuardConfig().tools.failure_tolerant)


@pytest.mark.parametrize(
    ("mode", "hard_stop", "enabled"),
    [
        ("interactive", None, False),
        ("unattended", None, True),
        ("interactive", True, True),
        ("unattended", False, False),
    ],
)
def test_hard_stop_default_follows_mode(mode: str, hard_stop: bool | None, enabled: bool) -> None:
    """hard_stop null follows mode (interactive → off, unattended → on); an explicit value wins."""
    assert GuardConfig(mode=mode, hard_stop=hard_stop).hard_stop_enabled is enabled


def test_config_is_frozen_keyword_only_and_comparable() -> None:
    """GuardConfig is frozen, keyword-only, compares by value and has a readable repr."""
    config = GuardConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.mode = "unattended"  # type: ignore[misc]
    with pytest.raises(TypeError):
        GuardConfig("unattended")  # type: ignore[misc]
    assert GuardConfig() == GuardConfig.from_mapping({})
    assert GuardConfig.from_mapping(None) == GuardConfig()
    assert GuardConfig(mode="unattended") != GuardConfig()
    assert repr(config).startswith("GuardConfig(")


def test_repr_never_shows_the_signature_key() -> None:
    """The signature key is a secret: it does not appear in the repr."""
    config = GuardConfig(signature_key="sekrit-key-value-123")
    assert "sekrit-key-value-123" not in repr(config)


# -- merging ------------------------------------------------------------------------------------


def test_threshold_maps_merge_key_by_key() -> None:
    """warn_after/hard_stop_after merge with the defaults key by key."""
    config = GuardConfig.from_mapping({"warn_after": {"exact_failure": 3}, "hard_stop_after": {"cycle": 4}})
    assert config.warn_after["exact_failure"] == 3
    assert config.hard_stop_after["cycle"] == 4
    assert {k: v for k, v in config.warn_after.items() if k != "exact_failure"} == {
        k: v for k, v in DEFAULT_WARN_AFTER.items() if k != "exact_failure"
    }
    assert config.hard_stop_after["exact_failure"] == 5


def test_caps_merge_key_by_key() -> None:
    """caps.turn and caps.session merge with the defaults key by key; new keys are added."""
    config = GuardConfig.from_mapping(
        {"caps": {"turn": {"web_search": 5, "browser_*": 9}, "session": {"subagents": 7}}}
    )
    assert dict(config.caps.turn) == {"web_search": 5, "subagents": 50, "browser_*": 9}
    assert dict(config.caps.session) == {"web_search": 200, "subagents": 7}
    assert config.caps.on_hit == "block"


def test_caps_on_hit_reject_is_accepted() -> None:
    """caps.on_hit accepts reject."""
    assert GuardConfig.from_mapping({"caps": {"on_hit": "reject"}}).caps.on_hit == "reject"


def test_zero_cap_means_unlimited_and_is_valid() -> None:
    """A cap of 0 is allowed (unlimited)."""
    assert GuardConfig.from_mapping({"caps": {"turn": {"web_search": 0}}}).caps.turn["web_search"] == 0


def test_tool_groups_and_spawn_tools_merge_key_by_key() -> None:
    """tool_groups and spawn_tools merge with the defaults key by key."""
    config = GuardConfig.from_mapping(
        {"tool_groups": {"browser": ["browser_*"]}, "spawn_tools": {"fan_out": "jobs", "Task": "prompts"}}
    )
    assert list(config.tool_groups["browser"]) == ["browser_*"]
    assert list(config.tool_groups["web_search"]) == ["web_search", "WebSearch", "*web_search*"]
    assert config.spawn_tools["fan_out"] == "jobs"
    assert config.spawn_tools["Task"] == "prompts"
    assert config.spawn_tools["delegate_task"] == "tasks"


def test_tool_groups_entry_replaces_that_group() -> None:
    """Setting a group that exists replaces its list (merging is per key)."""
    config = GuardConfig.from_mapping({"tool_groups": {"web_search": ["my_search"]}})
    assert list(config.tool_groups["web_search"]) == ["my_search"]
    assert "subagents" in config.tool_groups


def test_tool_lists_extend_the_defaults() -> None:
    """The lists under tools extend the defaults."""
    config = GuardConfig.from_mapping(
        {
            "tools": {
                "read": ["my_reader"],
                "write": ["my_writer"],
                "shell": ["my_shell"],
                "poll": ["my_poller"],
                "failure_tolerant": ["flaky"],
            }
        }
    )
    assert {"my_reader", "read_file", "WebSearch"} <= set(config.tools.read)
    assert {"my_writer", "write_file", "Edit", "str_replace_editor"} <= set(config.tools.write)
    assert {"my_shell", "terminal", "Bash", "bash"} <= set(config.tools.shell)
    assert {"my_poller", "process"} <= set(config.tools.poll)
    assert {"flaky", "terminal"} <= set(config.tools.failure_tolerant)


def test_tools_replace_true_replaces_every_list() -> None:
    """tools.replace: true replaces all the default lists."""
    config = GuardConfig.from_mapping({"tools": {"replace": True, "read": ["only_reader"]}})
    assert list(config.tools.read) == ["only_reader"]
    assert "write_file" not in config.tools.write
    assert config.tools.shell == ()
    assert "process" not in config.tools.poll
    assert "terminal" not in config.tools.failure_tolerant


def test_volatile_result_keys_replace_the_default_list() -> None:
    """volatile_result_keys replaces the default list."""
    assert list(GuardConfig.from_mapping({"volatile_result_keys": ["nonce"]}).volatile_result_keys) == [
        "nonce"
    ]


def test_telemetry_section_is_parsed() -> None:
    """The telemetry section sets span_mode, turn_spans, max_tool_values and max_signature_series."""
    config = GuardConfig.from_mapping(
        {
            "telemetry": {
                "span_mode": "decisions",
                "turn_spans": True,
                "max_tool_values": 7,
                "max_signature_series": 9,
            }
        }
    )
    assert config.telemetry.span_mode == "decisions"
    assert config.telemetry.turn_spans is True
    assert config.telemetry.max_tool_values == 7
    assert config.telemetry.max_signature_series == 9


@pytest.mark.parametrize("span_mode", ["auto", "own", "event", "decisions", "off"])
def test_every_span_mode_is_accepted(span_mode: str) -> None:
    """telemetry.span_mode accepts auto, own, event, decisions and off."""
    assert GuardConfig.from_mapping({"telemetry": {"span_mode": span_mode}}).telemetry.span_mode == span_mode


def test_warn_equal_to_stop_is_allowed() -> None:
    """warn_after ≤ hard_stop_after: equality is allowed."""
    config = GuardConfig.from_mapping({"warn_after": {"exact_failure": 5}})
    assert config.warn_after["exact_failure"] == 5


def test_streak_warn_thresholds_have_no_stop_counterpart() -> None:
    """read_only_streak and write_streak may be tuned in warn_after (they never stop)."""
    config = GuardConfig.from_mapping({"warn_after": {"read_only_streak": 100, "write_streak": 1}})
    assert config.warn_after["read_only_streak"] == 100
    assert config.warn_after["write_streak"] == 1


# -- files ---------------------------------------------------------------------------------------


def test_from_file_reads_yaml(tmp_path: Path) -> None:
    """from_file reads a YAML file with the documented keys."""
    path = tmp_path / "otelguard.yaml"
    path.write_text(
        "mode: unattended\n"
        "warnings: false\n"
        "warn_after: {exact_failure: 3}\n"
        "caps:\n  on_hit: reject\n  turn: {web_search: 10}\n"
        "volatile_result_keys: [nonce]\n"
        "max_tracked_signatures: 128\n",
        encoding="utf-8",
    )
    config = GuardConfig.from_file(path)
    assert config.mode == "unattended"
    assert config.hard_stop_enabled is True
    assert config.warnings is False
    assert config.warn_after["exact_failure"] == 3
    assert config.caps.on_hit == "reject"
    assert config.caps.turn["web_search"] == 10
    assert list(config.volatile_result_keys) == ["nonce"]
    assert config.max_tracked_signatures == 128
    assert GuardConfig.from_file(str(path)) == config


def test_from_file_empty_gives_defaults(tmp_path: Path) -> None:
    """An empty config file gives the defaults (every key is optional)."""
    path = tmp_path / "empty.yaml"
    path.write_text("", encoding="utf-8")
    assert GuardConfig.from_file(path) == GuardConfig()


def test_from_file_rejects_unknown_keys(tmp_path: Path) -> None:
    """from_file raises ConfigError for a bad key, with a did-you-mean hint."""
    path = tmp_path / "bad.yaml"
    path.write_text("warn_after:\n  exact_falure: 2\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        GuardConfig.from_file(path)
    assert "warn_after.exact_falure" in str(info.value)
    assert "did you mean" in str(info.value)
    assert "exact_failure" in str(info.value)


def test_from_file_missing_or_malformed_is_a_config_error(tmp_path: Path) -> None:
    """A missing file or invalid YAML is a ConfigError, not an OSError or a YAML error."""
    with pytest.raises(ConfigError):
        GuardConfig.from_file(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("mode: [unclosed\n", encoding="utf-8")
    with pytest.raises(ConfigError):
        GuardConfig.from_file(bad)


def test_from_file_non_mapping_document_is_a_config_error(tmp_path: Path) -> None:
    """A YAML document that is not a mapping is a ConfigError."""
    path = tmp_path / "list.yaml"
    path.write_text("- mode\n- interactive\n", encoding="utf-8")
    with pytest.raises(ConfigError):
        GuardConfig.from_file(path)


# -- hermes-agent aliases (the hermes integration's dialect) ----------------------------------------


def test_the_core_reads_only_otelguards_keys() -> None:
    """Without the hermes dialect a hermes key is an unknown key; the dialect is handed in, and a file
    is read through it as a mapping is."""
    with pytest.raises(ConfigError) as info:
        GuardConfig.from_mapping({"warnings_enabled": False})
    assert info.value.key == "warnings_enabled"
    assert GuardConfig.from_mapping({"warnings_enabled": False}, dialect=hermes_dialect).warnings is False
    seen: list[dict[str, Any]] = []

    def spy(section: dict[str, Any]) -> dict[str, Any]:
        seen.append(section)
        return {"mode": "unattended"}

    assert GuardConfig.from_mapping({"anything": 1}, dialect=spy).mode == "unattended"
    assert seen == [{"anything": 1}]


def test_a_lone_tool_loop_guardrails_block_is_unwrapped(tmp_path: Path) -> None:
    path = tmp_path / "hermes.yaml"
    path.write_text("tool_loop_guardrails:\n  hard_stop_enabled: true\n  loop_caps: {max_subagents: 2}\n")
    config = GuardConfig.from_file(path, dialect=hermes_dialect)
    assert config.hard_stop is True and config.caps.turn["subagents"] == 2


def test_hermes_enabled_flags() -> None:
    """warnings_enabled → warnings, hard_stop_enabled → hard_stop."""
    config = config_from_hermes({"warnings_enabled": False, "hard_stop_enabled": True})
    assert config.warnings is False
    assert config.hard_stop is True
    assert config.hard_stop_enabled is True


def test_hermes_non_interactive_hard_stop_false_turns_hard_stop_off() -> None:
    """non_interactive_hard_stop_enabled: false means hard_stop: false ..."""
    config = config_from_hermes({"mode": "unattended", "non_interactive_hard_stop_enabled": False})
    assert config.hard_stop_enabled is False


def test_hermes_non_interactive_hard_stop_false_yields_to_explicit_hard_stop() -> None:
    """... unless hard_stop is set."""
    config = config_from_hermes({"hard_stop": True, "non_interactive_hard_stop_enabled": False})
    assert config.hard_stop_enabled is True


def test_hermes_non_interactive_hard_stop_true_keeps_mode_default() -> None:
    """non_interactive_hard_stop_enabled: true leaves hard_stop following mode."""
    assert config_from_hermes({"non_interactive_hard_stop_enabled": True}).hard_stop_enabled is False
    unattended = config_from_hermes({"mode": "unattended", "non_interactive_hard_stop_enabled": True})
    assert unattended.hard_stop_enabled is True


def test_hermes_loop_caps() -> None:
    """loop_caps.max_web_searches → caps.turn.web_search, loop_caps.max_subagents → caps.turn.subagents."""
    config = config_from_hermes({"loop_caps": {"max_web_searches": 7, "max_subagents": 3}})
    assert config.caps.turn["web_search"] == 7
    assert config.caps.turn["subagents"] == 3
    assert dict(config.caps.session) == {"web_search": 200, "subagents": 200}


def test_hermes_idempotent_no_progress_inside_threshold_maps() -> None:
    """idempotent_no_progress inside warn_after/hard_stop_after → no_progress."""
    config = config_from_hermes(
        {"warn_after": {"idempotent_no_progress": 3}, "hard_stop_after": {"idempotent_no_progress": 7}}
    )
    assert config.warn_after["no_progress"] == 3
    assert config.hard_stop_after["no_progress"] == 7


@pytest.mark.parametrize(
    ("flat_key", "section", "detector"),
    [
        ("exact_failure_warn_after", "warn_after", "exact_failure"),
        ("exact_failure_block_after", "hard_stop_after", "exact_failure"),
        ("same_tool_failure_warn_after", "warn_after", "same_tool_failure"),
        ("same_tool_failure_halt_after", "hard_stop_after", "same_tool_failure"),
        ("no_progress_warn_after", "warn_after", "no_progress"),
        ("no_progress_block_after", "hard_stop_after", "no_progress"),
    ],
)
def test_hermes_flat_threshold_keys(flat_key: str, section: str, detector: str) -> None:
    """The flat hermes keys *_warn_after / *_block_after / *_halt_after set the matching threshold."""
    value = 4 if section == "warn_after" else 9
    config = config_from_hermes({flat_key: value, "hard_stop_after": {detector: 9}})
    assert getattr(config, section)[detector] == value


def test_hermes_section_as_a_whole() -> None:
    """A complete hermes tool_loop_guardrails section is accepted as it stands."""
    section: dict[str, Any] = {
        "warnings_enabled": True,
        "hard_stop_enabled": False,
        "warn_after": {"exact_failure": 2, "same_tool_failure": 3, "idempotent_no_progress": 2},
        "hard_stop_after": {"exact_failure": 5, "same_tool_failure": 8, "idempotent_no_progress": 5},
        "loop_caps": {"max_web_searches": 20, "max_subagents": 4},
    }
    config = config_from_hermes(section)
    assert config.hard_stop_enabled is False
    assert config.warn_after["no_progress"] == 2
    assert config.caps.turn["web_search"] == 20
    assert config.caps.turn["subagents"] == 4


# -- ConfigError paths ---------------------------------------------------------------------------

# (mapping, dotted key path, offending value as it must appear, fragment of what is allowed)
BAD_CONFIGS: list[tuple[dict[str, Any], str, str, str]] = [
    ({"mdoe": "interactive"}, "mdoe", "mdoe", "did you mean 'mode'"),
    (
        {"warn_after": {"exact_falure": 2}},
        "warn_after.exact_falure",
        "exact_falure",
        "did you mean 'exact_failure'",
    ),
    ({"hard_stop_after": {"cylce": 3}}, "hard_stop_after.cylce", "cylce", "did you mean 'cycle'"),
    ({"caps": {"trun": {}}}, "caps.trun", "trun", "did you mean 'turn'"),
    ({"tools": {"raed": ["x"]}}, "tools.raed", "raed", "did you mean 'read'"),
    ({"telemetry": {"span_mod": "own"}}, "telemetry.span_mod", "span_mod", "did you mean 'span_mode'"),
    ({"loop_caps": {"max_web_search": 3}}, "loop_caps.max_web_search", "max_web_search", "did you mean"),
    ({"mode": "batch"}, "mode", "batch", "unattended"),
    ({"caps": {"on_hit": "stop"}}, "caps.on_hit", "stop", "reject"),
    ({"telemetry": {"span_mode": "all"}}, "telemetry.span_mode", "all", "decisions"),
    ({"hard_stop": "on"}, "hard_stop", "on", "true"),
    ({"warnings": "yes"}, "warnings", "yes", "true"),
    ({"warnings_enabled": "no"}, "warnings", "no", "true"),
    ({"warn_after": {"cycle": "2"}}, "warn_after.cycle", "2", "integer"),
    ({"warn_after": {"cycle": 2.5}}, "warn_after.cycle", "2.5", "integer"),
    ({"warn_after": {"exact_failure": True}}, "warn_after.exact_failure", "True", "integer"),
    ({"warn_after": {"exact_failure": 0}}, "warn_after.exact_failure", "0", ">= 1"),
    ({"warn_after": {"exact_failure": -1}}, "warn_after.exact_failure", "-1", ">= 1"),
    ({"hard_stop_after": {"refusal": -6}}, "hard_stop_after.refusal", "-6", ">= 1"),
    ({"max_tracked_signatures": 0}, "max_tracked_signatures", "0", ">= 1"),
    ({"max_tracked_signatures": "many"}, "max_tracked_signatures", "many", "integer"),
    ({"caps": {"turn": {"web_search": -1}}}, "caps.turn.web_search", "-1", ">= 0"),
    ({"caps": {"session": {"subagents": -5}}}, "caps.session.subagents", "-5", ">= 0"),
    ({"caps": {"turn": {"web_search": "10"}}}, "caps.turn.web_search", "10", "integer"),
    ({"loop_caps": {"max_web_searches": -1}}, "max_web_searches", "-1", ">= 0"),
    ({"warn_after": [1, 2]}, "warn_after", "[1, 2]", "mapping"),
    ({"tools": {"read": "read_file"}}, "tools.read", "read_file", "list"),
    ({"tools": {"shell": "bash"}}, "tools.shell", "bash", "list"),
    ({"tools": {"shell": ["bash", ""]}}, "tools.shell[1]", "''", "non-empty string"),
    ({"tool_groups": {"g": "x"}}, "tool_groups.g", "x", "list"),
    ({"spawn_tools": {"fan_out": 5}}, "spawn_tools.fan_out", "5", "null"),
    ({"volatile_result_keys": "timestamp"}, "volatile_result_keys", "timestamp", "list"),
    ({"telemetry": {"max_tool_values": 0}}, "telemetry.max_tool_values", "0", ">= 1"),
    ({"telemetry": {"turn_spans": "yes"}}, "telemetry.turn_spans", "yes", "true"),
]


@pytest.mark.parametrize(
    ("mapping", "path", "value", "allowed"), BAD_CONFIGS, ids=[c[1] for c in BAD_CONFIGS]
)
def test_config_error_names_key_value_and_allowed(
    mapping: dict[str, Any], path: str, value: str, allowed: str
) -> None:
    """Every ConfigError message names the dotted key path, the bad value and what is allowed."""
    hermes = {"loop_caps", "warnings_enabled"} & set(mapping)  # rows of hermes-agent's dialect
    with pytest.raises(ConfigError) as info:
        GuardConfig.from_mapping(mapping, dialect=hermes_dialect if hermes else None)
    message = str(info.value)
    assert path in message
    assert value in message
    assert allowed in message


@pytest.mark.parametrize(
    ("mapping", "detector"),
    [
        ({"warn_after": {"exact_failure": 6}}, "exact_failure"),
        ({"hard_stop_after": {"cycle": 1}}, "cycle"),
        ({"warn_after": {"refusal": 4}, "hard_stop_after": {"refusal": 3}}, "refusal"),
        ({"no_progress_warn_after": 9}, "no_progress"),  # hermes-agent's dialect
    ],
)
def test_warn_above_stop_is_a_config_error(mapping: dict[str, Any], detector: str) -> None:
    """A warn threshold above its stop threshold is a ConfigError naming that detector's key."""
    with pytest.raises(ConfigError) as info:
        GuardConfig.from_mapping(mapping, dialect=hermes_dialect)
    message = str(info.value)
    assert f"warn_after.{detector}" in message or f"hard_stop_after.{detector}" in message


def test_streaks_have_no_stop_threshold() -> None:
    """read_only_streak never stops: hard_stop_after.read_only_streak is an unknown key."""
    with pytest.raises(ConfigError) as info:
        GuardConfig.from_mapping({"hard_stop_after": {"read_only_streak": 50}})
    assert "hard_stop_after.read_only_streak" in str(info.value)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"mode": "batch"},
        {"warn_after": {"exact_falure": 2}},
        {"max_tracked_signatures": 0},
        {"hard_stop_after": {"exact_failure": 1}},
        {"warnings": None},
    ],
)
def test_the_constructor_itself_validates(kwargs: dict[str, Any]) -> None:
    """GuardConfig(...) itself raises ConfigError, not only from_mapping."""
    with pytest.raises(ConfigError):
        GuardConfig(**kwargs)


def test_config_error_is_a_value_error_and_carries_the_key() -> None:
    """ConfigError is a ValueError and carries key/value/allowed for programs."""
    with pytest.raises(ValueError) as info:
        GuardConfig.from_mapping({"mode": "batch"})
    assert isinstance(info.value, ConfigError)
    assert info.value.key == "mode"
    assert info.value.value == "batch"


def test_top_level_non_mapping_is_a_config_error() -> None:
    """A config that is not a mapping is a ConfigError."""
    with pytest.raises(ConfigError):
        GuardConfig.from_mapping([("mode", "interactive")])  # type: ignore[arg-type]


def test_unknown_keys_inside_tools_section_list_the_allowed_keys() -> None:
    """An unknown key's message lists the allowed keys."""
    with pytest.raises(ConfigError) as info:
        GuardConfig.from_mapping({"tools": {"writes": []}})
    for key in ("read", "write", "shell", "poll", "failure_tolerant", "replace"):
        assert key in str(info.value)


def test_cap_keys_may_be_any_tool_name_or_glob() -> None:
    """A cap key that is neither a group nor a default tool is accepted (tool name or glob)."""
    config = GuardConfig.from_mapping({"caps": {"turn": {"my_tool": 3, "mcp__*__query": 4}}})
    assert config.caps.turn["my_tool"] == 3
    assert config.caps.turn["mcp__*__query"] == 4


# -- tool classes, as the the guard's observers see them -----------------------------------

DEFAULT_CLASSES = {
    "read": [
        "read_file", "search_files", "grep", "glob", "list_directory", "web_search", "web_fetch", "web_extract",
        "browser_snapshot", "mcp_github_read_file", "mcp_fs_list_directory", "mcp_exa_search",
        "mcp_brave_search_web", "skill_view", "skills_list", "Read", "Grep", "Glob", "LS", "WebFetch", "WebSearch",
    ],
    "write": [
        "write_file", "patch", "delete_file", "browser_click", "browser_type",
        "browser_navigate", "send_message", "git_commit", "git_push", "Edit",
        "MultiEdit", "Write", "NotebookEdit",
        # the coding agents' file editors
        "str_replace_editor", "str_replace_based_edit_tool", "text_editor", "edit_file", "apply_patch",
        "replace", "edit", "create", "insert",
    ],
    "shell": [
        "terminal", "execute_code", "Bash", "bash", "execute_bash", "shell", "local_shell",
        "run_shell_command", "execute_command", "run_terminal_cmd", "exec_command",
    ],
    "poll": ["process", "build_poll", "job_get_result"],
    # the spawn tools: a spawn is not an edit
    "unknown": ["frobnicate", "mcp_custom_thing", "delegate_task", "spawn_agent", "Task", "Agent"],
}  # fmt: skip


def observed_class(tool: str, **config: Any) -> str:
    recorder = RecordingObserver()
    guard = Guard(GuardConfig.from_mapping({"signature_key": "k", **config}), observers=(recorder,))
    guard.start_turn()
    guard.before_call(tool, {})
    return recorder.call_starts[-1].tool_class


@pytest.mark.parametrize(
    ("tool", "tool_class"), [(tool, cls) for cls, tools in DEFAULT_CLASSES.items() for tool in tools]
)
def test_default_tool_classes(tool: str, tool_class: str) -> None:
    """The defaults classify the common hermes-agent, MCP and Claude Code tool names."""
    assert observed_class(tool) == tool_class


def test_write_wins_over_read() -> None:
    """write wins over read when both match."""
    assert observed_class("dual_tool", tools={"read": ["dual_tool"], "write": ["dual_*"]}) == "write"
    assert observed_class("mcp_fs_read_write_file") == "write"


def test_shell_wins_over_write_and_read() -> None:
    """shell wins over write (and so over read) when several lists match a tool."""
    tools = {"read": ["dual_tool"], "write": ["dual_*"], "shell": ["dual_tool"]}
    assert observed_class("dual_tool", tools=tools) == "shell"
    assert observed_class("Bash", tools={"write": ["Bash"]}) == "shell"


def test_configured_shell_tools_are_shells_and_failure_tolerant() -> None:
    """tools.shell extends the defaults; a shell of one's own is failure-tolerant without being listed."""
    config = GuardConfig.from_mapping({"tools": {"shell": ["my_sh*"]}, "signature_key": "k"})
    facts = catalog_for(config).facts("my_shell")
    assert (facts.tool_class, facts.failure_tolerant) == ("shell", True)
    assert catalog_for(config).facts("bash").tool_class == "shell"


def test_tools_replace_with_a_shell_list_keeps_only_it() -> None:
    """With tools.replace: true only the listed shells are shells; a default shell becomes unknown."""
    tools = {"replace": True, "shell": ["my_shell"]}
    assert observed_class("my_shell", tools=tools) == "shell"
    assert observed_class("bash", tools=tools) == "unknown"


def test_configured_names_and_globs_classify_tools() -> None:
    """tools lists take exact names and fnmatch globs."""
    config = {"tools": {"read": ["lookup_*"], "poll": ["wait_for_job"], "write": ["deploy"]}}
    assert observed_class("lookup_customer", **config) == "read"
    assert observed_class("wait_for_job", **config) == "poll"
    assert observed_class("deploy", **config) == "write"


def test_tools_replace_makes_default_names_unknown() -> None:
    """With tools.replace: true the default names are no longer classified."""
    config = {"tools": {"replace": True, "read": ["only_reader"]}}
    assert observed_class("read_file", **config) == "unknown"
    assert observed_class("terminal", **config) == "unknown"
    assert observed_class("only_reader", **config) == "read"


def test_a_stop_threshold_below_the_default_warn_names_the_stop_key() -> None:
    """When only hard_stop_after.X was set, the error names that key, not the default warn_after.X."""
    with pytest.raises(ConfigError) as exc:
        GuardConfig.from_mapping({"hard_stop_after": {"cycle": 1}})
    assert exc.value.key == "hard_stop_after.cycle"
    assert "warn_after.cycle (2)" in str(exc.value)


def test_a_top_level_that_is_not_a_mapping_names_the_top_level() -> None:
    with pytest.raises(ConfigError) as exc:
        GuardConfig.from_mapping(["a"])  # type: ignore[arg-type]
    assert exc.value.key == "(top level)"
