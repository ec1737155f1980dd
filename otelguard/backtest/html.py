"""The "alerts that would have fired" section of the replay's HTML report (``backtest --html``).

It uses the page's own styles and escapes every string with the page's ``esc``; like the rest of the
page it shows labels, codes, counts, session ids and paths, never arguments, results or error texts.
"""

from __future__ import annotations

from typing import Final

from otelguard.backtest.alerts import FiredInterval
from otelguard.backtest.report import BacktestReport
from otelguard.readers.times import iso_utc
from otelguard.replay.html.parts import esc

__all__ = ["alerts_section"]

MAX_INTERVAL_ROWS: Final = 500
_SESSIONS_SHOWN: Final = 5
_HIDDEN_LABELS: Final = frozenset({"alertname", "job", "instance"})


def alerts_section(report: BacktestReport) -> str:
    title = '<h2 id="alerts-title">Alerts that would have fired</h2>'
    if report.period_start is None or report.period_end is None:
        return f'{title}<p class="muted" id="alerts-period">No timed events: nothing was backtested.</p>'
    intro = (
        f'<p class="muted" id="alerts-period">Rules {esc(report.rules_path)}, evaluated by Prometheus over '
        f"{esc(iso_utc(report.period_start))} to {esc(iso_utc(report.period_end))} "
        "(the first event to five minutes after the last).</p>"
    )
    rows = [_row(i) for outcome in report.fired for i in outcome.intervals]
    table = (
        '<table id="alerts"><thead><tr><th>Alert</th><th>Labels</th><th>Pending since</th><th>Fired</th>'
        '<th>Resolved</th><th class="n">Halts</th><th class="n">Cap hits</th><th>Sessions</th></tr></thead>'
        f"<tbody>{''.join(rows[:MAX_INTERVAL_ROWS])}</tbody></table>"
    )
    if not rows:
        table = '<p id="alerts">None: every alert stayed quiet.</p>'
    left_out = ""
    if len(rows) > MAX_INTERVAL_ROWS:
        left_out = (
            f'<p class="muted">first {MAX_INTERVAL_ROWS} of {len(rows)} intervals; --json lists them all</p>'
        )
    quiet = "".join(f"<li>{esc(o.rule.name)}: {esc(o.why_quiet())}</li>" for o in report.quiet)
    listed = (
        f'<p>Quiet: the alerts that would not have fired, and why.</p><ul id="alerts-quiet">{quiet}</ul>'
        if quiet
        else '<p id="alerts-quiet">Quiet: none.</p>'
    )
    parts = [title, intro, table, left_out, listed]
    if report.untimed_sessions_total:
        names = ", ".join(esc(f"{k.path} ({k.session_id})") for k in report.untimed_sessions[:20])
        more = report.untimed_sessions_total - min(20, len(report.untimed_sessions))
        parts.append(
            f'<p class="muted" id="alerts-untimed">{report.untimed_sessions_total} session(s) without '
            f"timestamps were left out: {names}{f' and {more} more' if more > 0 else ''}.</p>"
        )
    return "".join(parts)


def _row(interval: FiredInterval) -> str:
    labels = ", ".join(
        f"{esc(k)}={esc(v)}" for k, v in sorted(interval.labels.items()) if k not in _HIDDEN_LABELS
    )
    resolved = esc(iso_utc(interval.end)) if interval.resolved else "still firing at the end"
    sessions = list(dict.fromkeys(m.fields.get("session_id") for m in (*interval.halts, *interval.cap_hits)))
    shown = ", ".join(esc(s) for s in sessions[:_SESSIONS_SHOWN]) + (
        " ..." if len(sessions) > _SESSIONS_SHOWN else ""
    )
    return (
        f"<tr><td>{esc(interval.alert)}</td><td>{labels}</td><td>{esc(iso_utc(interval.pending_since))}</td>"
        f'<td>{esc(iso_utc(interval.start))}</td><td>{resolved}</td><td class="n">{interval.halts_total}</td>'
        f'<td class="n">{interval.cap_hits_total}</td><td class="id">{shown}</td></tr>'
    )
