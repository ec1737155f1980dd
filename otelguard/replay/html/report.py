"""The replay as one self-contained HTML page (``otelguard replay --html FILE``).

Inline CSS and inline SVG only: no script, no font, no image, nothing fetched (a Content-Security-Policy
forbids it too), so the page opens offline from disk and a hostile name cannot run anything. It holds
what the JSON document holds — tool names, codes, counts, call ids, session ids, paths — plus the
per-call marks of ``timeline``; every string from a transcript goes through ``html.escape``.

Bounded whatever the replay's size: timelines for the sessions the ``Timelines`` kept (at most
``MAX_COLUMNS`` marks each, every halt kept; see ``html_timelines``), the other sessions summarised in
a table, and every table capped with a line saying how many rows it left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import islice
from pathlib import Path
from typing import Final

from otelguard._version import __version__
from otelguard.replay.html.parts import esc, left_out, shown, shown_path, table
from otelguard.replay.html.timelines import CHAR_WIDTH, legend, session_index, timeline_figures
from otelguard.replay.report import MAX_LISTED_WARNINGS, CallRecord, HaltRecord, ReplayReport, SessionReport
from otelguard.replay.timeline import (
    CAP_USAGE_BUCKETS,
    CapUsage,
    SessionMarks,
    Timelines,
    session_rank,
    warning_count,
)

__all__ = ["MAX_HALT_ROWS", "MAX_SESSION_ROWS", "MAX_WARNING_ROWS", "render_html", "write_html"]

MAX_SESSION_ROWS: Final = 5000
MAX_HALT_ROWS: Final = 2000
MAX_WARNING_ROWS: Final = 2000
MAX_INPUT_ROWS: Final = 500
MAX_ERROR_ROWS: Final = 200
_STOP_ACTIONS: Final = frozenset({"block", "halt", "reject"})

_STYLE: Final = """
:root{color-scheme:light dark;--bg:#fff;--fg:#1f2328;--muted:#59636e;--line:#d1d9e0;--panel:#f6f8fa;
--allowed:#4c9a3f;--warned:#c98a00;--stopped:#cf222e;--prevented:#8c959f;--cancelled:#8250df;
--not-replayed:#6e7781;--in-progress:#0969da;--u0:#d1d9e0;--u1:#9ecae1;--u2:#4292c6;--u3:#f59e0b;--u4:#cf222e}
@media (prefers-color-scheme:dark){:root{--bg:#0d1117;--fg:#e6edf3;--muted:#9198a1;--line:#3d444d;
--panel:#151b23;--allowed:#57ab5a;--warned:#e3b341;--stopped:#ff6a69;--prevented:#768390;
--cancelled:#b083f0;--not-replayed:#9198a1;--in-progress:#4493f8;--u0:#373e47;--u1:#316dca;--u2:#539bf5;--u3:#e3b341;
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
td.id,.id{word-break:break-all}span[title]{text-decoration:underline dotted;cursor:help}
svg{max-width:100%;height:auto;display:block}svg text{fill:var(--fg);font:10px system-ui,sans-serif}
figure.timeline{margin:14px 0;padding:6px 10px;background:var(--panel);border:1px solid var(--line);
border-radius:6px}figcaption{font-size:13px}figcaption b{word-break:break-all}figcaption .where{margin-left:6px}
a{color:inherit}figure.timeline:target{outline:2px solid var(--warned)}
.legend{display:flex;flex-wrap:wrap;gap:16px;list-style:none;padding:0;margin:6px 0}
.legend li{display:flex;align-items:center;gap:6px}.legend svg{display:inline-block}
.m0{stroke:var(--allowed)}.m1{stroke:var(--warned)}.m2{stroke:var(--stopped)}.m3{stroke:var(--prevented)}
.m4{stroke:var(--cancelled)}.m5{stroke:var(--not-replayed);stroke-dasharray:3 2}
.m6{stroke:var(--in-progress)}.sep{stroke:var(--fg);stroke-width:1}
.tick{stroke:var(--stopped);stroke-width:1.5}.bar-warn{fill:var(--warned)}.bar-stop{fill:var(--stopped)}
.u0{fill:var(--u0)}.u1{fill:var(--u1)}.u2{fill:var(--u2)}.u3{fill:var(--u3)}.u4{fill:var(--u4)}
.swatch{display:inline-block;width:10px;height:10px;margin-right:4px;border-radius:2px}
"""


def render_html(
    report: ReplayReport, timelines: Timelines, sections: Sequence[str] = (), title: str = "otelguard replay"
) -> str:
    """The whole page for ``report``; ``timelines`` holds the marks the runner kept. ``sections`` are
    whole sections (already escaped HTML, e.g. the backtest's alerts) placed after the totals;
    ``title`` names the page (``otelguard backtest`` for the backtest's)."""
    totals = report.totals()
    ranked = sorted(
        report.sessions, key=lambda s: session_rank(s.halts_total, s.decisions, s.seq), reverse=True
    )
    kept = timelines.kept()
    drawn = [s for s in ranked if s.seq in kept]
    rest = [s for s in ranked if s.seq not in kept]
    anchors = {s.seq: rank for rank, s in enumerate(drawn, 1)}
    parts = [
        _head(title),
        f"<h1>{esc(title)}</h1>",
        f'<p class="muted">{len(report.inputs)} input(s); otelguard {esc(__version__)}. '
        "This page holds tool names, decision codes, counts, the guard's own messages (made of tool "
        "names and counts), call ids, session ids and paths only: never arguments, results or error "
        "texts.</p>",
        _totals(totals),
        *sections,
        _decisions(report, totals["decisions"]),
        _in_progress(totals["in_progress"]),
        _timelines(drawn, kept),
        _other_sessions(rest, len(drawn)),
        _halts(ranked, totals["halts"], anchors),
        _warned_calls(ranked, warning_count(totals["decisions"]), anchors),
        _cap_usage(timelines.cap_usage, totals["cap_hits"]),
        _inputs(report),
        _errors(report),
        "</body></html>\n",
    ]
    return "\n".join(parts)


def write_html(
    path: str | Path,
    report: ReplayReport,
    timelines: Timelines,
    sections: Sequence[str] = (),
    title: str = "otelguard replay",
) -> int:
    """Write the page; returns its size in bytes. A lone surrogate in a name is written as ``?``."""
    body = render_html(report, timelines, sections, title).encode("utf-8", "replace")
    Path(path).write_bytes(body)
    return len(body)


def _head(title: str) -> str:
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'\">"
        '<meta name="color-scheme" content="light dark">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{_STYLE}</style></head><body>"
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
    model = totals.get("model")
    if isinstance(model, dict):  # the transcripts recorded the model's replies
        cells += (
            f'<div data-total="model_replies"><dt>model replies</dt><dd>{esc(model["replies"])}</dd></div>'
            f'<div data-total="prevented_replies"><dt>replies that would not have been asked for</dt>'
            f"<dd>{esc(model['prevented'])}</dd></div>"
        )
    return f'<h2 id="totals-title">Totals</h2><dl class="totals" id="totals">{cells}</dl>'


def _decisions(report: ReplayReport, decisions: dict[str, int]) -> str:
    title = '<h2 id="decisions-title">Decisions by code</h2>'
    if not decisions:
        return f'{title}<p class="muted" id="decisions">Every call was allowed.</p>'
    rows = sorted(decisions.items(), key=lambda item: (-item[1], item[0]))
    label_width = int(max(len(code) for code, _ in rows) * CHAR_WIDTH) + 12
    bar_room = 420
    most = rows[0][1]
    height = 22 * len(rows) + 4
    count_width = max(len(f"{count} ({'/'.join(report.actions.get(code, ()))})") for code, count in rows)
    width = label_width + bar_room + 12 + int(count_width * CHAR_WIDTH)
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


def _timelines(sessions: Sequence[SessionReport], kept: dict[int, SessionMarks]) -> str:
    title = '<h2 id="timelines-title">Sessions, call by call</h2>'
    if not sessions:
        return f'{title}<p class="muted" id="timelines">No session to draw.</p>'
    intro = (
        '<p class="muted">One timeline per session, the sessions that halted or warned most first '
        "(the table links to each). Each mark is one tool call, left to right, coloured by the guard's "
        "decision; hover over a mark for its place in the session and in its turn, its tool and code.</p>"
    )
    return f"{title}{intro}{session_index(sessions)}{legend()}{timeline_figures(sessions, kept)}"


def _other_sessions(sessions: Sequence[SessionReport], drawn: int) -> str:
    if not sessions:
        return ""
    listed = sessions[:MAX_SESSION_ROWS]
    rows = (
        f'<tr class="session" data-session="{esc(s.session_id)}"><td class="n">{rank}</td>'
        f"<td>{shown(s.session_id)}</td><td>{shown_path(s.path)}</td>"
        f'<td class="n">{s.turns}</td><td class="n">{s.tool_calls}</td>'
        f'<td class="n">{warning_count(s.decisions)}</td><td class="n">{s.halts_total}</td>'
        f'<td class="n">{s.prevented_calls}</td></tr>'
        for rank, s in enumerate(listed, drawn + 1)
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
        + table("other-sessions", columns, rows)
        + left_out(len(listed), len(sessions), "sessions")
    )


def _session_cell(session: SessionReport, anchors: dict[int, int]) -> str:
    """The session's id, a link to its timeline when it has one."""
    rank = anchors.get(session.seq)
    if rank is None:
        return f"<td>{shown(session.session_id)}</td>"
    return f'<td><a href="#session-{rank}">{shown(session.session_id)}</a></td>'


_CALL_COLUMNS: Final = (
    ("session", 17, False),
    ("session call", 7, True),
    ("turn", 5, True),
    ("call in turn", 6, True),
    ("call id", 13, False),
    ("tool", 11, False),
)


def _call_row(
    css: str, code: str, session: SessionReport, anchors: dict[int, int], call: CallRecord | HaltRecord
) -> str:
    """A row of a table of calls: session, the call's place in the session, its turn and its place in
    the turn, call id, tool; the caller adds its own cells."""
    return (
        f'<tr class="{css}" data-code="{esc(code)}">{_session_cell(session, anchors)}'
        f'<td class="n">{call.session_call}</td><td class="n">{call.turn}</td><td class="n">{call.call}</td>'
        f"<td>{shown(call.call_id or '')}</td><td>{shown(call.tool_name)}</td>"
    )


def _halts(ranked: Sequence[SessionReport], total: int, anchors: dict[int, int]) -> str:
    title = '<h2 id="halts-title">Halted turns (the first block or halt of each turn)</h2>'
    if not total:
        return f'{title}<p class="muted" id="halts">No turn halted.</p>'
    rows = list(
        islice(
            (
                f"{_call_row('halt', halt.code, session, anchors, halt)}"
                f"<td>{esc(halt.action)}</td><td>{esc(halt.code)}</td>"
                f'<td class="n">{halt.count}</td><td class="n">{halt.limit}</td>'
                f'<td class="said">{esc(halt.message)}</td></tr>'
                for session in ranked
                for halt in session.halts
            ),
            MAX_HALT_ROWS,
        )
    )
    columns = (
        *_CALL_COLUMNS,
        ("action", 6, False),
        ("code", 12, False),
        ("count", 5, True),
        ("limit", 5, True),
        ("what the guard said", 22, False),
    )
    intro = (
        '<p class="muted">Each call is numbered in its session and in its turn. “count” and '
        "“limit” are the rule's count and its threshold (for a cap: the calls it had counted before "
        "this one and the cap); “what the guard said” is the guard's own message to the model, "
        "made of the tool's name and those counts.</p>"
    )
    return title + intro + table("halts", columns, rows) + left_out(len(rows), total, "halts")


def _warned_calls(ranked: Sequence[SessionReport], total: int, anchors: dict[int, int]) -> str:
    title = '<h2 id="warned-calls-title">Warned calls</h2>'
    if not total:
        return f'{title}<p class="muted" id="warned-calls">No call was warned.</p>'
    rows = list(
        islice(
            (
                f"{_call_row('warned', call.code or '', session, anchors, call)}<td>{esc(call.code)}</td></tr>"
                for session in ranked
                for call in session.warned_calls
            ),
            MAX_WARNING_ROWS,
        )
    )
    intro = (
        '<p class="muted">Every warning the guard gave, call by call (a session lists its first '
        f"{MAX_LISTED_WARNINGS}), the sessions that halted or warned most first.</p>"
    )
    columns = (*_CALL_COLUMNS, ("code", 41, False))
    return title + intro + table("warned-calls", columns, rows) + left_out(len(rows), total, "warnings")


def _in_progress(count: int) -> str:
    if not count:
        return ""
    calls = "call was" if count == 1 else "calls were"
    return (
        f'<p id="in-progress">{count} tool {calls} still in progress when their transcript ended '
        "(a live session): not replayed, and not an input error.</p>"
    )


def _cap_usage(usage: dict[str, CapUsage], cap_hits: dict[str, int]) -> str:
    title = '<h2 id="cap-usage-title">Turn cap usage</h2>'
    # a cap with no turn cap (a session or tree cap alone) still shows its hits, on a row of its own
    hit_only = sorted(cap for cap, hits in cap_hits.items() if hits and cap not in usage)
    if not usage and not hit_only:
        return f'{title}<p class="muted" id="cap-usage">No turn cap is configured.</p>'
    intro = (
        '<p class="muted">Turns by the share of each turn cap they used (the highest reached in the '
        "turn); cap hits count refused calls, per turn, session and tree cap.</p>"
    )
    rows = []
    for cap, entry in sorted(usage.items()):
        cells = "".join(f'<td class="n">{count}</td>' for count in entry.turns)
        rows.append(
            f'<tr data-cap="{esc(cap)}"><td>{esc(cap)}</td><td>{_usage_bar(entry)}</td>{cells}'
            f'<td class="n">{entry.highest:.0%}</td><td class="n">{cap_hits.get(cap, 0)}</td></tr>'
        )
    empty = '<td class="n"></td>' * len(CAP_USAGE_BUCKETS)
    rows.extend(
        f'<tr data-cap="{esc(cap)}"><td>{esc(cap)}</td><td class="muted">no turn cap</td>{empty}'
        f'<td class="n"></td><td class="n">{cap_hits[cap]}</td></tr>'
        for cap in hit_only
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
    return title + intro + table("cap-usage", columns, rows)


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
    listed = entries[:MAX_INPUT_ROWS]
    rows = (
        f'<tr><td class="id">{esc(e.path)}</td><td>{esc(e.format)}</td>'
        f'<td class="n">{e.sessions}</td><td class="n">{e.errors}</td></tr>'
        for e in listed
    )
    columns = (("path", 60, False), ("format", 16, False), ("sessions", 12, True), ("errors", 12, True))
    rendered = table("inputs", columns, rows)
    return '<h2 id="inputs-title">Inputs</h2>' + rendered + left_out(len(listed), len(entries), "inputs")


def _errors(report: ReplayReport) -> str:
    if not report.errors_total:
        return ""
    listed = report.errors[:MAX_ERROR_ROWS]
    rows = (
        f'<tr><td class="id">{esc(e.path if e.line is None else f"{e.path}:{e.line}")}</td>'
        f"<td>{esc(e.reason)}</td></tr>"
        for e in listed
    )
    rendered = table("errors", (("where", 40, False), ("reason", 60, False)), rows)
    return (
        '<h2 id="errors-title">Input errors (skipped)</h2>'
        + rendered
        + left_out(len(listed), report.errors_total, "errors")
    )
