"""Text from input, made safe to print on a terminal.

Session ids, tool names, call ids and file names come from transcripts that may come from anywhere.
Printed raw, an escape sequence in one would drive the reader's terminal (clear it, retitle it, hide
what follows) and a newline would start a forged line (``otelguard replay: ...``) on stdout or
stderr. ``printable`` shows every such character as an escape instead: ``\\n``, ``\\t``, ``\\r``,
``\\x1b``, ``\\u202e`` (C0 and C1 controls, DEL, the line and paragraph separators and the
bidirectional controls, which reorder what a reader sees). Everything else is kept as written;
rich markup is a separate matter (print such text as ``Text``, or with ``markup=False``).
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["printable"]

_UNSAFE: Final = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")
_NAMED: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: object) -> str:
    """``text`` (made a string) with every character that could act on a terminal escaped."""
    value = text if isinstance(text, str) else str(text)
    return _UNSAFE.sub(_escape, value)
