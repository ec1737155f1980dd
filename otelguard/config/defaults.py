"""The defaults: the detectors' thresholds and the catalogue of tools otelguard knows by name.

The catalogue names the tools of the agents otelguard has been run with (hermes-agent, Claude Code,
the coding agents); a config extends it (``tools``, ``tool_groups``, ``spawn_tools``, ``ignore_args``)
or replaces it (``tools.replace: true``). The known names and globs also tell a typo from a tool of
the user's own (``otelguard.config.names``).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from otelguard.config.names import is_glob

__all__ = [
    "DEFAULT_FAILURE_TOLERANT",
    "DEFAULT_HARD_STOP_AFTER",
    "DEFAULT_IGNORE_ARGS",
    "DEFAULT_POLL_TOOLS",
    "DEFAULT_READ_TOOLS",
    "DEFAULT_REJECTS_BEFORE_STOP",
    "DEFAULT_SHELL_TOOLS",
    "DEFAULT_SPAWN_TOOLS",
    "DEFAULT_TOOL_GROUPS",
    "DEFAULT_VOLATILE_RESULT_KEYS",
    "DEFAULT_WARN_AFTER",
    "DEFAULT_WRITE_TOOLS",
    "KNOWN_GLOBS",
    "KNOWN_NAMES",
]

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
        "stagnation": 11,
        "unchanged_check": 5,
        "no_action": 3,
        "repeated_reply": 2,
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
        "stagnation": 12,
        "unchanged_check": 5,
        "no_action": 8,
        "repeated_reply": 5,
    }
)
# How many times one repeated call is refused before sending it again stops the turn. A refused call
# does not run, so refusing it again costs the model one reply, and a false stop costs the task: in
# replays of public agent runs, solved runs sent the very same call through up to seven refusals
# (a lookup resent 11 times with the same answer, a rejected edit 11 times) and then moved on.
DEFAULT_REJECTS_BEFORE_STOP: Final = 7

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
# The spawn tools (DEFAULT_SPAWN_TOOLS) are in no class: a spawn is not an edit, so 30 of them in a
# row are not "changing calls without reading anything back"; as `unknown` they neither count nor
# reset the streaks, and identical_call and cycle still see a spawn resent with the same prompt.
DEFAULT_WRITE_TOOLS: Final = (
    "write_file", "patch", "edit_file", "delete_file", "move_file",
    "create_directory", "browser_click", "browser_type", "browser_navigate", "browser_press",
    "browser_scroll", "send_message", "memory", "cronjob",
    "git_*", "mcp_*_write_*", "mcp_*_create_*", "mcp_*_update_*", "mcp_*_delete_*",
    # Claude Code
    "Edit", "MultiEdit", "Write", "NotebookEdit",
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
    # Claude Code's, Gemini CLI's, Copilot CLI's and OpenCode's free-text labels: the same command retried with a new description
    # is the same call.
    {
        "Bash": ("description",),
        "Task": ("description",),
        "Agent": ("description",),
        "run_shell_command": ("description",),  # Gemini CLI's shell
        "bash": ("description",),  # Copilot CLI's and OpenCode's shell
    }
)
DEFAULT_VOLATILE_RESULT_KEYS: Final = (
    "duration_seconds",
    "duration_ms",
    "elapsed",
    "timestamp",
    "execution_count",
)


_DEFAULT_TOOL_NAMES: Final = (
    *DEFAULT_READ_TOOLS, *DEFAULT_WRITE_TOOLS, *DEFAULT_SHELL_TOOLS, *DEFAULT_POLL_TOOLS,
    *DEFAULT_FAILURE_TOLERANT, *DEFAULT_SPAWN_TOOLS, *DEFAULT_IGNORE_ARGS,
)  # fmt: skip
KNOWN_NAMES: Final = tuple(dict.fromkeys(n for n in _DEFAULT_TOOL_NAMES if not is_glob(n)))
"""Every tool the defaults name exactly."""
KNOWN_GLOBS: Final = tuple(dict.fromkeys(n for n in _DEFAULT_TOOL_NAMES if is_glob(n)))
"""Every glob of the defaults."""
