"""The rich console every command prints through: a terminal's width on a terminal, no wrapping
anywhere else (a pipe, a log file), so an id or a path is never split across lines."""

from __future__ import annotations

import sys
from typing import Final

from rich.console import Console

__all__ = ["PIPE_WIDTH", "cli_console"]

PIPE_WIDTH: Final = 10_000
"""The width of output that is not a terminal: wide enough that no line of a report wraps."""


def cli_console(*, stderr: bool = False, pipe_width: int = PIPE_WIDTH) -> Console:
    """A console on stdout (or stderr) that wraps only on a terminal; elsewhere at ``pipe_width``
    (by default so wide nothing wraps: a command whose cells can be kilobytes long passes less)."""
    stream = sys.stderr if stderr else sys.stdout
    try:
        terminal = stream.isatty()
    except (AttributeError, ValueError):  # no stream, or a closed one
        terminal = False
    if terminal:
        return Console(stderr=stderr)
    return Console(stderr=stderr, width=pipe_width, soft_wrap=pipe_width == PIPE_WIDTH)
