"""`otelguard replay PATH...`: run recorded agent transcripts through the guard (docs/replay.md).

Exit codes: 0 success, 1 the replay ran but inputs had errors (or the push failed), 2 usage or
configuration error, 3 nothing to replay (the inputs were read and hold no tool call). ``--json`` prints exactly one JSON document on stdout; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

from otelguard import ConfigError, GuardConfig
from otelguard.cli.config_messages import load_config, port_problem
from otelguard.cli.output import cli_console
from otelguard.cli.replay_tables import render_report
from otelguard.readers.lines import MAX_LINE_BYTES
from otelguard.readers.printable import printable
from otelguard.readers.sources import SUFFIXES
from otelguard.readers.times import parse_duration, parse_moment
from otelguard.replay import (
    AUTO,
    FORMATS,
    STDIN,
    EventSink,
    ReplayReport,
    ReplayRunner,
    UsageError,
    expand_paths,
    follow_inputs,
    replay_inputs,
)
from otelguard.replay.report import MAX_DETAILED_SESSIONS
from otelguard.replay.timed import TimedRun
from otelguard.replay.timeline import Timelines

NOTHING_TO_REPLAY = 3
"""The exit code of a replay that read its inputs cleanly and found no tool call in them."""
DEFAULT_JOB = "otelguard_replay"
DEFAULT_INSTANCE = "replay"
DEFAULT_SCRAPE_INTERVAL = "15s"


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    add_input_arguments(
        parser,
        "a transcript file, a directory (searched recursively for *.jsonl, *.json and *.traj), or - for stdin",
    )
    parser.add_argument("--json", action="store_true", help="print the report as one JSON document")
    parser.add_argument(
        "--html",
        metavar="FILE",
        help="also write a self-contained HTML report (timelines, decisions, halts, cap usage) to FILE",
    )
    parser.add_argument("--agent", default="replay", help="the agent label on metrics (default: replay)")
    parser.add_argument(
        "--follow", action="store_true", help="keep reading new lines and new files, like tail -F"
    )
    parser.add_argument(
        "--idle-timeout",
        type=float,
        metavar="SECONDS",
        help="with --follow: stop after this many seconds without new data (default: until SIGINT/SIGTERM)",
    )
    parser.add_argument(
        "--max-line-bytes",
        type=int,
        default=MAX_LINE_BYTES,
        metavar="BYTES",
        help=f"longest transcript line or .json document read; longer ones are input errors (default: {MAX_LINE_BYTES})",
    )
    parser.add_argument(
        "--detail-sessions",
        type=int,
        default=MAX_DETAILED_SESSIONS,
        metavar="N",
        help="sessions listed in the report, those that halted or warned most first; the rest are only "
        f"counted in the totals (default: {MAX_DETAILED_SESSIONS})",
    )
    parser.add_argument("--serve", type=int, metavar="PORT", help="serve the replay's metrics on /metrics")
    parser.add_argument("--addr", default="127.0.0.1", help="address for --serve (default: 127.0.0.1)")
    parser.add_argument("--pushgateway", metavar="URL", help="push the metrics to this Pushgateway when done")
    parser.add_argument(
        "--openmetrics",
        metavar="FILE",
        help="write the metrics a Prometheus scraping a live exporter would have stored, with the "
        "transcripts' timestamps, as OpenMetrics to FILE (for promtool tsdb create-blocks-from openmetrics)",
    )
    add_series_arguments(parser, replay=True)


def add_input_arguments(parser: argparse.ArgumentParser, paths_help: str) -> None:
    """``PATH...``, ``--format`` and ``--config``: shared with ``otelguard backtest``."""
    parser.add_argument("paths", nargs="+", metavar="PATH", help=paths_help)
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default=AUTO,
        help="transcript format (default: auto, detected per file): openai (Chat Completions messages, also "
        "tau-bench results and ToolBench answers), anthropic (Messages API), claude-code (session files), "
        "openhands (event streams, agent SDK events), swe-agent (.traj), mini-swe-agent (trajectories)",
    )
    parser.add_argument("--config", metavar="FILE", help="guard config (YAML); defaults otherwise")


def add_series_arguments(parser: argparse.ArgumentParser, *, replay: bool = False) -> None:
    """``--scrape-interval``, ``--job``, ``--instance``, ``--since`` and ``--until``: shared with
    ``otelguard backtest`` (for replay they go with ``--openmetrics``; ``--job`` with the Pushgateway too)."""
    where = "with --openmetrics: " if replay else ""
    parser.add_argument(
        "--scrape-interval",
        type=duration_argument,
        metavar="DURATION",
        help=f"{where}the scrape interval of the simulated Prometheus (default: {DEFAULT_SCRAPE_INTERVAL})",
    )
    job_help = (
        "the job label for --openmetrics, the job name for --pushgateway" if replay else "the job label"
    )
    parser.add_argument("--job", metavar="NAME", help=f"{job_help} (default: {DEFAULT_JOB})")
    parser.add_argument(
        "--instance", metavar="NAME", help=f"{where}the instance label (default: {DEFAULT_INSTANCE})"
    )
    now = time.time()
    for option, which in (("--since", "before"), ("--until", "after")):
        parser.add_argument(
            option,
            type=lambda text: moment_argument(text, now),
            metavar="WHEN",
            help=f"{where}leave out the metrics of events {which} WHEN: a time (2025-09-01, 2025-09-01T10:00:00Z; "
            "UTC unless it says otherwise) or a duration before now (7d)",
        )


def moment_argument(text: str, now: float) -> float:
    """An argparse type: a time, or a duration before ``now``."""
    try:
        return parse_moment(text, now)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def duration_argument(text: str) -> float:
    """An argparse type: a Prometheus duration of at least a millisecond."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    problem = _usage_problem(args)
    if problem is not None:
        print(printable(f"otelguard replay: {problem}"), file=sys.stderr)
        return 2
    config = load_config("otelguard replay", args.config)
    if config is None:
        return 2
    try:
        files = expand_paths(args.paths, allow_missing=args.follow)
    except UsageError as exc:
        print(printable(f"otelguard replay: {exc}"), file=sys.stderr)
        return 2
    empty = [] if args.follow else empty_directories(args.paths)  # --follow waits for new files
    for directory in empty:
        print(f"otelguard replay: {no_transcript_in(directory)}", file=sys.stderr)
    if empty and not files:
        return 1
    registry, telemetry = _telemetry(args, config)
    stop = threading.Event()
    # The handlers come before the server: a signal sent as soon as /metrics answers must find them.
    with _stop_on_signals(stop):
        try:
            server = _serve(args, registry)
        except ConfigError as exc:
            print(f"otelguard replay: cannot serve metrics: {exc}", file=sys.stderr)
            return 2
        workdir = tempfile.mkdtemp(prefix="otelguard-replay-") if args.openmetrics else None
        try:
            timelines = Timelines() if args.html else None
            options: dict[str, Any] = {
                "agent": args.agent,
                "timelines": timelines,
                "max_detailed_sessions": args.detail_sessions,
            }
            if workdir is None:
                runner = ReplayRunner(config, telemetry, **options)
                _replay(args, files, runner, stop)
                report = runner.finish()
                exported = True
            else:
                timed = TimedRun(config, workdir, args.since, args.until, **options)
                _replay(args, files, timed.sink, stop)
                report = timed.finish()
                exported = _write_openmetrics(args, timed, config)
            pushed = _push(args, registry)
            written = timelines is None or _write_html(args.html, report, timelines)
            _print_report(report, as_json=args.json)
            if server is not None and not args.follow:
                print(
                    f"otelguard replay: serving metrics on {server.url} until SIGINT/SIGTERM", file=sys.stderr
                )
                stop.wait()
        finally:
            if server is not None:
                server.shutdown()
            if workdir is not None:
                shutil.rmtree(workdir, ignore_errors=True)
    if report.errors_total or empty or not pushed or not written or not exported:
        return 1
    totals = report.totals()
    if totals["tool_calls"] == 0 and "model" not in totals and not args.follow and not stop.is_set():
        # a CI step fed an empty or truncated file must not pass as if a replay had checked it
        print(
            "otelguard replay: nothing to replay: the inputs hold no tool call or model reply (exit 3)",
            file=sys.stderr,
        )
        return NOTHING_TO_REPLAY
    return 0


