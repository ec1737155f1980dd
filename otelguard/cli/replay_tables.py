"""The human form of ``otelguard replay``'s report: rich tables (``--json`` prints the data instead)."""

from __future__ import annotations

from typing import Final, Literal

from rich.console import Console
from rich.table import Table
from rich.text import Text

from otelguard.readers.printable import printable
from otelguard.replay.report import ReplayReport

__all__ = ["render_report"]

_MAX_ROWS: Final = 50
"""Rows per table in the human report (``--json`` has everything)."""


def render_report(report: ReplayReport, console: Console) -> None:
    """Print the report as tables: inputs, sessions, decisions, cap hits, halts, errors, totals, and
    the calls still in progress when their transcript ended (a live session), if any."""
    totals = report.totals()
    console.print(_inputs_table(report))
    console.print(_sessions_table(report))
    if totals["decisions"]:
        console.print(_decisions_table(report, totals["decisions"]))
    if totals["cap_hits"]:
        console.print(_counts_table("cap hits", "cap", totals["cap_hits"]))
    if totals["halts"]:
        console.print(_halts_table(report))
    if report.errors:
        console.print(_errors_table(report))
    console.print(
        f"sessions: [bold]{totals['sessions']}[/], turns: [bold]{totals['turns']}[/], "
        f"tool calls: [bold]{totals['tool_calls']}[/], would-be halts: [bold]{totals['halts']}[/], "
        f"calls that would not have run: [bold]{totals['prevented_calls']}[/], "
        f"input errors: [bold]{totals['errors']}[/]",
        highlight=False,
    )
    model = totals.get("model")
    if model is not None:
        console.print(
            f"model replies: [bold]{model['replies']}[/], replies that would not have been asked for: "
            f"[bold]{model['prevented']}[/], model decisions: [bold]{sum(model['decisions'].values())}[/]",
            highlight=False,
        )
    if totals["in_progress"]:
        console.print(
            f"in progress: [bold]{totals['in_progress']}[/] (still running when the transcript ended; "
            "not replayed)",
            highlight=False,
        )


def _inputs_table(report: ReplayReport) -> Table:
    table = Table(title="inputs", title_justify="left")
    for column in ("path", "format", "sessions", "errors"):
        table.add_column(column, justify="right" if column in ("sessions", "errors") else "left")
    for entry in list(report.inputs.values())[:_MAX_ROWS]:
        _literal_row(table, entry.path, entry.format, str(entry.sessions), str(entry.errors))
    _more(table, len(report.inputs), "inputs")
    return table


def _sessions_table(report: ReplayReport) -> Table:
    table = Table(title="sessions", title_justify="left")
    table.add_column("session", overflow="fold")
    for column in ("turns", "tool calls", "warnings", "halted turns", "not run"):
        table.add_column(column, justify="right")
    for session in report.sessions[:_MAX_ROWS]:
        warnings = session.warnings
        _literal_row(
            table,
            session.session_id,
            str(session.turns),
            str(session.tool_calls),
            str(warnings),
            str(session.halts_total),
            str(session.prevented_calls),
        )
    _more(table, report.totals()["sessions"], "sessions")
    return table


def _decisions_table(report: ReplayReport, decisions: dict[str, int]) -> Table:
    table = Table(title="decisions by code", title_justify="left")
    table.add_column("code")
    table.add_column("action")
    table.add_column("count", justify="right")
    for code, count in sorted(decisions.items(), key=lambda item: (-item[1], item[0])):
        _literal_row(table, code, "/".join(sorted(report.actions.get(code, ()))), str(count))
    return table


def _counts_table(title: str, key: str, counts: dict[str, int]) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column(key)
    table.add_column("count", justify="right")
    for name, count in sorted(counts.items()):
        _literal_row(table, name, str(count))
    return table


def _halts_table(report: ReplayReport) -> Table:
    table = Table(title="would-be halts (first block/halt of each turn)", title_justify="left")
    numbered = ("session call", "turn", "call in turn")
    for column in ("session", *numbered, "call id", "tool", "action", "code"):
        justify: Literal["left", "right"] = "right" if column in numbered else "left"
        table.add_column(column, justify=justify, overflow="fold")
    shown = 0
    total = report.totals()["halts"]
    for session in report.sessions:
        for halt in session.halts:
            if shown < _MAX_ROWS:
                shown += 1
                _literal_row(
                    table,
                    session.session_id,
                    str(halt.session_call),
                    str(halt.turn),
                    str(halt.call),
                    halt.call_id or "",
                    halt.tool_name,
                    halt.action,
                    halt.code,
                )
    _more(table, total, "halts")
    return table


def _errors_table(report: ReplayReport) -> Table:
    table = Table(title="input errors (skipped)", title_justify="left")
    table.add_column("where")
    table.add_column("reason")
    for error in report.errors[:_MAX_ROWS]:
        where = error.path if error.line is None else f"{error.path}:{error.line}"
        _literal_row(table, where, error.reason)
    _more(table, report.errors_total, "errors")
    return table


def _literal_row(table: Table, *cells: str) -> None:
    """Cells hold names and ids from transcripts: shown as written, never read as rich markup, and
    with every control character escaped (``printable``)."""
    table.add_row(*(Text(printable(cell)) for cell in cells))


def _more(table: Table, total: int, what: str) -> None:
    if total > _MAX_ROWS:
        table.caption = f"first {_MAX_ROWS} of {total} {what}; --json lists more"
