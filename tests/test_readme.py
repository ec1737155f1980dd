"""The README's Python examples run as written, so they never rot."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_readme_has_python_examples() -> None:
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index: int) -> None:
    """Every ```python block of the README executes without error."""
    exec(compile(BLOCKS[index], f"README.md[python block {index}]", "exec"), {"__name__": "readme_example"})


def test_readme_test_command_is_what_ci_runs() -> None:
    """CI runs the same test command the README gives."""
    text = README.read_text(encoding="utf-8")
    ci = (README.parent / ".ci" / "run").read_text(encoding="utf-8")
    command = re.search(r"&& (python -m pytest[^\n`]*)", text)
    assert command is not None
    assert command.group(1).strip() in ci.splitlines()