def empty_directories(paths: list[str]) -> list[str]:
    """The directories among ``paths`` that hold no transcript file."""
    return [raw for raw in paths if raw != STDIN and Path(raw).is_dir() and not expand_paths([raw])]


def no_transcript_in(directory: str) -> str:
    """What a directory holding no transcript is told: where, and what was looked for."""
    shown = directory if directory.isprintable() else ascii(directory)
    return (
        f"{shown}: no transcript in this directory "
        f"(looked for {', '.join('*' + suffix for suffix in SUFFIXES)}, recursively)"
    )


def _usage_problem(args: argparse.Namespace) -> str | None:
    port = port_problem("--serve", args.serve)
    if port is not None:
        return port
    if args.job is not None and args.pushgateway is None and args.openmetrics is None:
        return "--job needs --pushgateway URL or --openmetrics FILE"
    if args.openmetrics is None and any(
        value is not None for value in (args.instance, args.scrape_interval, args.since, args.until)
    ):
        return "--instance, --scrape-interval, --since and --until need --openmetrics FILE"
    if args.since is not None and args.until is not None and args.since >= args.until:
        return "--since must be before --until"
    if args.openmetrics is not None:
        problem = _openmetrics_problem(args)
        if problem is not None:
            return problem
    if args.idle_timeout is not None and not args.follow:
        return "--idle-timeout needs --follow"
    if args.idle_timeout is not None and args.idle_timeout <= 0:
        return f"--idle-timeout must be positive, got {args.idle_timeout}"
    if args.max_line_bytes < 1 or args.detail_sessions < 0:
        return "--max-line-bytes must be at least 1 and --detail-sessions at least 0"
    if args.paths.count(STDIN) > 1:
        return "stdin (-) can be given only once"
    if args.html is not None:
        return _html_problem(args)
    return None


