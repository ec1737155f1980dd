"""Virtualenvs beside the project's own, for frameworks that must never be installed into it.

hermes-agent installs generic top-level modules (``agent``, ``tools``, ``utils``) that would shadow
or be shadowed by others, so its plugin is tested in a venv of its own, built once and cached under
``OTELGUARD_SIDE_VENVS`` (default ``~/.cache/otelguard-test/venvs``). The project itself is installed
into it in editable mode on every test session, so the venv always runs the checkout under test.

``python -m tests.side_venvs`` builds the cache ahead of a test run (``.ci/run`` does).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from otelguard.config.environment import OTELGUARD_REQUIRE_E2E

HERMES_AGENT_VERSION = "0.19.0"
PROJECT_ROOT = Path(__file__).resolve().parent.parent
_installed: dict[Path, Path] = {}


def venvs_home() -> Path:
    default = Path.home() / ".cache" / "otelguard-test" / "venvs"
    return Path(os.environ.get("OTELGUARD_SIDE_VENVS", default))


def _python(venv: Path) -> Path:
    return venv / "bin" / "python"


def hermes_venv() -> Path:
    """Where the hermes-agent venv for this Python is cached (complete once ``.complete`` is there)."""
    tag = f"py{sys.version_info.major}{sys.version_info.minor}"
    return venvs_home() / f"hermes-agent-{HERMES_AGENT_VERSION}-{tag}"


def build_hermes_venv() -> Path:
    """The cached venv with hermes-agent; builds it when missing. Raises CalledProcessError on failure."""
    venv = hermes_venv()
    marker = venv / ".complete"
    if not marker.exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        pip = [str(_python(venv)), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        subprocess.run([*pip, f"hermes-agent=={HERMES_AGENT_VERSION}"], check=True)
        marker.write_text(HERMES_AGENT_VERSION)
    return venv


def hermes_python() -> Path:
    """The side venv's interpreter with this checkout installed (editable); skips when unavailable."""
    try:
        venv = build_hermes_venv()
        if venv not in _installed:
            pip = [str(_python(venv)), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
            subprocess.run([*pip, "-e", str(PROJECT_ROOT)], check=True, capture_output=True)
            _installed[venv] = _python(venv)
    except (OSError, subprocess.CalledProcessError) as exc:
        reason = f"cannot build the hermes-agent side venv: {exc}"
        if os.environ.get(OTELGUARD_REQUIRE_E2E) == "1":
            pytest.fail(f"{reason}; {OTELGUARD_REQUIRE_E2E}=1 forbids skipping", pytrace=False)
        pytest.skip(reason)
    return _installed[venv]


if __name__ == "__main__":
    print(build_hermes_venv())
