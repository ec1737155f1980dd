"""`otelguard check-config FILE`: validate a config, print the effective config."""

from __future__ import annotations

import argparse
import json

from rich.table import Table
from rich.text import Text

from otelguard import ConfigError
from otelguard.cli.config_messages import load_config, print_config_error
from otelguard.cli.output import cli_console

PIPE_WIDTH = 100
"""The table's width in a file or a pipe: a value (the tool lists, say) is kilobytes on one line, so
there it is indented JSON and wraps in its column, as it does on a terminal."""


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("file", help="YAML config file")
    parser.add_argument("--json", action="store_true", help="print the effective config as JSON")


def run(args: argparse.Namespace) -> int:
    config = load_config("otelguard", args.file)
    if config is None:
        return 2
    try:
        # the state URL this process would use: OTELGUARD_STATE_URL wins over the file
        config = config.with_changes(state=config.effective_state())
    except ConfigError as exc:
        print_config_error("otelguard", exc)
        return 2
    effective = config.to_mapping()
    if args.json:
        print(json.dumps(effective, indent=2, sort_keys=True))
        return 0
    table = Table(show_header=True)
    table.add_column("key")
    table.add_column("value")
    for key, value in effective.items():
        shown = (
            json.dumps(value, indent=2) if isinstance(value, (dict, list)) and value else json.dumps(value)
        )
        table.add_row(Text(key), Text(shown))  # values come from the file: never markup
    console = cli_console(pipe_width=PIPE_WIDTH)
    console.print(Text(f"effective config: {args.file}"), soft_wrap=True)  # a path is never split
    console.print(table)
    return 0
