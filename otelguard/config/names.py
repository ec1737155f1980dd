"""Tool names in a config that are probably typos: valid keys that name nothing the defaults know.

A cap on ``web_serch`` is a valid config that caps a tool nobody has, while ``web_search`` keeps its
default limit. Such a name is worth a warning when it matches no known tool name, group or glob and is
one edit (an insertion, a deletion, a substitution or a swap of two neighbours) away from a known
name. Names that differ from a known one only by case are left alone: another host may well have a
``bash`` tool beside Claude Code's ``Bash``. Short names are left alone too: one edit in four letters
is another word more often than a typo.
"""

from __future__ import annotations

from collections.abc import Iterable
from fnmatch import fnmatchcase
from typing import Final

__all__ = ["TOKENS", "is_glob", "near_misses"]

TOKENS: Final = "tokens"
"""The cap key of the model's tokens (``caps.turn.tokens``, ``caps.session.tokens``,
``caps.tree.tokens``): reserved, never a tool name, group or glob (docs/model-turns.md)."""

MIN_NAME_CHARS: Final = 5
"""Known names shorter than this are never suggested."""


def is_glob(name: str) -> bool:
    return any(ch in name for ch in "*?[")


def near_misses(
    named: Iterable[tuple[str, str]], known: Iterable[str], globs: Iterable[str]
) -> tuple[str, ...]:
    """One warning line per ``(key path, name)`` of ``named`` that looks like a typo of a ``known``
    name; a name matching one of ``globs`` is not a typo."""
    exact = frozenset(known)
    patterns = tuple(globs)
    candidates = sorted(name for name in exact if len(name) >= MIN_NAME_CHARS)
    lines: list[str] = []
    for path, name in named:
        if name in exact or is_glob(name) or any(fnmatchcase(name, p) for p in patterns):
            continue
        close = next((c for c in candidates if _one_edit(name, c) and c.lower() != name.lower()), None)
        if close is not None:
            lines.append(f"{path}: {name!r} matches no known tool, group or glob; did you mean {close!r}?")
    return tuple(lines)


def _one_edit(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` differ by exactly one insertion, deletion, substitution or swap."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) > len(b):
        a, b = b, a
    start = 0
    while start < len(a) and a[start] == b[start]:
        start += 1
    if len(a) < len(b):  # one insertion into a gives b
        return a[start:] == b[start + 1 :]
    rest = start + 1
    if a[rest:] == b[rest:]:  # one substitution
        return True
    swapped = rest < len(a) and a[start] == b[rest] and a[rest] == b[start]
    return swapped and a[rest + 1 :] == b[rest + 1 :]
