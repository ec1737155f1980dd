"""Coding-agent CLIs from npm, at pinned versions, installed once into a cache beside the project.

Claude Code is installed with ``npm install --prefix`` into ``OTELGUARD_SIDE_CLIENTS`` (default
``~/.cache/otelguard-test/clients``), one folder per version, marked complete only once the
installed command answers with its version: the tests run the real client offline against a scripted
model. ``python -m tests.side_clients`` installs them ahead of a test run (``.ci/run`` does).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from otelguard.config.environment import OTELGUARD_REQUIRE_E2E

CLAUDE_CODE_PACKAGE = "@anthropic-ai/claude-code"
CLAUDE_CODE_VERSION = "2.1.197"
INSTALL_TIMEOUT = 900.0


def clients_home() -> Path:
    default = Path.home() / ".cache" / "otelguard-test" / "clients"
    return Path(os.environ.get("OTELGUARD_SIDE_CLIENTS", default))


def install_claude_code() -> Path:
    """The cached ``claude`` command of the pinned version; installs it when missing. Raises
    ``OSError`` (no npm) or ``CalledProcessError``/``TimeoutExpired`` on a failed install."""
    folder = clients_home() / f"claude-code-{CLAUDE_CODE_VERSION}"
    claude = folder / "node_modules" / ".bin" / "claude"
    marker = folder / ".complete"
    if marker.exists() and claude.exists():
        return claude
    npm = shutil.which("npm")
    if npm is None:
        raise FileNotFoundError("npm not found on PATH (apt-get install npm)")
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [npm, "install", "--prefix", str(folder), "--no-audit", "--no-fund", "--save-exact",
         f"{CLAUDE_CODE_PACKAGE}@{CLAUDE_CODE_VERSION}"],
        check=True, capture_output=True, timeout=INSTALL_TIMEOUT,
    )  # fmt: skip
    version = subprocess.run(
        [str(claude), "--version"], check=True, capture_output=True, text=True, timeout=60
    ).stdout
    if not version.startswith(CLAUDE_CODE_VERSION):
        raise subprocess.CalledProcessError(1, [str(claude), "--version"], output=version)
    marker.write_text(CLAUDE_CODE_VERSION)
    return claude


def claude_code() -> Path:
    """The pinned ``claude`` command; skips when it cannot be installed (fails under
    ``OTELGUARD_REQUIRE_E2E=1``, as CI runs)."""
    try:
        return install_claude_code()
    except (OSError, subprocess.SubprocessError) as exc:
        stderr = getattr(exc, "stderr", None) or b""
        detail = (
            stderr.decode(errors="replace").strip().splitlines()[-1:] if isinstance(stderr, bytes) else []
        )
        reason = (
            f"cannot install {CLAUDE_CODE_PACKAGE}@{CLAUDE_CODE_VERSION} with npm: {exc} {' '.join(detail)}"
        )
        if os.environ.get(OTELGUARD_REQUIRE_E2E) == "1":
            pytest.fail(f"{reason}; {OTELGUARD_REQUIRE_E2E}=1 forbids skipping", pytrace=False)
        pytest.skip(reason)


if __name__ == "__main__":
    print(install_claude_code())
