"""Coding-agent CLIs from npm, at pinned versions, installed once into a cache beside the project.

Claude Code, Codex, Gemini CLI, Copilot CLI and OpenCode are installed with ``npm install --prefix`` into ``OTELGUARD_SIDE_CLIENTS`` (default
``~/.cache/otelguard-test/clients``), one folder per version, marked complete only once the
installed command answers with its version: the tests run the real client offline against a scripted
model. ``python -m tests.side_clients`` installs them ahead of a test run (``.ci/run`` does).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from otelguard.config.environment import OTELGUARD_REQUIRE_E2E

CLAUDE_CODE_PACKAGE = "@anthropic-ai/claude-code"
CLAUDE_CODE_VERSION = "2.1.197"
CODEX_PACKAGE = "@openai/codex"
CODEX_VERSION = "0.171.0"
GEMINI_CLI_PACKAGE = "@google/gemini-cli"
GEMINI_CLI_VERSION = "0.61.0"
COPILOT_CLI_PACKAGE = "@github/copilot"
COPILOT_CLI_VERSION = "1.0.102"
OPENCODE_PACKAGE = "opencode-ai"
OPENCODE_VERSION = "1.18.33"
OPENCODE_PLUGIN_PACKAGE = "@opencode-ai/plugin"
"""What OpenCode installs into a project's ``.opencode`` on its first start with a local plugin (from
npm, about a minute): prepared from the cache instead, so the run stays offline."""
INSTALL_TIMEOUT = 900.0


def clients_home() -> Path:
    default = Path.home() / ".cache" / "otelguard-test" / "clients"
    return Path(os.environ.get("OTELGUARD_SIDE_CLIENTS", default))


def install(package: str, version: str, folder_name: str, command: str) -> Path:
    """The cached command of a pinned npm package; installs it when missing. Raises ``OSError`` (no
    npm) or ``CalledProcessError``/``TimeoutExpired`` on a failed install or a version that does
    not answer as pinned."""
    folder = clients_home() / f"{folder_name}-{version}"
    program = folder / "node_modules" / ".bin" / command
    marker = folder / ".complete"
    if marker.exists() and program.exists():
        return program
    npm = shutil.which("npm")
    if npm is None:
        raise FileNotFoundError("npm not found on PATH (it comes with Node.js)")
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [npm, "install", "--prefix", str(folder), "--no-audit", "--no-fund", "--save-exact",
         f"{package}@{version}"],
        check=True, capture_output=True, timeout=INSTALL_TIMEOUT,
    )  # fmt: skip
    answered = subprocess.run(
        [str(program), "--version"], check=True, capture_output=True, text=True, timeout=60
    ).stdout
    if version not in [word.rstrip(".") for word in answered.split()]:  # Copilot CLI ends with "."
        raise subprocess.CalledProcessError(1, [str(program), "--version"], output=answered)
    marker.write_text(version)
    return program


def install_claude_code() -> Path:
    """The cached ``claude`` command of the pinned version."""
    return install(CLAUDE_CODE_PACKAGE, CLAUDE_CODE_VERSION, "claude-code", "claude")


def install_codex() -> Path:
    """The cached ``codex`` command of the pinned version (``codex --version``: ``codex-cli 0.171.0``)."""
    return install(CODEX_PACKAGE, CODEX_VERSION, "codex", "codex")


def install_gemini_cli() -> Path:
    """The cached ``gemini`` command of the pinned version."""
    return install(GEMINI_CLI_PACKAGE, GEMINI_CLI_VERSION, "gemini-cli", "gemini")


def install_copilot_cli() -> Path:
    """The cached ``copilot`` command of the pinned version (``GitHub Copilot CLI 1.0.102.``)."""
    return install(COPILOT_CLI_PACKAGE, COPILOT_CLI_VERSION, "copilot-cli", "copilot")


def install_opencode() -> Path:
    """The cached ``opencode`` command of the pinned version."""
    return install(OPENCODE_PACKAGE, OPENCODE_VERSION, "opencode", "opencode")


def install_opencode_plugin_folder() -> Path:
    """The cached folder holding ``node_modules`` with ``@opencode-ai/plugin`` at OpenCode's own
    version, and the ``package.json`` OpenCode writes beside it."""
    folder = clients_home() / f"opencode-plugin-{OPENCODE_VERSION}"
    marker = folder / ".complete"
    if marker.exists():
        return folder
    npm = shutil.which("npm")
    if npm is None:
        raise FileNotFoundError("npm not found on PATH (it comes with Node.js)")
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [npm, "install", "--prefix", str(folder), "--no-audit", "--no-fund", "--save-exact",
         f"{OPENCODE_PLUGIN_PACKAGE}@{OPENCODE_VERSION}"],
        check=True, capture_output=True, timeout=INSTALL_TIMEOUT,
    )  # fmt: skip
    marker.write_text(OPENCODE_VERSION)
    return folder


def _installed_or_skipped(installer: Callable[[], Path], package: str, version: str) -> Path:
    """The installed command; skips when it cannot be installed (fails under
    ``OTELGUARD_REQUIRE_E2E=1``, as CI runs)."""
    try:
        return installer()
    except (OSError, subprocess.SubprocessError) as exc:
        stderr = getattr(exc, "stderr", None) or b""
        detail = (
            stderr.decode(errors="replace").strip().splitlines()[-1:] if isinstance(stderr, bytes) else []
        )
        reason = f"cannot install {package}@{version} with npm: {exc} {' '.join(detail)}"
        if os.environ.get(OTELGUARD_REQUIRE_E2E) == "1":
            pytest.fail(f"{reason}; {OTELGUARD_REQUIRE_E2E}=1 forbids skipping", pytrace=False)
        pytest.skip(reason)


def claude_code() -> Path:
    """The pinned ``claude`` command, or the test skipped (failed under ``OTELGUARD_REQUIRE_E2E=1``)."""
    return _installed_or_skipped(install_claude_code, CLAUDE_CODE_PACKAGE, CLAUDE_CODE_VERSION)


def codex() -> Path:
    """The pinned ``codex`` command, or the test skipped (failed under ``OTELGUARD_REQUIRE_E2E=1``)."""
    return _installed_or_skipped(install_codex, CODEX_PACKAGE, CODEX_VERSION)


def gemini_cli() -> Path:
    """The pinned ``gemini`` command, or the test skipped (failed under ``OTELGUARD_REQUIRE_E2E=1``)."""
    return _installed_or_skipped(install_gemini_cli, GEMINI_CLI_PACKAGE, GEMINI_CLI_VERSION)


def copilot_cli() -> Path:
    """The pinned ``copilot`` command, or the test skipped (failed under ``OTELGUARD_REQUIRE_E2E=1``)."""
    return _installed_or_skipped(install_copilot_cli, COPILOT_CLI_PACKAGE, COPILOT_CLI_VERSION)


def opencode() -> Path:
    """The pinned ``opencode`` command, or the test skipped (failed under ``OTELGUARD_REQUIRE_E2E=1``)."""
    return _installed_or_skipped(install_opencode, OPENCODE_PACKAGE, OPENCODE_VERSION)


def opencode_plugin_folder() -> Path:
    """The prepared ``.opencode`` dependencies, or the test skipped (failed under ``OTELGUARD_REQUIRE_E2E=1``)."""
    return _installed_or_skipped(install_opencode_plugin_folder, OPENCODE_PLUGIN_PACKAGE, OPENCODE_VERSION)


if __name__ == "__main__":
    print(install_claude_code())
    print(install_codex())
    print(install_gemini_cli())
    print(install_copilot_cli())
    print(install_opencode())
    print(install_opencode_plugin_folder())
