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
from tests.markdown_docs import DOCS_DIR, README, Block, blocks

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
    # nothing is on PyPI before a release: the install is the README's, from a checkout into a virtualenv
    assert commands[0] == "python3 -m venv .venv && . .venv/bin/activate && pip install -e ."
    assert f"{commands[0]} && otelguard demo" in README.read_text(encoding="utf-8")
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


CURL_SECTION = "## Try the sidecar with `curl`"
COMMON_FIELDS = {"session_id", "transcript_path", "cwd", "permission_mode", "hook_event_name"}
TOOL_FIELDS = {"tool_name", "tool_input", "tool_use_id"}


def curl_blocks() -> list[Block]:
    text = GUIDE.read_text(encoding="utf-8")
    section = text.split(CURL_SECTION, 1)[1].split("\n## ", 1)[0]
    return [b for b in blocks(GUIDE, "sh", "console") if b.text.strip() in section]


def console_steps(block: Block) -> list[tuple[str, str]]:
    """(command, the output the guide shows for it) for each `$ ` line of a console block."""
    steps: list[tuple[str, list[str]]] = []
    for line in block.text.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
    return [(command, "".join(f"{line}\n" for line in output)) for command, output in steps]


def test_the_steps_are_numbered_once_each() -> None:
    steps = GUIDE.read_text(encoding="utf-8").split("## From `pip install` to a guarded Claude Code", 1)[1]
    numbers = re.findall(r"^(\d+)\. ", steps.split("\n## ", 1)[0], flags=re.M)
    assert numbers == [str(n) for n in range(1, len(numbers) + 1)]


def test_the_curl_examples_answer_as_the_guide_shows(tmp_path: Path) -> None:
    """The payloads as Claude Code sends them, against a real sidecar with the starter config."""
    [payloads, *consoles] = curl_blocks()
    assert payloads.language == "sh" and len(consoles) >= 2
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTELGUARD_")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    subprocess.run(["bash", "-euc", payloads.text], cwd=tmp_path, check=True, timeout=TIMEOUT)
    pre = json.loads((tmp_path / "pre-tool-use.json").read_text())
    post = json.loads((tmp_path / "post-tool-use.json").read_text())
    assert set(pre) == COMMON_FIELDS | TOOL_FIELDS and pre["hook_event_name"] == "PreToolUse"
    assert set(post) == COMMON_FIELDS | TOOL_FIELDS | {"tool_response"}
    assert post["hook_event_name"] == "PostToolUse" and post["tool_use_id"] == pre["tool_use_id"]
    config = subprocess.run(
        [sys.executable, "-m", "otelguard", "hook", "claude-code", "--print-config"],
        capture_output=True, text=True, env=env, check=True, timeout=TIMEOUT,
    )  # fmt: skip
    (tmp_path / "otelguard.yaml").write_text(config.stdout)
    port = free_port()
    serve = subprocess.Popen(
        [sys.executable, "-m", "otelguard", "serve", "--config", "otelguard.yaml", "--port", str(port)],
        cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert serve.stderr is not None
        assert serve.stderr.readline().startswith("otelguard serve: listening on")
        env["OTELGUARD_URL"] = f"http://127.0.0.1:{port}"  # where the hook command finds it
        ran = 0
        for block in consoles:
            for command, shown in console_steps(block):
                here = as_run_here(command.replace("127.0.0.1:9464", f"127.0.0.1:{port}"))
                done = subprocess.run(
                    ["bash", "-c", here], cwd=tmp_path, env=env, capture_output=True, text=True,
                    timeout=TIMEOUT,
                )  # fmt: skip
                assert (done.returncode, done.stderr) == (0, ""), command
                assert done.stdout.rstrip("\n") == shown.rstrip("\n"), command
                ran += 1
        assert ran >= 4
    finally:
        stop_process(serve)
