"""Every command that listens words an out-of-range port the same way, and exits 2 before starting."""

from __future__ import annotations

from pathlib import Path

import pytest

from otelguard.cli import main


@pytest.mark.parametrize("port", [-1, 65536, 70000])
def test_an_out_of_range_port_is_worded_alike_by_demo_serve_and_replay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], port: int
) -> None:
    transcript = tmp_path / "t.jsonl"
    transcript.write_text("")
    lines = []
    for command, option in (
        (["demo", "--port", str(port)], "--port"),
        (["serve", "--port", str(port)], "--port"),
        (["replay", str(transcript), "--serve", str(port)], "--serve"),
    ):
        assert main(command) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err.splitlines() == [
            f"otelguard {command[0]}: {option} {port}: expected an integer from 0 to 65535"
        ]
        lines.append(captured.err.split(": ", 1)[1].replace("--serve", "--port"))
    assert len(set(lines)) == 1
