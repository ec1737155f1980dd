"""Reading a config file that may be hostile: bounded in size, depth, expansion and time.

A config file is small, local text. Anything else gets one clear line naming the file and what is
wrong, within a second and in bounded memory: a device, FIFO or directory is refused from its
``os.stat`` (opening a FIFO with no writer would block); the read stops past ``MAX_CONFIG_BYTES``;
the text must be UTF-8; YAML aliases may not expand past ``MAX_CONFIG_NODES`` (a 300-byte "billion
laughs" file expands to a billion strings) nor nest deeper than ``MAX_CONFIG_DEPTH``; integers are
at most ``MAX_INT_DIGITS`` digits. YAML errors give line and column and never quote the source
line: it may hold a secret such as ``signature_key``.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any, Final

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from otelguard.errors import ConfigError

__all__ = ["MAX_CONFIG_BYTES", "MAX_CONFIG_DEPTH", "MAX_CONFIG_NODES", "MAX_INT_DIGITS", "load_config_file"]

MAX_CONFIG_BYTES: Final = 64 * 1024
"""A full config is a few kilobytes; this leaves room for long tool lists and stays quick to parse."""
MAX_CONFIG_DEPTH: Final = 32
"""Nesting levels (mappings and lists), counted after alias expansion. otelguard's keys use four."""
MAX_CONFIG_NODES: Final = 100_000
"""Values (scalars, lists, mappings) in the document once every alias is expanded."""
MAX_INT_DIGITS: Final = 18
_NOT_REGULAR: Final = "not a regular file (a directory, FIFO or device)"
_QUOTED: Final = re.compile(r"'[^'\s]{5,}'|\"[^\"\s]{5,}\"")
"""Quoted source text inside a YAML problem (an alias, anchor or tag: none holds a space). A single
quoted character (``'\\t'``) helps and cannot hold a secret, so short quotes stay, and so do
PyYAML's own token names (``'<stream end>'``) and the text between two quotes (``', but got '``)."""
_INT_TAG: Final = "tag:yaml.org,2002:int"


def load_config_file(path: str | Path) -> Any:
    """The parsed YAML (or JSON) document of ``path``: plain dicts, lists and scalars, or ``None``."""
    text = _read_text(path)
    loader: _BoundedLoader | None = None
    try:
        loader = _BoundedLoader(text)
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node)
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        raise _file_error(path, f"{_where(exc.problem_mark)}not valid YAML: {_problem(exc)}") from None
    except yaml.reader.ReaderError as exc:
        where = _line_column(text, exc.position)
        raise _file_error(path, f"{where}not valid YAML: control character {exc.character!r}") from None
    except yaml.YAMLError as exc:
        raise _file_error(path, f"not valid YAML ({type(exc).__name__})") from None
    except (ValueError, OverflowError) as exc:
        # a timestamp or number the YAML resolver accepted but Python cannot build (2001-13-45);
        # the exception text would quote the value, so only its type is named
        raise _file_error(path, f"not valid YAML: a value could not be read ({type(exc).__name__})") from None
    finally:
        if loader is not None:
            loader.dispose()


def _read_text(path: str | Path) -> str:
    try:
        # stat first: opening a FIFO with no writer blocks, and a device can be endless
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise _file_error(path, _NOT_REGULAR)
        # O_NONBLOCK: if the path became a FIFO since the stat, opening it still returns at once
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
        with os.fdopen(fd, "rb") as file:
            if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                raise _file_error(path, _NOT_REGULAR)
            data = file.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise _file_error(path, f"cannot be read ({exc.strerror})") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise _file_error(path, f"larger than {MAX_CONFIG_BYTES:,} bytes, the most a config may be")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        where = _line_column(data[: exc.start].decode("utf-8"), exc.start)
        raise _file_error(path, f"{where}not UTF-8 text (byte offset {exc.start})") from None


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader with bounded composition depth and bounded integer literals."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def fetch_flow_collection_start(self, TokenClass: Any) -> None:
        # checked while scanning: the scanner reads every "[" ahead of the first token, so a file of
        # nested brackets would cost quadratic time before the composer could count its depth
        if self.flow_level >= MAX_CONFIG_DEPTH:
            raise yaml.MarkedYAMLError(
                problem=f"nested deeper than {MAX_CONFIG_DEPTH} levels", problem_mark=self.get_mark()
            )
        super().fetch_flow_collection_start(TokenClass)

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_CONFIG_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise yaml.MarkedYAMLError(
                    problem=f"nested deeper than {MAX_CONFIG_DEPTH} levels", problem_mark=mark
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_bounded_int(self, node: ScalarNode) -> int:
        digits = sum(ch.isalnum() for ch in str(node.value))
        if digits > MAX_INT_DIGITS:
            raise yaml.MarkedYAMLError(
                problem=f"integer of more than {MAX_INT_DIGITS} digits", problem_mark=node.start_mark
            )
        return self.construct_yaml_int(node)


_BoundedLoader.add_constructor(_INT_TAG, _BoundedLoader.construct_bounded_int)


def _check_expansion(root: Node) -> None:
    """Size and depth of the document with every alias expanded, without expanding it: each
    distinct node is measured once (iteratively, so a long alias chain cannot exhaust the stack)."""
    measured: dict[int, tuple[int, int]] = {}  # id(node) -> (values, depth) once expanded
    in_progress: set[int] = set()
    stack: list[Node] = [root]
    while stack:
        node = stack[-1]
        key = id(node)
        if key in measured:
            stack.pop()
            continue
        children = _children(node)
        pending = [child for child in children if id(child) not in measured]
        if key not in in_progress:
            in_progress.add(key)
            for child in pending:
                if id(child) in in_progress:
                    raise yaml.MarkedYAMLError(
                        problem="an alias refers to itself", problem_mark=child.start_mark
                    )
            stack.extend(pending)
            continue
        values = 1 + sum(measured[id(child)][0] for child in children)
        depth = 1 + max((measured[id(child)][1] for child in children), default=0)
        if values > MAX_CONFIG_NODES:
            raise yaml.MarkedYAMLError(
                problem=f"aliases expand to more than {MAX_CONFIG_NODES:,} values",
                problem_mark=node.start_mark,
            )
        if depth > MAX_CONFIG_DEPTH:
            raise yaml.MarkedYAMLError(
                problem=f"nested deeper than {MAX_CONFIG_DEPTH} levels once aliases are expanded",
                problem_mark=node.start_mark,
            )
        measured[key] = (values, depth)
        in_progress.discard(key)
        stack.pop()


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _file_error(path: str | Path, problem: str) -> ConfigError:
    """A problem with the file itself, read as ``path: problem``."""
    return ConfigError(ConfigError.FILE_KEY, str(path), problem, source=str(path))


def _where(mark: Any) -> str:
    return "" if mark is None else f"line {mark.line + 1}, column {mark.column + 1}: "


def _problem(exc: yaml.MarkedYAMLError) -> str:
    problem = _QUOTED.sub("(…)", exc.problem or "syntax error")
    return problem if exc.context is None else f"{problem} ({_QUOTED.sub('(…)', exc.context)})"


def _line_column(text: str, offset: int) -> str:
    before = text[:offset]
    line = before.count("\n") + 1
    return f"line {line}, column {offset - (before.rfind(chr(10)) + 1) + 1}: "
