"""Which recorded calls changed a run's files or its world: what a halt or a refusal can take away.

The benchmark scores a halt of a solved run that ended at its budget by whether the run changed
something after the stop (its passing patch or final state may have come after it). A call is a
change when, by the guard's own tool classes (``otelguard.core.classify``, the defaults):

* it is a ``write`` tool (the file editors, ``Edit``/``Write``, ``git_*``, the browser's actions,
  ``send_message``, ...), except an editor's ``view`` command (``str_replace_editor`` with
  ``command: view`` only reads), and it did not fail: an edit the harness refused (a linter's
  refusal, a string not found) changed nothing;
* it is a ``shell`` command that writes, as far as its text shows: a redirection into a file, an
  in-place ``sed``/``perl``, ``tee``, ``mv``/``cp``/``rm``/``mkdir``/``touch``/``patch``, a
  ``git`` command that changes the work tree (``apply``, ``checkout``, ``reset``, ``stash``, ...),
  a package install, or inline Python that opens a file for writing. Failed or not: a command that
  writes and then runs a failing test exits non-zero after its write. A script run by name
  (``python reproduce.py``) is a check, not a change: what it writes is not in the record;
* it is a tool of no class (a tau-bench or tau2-bench domain tool, a spawn tool, ...) whose name does
  not start with a reading verb (``get_``, ``find_``, ``list_``, ``search_``, ``check_``,
  ``calculate``, ``think``, ...), and it did not fail: ``update_*``, ``cancel_*``, ``book_*``,
  ``modify_*``, ``exchange_*``, ``transfer_to_human_agents``. An unknown verb counts as a change, so
  the rule can call a halt harmful that was not, never the other way round.

``read`` and ``poll`` tools (``Read``, ``grep``, SWE-agent's ``open``/``goto``/searches) never
change anything.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

import orjson

from otelguard import GuardConfig
from otelguard.core.classify import ToolCatalog, catalog_for, looks_failed
from otelguard.readers.events import ToolCall

__all__ = ["ChangeClassifier", "shell_writes"]

EDITOR_READS: Final = frozenset({"view"})
"""An editor's commands that only read (``str_replace_editor``'s ``view``)."""
READING_VERBS: Final = frozenset(
    {
        "get", "find", "list", "search", "lookup", "check", "calculate", "compute", "count", "can",
        "think", "read", "view", "show", "fetch", "query", "verify", "validate", "summarize",
        "describe", "filter", "suggest", "estimate", "browse", "inspect",
    }
)  # fmt: skip
"""A tool of no class whose name starts with one of these (``get_order_details``, ``Search``) reads."""

_HEREDOC: Final = re.compile(r"<<-?\s*(['\"]?)(\w+)\1")
_QUOTED: Final = re.compile(r"'[^']*'|\"(?:[^\"\\]|\\.)*\"")
# A redirection into a file: not a descriptor duplication (2>&1) and not into /dev/null.
_REDIRECT: Final = re.compile(r"(?<![<>&])(?:\d|&)?>>?(?![>&])\s*(?!/dev/null\b)(?=[^\s;&|)])")
_WRITING_COMMANDS: Final = re.compile(
    r"(?:^|[\s;&|(`]|\$\()"
    r"(?:mv|cp|rm|rmdir|mkdir|touch|tee|ln|chmod|truncate|patch|dd|unzip"
    r"|sed\s+(?:[^|;&]*\s)?-[a-zA-Z]*i"
    r"|perl\s+(?:[^|;&]*\s)?-[a-zA-Z]*i"
    r"|git\s+(?:apply|am|checkout|reset|restore|stash|commit|merge|rebase|cherry-pick|mv|rm|clean|pull|switch)"
    r"|(?:pip3?|uv\s+pip|python3?\s+-m\s+pip|apt(?:-get)?|npm|yarn|conda|gem|cargo)\s+(?:install|add|uninstall|remove))"
    r"(?=\s|$)",
    re.MULTILINE,
)
_PYTHON_WRITES: Final = re.compile(
    r"open\([^)]*['\"][wax]b?\+?['\"]|\.write_(?:text|bytes)\(|os\.(?:remove|rename|replace|unlink|makedirs|mkdir)\("
    r"|shutil\.(?:copy|move|rmtree)|\.unlink\("
)


def shell_writes(command: str) -> bool:
    """Whether a shell command's text shows it writing a file or changing the environment."""
    if _PYTHON_WRITES.search(command):
        return True
    return bool(_REDIRECT.search(_outside(command)) or _WRITING_COMMANDS.search(_outside(command)))


def _outside(command: str) -> str:
    """The command without its heredoc bodies and quoted strings (code and text, not the shell's)."""
    lines = command.split("\n")
    kept: list[str] = []
    end: str | None = None
    for line in lines:
        if end is not None:
            if line.strip() == end:
                end = None
            continue
        kept.append(line)
        opened = _HEREDOC.search(line)
        if opened:
            end = opened.group(2)
    return _QUOTED.sub("''", "\n".join(kept))


def _args(args: Any) -> Any:
    if isinstance(args, (str, bytes)):
        try:
            return orjson.loads(args)
        except orjson.JSONDecodeError:
            return args
    return args


def _command(args: Any) -> str:
    parsed = _args(args)
    if isinstance(parsed, Mapping):
        command = parsed.get("command") or parsed.get("cmd") or ""
        if isinstance(command, list):
            return " ".join(str(part) for part in command)
        return str(command)
    return parsed if isinstance(parsed, str) else ""


class ChangeClassifier:
    """Tells a change from a read by the guard's tool classes of a config."""

    def __init__(self, config: GuardConfig) -> None:
        self._catalog: ToolCatalog = catalog_for(config)

    def changes(self, call: ToolCall) -> bool:
        tool_class = self._catalog.tool_class(call.tool_name)
        if tool_class in ("read", "poll"):
            return False
        if tool_class == "shell":
            return shell_writes(_command(call.args))
        if self._failed(call, shell=False):
            return False
        if tool_class == "write":
            words = _command(call.args).split()
            if words and words[0] == call.tool_name:  # the action as text: "str_replace_editor view /a"
                words = words[1:]
            return not (words and words[0] in EDITOR_READS)
        verb = re.split(r"[_\W]", call.tool_name.strip(), maxsplit=1)[0].lower()
        return verb not in READING_VERBS

    @staticmethod
    def _failed(call: ToolCall, shell: bool) -> bool:
        if call.cancelled or call.refusal is not None:
            return True
        if call.failed is not None:
            return call.failed
        return call.has_result and looks_failed(call.result, shell)
