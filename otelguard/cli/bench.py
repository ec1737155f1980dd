"""``otelguard bench``: measure the guard's per-call cost against the floor, its memory and series.

Human output is a rich table (each figure, its ratio to the floor, the issue-6 target, met or not);
``--json`` prints the bench document (docs/overhead.md). Progress goes to stderr. Exit code 0 whenever the bench ran:
missing a target is a finding, not an input error.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from otelguard.bench import FIGURE_NAMES, TARGETS, BenchOptions, run_bench
from otelguard.bench.model_turns import MODEL_TARGET
from otelguard.bench.sidecar import SidecarOptions, run_sidecar_bench
from otelguard.bench.tricks import PAYS
from otelguard.bench.workloads import WORKLOADS
from otelguard.cli.output import cli_console

__all__ = ["add_arguments", "run"]

_DEFAULTS = BenchOptions()


def _positive(text: str) -> int:
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument(
        "--calls", type=_positive, default=_DEFAULTS.calls, metavar="N",
        help=f"timed calls per workload (default {_DEFAULTS.calls:,}; the large workload uses a quarter)",
    )  # fmt: skip
    parser.add_argument(
        "--workload", choices=WORKLOADS, default=None,
        help="run every configuration on this workload (default: all on mixed, the guard alone on large)",
    )  # fmt: skip
    parser.add_argument(
        "--memory-calls", type=_positive, default=_DEFAULTS.memory_calls, metavar="N",
        help=f"distinct calls in one turn before measuring retained memory (default {_DEFAULTS.memory_calls:,})",
    )  # fmt: skip
    parser.add_argument(
        "--growth-calls", type=_positive, default=_DEFAULTS.growth_calls, metavar="N",
        help=f"compare the cost at call 100 with the cost at call N of one turn (default {_DEFAULTS.growth_calls:,})",
    )  # fmt: skip
    parser.add_argument(
        "--loop-signatures", type=_positive, default=_DEFAULTS.loop_signatures, metavar="N",
        help=f"distinct looping signatures before counting series (default {_DEFAULTS.loop_signatures:,})",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=_DEFAULTS.seed, help="workload seed (default 1)")
    parser.add_argument(
        "--sidecar", action="store_true",
        help="also measure otelguard serve and the Claude Code hook command (real processes; seconds)",
    )  # fmt: skip
    parser.add_argument(
        "--sidecar-sessions", type=_positive, default=SidecarOptions().sessions, metavar="N",
        help=f"with --sidecar: distinct sessions sent before measuring serve's memory (default {SidecarOptions().sessions:,})",
    )  # fmt: skip
    parser.add_argument(
        "--sidecar-pairs", type=_positive, default=SidecarOptions().pairs_per_client, metavar="N",
        help=f"with --sidecar: before+after pairs per client, 8 clients (default {SidecarOptions().pairs_per_client:,})",
    )  # fmt: skip
    parser.add_argument(
        "--json", action="store_true", help="print the JSON document (see docs/overhead.md) on stdout"
    )


def run(args: argparse.Namespace) -> int:
    options = BenchOptions(
        calls=args.calls,
        workload=args.workload,
        memory_calls=args.memory_calls,
        growth_calls=args.growth_calls,
        loop_signatures=args.loop_signatures,
        seed=args.seed,
    )
    err = cli_console(stderr=True)

    def progress(message: str) -> None:
        err.print(f"[dim]otelguard bench: {message}[/dim]")

    document = run_bench(options, progress=progress)
    if args.sidecar:
        document["sidecar"] = run_sidecar_bench(
            SidecarOptions(sessions=args.sidecar_sessions, pairs_per_client=args.sidecar_pairs), progress
        )
    if args.json:
        sys.stdout.write(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        _print_tables(cli_console(), document)
    return 0


def _verdict(met: bool | None) -> str:
    if met is None:
        return ""
    return "[green]met[/green]" if met else "[red]missed[/red]"


def _print_tables(console: Console, document: dict[str, Any]) -> None:
    table = Table(
        title=f"otelguard bench: per-call cost, {document['calls']:,} calls (median and p99 of rounds)"
    )
    for column, justify in (("figure", "left"), ("median µs", "right"), ("p99 µs", "right"),
                            ("× floor", "right"), ("target", "right"), ("", "left")):  # fmt: skip
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for workload, floor in document["floor_us"].items():
        table.add_row(f"floor_{workload}", f"{floor:.2f}", "", "1.00", "", "")
        naive = document["naive_floor_us"][workload]
        table.add_row(f"naive_floor_{workload}", f"{naive:.2f}", "", f"{naive / floor:.2f}", "", "")
    order = {name: i for i, name in enumerate(FIGURE_NAMES)}
    for figure in sorted(document["figures"], key=lambda f: order.get(f["name"], len(order))):
        target = figure["target"]
        table.add_row(
            figure["name"],
            f"{figure['per_call_us']:.2f}",
            f"{figure['p99_us']:.2f}",
            f"{figure['ratio_to_floor']:.2f}",
            "" if target is None else f"≤ {target:g}",
            _verdict(figure["met"]),
        )
    console.print(table)
    other = Table(title="growth, memory and series")
    for column in ("measurement", "value", "target", ""):
        other.add_column(column)
    params = document.get("parameters", {})
    rows = (
        (f"cost at call {params.get('growth_calls', 100_000):,} / at call 100", f"{document['growth_ratio']:.3f}",
         "growth_ratio", f"≤ {TARGETS['growth_ratio']:g}"),
        (f"retained bytes after {params.get('memory_calls', 1_000_000):,} distinct calls",
         f"{document['retained_bytes_after_1m_distinct']:,}", "retained_bytes_after_1m_distinct",
         f"≤ {TARGETS['retained_bytes_after_1m_distinct']:,}"),
        (f"metric series after {params.get('loop_signatures', 100_000):,} looping signatures",
         f"{document['series_after_100k_signatures']:,}", "series_after_100k_signatures",
         f"≤ {TARGETS['series_after_100k_signatures']:,}"),
    )  # fmt: skip
    met = {row["name"]: row["met"] for row in document["targets"]}
    for label, value, key, target in rows:
        other.add_row(label, value, target, _verdict(met.get(key)))
    other.add_row("/metrics body bytes", f"{document['metrics_body_bytes']:,}", "", "")
    for name, trick in document.get("hot_path_tricks", {}).items():
        if trick["saving"] is not None:
            other.add_row(
                f"{name}: {trick['path']} {trick['with_us']:.2f} µs/call, {trick['without_us']:.2f} without",
                f"{trick['saving']:.1%} saved",
                f"≥ {PAYS:.0%}",
                _verdict(trick["pays"]),
            )
    for name, figures in document.get("model_events", {}).items():
        if isinstance(figures, dict) and figures.get("ratio") is not None:
            other.add_row(
                f"model event ({name}): {figures['model_event_us']:.2f} µs, tool call "
                f"{figures['tool_call_us']:.2f} µs",
                f"{figures['ratio']:.2f}x",
                f"≤ {MODEL_TARGET:g}x",
                _verdict(figures["met"]),
            )
    console.print(other)
    if "sidecar" in document:
        _print_sidecar(console, document["sidecar"])
    missed = [row["name"] for row in document["targets"] if not row["met"]]
    summary = (
        "all targets met"
        if not missed
        else f"missed: {', '.join(missed)} (a missed target is a finding about this machine and this "
        "build, not an error: the exit status stays 0)"
    )
    console.print(
        f"{len(document['targets']) - len(missed)}/{len(document['targets'])} targets met; {summary}",
        markup=False,
    )


def _print_sidecar(console: Console, sidecar: dict[str, Any]) -> None:
    table = Table(title="sidecar: otelguard serve and the hook command")
    for column in ("measurement", "value", "target", ""):
        table.add_column(column)
    met = {row["name"]: row for row in sidecar["targets"]}
    for key, label in (
        ("sidecar_calls_per_s", "before+after pairs/s through serve, 8 keep-alive clients"),
        ("hook_roundtrip_ratio", "hook process (PreToolUse, warm sidecar) / python -c pass"),
    ):
        row = met[key]
        table.add_row(label, f"{row['value']:,}", row["target"], _verdict(row["met"]))
    table.add_row("hook process median ms", f"{sidecar['hook_median_ms']:.2f}", "", "")
    cache = sidecar["hot_path_tricks"]["request_head_cache"]
    table.add_row(
        f"request-head cache: serve {cache['with_us']:.1f} CPU µs/request, {cache['without_us']:.1f} without",
        f"{cache['saving']:.1%} saved",
        f"≥ {PAYS:.0%}",
        _verdict(cache["pays"]),
    )
    table.add_row("python -c pass median ms", f"{sidecar['python_pass_median_ms']:.2f}", "", "")
    table.add_row(
        f"serve RSS after {sidecar['serve_sessions_sent']:,} sessions (max {sidecar['serve_max_sessions']:,})",
        f"{sidecar['serve_rss_kib_after_flood']:,} KiB (pool full {sidecar['serve_rss_kib_pool_full']:,}, "
        f"start {sidecar['serve_rss_kib_at_start']:,})",
        "",
        "",
    )
    console.print(table)
    _print_shared_state(console, sidecar["shared_state"], met.get("shared_state_capped_calls_per_s"))


def _print_shared_state(console: Console, shared: dict[str, Any], target: dict[str, Any] | None) -> None:
    if "skipped" in shared:
        console.print(f"shared state: not measured ({shared['skipped']})")
        return
    table = Table(title="shared state: session caps in Redis (two serve replicas, one local Redis)")
    for column in ("measurement", "value", "target", ""):
        table.add_column(column)
    rate = shared["shared_state_capped_calls_per_s"]
    table.add_row(
        "capped before+after pairs/s, Redis",
        f"{rate:,}",
        target["target"] if target else "",
        _verdict(target["met"] if target else None),
    )
    table.add_row(
        "capped before+after pairs/s, memory state", f"{shared['memory_state_capped_calls_per_s']:,}", "", ""
    )
    cost = shared["capped_call_us"]
    table.add_row(
        "added µs per capped call (in process)",
        f"{shared['added_us_per_capped_call']:,} ({cost['redis']:,} with Redis, {cost['memory']:,} in memory)",
        "",
        "",
    )
    for outage, figures in shared["fail_open"].items():
        table.add_row(
            f"Redis {outage}: µs per call, median / p99 / max",
            f"{figures['median_us']:,} / {figures['p99_us']:,} / {figures['max_us']:,} "
            f"({figures['redis_attempts']} of {figures['calls']:,} calls tried Redis)",
            "",
            "",
        )
    console.print(table)
