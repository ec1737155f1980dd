"""Tool classes, cap keys and spawn counts by tool name; the fallback failure classifier."""

from __future__ import annotations

import re
import threading
import weakref
from collections.abc import Iterable, Mapping
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any, Final

import orjson

from otelguard.config.names import TOKENS
from otelguard.core.decisions import ToolClass

if TYPE_CHECKING:
    from otelguard.config import GuardConfig

__all__ = ["NamePatterns", "ToolCatalog", "ToolFacts", "catalog_for", "looks_failed"]

_MAX_CACHED_NAMES: Final = 4096
_GLOB_CHARS: Final = frozenset("*?[")


class NamePatterns:
    """Exact names and fnmatch globs (case-sensitive: ``Read`` and ``read`` are different tools)."""

    __slots__ = ("_exact", "_globs")

    def __init__(self, patterns: Iterable[str]) -> None:
        patterns = tuple(patterns)
        self._exact = frozenset(p for p in patterns if not _GLOB_CHARS.intersection(p))
        self._globs = tuple(p for p in patterns if _GLOB_CHARS.intersection(p))

    def matches(self, name: str) -> bool:
        return name in self._exact or any(fnmatchcase(name, g) for g in self._globs)


class ToolFacts:
    """What the config says about one tool name: its class, its caps, whether it spawns subagents,
    which of its arguments are cosmetic."""

    __slots__ = (
        "caps_session",
        "caps_tree",
        "caps_turn",
        "failure_tolerant",
        "ignored_args",
        "spawn_arg",
        "tool_class",
    )

    def __init__(
        self,
        tool_class: ToolClass,
        failure_tolerant: bool,
        caps_turn: tuple[tuple[str, int], ...],
        caps_session: tuple[tuple[str, int], ...],
        spawn_arg: str | bool | None,
        ignored_args: frozenset[str] = frozenset(),
        caps_tree: tuple[tuple[str, int], ...] = (),
    ) -> None:
        self.tool_class = tool_class
        self.failure_tolerant = failure_tolerant
        self.caps_turn = caps_turn
        self.caps_session = caps_session
        self.spawn_arg = spawn_arg  # False: not a spawn tool; None: always one; str: batch argument
        self.ignored_args = ignored_args  # top-level argument keys left out of the signature
        self.caps_tree = caps_tree  # counted across the delegation tree (only for a guard in one)


