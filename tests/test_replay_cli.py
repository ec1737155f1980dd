"""`otelguard replay` as a command: exit codes, usage errors, and nothing raw in its output or metrics."""

from __future__ import annotations

import json
import os
import pty
import sys
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from otelguard import GuardConfig
from otelguard.cli import main
from otelguard.replay import ReplayRunner, replay_inputs
from otelguard.telemetry import Telemetry

FIXTURES = Path(__file__).parent / "fixtures" / "replay"

ARG_CANARY = "CANARY-ARG-7f3a"
RESULT_CANARY = "CANARY-RESULT-9c1d"
ERROR_CANARY = "CANARY-ERROR-2b8e"


def canary_transcripts(tmp_path: Path) -> Path:
    """One file per format whose arguments, results and error texts carry canary strings, looping
    enough to produce warnings, blocks and a halt, plus malformed lines quoting canaries."""
    root = tmp_path / "canary"
    root.mkdir()
    openai: list[Any] = [{"role": "user", "content": f"please {ARG_CANARY}"}]
    for i in range(13):  # 5 failures, 7 rejects (the default), the block
        openai.append(
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": f"c{i}",
                        "type": "function",
                        "function": {"name": "terminal", "arguments": json.dumps({"command": ARG_CANARY})},
                    }
                ],
            }
        )
        openai.append({"role": "tool", "tool_call_id": f"c{i}", "content": f"Error: {ERROR_CANARY}"})
    lines = [json.dumps(r) for r in openai]
    lines.append('{"role": "assistant", "content": "' + ARG_CANARY)  # truncated, quotes a canary
    lines.append(json.dumps({"role": "tool", "tool_call_id": "zz", "content": RESULT_CANARY}))
    (root / "openai.jsonl").write_text("\n".join(lines) + "\n")
    cc: list[Any] = [{"type": "user", "sessionId": "s", "message": {"role": "user", "content": ARG_CANARY}}]
    for i in range(15):  # 5 reads, 7 rejects, the block, and two calls the halted turn never sends
        cc.append(
            {
                "type": "assistant",
                "sessionId": "s",
                "message": {
                    "id": f"m{i}",
                    "role": "assistant",
                    "content": [
                        {
                            "type": "tool_use",
                            "id": f"t{i}",
                            "name": "Read",
                            "input": {"file_path": ARG_CANARY},
                        }
                    ],
                },
            }
        )
        cc.append(
            {
                "type": "user",
                "sessionId": "s",
                "message": {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": RESULT_CANARY}],
                },
                "toolUseResult": {"stdout": RESULT_CANARY},
            }
        )
    (root / "claude.jsonl").write_text("".join(json.dumps(r) + "\n" for r in cc))
    return root


def test_no_argument_values_results_or_error_texts_in_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = canary_transcripts(tmp_path)
    config = str(FIXTURES / "unattended.yaml")
    code = main(["replay", str(root), "--config", config, "--json"])
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert code == 1  # the malformed lines
    assert doc["totals"]["halts"] == 2 and doc["errors"]
    main(["replay", str(root), "--config", config])
    human = capsys.readouterr()
    for text in (captured.out, captured.err, human.out, human.err):
        for canary in (ARG_CANARY, RESULT_CANARY, ERROR_CANARY):
            assert canary not in text


def test_no_argument_values_results_or_error_texts_in_metrics(tmp_path: Path) -> None:
    root = canary_transcripts(tmp_path)
    registry = CollectorRegistry()
    config = GuardConfig.from_file(FIXTURES / "unattended.yaml")
    runner = ReplayRunner(config, Telemetry(registry=registry))
    files = sorted(str(p) for p in root.iterdir())
    replay_inputs(files, "auto", runner)
    report = runner.finish()
    assert report.totals()["halts"] == 2
    body = generate_latest(registry).decode()
    assert 'otelguard_decisions_total{action="block",agent="replay",code="exact_failure_block"' in body
    for canary in (ARG_CANARY, RESULT_CANARY, ERROR_CANARY):
        assert canary not in body


