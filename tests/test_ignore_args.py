"""ignore_args: cosmetic top-level arguments left out of the signature, per tool name or glob."""

from __future__ import annotations

import json
from typing import Any

import pytest

from otelguard import Guard, GuardConfig
from otelguard.errors import ConfigError
from otelguard.testing import RecordingObserver, codes, run_script
from tests.test_detectors import KEY, make_guard

BUILD_FAILED = "npm ERR! Missing script: build"


def args_hash(tool: str, args: Any, **config: Any) -> str:
    guard = Guard(GuardConfig.from_mapping({"signature_key": KEY, **config}))
    guard.start_turn()
    decision = guard.before_call(tool, args)
    assert decision.signature is not None
    return decision.signature.args_hash


# -- defaults --------------------------------------------------------------------------------------


def test_defaults_ignore_claude_codes_description_labels() -> None:
    """Default: Bash, Task and Agent (Claude Code), run_shell_command (Gemini CLI) and bash (Copilot
    CLI, OpenCode) leave out their free-text description."""
    assert dict(GuardConfig().ignore_args) == {
        "Bash": ("description",),
        "Task": ("description",),
        "Agent": ("description",),
        "run_shell_command": ("description",),
        "bash": ("description",),
    }
    for tool in ("Bash", "Task", "Agent", "run_shell_command", "bash"):
        first = args_hash(tool, {"command": "npm run build", "description": "Build the project"})
        again = args_hash(tool, {"command": "npm run build", "description": "Retry the build"})
        assert first == again == args_hash(tool, {"command": "npm run build"})


def test_the_other_arguments_still_count() -> None:
    """Only the listed keys are left out: a different command is a different call."""
    assert args_hash("Bash", {"command": "npm run build", "description": "x"}) != args_hash(
        "Bash", {"command": "npm test", "description": "x"}
    )


def test_other_tools_keep_their_description() -> None:
    """A tool with no ignore_args entry hashes every argument."""
    assert args_hash("Read", {"file_path": "/a", "description": "one"}) != args_hash(
        "Read", {"file_path": "/a", "description": "two"}
    )


def test_only_top_level_keys_are_left_out() -> None:
    """A nested key of the same name is an argument value, not a label: it still counts."""
    assert args_hash("Bash", {"command": "x", "env": {"description": "a"}}) != args_hash(
        "Bash", {"command": "x", "env": {"description": "b"}}
    )


def test_json_string_arguments_drop_the_keys_too() -> None:
    """Arguments sent as a JSON string are parsed, the keys dropped, then hashed like the mapping."""
    mapping = args_hash("Bash", {"command": "npm run build", "description": "one"})
    text = json.dumps({"description": "two", "command": "npm run build"})
    assert args_hash("Bash", text) == mapping
    assert args_hash("Bash", text.encode()) == mapping
    assert args_hash("Bash", json.dumps({"command": "npm run build", "description": "\ud800"})) == mapping


def test_the_build_retried_with_new_descriptions_is_one_call_for_the_detectors() -> None:
    """The real loop: `npm run build` four times, a new description each time: exact_failure sees it."""
    script = [
        ("Bash", {"command": "npm run build", "description": f"Build attempt {i}"}, BUILD_FAILED, True)
        for i in range(13)
    ]
    steps = run_script(make_guard(), script)
    assert codes(steps) == ["allow"] + ["exact_failure_warn"] * 4 + ["exact_failure_reject"] * 7 + [
        "exact_failure_block"
    ]
    without = run_script(make_guard(ignore_args={"Bash": []}), script)
    assert "exact_failure_warn" not in codes(without)


def test_spawn_counting_still_reads_the_full_arguments() -> None:
    """A spawn tool's batch list is counted even when its key is left out of the signature."""
    guard = make_guard(ignore_args={"delegate_task": ["tasks"]}, caps={"turn": {"subagents": 3}})
    batch = {"tasks": [{"goal": "a"}, {"goal": "b"}]}
    assert guard.before_call("delegate_task", batch).allows_execution
    guard.after_call("delegate_task", batch, "done", failed=False)
    refused = guard.before_call("delegate_task", json.dumps(batch))
    assert (refused.code, refused.count, refused.limit) == ("cap_turn", 2, 3)


# -- config ----------------------------------------------------------------------------------------


def test_globs_match_tool_names_and_entries_add_up() -> None:
    """Keys are tool names or fnmatch globs; every matching entry's keys are left out."""
    config = {"ignore_args": {"mcp_*": ["request_id"], "mcp_search": ["trace"]}}
    base = args_hash("mcp_search", {"q": "x"}, **config)
    assert args_hash("mcp_search", {"q": "x", "request_id": 1, "trace": 2}, **config) == base
    assert args_hash("mcp_fetch", {"q": "x", "request_id": 9}, **config) == args_hash(
        "mcp_fetch", {"q": "x"}, **config
    )
    assert args_hash("mcp_fetch", {"q": "x", "trace": 9}, **config) != args_hash(
        "mcp_fetch", {"q": "x"}, **config
    )


def test_merges_with_the_defaults_key_by_key() -> None:
    """A user entry adds to the defaults; an entry for a default tool replaces its list ([] disables it)."""
    config = GuardConfig.from_mapping({"ignore_args": {"my_tool": ["nonce"], "Task": []}})
    assert dict(config.ignore_args) == {
        "Bash": ("description",),
        "Task": (),
        "Agent": ("description",),
        "run_shell_command": ("description",),
        "bash": ("description",),
        "my_tool": ("nonce",),
    }
    assert config.to_mapping()["ignore_args"]["my_tool"] == ["nonce"]
    assert args_hash("Task", {"prompt": "p", "description": "a"}, ignore_args={"Task": []}) != args_hash(
        "Task", {"prompt": "p", "description": "b"}, ignore_args={"Task": []}
    )


@pytest.mark.parametrize(
    ("value", "path"),
    [
        (["Bash"], "ignore_args"),
        ({"Bash": "description"}, "ignore_args.Bash"),
        ({"Bash": [1]}, r"ignore_args.Bash\[0\]"),
        ({"Bash": [""]}, r"ignore_args.Bash\[0\]"),
        ({"": ["x"]}, "ignore_args"),
        ({3: ["x"]}, "ignore_args.3"),
    ],
)
def test_bad_values_are_config_errors_naming_the_key(value: Any, path: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{path}: "):
        GuardConfig.from_mapping({"ignore_args": value})


def test_observers_see_the_hash_without_the_ignored_keys() -> None:
    """The exported args_hash is the one the detectors use."""
    recorder = RecordingObserver()
    guard = Guard(GuardConfig(signature_key=KEY), observers=(recorder,))
    guard.start_turn()
    for description in ("one", "two"):
        args = {"command": "ls", "description": description}
        guard.before_call("Bash", args)
        guard.after_call("Bash", args, "ok", failed=False)
    first, second = recorder.calls
    assert first.signature == second.signature


def test_a_json_string_batch_with_a_lone_surrogate_is_still_counted() -> None:
    """Spawn counting reads JSON-string arguments the way the hash does, lone surrogates included."""
    guard = make_guard(caps={"turn": {"subagents": 2}})
    batch = json.dumps({"tasks": [{"goal": "\ud800"}, {"goal": "b"}, {"goal": "c"}]})
    refused = guard.before_call("delegate_task", batch)
    assert (refused.code, refused.count, refused.limit) == ("cap_turn", 0, 2)
