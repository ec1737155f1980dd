"""Pieces every part of the HTML replay report uses: escaping, shortened ids, and bounded tables.

Every string taken from a transcript goes through ``esc``; a long one is shown shortened with the
whole of it in a ``title`` (the browser's own hover text: no script).
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from typing import Final

__all__ = ["MAX_SHOWN_CHARS", "esc", "left_out", "shown", "shown_path", "table"]

MAX_SHOWN_CHARS: Final = 40
"""Ids and paths longer than this are shown shortened (a UUID, 36 characters, is shown whole; a
Claude Code subagent's ``<session>:<sidechain>`` id, 73, is not)."""
_KEEP: Final = 16
_CHUNK_ROWS: Final = 200


def esc(value: object) -> str:
    """Escaped for HTML text and for a double- or single-quoted attribute."""
    return html.escape(str(value), quote=True)


def shown(text: str, css: str = "id") -> str:
    """``text`` as a span, its middle left out when it is long (both ends tell ids apart); the whole
    of it is the span's title."""
    if len(text) <= MAX_SHOWN_CHARS:
        return f'<span class="{css}">{esc(text)}</span>'
    short = f"{text[:_KEEP]}…{text[-_KEEP:]}"
    return f'<span class="{css}" title="{esc(text)}">{esc(short)}</span>'


def shown_path(path: str) -> str:
    """A path shortened from the left (its end names the file), the whole of it as the title."""
    if len(path) <= MAX_SHOWN_CHARS:
        return f'<span class="where">{esc(path)}</span>'
    return f'<span class="where" title="{esc(path)}">…{esc(path[-(MAX_SHOWN_CHARS - 1) :])}</span>'


def table(table_id: str, columns: Sequence[tuple[str, int, bool]], rows: Iterable[str]) -> str:
    """``columns``: (header, width in percent, numeric). Rows go in chunks of fixed-layout tables
    that the browser lays out only when scrolled into view, so thousands of rows still open fast."""
    colgroup = (
        "<colgroup>" + "".join(f'<col style="width:{width}%">' for _, width, _ in columns) + "</colgroup>"
    )
    head = "".join(f'<th class="n">{h}</th>' if numeric else f"<th>{h}</th>" for h, _, numeric in columns)
    chunks: list[str] = []
    batch: list[str] = []
    for row in rows:
        batch.append(row)
        if len(batch) == _CHUNK_ROWS:
            chunks.append(_chunk(colgroup, batch))
            batch = []
    if batch or not chunks:
        chunks.append(_chunk(colgroup, batch))
    header = f"<table>{colgroup}<thead><tr>{head}</tr></thead></table>"
    return f'<div class="rows" id="{table_id}">{header}{"".join(chunks)}</div>'


def _chunk(colgroup: str, rows: list[str]) -> str:
    style = f"contain-intrinsic-size:auto {len(rows) * 27}px"
    return f'<div class="chunk" style="{style}"><table>{colgroup}<tbody>{"".join(rows)}</tbody></table></div>'


def left_out(shown_rows: int, total: int, what: str) -> str:
    if total <= shown_rows:
        return ""
    return f'<p class="muted">first {shown_rows} of {total} {what}; --json lists more</p>'
