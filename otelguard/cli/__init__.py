"""The ``otelguard`` command line. One module per command; each uses only the public API.

Exit codes: 0 success, 1 the work ran but found input errors, 2 usage or configuration error.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from otelguard._version import __version__

__all__ = ["main"]

# command name -> module under otelguard.cli exposing add_arguments(parser) and run(args) -> int
COMMANDS = {
    "demo": ("demo", "simulated agents through a real guard, serving live /metrics"),
    "replay": ("replay", "run recorded agent transcripts through the guard"),
    "check-config": ("check_config", "validate a config file and print the effective config"),
    "bench": ("bench", "measure the guard's per-call cost against the floor"),
    "dashboards": ("shipped_files", "export the shipped Grafana dashboard"),
    "rules": ("shipped_files", "export the shipped Prometheus rules"),
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"otelguard: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="otelguard", description="Stop LLM agents from looping on tool calls.")
    parser.add_argument("--version", action="version", version=f"otelguard {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, (module_name, help_text) in COMMANDS.items():
        command_parser = sub.add_parser(name, help=help_text, description=help_text)
        module = importlib.import_module(f"otelguard.cli.{module_name}")
        module.add_arguments(command_parser, name)
        command_parser.set_defaults(_module=module)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    code: int = args._module.run(args)
    return code
