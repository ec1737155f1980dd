"""The replay as one self-contained HTML page (``otelguard replay --html FILE``).

Inline CSS and inline SVG only: no script, no font, no image, nothing fetched (a Content-Security-Policy
forbids it too), so the page opens offline from disk and a hostile name cannot run anything. It holds
what the JSON document holds — tool names, codes, counts, call ids, session ids, paths — plus the
per-call marks of ``timeline``; every string from a transcript goes through ``html.escape``.

Bounded whatever the replay's size: timelines for the sessions the ``Timelines`` kept (at most
``MAX_COLUMNS`` marks each, every halt kept), the other sessions summarised in a table, and every table
capped with a line saying how many rows it left out.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final

from otelguard._version import __version__
from otelguard.replay.report import ReplayReport, SessionReport
from otelguard.replay.timeline import (
    CAP_USAGE_BUCKETS,
    CLASS_MASK,
    MARK_CLASSES,
    TURN_START,
    CapUsage,
    SessionMarks,
    Timelines,
    session_rank,
    warning_count,
)

__all__ = ["MAX_HALT_ROWS", "MAX_SESSION_ROWS", "render_html", "write_html"]

MAX_SESSION_ROWS: Final = 5000
MAX_HALT_ROWS: Final = 2000
MAX_INPUT_ROWS: Final = 500
MAX_ERROR_ROWS: Final = 200

_TIMELINE_WIDTH: Final = 1100
_PITCH_RANGE: Final = (3, 12)
"""Horizontal units per mark: one pitch for every timeline on the page, so lengths compare."""
_MIN_WIDTH: Final = 200
_TURN_GAP: Final = 4
_MAX_TURN_GAPS: Final = 60
"""Past this many turn starts in one timeline, turns are ticks under the marks instead of gaps."""
_MAX_TURN_LABELS: Final = 24
_CHUNK_ROWS: Final = 200
_LABEL_LANES: Final = (10, 22)
_CHAR_WIDTH: Final = 6.2
_TIMELINE_HEIGHT: Final = 76
# (top, height) of each mark class: a stop stands taller and a prevented call shorter, so the classes
# differ by shape as well as by colour
_MARK_SHAPE: Final = ((34, 22), (34, 22), (28, 28), (46, 10), (34, 22), (52, 4))
_STOP_ACTIONS: Final = frozenset({"block", "halt", "reject"})

_STYLE: Final = """
:root{color-scheme:light dark;--bg:#fff;--fg:#1f2328;--muted:#59636e;--line:#d1d9e0;--panel:#f6f8fa;
--allowed:#4c9a3f;--warned:#c98a00;--stopped:#cf222e;--prevented:#8c959f;--cancelled:#8250df;
--not-replayed:#c8d1da;--u0:#d1d9e0;--u1:#9ecae1;--u2:#4292c6;--u3:#f59e0b;--u4:#cf222e}
@media (prefers-color-scheme:dark){:root{--bg:#0d1117;--fg:#e6edf3;--muted:#9198a1;--line:#3d444d;
--panel:#151b23;--allowed:#57ab5a;--warned:#e3b341;--stopped:#ff6a69;--prevented:#768390;
--cancelled:#b083f0;--not-replayed:#373e47;--u0:#373e47;--u1:#316dca;--u2:#539bf5;--u3:#e3b341;
--u4:#ff6a69}}
body{background:var(--bg);color:var(--fg);font:14px/1.45 system-ui,sans-serif;margin:24px auto;
max-width:1200px;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid var(--line)}
.muted,figcaption .where{color:var(--muted)}
.totals{display:flex;flex-wrap:wrap;gap:10px;margin:12px 0;padding:0}
.totals div{background:var(--panel);border:1px solid var(--line);border-radius:6px;padding:6px 12px}
.totals dt{color:var(--muted);font-size:12px}.totals dd{margin:0;font-size:20px;font-weight:600}
table{border-collapse:collapse;table-layout:fixed;width:100%}.rows{margin:6px 0}
.chunk,figure.timeline{content-visibility:auto}figure.timeline{contain-intrinsic-size:auto 130px}th,td{border-bottom:1px solid var(--line);padding:3px 10px;
text-align:left;vertical-align:top}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
td.id{word-break:break-all}
svg{max-width:100%;height:auto;display:block}svg text{fill:var(--fg);font:10px system-ui,sans-serif}
figure.timeline{margin:14px 0;padding:6px 10px;background:var(--panel);border:1px solid var(--line);
border-radius:6px}figcaption{font-size:13px}figcaption b{word-break:break-all}
.legend{display:flex;flex-wrap:wrap;gap:16px;list-style:none;padding:0;margin:6px 0}
.legend li{display:flex;align-items:center;gap:6px}.legend svg{display:inline-block}
.m0{stroke:var(--allowed)}.m1{stroke:var(--warned)}.m2{stroke:var(--stopped)}.m3{stroke:var(--prevented)}
.m4{stroke:var(--cancelled)}.m5{stroke:var(--not-replayed)}.sep{stroke:var(--fg);stroke-width:1}
.tick{stroke:var(--stopped);stroke-width:1.5}.bar-warn{fill:var(--warned)}.bar-stop{fill:var(--stopped)}
.u0{fill:var(--u0)}.u1{fill:var(--u1)}.u2{fill:var(--u2)}.u3{fill:var(--u3)}.u4{fill:var(--u4)}
.swatch{display:inline-block;width:10px;height:10px;margin-right:4px;border-radius:2px}
"""

_LEGEND_TEXT: Final = {
    "allowed": "allowed",
    "warned": "warned (the call ran, with a warning)",
    "stopped": "block / halt / reject (the guard stopped the call or the turn)",
    "prevented": "prevented (later in a stopped turn: would not have run)",
    "cancelled": "cancelled",
    "not-replayed": "no result in the transcript (not replayed)",
}


def esc(value: object) -> str:
    """Escaped for HTML text and for a double- or single-quoted attribute."""
    return html.escape(str(value), quote=True)


def render_html(report: ReplayReport, timelines: Timelines, sections: Sequence[str] = ()) -> str:
    """The whole page for ``report``; ``timelines`` holds the marks the runner kept. ``sections`` are
    whole sections (already escaped HTML, e.g. the backtest's alerts) placed after the totals."""
    totals = report.totals()
    ranked = sorted(
        report.sessions, key=lambda s: session_rank(s.halts_total, s.decisions, s.seq), reverse=True
    )
    kept = timelines.kept()
    drawn = [s for s in ranked if s.seq in kept]
    rest = [s for s in ranked if s.seq not in kept]
    parts = [
        _head(),
        "<h1>otelguard replay</h1>",
        f'<p class="muted">{len(report.inputs)} input(s); otelguard {esc(__version__)}. '
        "This page holds tool names, decision codes, counts, call ids, session ids and paths only: "
        "never arguments, results or error texts.</p>",
        _totals(totals),
        *sections,
        _decisions(report, totals["decisions"]),
        _timelines(drawn, kept),
        _other_sessions(rest, len(drawn)),
        _halts(ranked, totals["halts"]),
        _cap_usage(timelines.cap_usage, totals["cap_hits"]),
        _inputs(report),
        _errors(report),
        "</body></html>\n",
    ]
    return "\n".join(parts)


def write_html(
    path: str | Path, report: ReplayReport, timelines: Timelines, sections: Sequence[str] = ()
) -> int:
    """Write the page; returns its size in bytes. A lone surrogate in a name is written as ``?``."""
    body = render_html(report, timelines, sections).encode("utf-8", "replace")
    Path(path).write_bytes(body)
    return len(body)


def _head() -> str:
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'\">"
        '<meta name="color-scheme" content="light dark">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>otelguard replay</title><style>{_STYLE}</style></head><body>"
    )


def _totals(totals: dict[str, object]) -> str:
    labels = (
        ("sessions", "sessions"),
        ("turns", "turns"),
        ("tool_calls", "tool calls"),
        ("halts", "halted turns"),
        ("prevented_calls", "calls that would not have run"),
        ("errors", "input errors"),
    )
    cells = "".join(
        f'<div data-total="{key}"><dt>{label}</dt><dd>{esc(totals[key])}</dd></div>' for key, label in labels
    )
    return f'<h2 id="totals-title">Totals</h2><dl class="totals" id="totals">{cells}</dl>'


def _decisions(report: ReplayReport, decisions: dict[str, int]) -> str:
    title = '<h2 id="decisions-title">Decisions by code</h2>'
    if not decisions:
        return f'{title}<p class="muted" id="decisions">Every call was allowed.</p>'
    rows = sorted(decisions.items(), key=lambda item: (-item[1], item[0]))
    label_width = int(max(len(code) for code, _ in rows) * _CHAR_WIDTH) + 12
    bar_room = 420
    most = rows[0][1]
    height = 22 * len(rows) + 4
    count_width = max(len(f"{count} ({'/'.join(report.actions.get(code, ()))})") for code, count in rows)
    width = label_width + bar_room + 12 + int(count_width * _CHAR_WIDTH)
    bars = []
    for index, (code, count) in enumerate(rows):
        y = 4 + 22 * index
        actions = report.actions.get(code, set())
        kind = "stop" if actions & _STOP_ACTIONS else "warn"
        length = max(2, round(bar_room * count / most))
        shown = "/".join(sorted(actions))
        bars.append(
            f'<g class="bar" data-code="{esc(code)}" data-count="{count}">'
            f'<text x="{label_width - 8}" y="{y + 13}" text-anchor="end">{esc(code)}</text>'
            f'<rect class="bar-{kind}" x="{label_width}" y="{y}" width="{length}" height="16"/>'
            f'<text x="{label_width + length + 6}" y="{y + 13}">{count} ({esc(shown)})</text></g>'
        )
    svg = (
        f'<svg id="decisions" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'role="img" aria-label="decisions by code">{"".join(bars)}</svg>'
    )
    note = (
        '<p class="muted"><span class="swatch" style="background:var(--warned)"></span>warning codes '
        '<span class="swatch" style="background:var(--stopped)"></span>codes that block, halt or reject '
        "(the action is in brackets)</p>"
    )
    return title + svg + note


def _legend() -> str:
    items = []
    for value, name in enumerate(MARK_CLASSES):
        top, height = _MARK_SHAPE[value]
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


def _timelines(sessions: Sequence[SessionReport], kept: dict[int, SessionMarks]) -> str:
    title = '<h2 id="timelines-title">Sessions, call by call</h2>'
    if not sessions:
        return f'{title}<p class="muted" id="timelines">No session to draw.</p>'
    intro = (
        '<p class="muted">One timeline per session, the sessions that halted or warned most first. '
        "Each mark is one tool call, left to right, coloured by the guard's decision.</p>"
    )
    widest = max(len(kept[s.seq].marks) for s in sessions)
    pitch = max(_PITCH_RANGE[0], min(_PITCH_RANGE[1], _TIMELINE_WIDTH // max(widest, 1)))
    figures = [_timeline(rank, session, kept[session.seq], pitch) for rank, session in enumerate(sessions, 1)]
    return f'{title}{intro}{_legend()}<div id="timelines">{"".join(figures)}</div>'


def _timeline(rank: int, session: SessionReport, marks: SessionMarks, pitch: int) -> str:
    columns = marks.marks
    turn_columns = [i for i, mark in enumerate(columns) if mark & TURN_START and i > 0]
    gaps = len(turn_columns) <= _MAX_TURN_GAPS
    xs = _column_positions(len(columns), set(turn_columns) if gaps else set(), pitch)
    stroke = max(2, pitch * 2 // 3)
    paths: list[list[str]] = [[] for _ in MARK_CLASSES]
    for column, mark in enumerate(columns):
        value = mark & CLASS_MASK
        paths[value].append(f"M{xs[column]} {_MARK_SHAPE[value][0]}v{_MARK_SHAPE[value][1]}")
    body = [
        f'<path class="m{value}" stroke-width="{stroke}" transform="translate({stroke / 2:g} 0)" '
        f'd="{"".join(d)}"/>'
        for value, d in enumerate(paths)
        if d
    ]
    body.append(_turn_separators(turn_columns, xs, gaps, marks.calls_per_mark, stroke))
    halt_svg, unlabelled, labels_end = _halt_labels(session, marks, xs, stroke)
    body.append(halt_svg)
    width = round(max(_MIN_WIDTH, (xs[-1] if xs else 0) + pitch + 40, labels_end))
    svg = (
        f'<svg viewBox="0 0 {width} {_TIMELINE_HEIGHT}" width="{width}" height="{_TIMELINE_HEIGHT}" '
        f'role="img" aria-label="timeline of session {rank}">{"".join(body)}</svg>'
    )
    caption = _timeline_caption(rank, session, marks, unlabelled)
    return (
        f'<figure class="timeline" data-session="{esc(session.session_id)}" data-rank="{rank}" '
        f'data-calls="{session.tool_calls}" data-halts="{session.halts_total}" '
        f'data-marks="{len(columns)}">{caption}{svg}</figure>'
    )


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
        parts.append('<text x="0" y="72">turn 1</text>')
        parts.extend(
            f'<text x="{xs[c]}" y="72">turn {number}</text>' for number, c in enumerate(turn_columns, 2)
        )
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
        text_width = len(halt.code) * _CHAR_WIDTH
        start = max(0.0, x - 3)
        lane = next((i for i, end in enumerate(lane_ends) if end < start), None)
        if lane is None:
            unlabelled += 1
            continue
        lane_ends[lane] = start + text_width + 6
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
    notes = []
    if marks.calls_per_mark > 1:
        notes.append(f"each mark is {marks.calls_per_mark} calls (the most severe shown)")
    if unlabelled:
        notes.append(f"{unlabelled} halt label(s) left out for room: see the halts table")
    extra = f'<br><span class="muted">{"; ".join(notes)}</span>' if notes else ""
    return (
        f"<figcaption>#{rank} <b>{esc(session.session_id)}</b> "
        f'<span class="where">{esc(session.path)}</span><br>{stats}{extra}</figcaption>'
    )


def _table(table_id: str, columns: Sequence[tuple[str, int, bool]], rows: Iterable[str]) -> str:
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


def _left_out(shown: int, total: int, what: str) -> str:
    if total <= shown:
        return ""
    return f'<p class="muted">first {shown} of {total} {what}; --json lists more</p>'


def _other_sessions(sessions: Sequence[SessionReport], drawn: int) -> str:
    if not sessions:
        return ""
    shown = sessions[:MAX_SESSION_ROWS]
    rows = (
        f'<tr class="session" data-session="{esc(s.session_id)}"><td class="n">{rank}</td>'
        f'<td class="id">{esc(s.session_id)}</td><td class="id">{esc(s.path)}</td>'
        f'<td class="n">{s.turns}</td><td class="n">{s.tool_calls}</td>'
        f'<td class="n">{warning_count(s.decisions)}</td><td class="n">{s.halts_total}</td>'
        f'<td class="n">{s.prevented_calls}</td></tr>'
        for rank, s in enumerate(shown, drawn + 1)
    )
    columns = (
        ("#", 6, True),
        ("session", 30, False),
        ("path", 24, False),
        ("turns", 8, True),
        ("calls", 8, True),
        ("warnings", 8, True),
        ("halted turns", 8, True),
        ("not run", 8, True),
    )
    return (
        '<h2 id="other-sessions-title">The other sessions</h2>'
        f'<p class="muted">Past the {drawn} drawn above, in the same order.</p>'
        + _table("other-sessions", columns, rows)
        + _left_out(len(shown), len(sessions), "sessions")
    )


def _halts(ranked: Sequence[SessionReport], total: int) -> str:
    title = '<h2 id="halts-title">Halted turns (the first block or halt of each turn)</h2>'
    if not total:
        return f'{title}<p class="muted" id="halts">No turn halted.</p>'
    rows: list[str] = []
    for session in ranked:
        for halt in session.halts:
            if len(rows) >= MAX_HALT_ROWS:
                break
            rows.append(
                f'<tr class="halt" data-code="{esc(halt.code)}"><td class="id">{esc(session.session_id)}</td>'
                f'<td class="n">{halt.turn}</td><td class="n">{halt.call}</td>'
                f'<td class="id">{esc(halt.call_id or "")}</td><td class="id">{esc(halt.tool_name)}</td>'
                f"<td>{esc(halt.action)}</td><td>{esc(halt.code)}</td></tr>"
            )
    columns = (
        ("session", 30, False),
        ("turn", 7, True),
        ("call", 7, True),
        ("call id", 18, False),
        ("tool", 16, False),
        ("action", 8, False),
        ("code", 14, False),
    )
    return title + _table("halts", columns, rows) + _left_out(len(rows), total, "halts")


def _cap_usage(usage: dict[str, CapUsage], cap_hits: dict[str, int]) -> str:
    title = '<h2 id="cap-usage-title">Turn cap usage</h2>'
    if not usage:
        return f'{title}<p class="muted" id="cap-usage">No turn cap is configured.</p>'
    intro = (
        '<p class="muted">Turns by the share of each turn cap they used (the highest reached in the '
        "turn); cap hits count refused calls, per turn and per session cap.</p>"
    )
    rows = []
    for cap, entry in sorted(usage.items()):
        cells = "".join(f'<td class="n">{count}</td>' for count in entry.turns)
        rows.append(
            f'<tr data-cap="{esc(cap)}"><td>{esc(cap)}</td><td>{_usage_bar(entry)}</td>{cells}'
            f'<td class="n">{entry.highest:.0%}</td><td class="n">{cap_hits.get(cap, 0)}</td></tr>'
        )
    swatches = [
        f'<span class="swatch" style="background:var(--u{i})"></span>{esc(name)}'
        for i, name in enumerate(CAP_USAGE_BUCKETS)
    ]
    columns = (
        ("cap", 14, False),
        ("turns", 26, False),
        *((swatch, 8, True) for swatch in swatches),
        ("highest", 10, True),
        ("cap hits", 10, True),
    )
    return title + intro + _table("cap-usage", columns, rows)


def _usage_bar(entry: CapUsage) -> str:
    total = sum(entry.turns) or 1
    x = 0.0
    rects = []
    for bucket, count in enumerate(entry.turns):
        if count:
            width = 240 * count / total
            rects.append(f'<rect class="u{bucket}" x="{x:.1f}" y="0" width="{width:.1f}" height="14"/>')
            x += width
    return f'<svg width="240" height="14" viewBox="0 0 240 14">{"".join(rects)}</svg>'


def _inputs(report: ReplayReport) -> str:
    entries = list(report.inputs.values())
    shown = entries[:MAX_INPUT_ROWS]
    rows = (
        f'<tr><td class="id">{esc(e.path)}</td><td>{esc(e.format)}</td>'
        f'<td class="n">{e.sessions}</td><td class="n">{e.errors}</td></tr>'
        for e in shown
    )
    columns = (("path", 60, False), ("format", 16, False), ("sessions", 12, True), ("errors", 12, True))
    table = _table("inputs", columns, rows)
    return '<h2 id="inputs-title">Inputs</h2>' + table + _left_out(len(shown), len(entries), "inputs")


def _errors(report: ReplayReport) -> str:
    if not report.errors_total:
        return ""
    shown = report.errors[:MAX_ERROR_ROWS]
    rows = (
        f'<tr><td class="id">{esc(e.path if e.line is None else f"{e.path}:{e.line}")}</td>'
        f"<td>{esc(e.reason)}</td></tr>"
        for e in shown
    )
    table = _table("errors", (("where", 40, False), ("reason", 60, False)), rows)
    return (
        '<h2 id="errors-title">Input errors (skipped)</h2>'
        + table
        + _left_out(len(shown), report.errors_total, "errors")
    )
