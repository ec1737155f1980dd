"""docs/coding-agents.md shows each CLI's settings exactly as ``--print-settings`` prints them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from otelguard.coding_agents import codex, gemini_cli

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "coding-agents.md"
PIPX = "/home/me/.local/pipx/venvs/otelguard/bin/python -c 'from otelguard.cli import main; main()'"
"""The installation the guide's examples name (a ``pipx`` install)."""


def json_blocks() -> list[object]:
    text = GUIDE.read_text(encoding="utf-8")
    return [json.loads(block) for block in re.findall(r"```json\n(.*?)```", text, re.DOTALL)]


@pytest.mark.parametrize(("index", "module"), [(0, codex), (1, gemini_cli)])
def test_the_guide_shows_the_printed_settings(index: int, module: object) -> None:
    printed = json.loads(module.settings_block(None, program=PIPX))  # type: ignore[attr-defined]
    assert json_blocks()[index] == printed


def test_the_guide_names_the_versions_the_tests_pin() -> None:
    from tests.side_clients import CODEX_VERSION, GEMINI_CLI_VERSION

    text = GUIDE.read_text(encoding="utf-8")
    assert f"codex-cli {CODEX_VERSION}" in text and f"| {GEMINI_CLI_VERSION} |" in text
