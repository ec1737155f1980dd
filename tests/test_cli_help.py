"""What the commands say about themselves: exit codes in every ``--help``, help texts that match what
the commands do, output that is not wrapped when it is not a terminal, and one clean line for a
problem a user can fix."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from otelguard.cli import COMMANDS, EXIT_CODES, main
from otelguard.replay import FORMATS

TIMEOUT = 60.0


def otelguard(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real command, its stdout a pipe (not a terminal)."""
    environment = {key: value for key, value in os.environ.items() if key != "COLUMNS"}
    return subprocess.run(
        [sys.executable, "-m", "otelguard", *args],
        capture_output=True, text=True, timeout=TIMEOUT, env={**environment, **(env or {})},
    )  # fmt: skip


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_commands_help_states_its_exit_codes(command: str) -> None:
    args = ["hook", "--help"] if command == "hook" else [command, "--help"]
    shown = otelguard(*args)
    assert shown.returncode == 0
    text = " ".join(shown.stdout.split())
    assert "exit status:" in text
    if command != "hook":
        assert " ".join(EXIT_CODES[command].split()) in text


def test_the_exit_codes_differ_where_the_commands_do() -> None:
    assert "1 input errors" in EXIT_CODES["replay"]
    assert "1 an alert would have fired" in EXIT_CODES["backtest"]
    assert EXIT_CODES["hook"].startswith("always 0")
    assert "a missed target is a finding, not an error" in EXIT_CODES["bench"]


def test_replay_help_names_every_suffix_and_every_format() -> None:
    text = " ".join(otelguard("replay", "--help").stdout.split())
    assert "*.jsonl, *.json and *.traj" in text
    for name in (*FORMATS, "tau-bench", "ToolBench"):
        assert name in text, name


def test_demo_help_shows_the_defaults_of_rate_and_agents() -> None:
    from otelguard.cli.demo import DEFAULT_AGENTS, DEFAULT_RATE

    text = " ".join(otelguard("demo", "--help").stdout.split())
    assert f"all agents together (default {DEFAULT_RATE:g})" in text
    assert f"number of simulated agents (default {DEFAULT_AGENTS})" in text


def test_replay_of_a_directory_without_a_transcript_says_so_and_exits_1(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a transcript\n")
    (tmp_path / "sub").mkdir()
    result = otelguard("replay", str(tmp_path))
    assert result.returncode == 1
    assert result.stderr == (
        f"otelguard replay: {tmp_path}: no transcript in this directory "
        "(looked for *.jsonl, *.json, *.traj, recursively)\n"
    )
    assert result.stdout == ""


def test_piped_output_is_not_wrapped(tmp_path: Path) -> None:
    """A long file name and session id stay whole on one line each when stdout is a pipe."""
    name = "agent-run-" + "0123456789abcdef" * 8
    rows: list[object] = [{"role": "user", "content": "go"}]
    for index in range(3):
        call = {"id": f"c{index}", "type": "function", "function": {"name": "terminal", "arguments": "{}"}}
        rows += [
            {"role": "assistant", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{index}", "content": "ok"},
        ]
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    result = otelguard("replay", str(path))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any(str(path) in line for line in lines)
    assert any(f" {name} " in line for line in lines)
    assert not any(line != line.rstrip() for line in lines)  # no padding to a width either


def test_a_terminal_still_gets_its_width(monkeypatch: pytest.MonkeyPatch) -> None:
    from otelguard.cli.output import PIPE_WIDTH, cli_console

    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    assert cli_console().width != PIPE_WIDTH
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False, raising=False)
    assert cli_console().width == PIPE_WIDTH


@pytest.mark.parametrize("command", ["rules", "dashboards"])
def test_export_into_an_unwritable_path_is_one_line_exit_2(command: str, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    result = otelguard(command, "export", str(blocker / "inside"))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"otelguard {command} export: cannot write {blocker / 'inside'}")
    assert line.endswith("Not a directory")


def test_bench_says_a_missed_target_is_a_finding(capsys: pytest.CaptureFixture[str]) -> None:
    from otelguard.cli.bench import _print_tables

    small = ["--calls", "200", "--memory-calls", "300", "--growth-calls", "400", "--loop-signatures", "300"]
    assert main(["bench", *small, "--workload", "mixed", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    document["targets"][0]["met"] = False
    console = Console(record=True, width=10_000)
    _print_tables(console, document)
    last = " ".join(console.export_text().strip().splitlines()[-1].split())
    assert f"missed: {document['targets'][0]['name']}" in last
    assert "a missed target is a finding about this machine and this build, not an error" in last
    assert "exit status stays 0" in last