def test_exit_code_is_1_when_inputs_had_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"role": "user", "content": "go"}\n{"truncated\n')
    assert main(["replay", str(bad), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["errors"] == [
        {"path": str(bad), "line": 2, "reason": "invalid JSON (column 12); line skipped"}
    ]
    assert doc["inputs"][0]["errors"] == 1


def test_unknown_format_is_an_input_error_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    odd = tmp_path / "metrics.jsonl"
    odd.write_text('{"ts": 1, "value": 2}\n')
    assert main(["replay", str(odd), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    [error] = doc["errors"]
    assert error["path"] == str(odd) and error["reason"].startswith("unknown transcript format")
    assert doc["inputs"] == [{"path": str(odd), "format": "unknown", "sessions": 0, "errors": 1}]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["does-not-exist.jsonl"], "no such file or directory: does-not-exist.jsonl"),
        ([str(FIXTURES), "--job", "x"], "--job needs --pushgateway URL or --openmetrics FILE"),
        ([str(FIXTURES), "--idle-timeout", "1"], "--idle-timeout needs --follow"),
        (["-", "-"], "stdin (-) can be given only once"),
    ],
)
def test_usage_errors_exit_2_with_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main(["replay", *argv]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"otelguard replay: {message}"


def test_bad_config_exits_2_naming_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("warn_after: {exact_falure: 2}\n")
    assert main(["replay", str(FIXTURES), "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "warn_after.exact_falure" in err


def test_unparsable_config_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("warn_after: {exact_failure: 2\nmode: [\n")  # the YAML parser's message spans lines
    assert main(["replay", str(FIXTURES), "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert err.startswith(f"otelguard replay: invalid config {config}: ")
    assert "valid YAML" in err


def test_bad_format_choice_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["replay", str(FIXTURES), "--format", "yaml"])
    assert exc.value.code == 2


def run_with_stderr_on_a_terminal(argv: list[str]) -> str:
    """Run the command with stderr on a pseudo-terminal (stdout discarded); return what the terminal got."""
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        os.execvp(sys.executable, [sys.executable, "-m", "otelguard.cli", *argv])
    out = b""
    while True:
        try:
            data = os.read(fd, 4096)
        except OSError:
            break
        if not data:
            break
        out += data
    os.waitpid(pid, 0)
    os.close(fd)
    return out.decode(errors="replace")


def test_progress_bar_only_when_stderr_is_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    fixture = str(FIXTURES / "openai" / "healthy.jsonl")
    assert "replaying" in run_with_stderr_on_a_terminal(["replay", fixture, "--json"])
    assert main(["replay", fixture, "--json"]) == 0
    assert "replaying" not in capsys.readouterr().err


def test_nothing_to_replay_says_so_and_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An empty file, or one without a tool call or a model reply, was read cleanly but checked
    nothing: a CI step built on replay must not pass on it. A chat of the model's replies alone was
    checked (the replies are the guard's to judge)."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"role": "user", "content": "hi"}\n{"role": "user", "content": "again"}\n')
    for path in (empty, prompts):
        assert main(["replay", str(path), "--json"]) == 3
        captured = capsys.readouterr()
        assert json.loads(captured.out)["totals"]["tool_calls"] == 0
        assert "otelguard replay: nothing to replay: the inputs hold no tool call" in captured.err
    chat = tmp_path / "chat.jsonl"
    chat.write_text('{"role": "user", "content": "hi"}\n{"role": "assistant", "content": "hello"}\n')
    assert main(["replay", str(chat), "--json"]) == 0
    totals = json.loads(capsys.readouterr().out)["totals"]
    assert (totals["tool_calls"], totals["model"]["replies"]) == (0, 1)
    assert main(["replay", str(empty), str(FIXTURES / "openai" / "delegation_storm.jsonl")]) in (0, 1)
