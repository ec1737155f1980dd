"""The examples of the README and of docs/ run (or parse, or validate) as written, so they never rot."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys

import pytest
import yaml

from otelguard import GuardConfig
from otelguard.cli import build_parser
from tests.markdown_docs import README, REPO, Block, all_blocks, blocks

PYTHON = all_blocks("python")
YAML = all_blocks("yaml")
JSON = all_blocks("json")
SHELL = all_blocks("bash", "console")
CONFIG_KEYS = frozenset(GuardConfig().to_mapping())


def test_readme_and_docs_have_examples() -> None:
    assert len(blocks(README, "python")) >= 3
    assert len(PYTHON) >= 8 and len(YAML) >= 4 and len(SHELL) >= 8


@pytest.mark.parametrize("block", PYTHON, ids=[b.where for b in PYTHON])
def test_python_example_runs(block: Block) -> None:
    """Every ```python block executes without error."""
    exec(compile(block.text, block.where, "exec"), {"__name__": "docs_example"})


def _is_guard_config(document: object) -> bool:
    return isinstance(document, dict) and bool(document) and set(document) <= CONFIG_KEYS


@pytest.mark.parametrize("block", YAML, ids=[b.where for b in YAML])
def test_yaml_example_parses_and_guard_configs_validate(block: Block) -> None:
    """Every ```yaml block parses; one made of guard config keys is a valid GuardConfig."""
    document = yaml.safe_load(block.text)
    assert isinstance(document, dict), f"{block.where}: expected a mapping"
    if _is_guard_config(document):
        GuardConfig.from_mapping(document)


def test_every_config_key_is_shown_in_a_validated_example() -> None:
    shown: set[str] = set()
    for block in YAML:
        document = yaml.safe_load(block.text)
        if _is_guard_config(document):
            shown |= set(document)
    # the effective config also reports `hard_stop_enabled`, which follows `mode` and `hard_stop`
    assert shown == CONFIG_KEYS - {"hard_stop_enabled"}


@pytest.mark.parametrize("block", JSON, ids=[b.where for b in JSON])
def test_json_example_parses(block: Block) -> None:
    json.loads(block.text)


def _commands(block: Block) -> list[str]:
    """The shell commands of a block: `$ ` lines of a console block, every line of a bash block."""
    text = block.text.replace("\\\n", " ")
    lines = text.splitlines()
    if block.language == "console":
        lines = [line.removeprefix("$ ") for line in lines if line.startswith("$ ")]
    commands = []
    for line in lines:
        for part in re.split(r"&&|\|", line):
            commands.append(part.strip())
    return [c for c in commands if c and not c.startswith("#")]


def _otelguard_argv(command: str) -> list[str] | None:
    words = shlex.split(command, comments=True)
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):  # leading VAR=value assignments
        words.pop(0)
    if not words or words[0] != "otelguard":
        return None
    redirect = next((i for i, word in enumerate(words) if word[:1] in "<>" or word[:2] in ("1>", "2>")), None)
    return words[1:redirect]


OTELGUARD_COMMANDS = [
    (block.where, argv)
    for block in SHELL
    for c in _commands(block)
    # `otelguard hook` is parsed by hand, on its fast path: tests/test_claude_code_guide.py runs the
    # guide's hook commands instead
    if (argv := _otelguard_argv(c)) is not None and argv[:1] != ["hook"]
]


def test_docs_show_every_command() -> None:
    shown = {argv[0] for _, argv in OTELGUARD_COMMANDS}
    assert {"demo", "replay", "backtest", "check-config", "bench", "dashboards", "rules"} <= shown


@pytest.mark.parametrize(("where", "argv"), OTELGUARD_COMMANDS, ids=[w for w, _ in OTELGUARD_COMMANDS])
def test_otelguard_command_in_docs_is_accepted_by_the_cli(where: str, argv: list[str]) -> None:
    """Every `otelguard ...` command in a bash/console block parses with the real argument parser."""
    try:
        build_parser().parse_args(argv)
    except SystemExit as exit:
        pytest.fail(f"{where}: `otelguard {shlex.join(argv)}` is rejected (exit {exit.code})")


def test_readme_test_command_is_what_ci_runs() -> None:
    """CI runs the same test command the README gives."""
    text = README.read_text(encoding="utf-8")
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    command = re.search(r"&& (python -m pytest[^\n`]*)", text)
    assert command is not None
    assert command.group(1).strip() in ci.splitlines()
    assert command.group(1).strip() == "python -m pytest -q"


VENV = ("python3 -m venv .venv", ". .venv/bin/activate")
"""A virtualenv first: Debian's and Ubuntu's Python refuse pip outside one (externally managed)."""


def test_readme_install_is_what_ci_installs() -> None:
    text = README.read_text(encoding="utf-8")
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert " && ".join((*VENV, 'pip install -e ".[dev,otlp]" && python -m pytest -q')) in text
    assert " && ".join((*VENV, "pip install -e . && otelguard demo")) in text
    assert "python3-venv" in text  # Debian's venv module is a package of its own
    # CI takes the same steps, in the same order, before the test command
    steps = [*VENV, "pip install", "python -m pytest -q"]
    found = [next(i for i, line in enumerate(ci) if line.startswith(step)) for step in steps]
    assert found == sorted(found)
    assert '-e ".[dev,otlp]"' in ci[found[2]]


def test_the_quick_start_prints_what_the_readme_shows() -> None:
    """Run in a fresh interpreter, the quick start prints exactly the output shown under it: its
    decisions and the metrics they made, something to look at without setting up anything else."""
    section = README.read_text(encoding="utf-8").split("## Quick start", 1)[1].split("\n## ", 1)[0]
    [code] = [block for block in blocks(README, "python") if block.text.strip() in section]
    [shown] = [block for block in blocks(README, "text") if block.text.strip() in section]
    done = subprocess.run(
        [sys.executable, "-c", code.text],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == shown.text
    assert "no_progress_warn" in shown.text and "otelguard_decisions_total{" in shown.text
