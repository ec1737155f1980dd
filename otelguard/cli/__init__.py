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


EXIT_CODES = {
    "demo": "0 stopped (SIGINT, SIGTERM or --duration); 2 usage or configuration error (a bad config, "
    "--port in use)",
    "replay": "0 every input read; 1 input errors (malformed lines, unreadable files, a directory with no "
    "transcript) or an output that could not be written (--html, --openmetrics, --pushgateway), the "
    "report printed all the same; 2 usage or configuration error; 3 nothing to replay (no tool call in the "
    "inputs)",
    "backtest": "0 no alert would have fired; 1 an alert would have fired; 2 usage or configuration "
    "error, or Prometheus could not run; 3 nothing was backtested (no transcript found, or none recorded "
    "when its calls happened); 130 interrupted",
    "serve": "0 stopped by SIGINT or SIGTERM; 2 usage or configuration error (a bad config, --port in use)",
    "hook": "always 0, even on errors (Claude Code reads exit 2 as 'block this call'): a problem is one "
    "line on stderr and the call goes ahead",
    "check-config": "0 the config is valid (its warnings, probable typos, on stderr); 2 it is not (one line "
    "per problem on stderr)",
    "bench": "0 the measurement ran, whether or not every target was met (a missed target is a finding, "
    "not an error); 2 usage error",
    "dashboards": "0 written or already up to date; 2 DIR is not a directory, a file differs (without "
    "--force) or cannot be written",
    "rules": "0 written or already up to date; 2 DIR is not a directory, a file differs (without --force) "
    "or cannot be written",
}
"""What each command's exit status means, as its ``--help`` ends."""


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
        command_parser = sub.add_parser(
            name, help=help_text, description=help_text, epilog=f"exit status: {EXIT_CODES[name]}"
        )
        module = importlib.import_module(f"otelguard.cli.{module_name}")
        module.add_arguments(command_parser, name)
        command_parser.set_defaults(command_module=module)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list and args_list[0] == "hook":
        from otelguard.coding_agents.hook import main as hook_main

        return hook_main(args_list[1:])
    if args_list and args_list[0] not in COMMANDS and args_list[0].lower().startswith("hook"):
        from otelguard.coding_agents.hook import mistyped

        return mistyped(args_list[0])
    parser = build_parser(args_list[0] if args_list else None)
    args = parser.parse_args(args_list)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    # the processes otelguard runs drop prometheus_client's `_created` samples (a second line per
    # series); a library user's registry keeps its own setting (docs/telemetry.md)
    import warnings

    from prometheus_client import disable_created_metrics

    from otelguard.errors import ConfigWarning

    disable_created_metrics()  # type: ignore[no-untyped-call]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)  # each command prints a config's warnings itself
        code: int = args.command_module.run(args)
    return code
