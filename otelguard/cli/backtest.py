"""`otelguard backtest PATH...`: which alerts would have fired on recorded transcripts (docs/backtest.md).

Exit codes: 0 no alert would have fired, 1 at least one would have, 2 a usage or configuration error,
a missing ``prometheus``/``promtool`` or an engine failure, 3 nothing was backtested (no transcript
found, or none recorded when its calls happened), 130 interrupted. Input errors are reported
and do not change the exit code. ``--json`` prints exactly one JSON document on stdout; progress goes
to stderr. Whatever happens, the server is stopped and the temporary directory removed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any, NoReturn

from rich.console import Console
from rich.table import Table
from rich.text import Text

from otelguard import ConfigError, GuardConfig
from otelguard.backtest.engine import BacktestError, Binaries, Engine, MissingBinary
from otelguard.backtest.report import BacktestReport
from otelguard.backtest.rules import DEFAULT_EVALUATION_INTERVAL, load_rules
from otelguard.backtest.run import BacktestOptions, run_backtest
from otelguard.cli.output import cli_console
from otelguard.cli.replay import (
    DEFAULT_INSTANCE,
    DEFAULT_JOB,
    DEFAULT_SCRAPE_INTERVAL,
    add_input_arguments,
    add_series_arguments,
    duration_argument,
    empty_directories,
    no_transcript_in,
    output_file_problem,
)
from otelguard.errors import UsageError
from otelguard.readers.printable import printable
from otelguard.readers.times import format_duration, iso_utc, parse_duration
from otelguard.replay import STDIN, expand_paths
from otelguard.replay.timeline import Timelines

_INTERRUPTED = 130
# Not 0: a CI gate built on the backtest must not pass when nothing was checked.
_NOTHING_BACKTESTED = 3
_LISTED = 20
_SHOWN_APART = frozenset({"alertname", "job", "instance"})
_ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    add_input_arguments(
        parser, "a transcript file or a directory (searched recursively for *.jsonl, *.json and *.traj)"
    )
    parser.add_argument(
        "--rules",
        metavar="FILE",
        help="Prometheus rule file to backtest (default: the shipped otelguard rules)",
    )
    parser.add_argument(
        "--evaluation-interval",
        type=duration_argument,
        metavar="DURATION",
        help="interval of rule groups that set none, as Prometheus's global evaluation_interval (default: 1m)",
    )
    parser.add_argument("--agent", default="replay", help="the agent label on metrics (default: replay)")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON document")
    parser.add_argument(
        "--html",
        metavar="FILE",
        help="also write the replay's HTML report, with the alerts that would have fired",
    )
    add_series_arguments(parser)


def run(args: argparse.Namespace) -> int:
    try:
        options, binaries = _prepare(args)
    except ConfigError as exc:
        return _usage(f"invalid config {args.config}: {' '.join(str(exc).split())}")
    except (UsageError, MissingBinary) as exc:
        return _usage(str(exc))
    for directory in empty_directories(args.paths):  # an input error: the others are still backtested
        _progress(no_transcript_in(directory))
    workdir = Path(tempfile.mkdtemp(prefix="otelguard-backtest-"))
    timelines = Timelines() if args.html else None
    try:
        with _interrupt_on_signals():
            Engine(binaries, workdir, lookback=1, retention_days=1).check_rules(options.rules.path)
            report = run_backtest(options, binaries, workdir, _progress, threading.Event(), timelines)
    except KeyboardInterrupt:
        with contextlib.suppress(OSError):  # after SIGHUP the terminal may be gone
            print(
                f"otelguard backtest: interrupted; stopped prometheus and removed {workdir}", file=sys.stderr
            )
        return _INTERRUPTED
    except BacktestError as exc:
        return _usage(str(exc))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if timelines is not None:
        _write_html(args.html, report, timelines)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        _render(report, cli_console(), found=bool(options.files))
    if report.period_start is None:
        return _NOTHING_BACKTESTED
    return 1 if report.fired else 0


def _prepare(args: argparse.Namespace) -> tuple[BacktestOptions, Binaries]:
    if args.paths.count(STDIN):
        raise UsageError("stdin (-) cannot be backtested; give transcript files or directories")
    if args.html is not None and (problem := output_file_problem("--html", args.html)) is not None:
        raise UsageError(problem)
    if args.since is not None and args.until is not None and args.since >= args.until:
        raise UsageError("--since must be before --until")
    from otelguard.integrations.hermes import hermes_dialect  # either dialect, as every command reads

    config = GuardConfig.from_file(args.config, dialect=hermes_dialect) if args.config else GuardConfig()
    files = expand_paths(args.paths)
    rules = load_rules(
        args.rules or _shipped_rules(), args.evaluation_interval or DEFAULT_EVALUATION_INTERVAL
    )
    if not rules.alerts:
        raise UsageError(f"rules {rules.path} hold no alerting rule: there is nothing to backtest")
    rules.levels()  # recording rules that read each other in a cycle cannot be backfilled
    binaries = Binaries.find()
    options = BacktestOptions(
        files,
        args.format,
        config,
        rules,
        args.scrape_interval or parse_duration(DEFAULT_SCRAPE_INTERVAL),
        args.job or DEFAULT_JOB,
        args.instance or DEFAULT_INSTANCE,
        agent=args.agent,
        since=args.since,
        until=args.until,
    )
    return options, binaries


def _shipped_rules() -> str:
    return str(resources.files("otelguard") / "data" / "prometheus" / "otelguard-rules.yaml")


def _usage(message: str) -> int:
    print(printable(f"otelguard backtest: {message}"), file=sys.stderr)  # it may quote input
    return 2


def _progress(message: str) -> None:
    print(printable(f"otelguard backtest: {message}"), file=sys.stderr, flush=True)


@contextlib.contextmanager
def _interrupt_on_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP (a closed terminal) end a backtest like Ctrl-C does: through the cleanup
    (prometheus stopped, the temporary directory removed), not around it. Prometheus takes SIGHUP as
    "reload its config", so it would outlive a backtest that died of it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(*_: Any) -> NoReturn:
        raise KeyboardInterrupt

    previous = {number: signal.signal(number, interrupt) for number in _ENDING_SIGNALS}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _write_html(path: str, report: BacktestReport, timelines: Timelines) -> None:
    from otelguard.backtest.html import alerts_section
    from otelguard.replay.html.report import write_html

    try:
        size = write_html(path, report.replay, timelines, [alerts_section(report)], "otelguard backtest")
    except OSError as exc:
        print(f"otelguard backtest: cannot write --html {path}: {exc.strerror or exc}", file=sys.stderr)
        return
    print(f"otelguard backtest: wrote the HTML report to {path} ({size} bytes)", file=sys.stderr)


def _moment(seconds: float, same_day_as: str = "") -> str:
    """``2025-03-03 10:12:55`` to the second (``--json`` has the milliseconds, and when the alert
    became pending); only the time when the date is ``same_day_as``'s."""
    text = iso_utc(math.floor(seconds)).replace("T", " ").removesuffix("Z")
    return text[11:] if text[:10] == same_day_as[:10] else text


