"""docs/copilot-cli.md shows the hooks file exactly as ``--print-settings`` prints it, and both pages
name the versions the real-client tests pin."""

from __future__ import annotations

import json
import re
from pathlib import Path

from otelguard.coding_agents import copilot_cli
from tests.side_clients import COPILOT_CLI_VERSION, OPENCODE_VERSION

DOCS = Path(__file__).resolve().parent.parent / "docs"
PIPX = "/home/me/.local/pipx/venvs/otelguard/bin/python -c 'from otelguard.cli import main; main()'"
"""The installation the guides' examples name (a ``pipx`` install)."""


def test_the_copilot_guide_shows_the_printed_hooks_file() -> None:
    text = (DOCS / "copilot-cli.md").read_text(encoding="utf-8")
    (block,) = re.findall(r"```json\n(.*?)```", text, re.DOTALL)
    assert json.loads(block) == json.loads(copilot_cli.settings_block(None, program=PIPX))


def test_the_guides_name_the_versions_the_tests_pin() -> None:
    assert f"Copilot CLI {COPILOT_CLI_VERSION}" in (DOCS / "copilot-cli.md").read_text(encoding="utf-8")
    assert f"OpenCode {OPENCODE_VERSION}" in (DOCS / "opencode.md").read_text(encoding="utf-8")
