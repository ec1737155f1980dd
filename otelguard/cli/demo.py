"""`otelguard demo`: simulated agents looping through a real guard, with live ``/metrics``.

Serves ``/metrics`` (default 127.0.0.1:9464), records spans through an SDK tracer provider (OTLP
when ``OTEL_EXPORTER_OTLP_*`` is set) and, on a terminal, shows a live table of decisions.
SIGINT/SIGTERM or ``--duration`` end it with exit 0.
"""

from __future__ import annotations

import argparse
import os
import random
import secrets
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from otelguard import ConfigError, GuardConfig
from otelguard.cli.config_messages import load_config, option_problem, port_problem
from otelguard.config.environment import OTELGUARD_SIGNATURE_KEY
from otelguard.config.names import TOKENS
from otelguard.core.scripted import ScriptedCall
from otelguard.demo.simulation import (
    AGENT_NAMES,
    DEMO_TURN_TOKENS,
    SCENARIOS,
    DemoStats,
    SimulatedAgent,
)
from otelguard.serving.metrics_server import MetricsServer, serve_metrics
from otelguard.telemetry import Telemetry
from otelguard.telemetry.tracer_setup import SpanExport, span_export_from_env

__all__ = ["add_arguments", "run"]

DEFAULT_RATE = 40.0
DEFAULT_AGENTS = 4
# /metrics must answer within 5 s; waiting this long for the first decision keeps every family
# populated on the first scrape without risking that.
FIRST_DECISION_WAIT_SECONDS = 3.0


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("--port", type=int, default=9464, help="port for /metrics (default 9464)")
    parser.add_argument("--addr", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--duration", type=float, default=None, metavar="SECONDS", help="stop after SECONDS")
    parser.add_argument("--seed", type=int, default=None, help="random seed for reproducible runs")
    parser.add_argument(
        "--rate",
        type=float,
        default=DEFAULT_RATE,
        metavar="CALLS_PER_S",
        help=f"tool calls per second, all agents together (default {DEFAULT_RATE:g})",
    )
    parser.add_argument(
        "--agents",
        type=int,
        default=DEFAULT_AGENTS,
        help=f"number of simulated agents (default {DEFAULT_AGENTS})",
    )
    parser.add_argument(
        "--config", default=None, metavar="FILE", help="guard config (default: mode unattended)"
    )


def run(args: argparse.Namespace) -> int:
    problem = _check_arguments(args)
    if problem:
        print(f"otelguard demo: {problem}", file=sys.stderr)
        return 2
    config = _demo_config(args.config)
    if config is None:
        return 2
    stop = threading.Event()
    restore = _handle_signals(stop)
    spans = span_export_from_env("otelguard-demo")
    stats = DemoStats()
    threads = _start_agents(args, config, spans, stats, stop)
    try:
        _wait_for_first_decision(stats, stop)
        server = serve_metrics(port=args.port, addr=args.addr)
    except ConfigError as exc:
        restore()
        _stop(stop, threads, spans)
        print(f"otelguard demo: {option_problem(exc)}", file=sys.stderr)
        return 2
    try:
        _show(args, server, spans, stats, stop)
    finally:
        restore()
        server.shutdown()
        _stop(stop, threads, spans)
    _print_summary(stats, spans)
    return 0


def _start_agents(
    args: argparse.Namespace, config: GuardConfig, spans: SpanExport, stats: DemoStats, stop: threading.Event
) -> list[threading.Thread]:
    telemetry = Telemetry(tracer_provider=spans.provider)
    names = _agent_names(args.agents)
    tools = tuple(
        sorted({call.tool_name for scenario in SCENARIOS.values() for call in _first_calls(scenario)})
    )
    for name in names:
        telemetry.prime(name, tools=tools, caps=tuple(config.caps.turn))
    interval = len(names) / args.rate
    agents = [
        SimulatedAgent(name, i, config, telemetry, stats, stop, seed=args.seed, interval=interval)
        for i, name in enumerate(names)
    ]
    threads = [threading.Thread(target=a.run, name=f"agent-{a.name}", daemon=True) for a in agents]
    for thread in threads:
        thread.start()
    return threads


def _wait_for_first_decision(stats: DemoStats, stop: threading.Event) -> None:
    deadline = time.monotonic() + FIRST_DECISION_WAIT_SECONDS
    while not stop.is_set() and time.monotonic() < deadline:
        if stats.first_decision.wait(0.1):
            return


def _check_arguments(args: argparse.Namespace) -> str | None:
    if not args.rate > 0:
        return f"--rate: {args.rate} is not allowed; expected a number of calls per second > 0"
    if args.agents < 1:
        return f"--agents: {args.agents} is not allowed; expected an integer >= 1"
    if args.duration is not None and args.duration < 0:
        return f"--duration: {args.duration} is not allowed; expected seconds >= 0"
    return port_problem("--port", args.port)


def _demo_config(path: str | None) -> GuardConfig | None:
    """``--config`` as given (``None`` once its errors are printed); otherwise unattended (hard stops
    on, so turns get halted) with turn spans and a cap on a turn's tokens."""
    if path is not None:
        config = load_config("otelguard demo", path)
        if config is None:
            return None
    else:
        config = GuardConfig.from_mapping(
            {
                "mode": "unattended",
                "telemetry": {"turn_spans": True},
                "caps": {"turn": {TOKENS: DEMO_TURN_TOKENS}},
            }
        )
    if config.signature_key is None and not os.environ.get(OTELGUARD_SIGNATURE_KEY):
        # A per-run key, set explicitly: the demo's hashes need not correlate across runs, and the
        # note that telemetry gives about a random key would only confuse a first-time user.
        config = config.with_changes(signature_key=secrets.token_hex(16))
    return config


def _agent_names(count: int) -> list[str]:
    names = list(AGENT_NAMES[:count])
    for i in range(len(AGENT_NAMES), count):
        names.append(f"{AGENT_NAMES[i % len(AGENT_NAMES)]}-{i // len(AGENT_NAMES) + 1}")
    return names


def _first_calls(scenario: Callable[..., Any]) -> list[ScriptedCall]:
    calls: list[ScriptedCall] = []
    for call in scenario(random.Random(0)):
        calls.append(call)
        if len(calls) >= 8:
            break
    return calls


def _handle_signals(stop: threading.Event) -> Callable[[], None]:
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    for sig in previous:
        signal.signal(sig, on_signal)

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore


def _show(
    args: argparse.Namespace,
    server: MetricsServer,
    spans: SpanExport,
    stats: DemoStats,
    stop: threading.Event,
) -> None:
    deadline = None if args.duration is None else time.monotonic() + args.duration
    if sys.stdout.isatty():
        _live_view(server.url, spans.target, stats, stop, deadline)
        return
    print(f"otelguard demo: serving {server.url} ({args.agents} agents, {args.rate:g} calls/s)", flush=True)
    while not stop.is_set():
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            break
        stop.wait(0.5 if remaining is None else min(0.5, remaining))


def _live_view(
    url: str, span_target: str, stats: DemoStats, stop: threading.Event, deadline: float | None
) -> None:
    """Rich live tables, refreshed twice a second, until stopped or past the deadline."""
    from rich.live import Live

    with Live(_render(url, span_target, stats), refresh_per_second=2, transient=False) as live:
        while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
            stop.wait(0.5)
            live.update(_render(url, span_target, stats))


def _render(url: str, span_target: str, stats: DemoStats) -> Any:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    snap = stats.snapshot()
    spans = "OTLP" if span_target == "otlp" else "recorded (set OTEL_EXPORTER_OTLP_ENDPOINT to export)"
    header = Text.assemble(
        ("otelguard demo", "bold"),
        f"  metrics: {url}  spans: {spans}\n",
        f"{snap['calls']} tool calls, {snap['turns']} turns, ",
        (f"{snap['halted_turns']} halted", "bold red" if snap["halted_turns"] else ""),
        "  (Ctrl-C to stop)",
    )
    codes = Table(title="decisions by code", expand=False)
    codes.add_column("code")
    codes.add_column("count", justify="right")
    for code, count in sorted(snap["codes"].items(), key=lambda item: -item[1]):
        codes.add_row(Text(code), str(count))
    recent = Table(title="latest decisions", expand=False)
    for column in ("agent", "scenario", "tool", "action", "code"):
        recent.add_column(column)
    # Not "count/limit": a warning keeps counting past the threshold it fired at (3 failures, warned
    # from 2), which as a fraction reads as a limit overrun.
    recent.add_column("count", justify="right")
    recent.add_column("threshold", justify="right")
    styles = {"warn": "yellow", "reject": "magenta", "block": "red", "halt": "bold red"}
    for row in reversed(snap["recent"]):
        recent.add_row(
            Text(row.agent), Text(row.scenario), Text(row.tool_name), Text(row.action, style=styles.get(row.action, "")),
            Text(row.code), str(row.count), str(row.limit),
        )  # fmt: skip
    return Group(header, codes, recent)


def _stop(stop: threading.Event, threads: list[threading.Thread], spans: SpanExport) -> None:
    stop.set()
    for thread in threads:
        thread.join(2)
    spans.shutdown()


def _print_summary(stats: DemoStats, spans: SpanExport) -> None:
    snap = stats.snapshot()
    codes = ", ".join(f"{code} {n}" for code, n in sorted(snap["codes"].items()))
    print(
        f"otelguard demo: {snap['calls']} calls, {snap['turns']} turns ({snap['halted_turns']} halted); "
        f"decisions: {codes or 'none'}",
        flush=True,
    )
    if spans.exporter.dropped:
        print(f"otelguard demo: {spans.exporter.dropped} spans could not be exported", file=sys.stderr)
