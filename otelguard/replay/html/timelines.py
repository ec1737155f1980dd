"""The timelines of the HTML replay report: one SVG per drawn session, a mark per call, and the index
of drawn sessions that links to each.

Every mark carries an SVG ``<title>`` (call, turn, tool and code), which the browser shows on hover:
no script. Turn labels are written only where they do not run into the previous one; halt codes go in
one of two lanes above the marks, and those that find no room are counted in the caption.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from otelguard.core.decisions import MODEL_TOOL
from otelguard.replay.html.parts import esc, shown, shown_path, table
from otelguard.replay.report import SessionReport
from otelguard.replay.timeline import CLASS_MASK, MARK_CLASSES, TURN_START, SessionMarks, warning_count

__all__ = ["CHAR_WIDTH", "MARK_SHAPE", "legend", "session_index", "timeline_figures"]

_TIMELINE_WIDTH: Final = 1100
_PITCH_RANGE: Final = (3, 12)
"""Horizontal units per mark: one pitch for every timeline on the page, so lengths compare."""
_MIN_WIDTH: Final = 200
_TURN_GAP: Final = 4
_MAX_TURN_GAPS: Final = 60
"""Past this many turn starts in one timeline, turns are ticks under the marks instead of gaps."""
_MAX_TURN_LABELS: Final = 24
_LABEL_LANES: Final = (10, 22)
CHAR_WIDTH: Final = 6.2
"""Width of one character of the 10 px labels, rounded up, for laying labels out without a browser."""
_LABEL_GAP: Final = 6
_TIMELINE_HEIGHT: Final = 76
MARK_SHAPE: Final = ((34, 22), (34, 22), (28, 28), (46, 10), (34, 22), (34, 22), (34, 22))
"""(top, height) of each mark class: a stop stands taller and a prevented call shorter, so the classes
differ by shape as well as by colour (a call with no result is dashed, see the page's style)."""

_LEGEND_TEXT: Final = {
    "allowed": "allowed",
    "warned": "warned (the call ran, with a warning)",
    "stopped": "block / halt / reject (the guard stopped the call or the turn)",
    "prevented": "prevented (later in a stopped turn: would not have run)",
    "cancelled": "cancelled",
    "not-replayed": "no result in the transcript (not replayed)",
    "in-progress": "in progress (still running when the transcript ended: a live session)",
}


def legend() -> str:
    items = []
    for value, name in enumerate(MARK_CLASSES):
        top, height = MARK_SHAPE[value]
        items.append(
            f'<li data-class="{name}"><svg width="8" height="32" viewBox="0 24 8 34">'
            f'<path class="m{value}" stroke-width="4" d="M4 {top}v{height}"/></svg>{esc(_LEGEND_TEXT[name])}</li>'
        )
    items.append(
        '<li data-class="turn"><svg width="8" height="32" viewBox="0 24 8 34">'
        '<path class="sep" d="M4 26v34"/></svg>a new turn (a user message)</li>'
    )
    items.append(
        '<li data-class="halt"><svg width="8" height="32" viewBox="0 24 8 34">'
        '<path class="tick" d="M1 24l3 4l3 -4"/><path class="m2" stroke-width="4" d="M4 30v26"/></svg>'
        "the call that halted its turn, labelled with its code</li>"
    )
    return f'<ul class="legend" id="legend">{"".join(items)}</ul>'


def session_index(sessions: Sequence[SessionReport]) -> str:
    """The drawn sessions, one row each, linking to their timelines."""
    rows = (
        f'<tr class="index" data-session="{esc(s.session_id)}"><td class="n"><a href="#session-{rank}">'
        f"#{rank}</a></td><td>{shown(s.session_id)}</td><td>{shown_path(s.path)}</td>"
        f'<td class="n">{s.tool_calls}</td><td class="n">{warning_count(s.decisions)}</td>'
        f'<td class="n">{s.halts_total}</td><td class="n">{s.in_progress_total}</td></tr>'
        for rank, s in enumerate(sessions, 1)
    )
    columns = (
        ("#", 6, True),
        ("session", 32, False),
        ("path", 26, False),
        ("calls", 9, True),
        ("warnings", 9, True),
        ("halted turns", 9, True),
        ("in progress", 9, True),
    )
    return table("session-index", columns, rows)


def timeline_figures(sessions: Sequence[SessionReport], kept: dict[int, SessionMarks]) -> str:
    widest = max(len(kept[s.seq].marks) for s in sessions)
    pitch = max(_PITCH_RANGE[0], min(_PITCH_RANGE[1], _TIMELINE_WIDTH // max(widest, 1)))
    figures = [_timeline(rank, session, kept[session.seq], pitch) for rank, session in enumerate(sessions, 1)]
    return f'<div id="timelines">{"".join(figures)}</div>'


def _timeline(rank: int, session: SessionReport, marks: SessionMarks, pitch: int) -> str:
    columns = marks.marks
    turn_columns = [i for i, mark in enumerate(columns) if mark & TURN_START and i > 0]
    gaps = len(turn_columns) <= _MAX_TURN_GAPS
    xs = _column_positions(len(columns), set(turn_columns) if gaps else set(), pitch)
    stroke = max(2, pitch * 2 // 3)
    body = [
        f'<g class="marks" stroke-width="{stroke}" transform="translate({stroke / 2:g} 0)">'
        f"{_marks(marks, xs)}</g>",
        _turn_separators(turn_columns, xs, gaps, marks.calls_per_mark, stroke),
    ]
    halt_svg, unlabelled, labels_end = _halt_labels(session, marks, xs, stroke)
    body.append(halt_svg)
    width = round(max(_MIN_WIDTH, (xs[-1] if xs else 0) + pitch + 40, labels_end))
    svg = (
        f'<svg viewBox="0 0 {width} {_TIMELINE_HEIGHT}" width="{width}" height="{_TIMELINE_HEIGHT}" '
        f'role="img" aria-label="timeline of session {rank}">{"".join(body)}</svg>'
    )
    caption = _timeline_caption(rank, session, marks, unlabelled)
    return (
        f'<figure class="timeline" id="session-{rank}" data-session="{esc(session.session_id)}" '
        f'data-rank="{rank}" data-calls="{session.tool_calls}" data-halts="{session.halts_total}" '
        f'data-marks="{len(columns)}">{caption}{svg}</figure>'
    )


def _marks(marks: SessionMarks, xs: list[int]) -> str:
    """One path per mark, each with its hover text: which call(s), the turn, the tool and the code."""
    per_mark = marks.calls_per_mark
    turn = turn_start = 0
    models = turn_models = 0  # marks of model decisions so far (in the session, in the turn): not calls
    parts = []
    for column, mark in enumerate(marks.marks):
        if mark & TURN_START or column == 0:
            turn += 1
            turn_start, turn_models = column, 0
        value = mark & CLASS_MASK
        top, height = MARK_SHAPE[value]
        tool, code = marks.name(column)
        named = " · ".join(esc(part) for part in (tool, code) if part)
        if per_mark == 1 and tool == MODEL_TOOL:
            models, turn_models = models + 1, turn_models + 1
            where = f"model reply after session call {column + 1 - models} · turn {turn}"
        elif per_mark == 1:
            call = column - turn_start - turn_models + 1
            where = f"session call {column + 1 - models} · turn {turn}, call {call}"
        else:
            first = column * per_mark + 1
            where = f"session calls {first}–{min(first + per_mark - 1, marks.calls)}, the most severe"
        parts.append(
            f'<path class="m{value}" d="M{xs[column]} {top}v{height}"><title>{where} · {named}</title></path>'
        )
    return "".join(parts)


def _column_positions(count: int, gap_before: set[int], pitch: int) -> list[int]:
    positions = []
    x = 0
    for column in range(count):
        if column in gap_before:
            x += _TURN_GAP
        positions.append(x)
        x += pitch
    return positions


def _turn_separators(
    turn_columns: list[int], xs: list[int], gaps: bool, calls_per_mark: int, stroke: int
) -> str:
    if not turn_columns:
        return ""
    if gaps:  # a line in the middle of the gap between the turns
        lines = "".join(f"M{(xs[c - 1] + stroke + xs[c]) / 2:g} 28v38" for c in turn_columns)
    else:  # too many turns for gaps: a short tick under each mark where a turn starts
        lines = "".join(f"M{xs[c] + stroke / 2:g} 58v6" for c in turn_columns)
    parts = [f'<path class="sep" d="{lines}"/>']
    if gaps and len(turn_columns) < _MAX_TURN_LABELS and calls_per_mark == 1:
        free_from = 0.0  # a label is written only where it clears the one before
        for number, column in enumerate([0, *turn_columns], 1):
            text = f"turn {number}"
            if xs[column] < free_from:
                continue
            parts.append(f'<text class="turn" x="{xs[column]}" y="72">{text}</text>')
            free_from = xs[column] + len(text) * CHAR_WIDTH + _LABEL_GAP
    return "".join(parts)


def _halt_labels(
    session: SessionReport, marks: SessionMarks, xs: list[int], stroke: int
) -> tuple[str, int, float]:
    """A tick over every halt and its code in one of two lanes; the codes that find no free lane are
    counted (the halts table lists them). Also returns where the last label ends."""
    lane_ends = [-1.0] * len(_LABEL_LANES)
    ticks: list[str] = []
    labels: list[str] = []
    unlabelled = 0
    for halt, call in zip(session.halts, marks.halt_calls, strict=False):
        column = min(call // marks.calls_per_mark, len(xs) - 1)
        x = xs[column] + stroke / 2
        ticks.append(f"M{x - 3:g} 23l3 4l3 -4")
        text_width = len(halt.code) * CHAR_WIDTH
        start = max(0.0, x - 3)
        lane = next((i for i, end in enumerate(lane_ends) if end < start), None)
        if lane is None:
            unlabelled += 1
            continue
        lane_ends[lane] = start + text_width + _LABEL_GAP
        labels.append(
            f'<text class="halt" data-code="{esc(halt.code)}" x="{start:.0f}" '
            f'y="{_LABEL_LANES[lane]}">{esc(halt.code)}</text>'
        )
    unlabelled += max(0, session.halts_total - len(marks.halt_calls))
    if not ticks:
        return "", unlabelled, 0.0
    return f'<path class="tick" d="{"".join(ticks)}"/>{"".join(labels)}', unlabelled, max(lane_ends)


def _timeline_caption(rank: int, session: SessionReport, marks: SessionMarks, unlabelled: int) -> str:
    counts = (
        (session.turns, "turn"),
        (session.tool_calls, "call"),
        (session.halts_total, "halted turn"),
        (warning_count(session.decisions), "warning"),
    )
    stats = " · ".join(f"{n} {what}{'' if n == 1 else 's'}" for n, what in counts)
    stats += f" · {session.prevented_calls} would not have run"
    if session.in_progress_total:
        stats += f" · {session.in_progress_total} in progress"
    notes = []
    if marks.calls_per_mark > 1:
        notes.append(f"each mark is {marks.calls_per_mark} calls (the most severe shown)")
    if unlabelled:
        notes.append(f"{unlabelled} halt label(s) left out for room: see the halts table")
    extra = f'<br><span class="muted">{"; ".join(notes)}</span>' if notes else ""
    return (
        f'<figcaption><a href="#session-{rank}">#{rank}</a> <b>{shown(session.session_id, "sid")}</b> '
        f"{shown_path(session.path)}<br>{stats}{extra}</figcaption>"
    )