def _openmetrics_problem(args: argparse.Namespace) -> str | None:
    if args.follow:
        return "--openmetrics cannot be used with --follow (the file is written once, when the replay ends)"
    if args.serve is not None or args.pushgateway is not None:
        return "--openmetrics cannot be combined with --serve or --pushgateway"
    return output_file_problem("--openmetrics", args.openmetrics)


def output_file_problem(option: str, path: str) -> str | None:
    target = Path(path)
    if target.is_dir():
        return f"{option} {path} is a directory; give a file name"
    if not target.parent.is_dir():
        return f"{option} {path}: directory {target.parent} does not exist"
    return None


def _html_problem(args: argparse.Namespace) -> str | None:
    if args.follow:
        return "--html cannot be used with --follow (the report is written once, when the replay ends)"
    return output_file_problem("--html", args.html)


def _telemetry(args: argparse.Namespace, config: GuardConfig) -> tuple[Any, Any]:
    if args.serve is None and args.pushgateway is None:
        return None, None
    # imported here so a plain replay never loads prometheus_client or OpenTelemetry
    from prometheus_client import CollectorRegistry

    from otelguard.telemetry import Telemetry

    registry = CollectorRegistry()
    telemetry = Telemetry(registry=registry)
    # series exist from the first scrape, so dashboards and alerts see zeros rather than nothing
    telemetry.prime(args.agent, caps=tuple(key for key, limit in config.caps.turn.items() if limit > 0))
    return registry, telemetry


def _serve(args: argparse.Namespace, registry: Any) -> Any:
    if args.serve is None:
        return None
    from otelguard.serving.metrics_server import serve_metrics

    return serve_metrics(args.serve, args.addr, registry=registry)


