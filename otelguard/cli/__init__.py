"""The ``otelguard`` command line. One module per command; each uses only the public API.

Exit codes: 0 success, 1 the work ran but found input errors (``backtest``: an alert would have
fired), 2 usage or configuration error; each command's ``--help`` states its own. ``otelguard hook``
runs on every Claude Code tool call: it is dispatched before anything else is imported (argparse and
the command modules included), uses only the standard library and always exits 0, as does a command
name that looks like a mistyped ``hook`` (Claude Code reads exit 2 as "block this call").
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # not typing's: the hook command must not pay for importing typing
if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence

__all__ = ["main"]

# command name -> module under otelguard.cli exposing add_arguments(parser) and run(args) -> int
COMMANDS = {
    "demo": ("demo", "simulated agents through a real guard, serving live /metrics"),
    "replay": ("replay", "run recorded agent transcripts through the guard"),
    "backtest": ("backtest", "which alerts would have fired on recorded transcripts (real Prometheus)"),
    "serve": ("serve", "the sidecar: a guard per session over HTTP, with /metrics, on one port"),
    "hook": ("hook", "the command for Claude Code's hooks: stdin payload -> sidecar -> stdout"),
    "check-config": ("check_config", "validate a config file and print the effective config"),
    "bench": ("bench", "measure the guard's per-call cost against the floor"),
    "dashboards": ("shipped_files", "export the shipped Grafana dashboard"),
    "rules": ("shipped_files", "export the shipped Prometheus rules"),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; given the command about to run, only that command's module is imported (startup
    time: ``otelguard serve`` must not load the replay and demo modules)."""
    import argparse
    import importlib

    from otelguard._version import __version__

    class _Parser(argparse.ArgumentParser):
        def error(self, message: str) -> None:  # type: ignore[override]
            self.exit(2, f"otelguard: error: {message}\n")

    parser = _Parser(prog="otelguard", description="Stop LLM agents from looping on tool calls.")
    parser.add_argument("--version", action="version", version=f"otelguard {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, (module_name, help_text) in COMMANDS.items():
        if name == "hook" or (command in COMMANDS and name != command):
            # listed for --help only: hook is parsed by hand on its fast path
            sub.add_parser(name, help=help_text, description=help_text, add_help=False)
            continue
        command_parser = sub.add_parser(name, help=help_text, description=help_text)
        module = importlib.import_module(f"otelguard.cli.{module_name}")
        module.add_arguments(command_parser, name)
        command_parser.set_defaults(_module=module)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list and args_list[0] == "hook":
        from otelguard.cli.hook import main as hook_main

        return hook_main(args_list[1:])
    if args_list and args_list[0] not in COMMANDS and args_list[0].lower().startswith("hook"):
        from otelguard.cli.hook import mistyped

        return mistyped(args_list[0])
    parser = build_parser(args_list[0] if args_list else None)
    args = parser.parse_args(args_list)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    code: int = args._module.run(args)
    return code
