"""`otelguard backtest`'s usage errors: each is exit 2 with one line naming the problem (no binary needed)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from benchmarks.backtest_fleet import DAY, SessionWriter
from otelguard.cli import main


@pytest.fixture
def transcript(tmp_path: Path) -> Path:
    writer = SessionWriter("nnnn-one")
    writer.prompt(DAY)
    writer.call(DAY, "Read", {"f": 1}, "r")
    return writer.write(tmp_path)


@pytest.mark.parametrize("missing", ["prometheus", "promtool"])
def test_a_missing_binary_is_named_with_the_debian_package(
    tmp_path: Path,
    transcript: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    missing: str,
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("prometheus", "promtool"):
        found = shutil.which(name)
        if name != missing:
            target = bin_dir / name
            if found is not None:
                target.symlink_to(found)
            else:  # only its presence matters: the backtest stops before running anything
                target.write_text("#!/bin/sh\nexit 1\n")
                target.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    assert main(["backtest", str(transcript)]) == 2
    err = capsys.readouterr().err
    assert f"{missing} not found on PATH" in err
    assert "apt-get install prometheus" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["-"], "stdin (-) cannot be backtested"),
        (["MISSING"], "no such file or directory"),
        (["T", "--html", "."], "--html . is a directory"),
        (["T", "--config", "BADCONFIG"], "invalid config"),
        (["T", "--rules", "NOALERTS"], "hold no alerting rule"),
        (["T", "--rules", "NOTYAML"], "are not valid YAML"),
        (["T", "--since", "2025-03-04", "--until", "2025-03-03"], "--since must be before --until"),
        (["T", "--rules", "CYCLE"], "recording rules read each other in a cycle (a:b -> c:d -> a:b)"),
    ],
)
def test_usage_errors(
    tmp_path: Path,
    transcript: Path,
    capsys: pytest.CaptureFixture[str],
    arguments: list[str],
    message: str,
) -> None:
    bad_config = tmp_path / "bad.yaml"
    bad_config.write_text("caps: {turn: {web_search: -1}}\n")
    no_alerts = tmp_path / "rules.yaml"
    no_alerts.write_text(
        yaml.safe_dump({"groups": [{"name": "g", "rules": [{"record": "a:b", "expr": "up"}]}]})
    )
    not_yaml = tmp_path / "notyaml.yaml"
    not_yaml.write_text("groups: [\n")
    cycle = tmp_path / "cycle.yaml"
    cycle.write_text(
        yaml.safe_dump(
            {
                "groups": [
                    {
                        "name": "g",
                        "rules": [
                            {"record": "a:b", "expr": "c:d"},
                            {"record": "c:d", "expr": "a:b"},
                            {"alert": "A", "expr": "a:b > 0"},
                        ],
                    }
                ]
            }
        )
    )
    names = {
        "T": str(transcript),
        "MISSING": str(tmp_path / "missing"),
        "BADCONFIG": str(bad_config),
        "NOALERTS": str(no_alerts),
        "NOTYAML": str(not_yaml),
        "CYCLE": str(cycle),
    }
    assert main(["backtest", *[names.get(a, a) for a in arguments]]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.startswith("otelguard backtest: ") and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("option", ["--scrape-interval", "--evaluation-interval"])
def test_a_bad_interval_is_a_usage_error(
    transcript: Path, capsys: pytest.CaptureFixture[str], option: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["backtest", str(transcript), option, "0s"])
    assert exit_info.value.code == 2
    assert "is not a positive duration" in capsys.readouterr().err
