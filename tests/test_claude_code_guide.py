"""The Claude Code guide's first commands work as written on a machine that has only otelguard: in an
empty directory, each command of its numbered steps runs in order (the sidecar on a free port instead
of 9464, which another process may hold) and leaves what the next step needs."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from otelguard import GuardConfig
from tests.e2e import free_port, stop_process
from tests.markdown_docs import DOCS_DIR, blocks

GUIDE = DOCS_DIR / "claude-code.md"
TIMEOUT = 60.0


def guide_commands() -> list[str]:
    """The commands of the `sh` blocks of the numbered steps, in order, comments left out."""
    steps = GUIDE.read_text(encoding="utf-8").split("## From `pip install` to a guarded Claude Code", 1)[1]
    steps = steps.split("\n## ", 1)[0]
    commands = []
    for block in blocks(GUIDE, "sh"):
        if block.text.strip() not in steps:
            continue
        for line in block.text.splitlines():
            command = line.split("  #", 1)[0].strip()
            if command and not command.startswith("#"):
                commands.append(command)
    return commands


def as_run_here(command: str) -> str:
    """`otelguard ...` as this checkout's `python -m otelguard ...`."""
    return re.sub(r"^otelguard\b", shlex.join([sys.executable, "-m", "otelguard"]), command)


def test_the_guide_starts_with_install_config_serve_settings() -> None:
    commands = guide_commands()
    assert commands[0] == "pipx install otelguard"  # a virtualenv of its own, the command on the PATH
    assert [c.split()[1] for c in commands[1:]] == ["hook", "serve", "hook"]


def test_the_guides_first_commands_work_in_an_empty_directory(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    env.pop("OTELGUARD_SIGNATURE_KEY", None)
    serve = None
    try:
        for command in guide_commands()[1:]:  # the first is the install that put otelguard here
            if " serve " in f" {command} ":
                port = free_port()
                serve = subprocess.Popen(  # exec: stopping the shell's process stops the sidecar itself
                    f"exec {as_run_here(command)} --port {port}",
                    shell=True, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True,
                )  # fmt: skip
                assert serve.stderr is not None
                first_line = serve.stderr.readline()  # nothing to say before it: the config has a key
                assert first_line.startswith("otelguard serve: listening on http://127.0.0.1:"), first_line
                continue
            done = subprocess.run(
                as_run_here(command), shell=True, cwd=tmp_path, env=env, capture_output=True, text=True,
                timeout=TIMEOUT,
            )  # fmt: skip
            assert (done.returncode, done.stderr) == (0, ""), command
            if "--print-settings" in command:
                assert set(json.loads(done.stdout)["hooks"]) >= {"PreToolUse", "PostToolUse"}
        config = GuardConfig.from_file(tmp_path / "otelguard.yaml")
        assert config.mode == "unattended" and config.signature_key
        assert serve is not None and serve.poll() is None, "the sidecar is still up"
    finally:
        if serve is not None:
            stop_process(serve)