def _replay(args: argparse.Namespace, files: list[str], runner: EventSink, stop: threading.Event) -> None:
    if args.follow:
        follow_inputs(
            args.paths, args.format, runner, stop, args.idle_timeout, max_line_bytes=args.max_line_bytes
        )
        return
    with _progress(files) as advance:
        replay_inputs(files, args.format, runner, advance, stop, max_line_bytes=args.max_line_bytes)


@contextlib.contextmanager
def _progress(files: list[str]) -> Iterator[Callable[[int], None] | None]:
    """A byte-based progress bar on stderr, only when stderr is a terminal."""
    if not sys.stderr.isatty():
        yield None
        return
    total = None if STDIN in files else sum(os.path.getsize(f) for f in files)
    columns = (TextColumn("replaying"), BarColumn(), DownloadColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task("replay", total=total)
        yield lambda n: progress.advance(task, n)


def _push(args: argparse.Namespace, registry: Any) -> bool:
    if args.pushgateway is None:
        return True
    from prometheus_client import push_to_gateway

    try:
        push_to_gateway(args.pushgateway, job=args.job or DEFAULT_JOB, registry=registry)
    except (OSError, ValueError) as exc:
        print(f"otelguard replay: push to {args.pushgateway} failed: {exc}", file=sys.stderr)
        return False
    return True


def _write_openmetrics(args: argparse.Namespace, timed: TimedRun, config: GuardConfig) -> bool:
    """Write ``--openmetrics``; sessions without timestamps are named on stderr and left out."""
    from otelguard.replay.openmetrics import write_openmetrics

    if timed.sink.untimed_sessions_total:
        print(
            f"otelguard replay: {timed.sink.untimed_sessions_total} session(s) without timestamps left out "
            f"of {args.openmetrics}: {timed.untimed_names()}",
            file=sys.stderr,
        )
    spill = timed.spill
    if timed.events.failure is not None:
        spill.close()
        print(
            f"otelguard replay: cannot write --openmetrics {args.openmetrics}: the replay's events "
            f"could not be kept ({timed.events.failure})",
            file=sys.stderr,
        )
        return False
    problem = timed.period_problem()
    if problem is not None:  # before the file is opened
        spill.close()
        print(
            printable(f"otelguard replay: cannot write --openmetrics {args.openmetrics}: {problem}"),
            file=sys.stderr,
        )
        return False
    try:
        with open(args.openmetrics, "w", encoding="utf-8", errors="replace") as stream:
            if spill.first is None or spill.last is None:
                stream.write("# EOF\n")
                print(
                    f"otelguard replay: no timed events; {args.openmetrics} holds no samples", file=sys.stderr
                )
                return True
            summary = write_openmetrics(
                stream,
                spill.drain(),
                spill.first,
                spill.last,
                args.scrape_interval or parse_duration(DEFAULT_SCRAPE_INTERVAL),
                config.telemetry,
                job=args.job or DEFAULT_JOB,
                instance=args.instance or DEFAULT_INSTANCE,
            )
    except OSError as exc:
        print(
            f"otelguard replay: cannot write --openmetrics {args.openmetrics}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return False
    finally:
        spill.close()
    print(
        f"otelguard replay: wrote {summary.samples} samples of {summary.series} series to {args.openmetrics}",
        file=sys.stderr,
    )
    return True


def _write_html(path: str, report: ReplayReport, timelines: Timelines) -> bool:
    from otelguard.replay.html.report import write_html

    try:
        size = write_html(path, report, timelines)
    except OSError as exc:
        print(f"otelguard replay: cannot write --html {path}: {exc.strerror or exc}", file=sys.stderr)
        return False
    print(f"otelguard replay: wrote the HTML report to {path} ({size} bytes)", file=sys.stderr)
    return True


def _print_report(report: ReplayReport, *, as_json: bool) -> None:
    if as_json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        render_report(report, cli_console())


@contextlib.contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """SIGINT/SIGTERM end a follow (or a serve) cleanly: the report is still printed, exit 0."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, lambda *_: stop.set())
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
