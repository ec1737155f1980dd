"""`otelguard check-config FILE`: validate a config, print the effective config."""

from __future__ import annotations

import argparse
import json

from rich.table import Table
from rich.text import Text

from otelguard import ConfigError
from otelguard.cli.config_messages import load_config, print_config_error
from otelguard.cli.output import cli_console


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
    table = Table(title=Text(f"effective config: {args.file}"), show_header=True)
    table.add_column("key")
    table.add_column("value")
    for key, value in effective.items():
        table.add_row(Text(key), Text(json.dumps(value)))  # values come from the file: never markup
    cli_console().print(table)
    return 0
