"""How the commands that read a config report it: every problem on a line of its own, naming the file
(the command then exits 2), and the config's warnings (probable typos) once on stderr."""

from __future__ import annotations

import sys

from otelguard import ConfigError, GuardConfig

__all__ = ["PORT_RANGE", "load_config", "option_problem", "port_problem", "print_config_error"]

PORT_RANGE = "expected an integer from 0 to 65535"
"""What a port option takes, in the words every command uses (the server's own check says the same)."""

_OPTIONS = ("port", "addr", "certfile", "keyfile")
"""Keys of the server settings a command takes as options of the same name: a problem names the option."""


def print_config_error(command: str, exc: ConfigError) -> None:
    """One line per problem; a problem read from a file starts with the file's name."""
    for problem in exc.errors:
        line = " ".join(problem.line.split())  # one line, whatever the YAML parser wrote
        print(f"{command}: invalid config {line}", file=sys.stderr)


def option_problem(exc: ConfigError) -> str:
    """A problem as one line; one with a server setting given on the command line names its option
    (``--port 9464: 127.0.0.1:9464 is already in use; choose another port``)."""
    if exc.key in _OPTIONS and exc.source is None and len(exc.errors) == 1:
        return f"--{exc.key} {exc.value}: {exc.allowed}"
    return " ".join(str(exc).split())


def port_problem(option: str, port: int | None) -> str | None:
    """A port option out of range, worded alike by every command that listens; ``None`` when fine."""
    if port is None or 0 <= port <= 65535:
        return None
    return f"{option} {port}: {PORT_RANGE}"


def load_config(command: str, path: str | None) -> GuardConfig | None:
    """The config of ``path`` (the defaults without one), its warnings printed; ``None`` once its
    errors are printed."""
    try:
        config = GuardConfig.from_file(path) if path else GuardConfig()
    except ConfigError as exc:
        print_config_error(command, exc)
        return None
    for line in config.config_warnings:
        print(f"{command}: warning: {path}: {line}", file=sys.stderr)
    return config
