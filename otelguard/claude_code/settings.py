"""What ``otelguard hook claude-code`` prints once, kept out of the module that runs on every tool call:
the hooks block for ``.claude/settings.json`` (a command per event, or Claude Code's ``http`` hooks)
and the starter config for unattended use."""

from __future__ import annotations

import json
import os
import secrets
import shlex
import sys
from typing import Final

from otelguard.claude_code.events import DEFAULT_TIMEOUT_SECONDS, HOOK_EVENTS, TOOL_EVENTS
from otelguard.config.environment import OTELGUARD_TOKEN

__all__ = ["STARTER_CONFIG", "hook_program", "http_settings_block", "settings_block", "starter_config"]

STARTER_CONFIG: Final = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "claude-code.yaml")
"""The starter config ``--print-config`` prints, with a fresh signature key written in."""


def hook_program() -> str:
    """This installation's otelguard as a shell word: its own interpreter, absolute, with ``-m
    otelguard``. Claude Code runs the hook command through a shell whose ``PATH`` need not hold a
    virtualenv's ``bin`` (a bare ``otelguard`` would then be "command not found", which Claude Code
    takes as a non-blocking error: the guard silently off). ``-m`` rather than the ``otelguard``
    script: the script pip writes imports ``re`` before otelguard runs, the costlier start."""
    if not sys.executable:  # an embedded interpreter that cannot name itself
        return "otelguard"
    return f"{shlex.quote(os.path.abspath(sys.executable))} -m otelguard"


def settings_block(url: str | None, timeout: float | None = None, program: str | None = None) -> str:
    """The ``hooks`` block for ``.claude/settings.json``: every event the guard needs, one command.
    ``url``/``timeout``: written into the command when given (``None``: the command's defaults).
    ``program``: what runs otelguard (``None``: ``hook_program()``, this installation)."""
    command = f"{program or hook_program()} hook claude-code"
    if url is not None:
        command += f" --url {shlex.quote(url)}"
    if timeout is not None:
        command += f" --timeout {timeout:g}"
    else:
        timeout = DEFAULT_TIMEOUT_SECONDS
    # Claude Code's own per-hook timeout (seconds) sits above ours, so ours decides: fail open.
    return _hooks_block({"type": "command", "command": command, "timeout": int(timeout) + 3})


def http_settings_block(hook_url: str, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> str:
    """The ``hooks`` block with Claude Code's ``http`` hooks: it posts each event to the sidecar itself,
    so no process starts per event. Claude Code fails open on its own: an answer that is not a 2xx,
    a refused connection or the timeout is a non-blocking error and the call goes ahead. The bearer
    token comes from ``OTELGUARD_TOKEN`` where Claude Code runs (an empty header without it, which a
    sidecar without a token ignores). ``hook_url``: the sidecar's hook endpoint."""
    handler: dict[str, object] = {
        "type": "http",
        "url": hook_url,
        "timeout": int(timeout) if timeout == int(timeout) else timeout,
        "headers": {"Authorization": f"Bearer ${OTELGUARD_TOKEN}"},
        "allowedEnvVars": [OTELGUARD_TOKEN],
    }
    return _hooks_block(handler)


def _hooks_block(handler: dict[str, object]) -> str:
    hooks: dict[str, list[dict[str, object]]] = {}
    for event in HOOK_EVENTS:
        entry: dict[str, object] = {"matcher": "*"} if event in TOOL_EVENTS else {}
        entry["hooks"] = [handler]
        hooks[event] = [entry]
    return json.dumps({"hooks": hooks}, indent=2)


def starter_config() -> str:
    """The starter config for unattended use, with a fresh random signature key written in."""
    with open(STARTER_CONFIG, encoding="utf-8") as file:
        text = file.read()
    return text.replace("signature_key: null", f"signature_key: {secrets.token_hex(16)}", 1)
