"""What ``otelguard hook CLI`` prints once, kept out of the module that runs on every tool call: the
machinery every CLI's settings block is made with (the command that runs the hook, a hooks block in
Claude Code's layout, which Codex and Gemini CLI read too) and the starter config for unattended use.
Each CLI's own block is in its module."""

from __future__ import annotations

import json
import os
import secrets
import shlex
import sys
from collections.abc import Iterable, Mapping
from typing import Final

__all__ = ["LAUNCH", "STARTER_CONFIG", "hook_command", "hook_program", "hooks_block", "starter_config"]

STARTER_CONFIG: Final = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "claude-code.yaml")
"""The starter config ``--print-config`` prints, with a fresh signature key written in."""


LAUNCH: Final = "from otelguard.cli import main; main()"
"""What the interpreter runs (``-c``): the hook always returns 0, so its exit status needs no more."""


def hook_program() -> str:
    """This installation's otelguard as a shell word: its own interpreter, absolute, running
    ``LAUNCH``. A CLI runs the hook command through a shell whose ``PATH`` need not hold a
    virtualenv's ``bin`` (a bare ``otelguard`` would then be "command not found", which the CLIs
    take as a non-blocking error: the guard silently off). ``-c`` rather than ``-m otelguard``:
    ``-m`` goes through ``runpy``, whose imports (``importlib.util``, ``contextlib``,
    ``collections``, ``functools``) cost a fresh virtualenv about 5 ms on every call, nearly half of
    the interpreter's own start; and rather than the ``otelguard`` script, which imports ``re``
    before otelguard runs."""
    if not sys.executable:  # an embedded interpreter that cannot name itself
        return "otelguard"
    return f"{shlex.quote(os.path.abspath(sys.executable))} -c {shlex.quote(LAUNCH)}"


def hook_command(cli: str, url: str | None, timeout: float | None, program: str | None = None) -> str:
    """The command that runs ``otelguard hook CLI``. ``url``/``timeout``:
    written into the command when given (``None``: the command's defaults). ``program``: what runs
    otelguard (``None``: ``hook_program()``, this installation)."""
    command = f"{program or hook_program()} hook {cli}"
    if url is not None:
        command += f" --url {shlex.quote(url)}"
    if timeout is not None:
        command += f" --timeout {timeout:g}"
    return command


def hooks_block(
    events: Iterable[str],
    tool_events: Iterable[str],
    handler: dict[str, object],
    overrides: Mapping[str, dict[str, object]] | None = None,
) -> str:
    """``{"hooks": {event: [{"matcher": "*", "hooks": [handler]}]}}`` (the matcher only on the events
    about one tool call; ``overrides``: another handler for some events): the layout Claude Code,
    Codex and Gemini CLI read."""
    matched = set(tool_events)
    hooks: dict[str, list[dict[str, object]]] = {}
    for event in events:
        entry: dict[str, object] = {"matcher": "*"} if event in matched else {}
        entry["hooks"] = [(overrides or {}).get(event, handler)]
        hooks[event] = [entry]
    return json.dumps({"hooks": hooks}, indent=2)


def starter_config() -> str:
    """The starter config for unattended use, with a fresh random signature key written in."""
    with open(STARTER_CONFIG, encoding="utf-8") as file:
        text = file.read()
    return text.replace("signature_key: null", f"signature_key: {secrets.token_hex(16)}", 1)
