"""`otelguard check-config`: exit codes and output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from otelguard.cli import main


def test_valid_config_prints_effective_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A valid file exits 0 and --json prints exactly one document with merged defaults."""
    path = tmp_path / "otelguard.yaml"
    path.write_text("mode: unattended\ncaps:\n  turn: {web_search: 10}\n")
    assert main(["check-config", str(path), "--json"]) == 0
    effective = json.loads(capsys.readouterr().out)
    assert effective["hard_stop_enabled"] is True
    assert effective["caps"]["turn"] == {"web_search": 10, "subagents": 50}


def test_human_output_is_a_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "otelguard.yaml"
    path.write_text("{}\n")
    assert main(["check-config", str(path)]) == 0
    assert "max_tracked_signatures" in capsys.readouterr().out


def test_invalid_config_exits_2_naming_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A bad key exits 2 with a one-line message naming the key path and a suggestion."""
    path = tmp_path / "otelguard.yaml"
    path.write_text("warn_after:\n  exact_falure: 3\n")
    assert main(["check-config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "warn_after.exact_falure" in err and "exact_failure" in err
    assert len(err.strip().splitlines()) == 1


def test_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-config", str(tmp_path / "nope.yaml")]) == 2
    assert "nope.yaml" in capsys.readouterr().err


def test_signature_key_is_never_printed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "otelguard.yaml"
    path.write_text("signature_key: s3cr3t-canary\n")
    assert main(["check-config", str(path), "--json"]) == 0
    assert "s3cr3t-canary" not in capsys.readouterr().out


def test_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["no-such-command"])
    assert exc.value.code == 2


LONG_CONFIG = (
    "caps:\n  turn:\n"
    + "".join(f"    tool_number_{n:03d}_with_a_rather_long_descriptive_name: {n + 1}\n" for n in range(150))
    + "tool_groups:\n  web_search: ["
    + ", ".join(f"search_{n}_{'x' * 40}" for n in range(100))
    + ", "
    + "y" * 300
    + "]\n"
)


@pytest.mark.parametrize("text", ["{}\n", LONG_CONFIG], ids=["default", "long"])
def test_output_to_a_pipe_keeps_every_line_short(tmp_path: Path, text: str) -> None:
    """Redirected to a file, the table wraps its values (kilobytes of tool lists on one line before)."""
    path = tmp_path / "otelguard.yaml"
    path.write_text(text)
    result = subprocess.run(
        [sys.executable, "-m", "otelguard", "check-config", str(path)],
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=60,
        check=True,
    )
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 120, max(lines, key=len)
    assert "max_tracked_signatures" in result.stdout
    if text == LONG_CONFIG:
        assert "tool_number_149_with_a_rather_long_descriptive_name" in result.stdout  # wrapped, not cut