def _tool_limits(limits: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
    """The caps of one scope that tools are charged to: every key with a limit but ``tokens``."""
    return tuple((key, limit) for key, limit in limits.items() if limit > 0 and key != TOKENS)


class ToolCatalog:
    """What the config says about each tool name, computed once per name and cached (bounded)."""

    def __init__(self, config: GuardConfig) -> None:
        tools = config.tools
        self._shell = NamePatterns(tools.shell)
        self._write = NamePatterns(tools.write)
        self._poll = NamePatterns(tools.poll)
        self._read = NamePatterns(tools.read)
        self._tolerant = NamePatterns(tools.failure_tolerant)
        # ``tokens`` caps the model's tokens (docs/model-turns.md): no tool is charged to it
        self._cap_matchers = {
            key: NamePatterns(config.tool_groups.get(key, (key,)))
            for key in (*config.caps.turn, *config.caps.session, *config.caps.tree)
            if key != TOKENS
        }
        self._turn_limits = _tool_limits(config.caps.turn)
        self._session_limits = _tool_limits(config.caps.session)
        self._tree_limits = _tool_limits(config.caps.tree)
        self._spawn = dict(config.spawn_tools)
        self._ignore = tuple(
            (NamePatterns((pattern,)), frozenset(keys))
            for pattern, keys in config.ignore_args.items()
            if keys
        )
        self._cache: dict[str, ToolFacts] = {}
        self._lock = threading.Lock()
        self.known_facts = self._cache.get
        """``known_facts(name)``: the facts of a name already looked up, else ``None`` (never computes).
        The guard asks it first on every call; a miss costs a ``facts(name)`` call."""

    def facts(self, name: str) -> ToolFacts:
        facts = self._cache.get(name)
        if facts is None:
            facts = self._compute(name)
            with self._lock:
                if len(self._cache) >= _MAX_CACHED_NAMES:
                    self._cache.clear()
                self._cache[name] = facts
        return facts

    def tool_class(self, name: str) -> ToolClass:
        return self.facts(name).tool_class

    def _compute(self, name: str) -> ToolFacts:
        tool_class: ToolClass
        if self._shell.matches(name):
            tool_class = "shell"
        elif self._write.matches(name):
            tool_class = "write"
        elif self._poll.matches(name):
            tool_class = "poll"
        elif self._read.matches(name):
            tool_class = "read"
        else:
            tool_class = "unknown"
        return ToolFacts(
            tool_class=tool_class,
            # a non-zero exit is often a shell's answer (grep finding nothing, a test still failing)
            failure_tolerant=tool_class == "shell" or self._tolerant.matches(name),
            caps_turn=tuple((k, v) for k, v in self._turn_limits if self._cap_matchers[k].matches(name)),
            caps_session=tuple(
                (k, v) for k, v in self._session_limits if self._cap_matchers[k].matches(name)
            ),
            spawn_arg=self._spawn.get(name, False),
            ignored_args=frozenset().union(*(keys for names, keys in self._ignore if names.matches(name))),
            caps_tree=tuple((k, v) for k, v in self._tree_limits if self._cap_matchers[k].matches(name)),
        )

    def spawn_count(self, facts: ToolFacts, parsed_args: Any) -> int:
        """Subagents a spawn tool starts: the batch list's length (list or JSON-string list), else 1."""
        if facts.spawn_arg is False:
            return 0
        if facts.spawn_arg is None or not isinstance(parsed_args, Mapping):
            return 1
        batch = parsed_args.get(facts.spawn_arg)
        if isinstance(batch, (str, bytes)):
            try:
                batch = orjson.loads(batch)
            except orjson.JSONDecodeError:
                return 1
        if isinstance(batch, (list, tuple)) and batch:
            return len(batch)
        return 1


_ERROR_PREFIX: Final = "Error"
_JSON_HINTS: Final = ('"error"', '"success"', '"exit_code"')
_SHELL_JSON_HINTS: Final = (*_JSON_HINTS, '"is_error"')

# The exit status lines live shells write into their results, each a whole line, each as its host
# prints it (nothing guessed from prose):
# * OpenHands' execute_bash observation ends with "[Command finished with exit code N]" (older
#   versions: "[The command completed with exit code N.]" before the working-directory lines);
#   -1 means the command has not finished.
# * Codex: its shell tools' output starts with "Exit code: N" and exec_command's with
#   "Process exited with code N" (after "Chunk ID"/"Wall time" lines).
_OPENHANDS_EXIT: Final = re.compile(
    r"^\[(?:Command finished with exit code (-?\d+)|The command completed with exit code (-?\d+)\.)\]\s*$",
    re.MULTILINE,
)
_CODEX_EXIT: Final = re.compile(r"^(?:Exit code: |Process exited with code )(-?\d+)\s*$", re.MULTILINE)
_HEAD_CHARS: Final = 400  # Codex's status line comes within the first few short lines
_TAIL_CHARS: Final = 600  # OpenHands' after the output, followed by at most two short lines


def looks_failed(result: Any, shell: bool = False) -> bool:
    """The fallback classifier for ``failed=None``: an ``"error"``, ``"success": false``, a non-zero
    ``"exit_code"``, or text starting with ``Error``. Parses JSON text only when a hint is present.

    ``shell``: the result of a ``shell`` tool, which also failed when it records a non-zero exit status
    in one of the fixed forms live shells use: ``"is_error": true`` (Claude Code), a non-zero
    ``metadata.exit_code`` (Codex's JSON output), OpenHands' ``[Command finished with exit code N]``
    line, Codex's ``Exit code: N`` / ``Process exited with code N`` line."""
    if isinstance(result, Mapping):
        return _mapping_failed(result, shell)
    if isinstance(result, (bytes, bytearray)):
        result = bytes(result).decode("utf-8", "replace")
    if not isinstance(result, str):
        return False
    text = result.lstrip()
    if text.startswith(_ERROR_PREFIX):
        return True
    hints = _SHELL_JSON_HINTS if shell else _JSON_HINTS
    if text[:1] == "{" and any(hint in text for hint in hints):
        try:
            parsed = orjson.loads(text)
        except orjson.JSONDecodeError:
            parsed = None
        if isinstance(parsed, Mapping):
            return _mapping_failed(parsed, shell)
    return shell and _shell_text_failed(text)


def _mapping_failed(result: Mapping[Any, Any], shell: bool = False) -> bool:
    error = result.get("error")
    if error not in (None, False, "", {}, []):
        return True
    if result.get("success") is False:
        return True
    if _nonzero(result.get("exit_code")):
        return True
    if not shell:
        return False
    if result.get("is_error") is True:
        return True
    metadata = result.get("metadata")
    return isinstance(metadata, Mapping) and _nonzero(metadata.get("exit_code"))


def _nonzero(code: Any) -> bool:
    return isinstance(code, (int, float)) and not isinstance(code, bool) and code != 0


def _shell_text_failed(text: str) -> bool:
    """A non-zero exit status line of OpenHands (in the tail) or Codex (in the head)."""
    tail = text[-_TAIL_CHARS:]
    if "exit code" in tail:
        found = _OPENHANDS_EXIT.search(tail)
        if found is not None:
            return int(found.group(1) or found.group(2)) not in (0, -1)
    head = text[:_HEAD_CHARS]
    if "xit" in head:
        status = _CODEX_EXIT.search(head)
        if status is not None:
            return int(status.group(1)) != 0
    return False


_CATALOGS: dict[int, ToolCatalog] = {}


def catalog_for(config: GuardConfig) -> ToolCatalog:
    """The catalog of a config, shared by every guard built from that config object.

    A host that makes a guard per session (the sidecar, the adapters' session pools) builds the
    catalog once, not per session; the entry goes when the config object does.
    """
    key = id(config)
    catalog = _CATALOGS.get(key)
    if catalog is None:
        catalog = ToolCatalog(config)
        _CATALOGS[key] = catalog
        weakref.finalize(config, _CATALOGS.pop, key, None)
    return catalog