def _render(report: BacktestReport, console: Console, *, found: bool = True) -> None:
    if not found:
        console.print(
            "Nothing was backtested: no transcript was found in the paths given, so no alert was "
            "checked (exit 3).",
            markup=False,
        )
    elif report.period_start is None or report.period_end is None:
        console.print(
            "Nothing was backtested: no transcript recorded when its calls happened, so no alert was "
            "checked (exit 3). Backtest transcripts with timestamps, such as Claude Code's.",
            markup=False,
        )
    else:
        console.print(
            f"Recorded period {iso_utc(report.period_start)} to {iso_utc(report.period_end)}, "
            f"scraped every {format_duration(report.scrape_interval)}; rules {report.rules_path}"
        )
    table = Table(title="Alerts that would have fired (UTC)")
    table.add_column("alert", overflow="fold", min_width=10)
    table.add_column("labels", overflow="fold", min_width=10)
    table.add_column("fired", no_wrap=True)
    table.add_column("resolved", no_wrap=True)
    table.add_column("halts", justify="right")
    table.add_column("cap hits", justify="right")
    for outcome in report.fired:
        for interval in outcome.intervals:
            labels = " ".join(f"{k}={v}" for k, v in sorted(interval.labels.items()) if k not in _SHOWN_APART)
            start = _moment(interval.start)
            cells = (
                interval.alert,
                labels,
                start,
                _moment(interval.end, start) if interval.resolved else "still firing",
                str(interval.halts_total),
                str(interval.cap_hits_total),
            )
            table.add_row(
                *(Text(printable(cell)) for cell in cells)
            )  # names from input: never markup, escaped
    if report.fired:
        console.print(table)
    elif report.period_start is not None:
        console.print("No alert would have fired.")
    if report.period_start is not None:  # with nothing backtested no alert was quiet either
        console.print("Quiet:" if report.quiet else "Quiet: none", markup=False)
        for outcome in report.quiet:  # why each stayed quiet: its for: against how long it held
            console.print(f"  {outcome.rule.name}: {outcome.why_quiet()}", markup=False)
    if report.untimed_sessions_total:
        names = ", ".join(
            f"{printable(k.path)} ({printable(k.session_id)})" for k in report.untimed_sessions[:_LISTED]
        )
        console.print(
            f"{report.untimed_sessions_total} session(s) without timestamps were left out: {names}",
            markup=False,
        )
    errors = report.replay.errors_total
    if errors:
        console.print(f"{errors} input error(s), reported and skipped:", markup=False)
        for error in report.replay.errors[:_LISTED]:
            where = f"{error.path}:{error.line}" if error.line is not None else error.path
            console.print(f"  {printable(where)}: {printable(error.reason)}", markup=False)
