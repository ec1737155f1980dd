"""The extras are bounded to the versions the tests run, so a new release elsewhere cannot turn CI red.

A framework or backend release that this checkout has not been tested with is never installed by
``pip install -e ".[dev,otlp]"``: each extra names an upper bound, the ``dev`` extra repeats it, and
raising a bound is a change here, made together with the tests that cover the new version.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from tests.test_redis_py_versions import SUPPORTED as REDIS_PY_TESTED

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parents[1]
BOUNDED_EXTRAS = ("langchain", "openai-agents", "pydantic-ai", "redis")


def _optional_dependencies() -> dict[str, list[Requirement]]:
    project: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras: dict[str, list[str]] = project["optional-dependencies"]
    return {extra: [Requirement(line) for line in lines] for extra, lines in extras.items()}


def _upper_bound(requirement: Requirement) -> Version | None:
    uppers = [Version(spec.version) for spec in requirement.specifier if spec.operator == "<"]
    return min(uppers) if uppers else None


@pytest.mark.parametrize("extra", BOUNDED_EXTRAS)
def test_every_framework_extra_has_an_upper_bound(extra: str) -> None:
    for requirement in _optional_dependencies()[extra]:
        assert _upper_bound(requirement) is not None, f"{extra}: {requirement} admits any future release"


@pytest.mark.parametrize("extra", BOUNDED_EXTRAS)
def test_the_dev_extra_repeats_each_bound(extra: str) -> None:
    dev = {requirement.name: requirement.specifier for requirement in _optional_dependencies()["dev"]}
    for requirement in _optional_dependencies()[extra]:
        assert dev.get(requirement.name) == requirement.specifier, requirement.name


@pytest.mark.parametrize("extra", BOUNDED_EXTRAS)
def test_the_installed_version_is_inside_the_bounds(extra: str) -> None:
    for requirement in _optional_dependencies()[extra]:
        installed = importlib.metadata.version(requirement.name)
        assert requirement.specifier.contains(installed, prereleases=True), (requirement, installed)


def test_the_redis_bound_admits_exactly_the_tested_series() -> None:
    """Every redis-py version the backend is tested on is allowed, and nothing past the newest minor."""
    (redis,) = _optional_dependencies()["redis"]
    assert all(redis.specifier.contains(version) for version in REDIS_PY_TESTED)
    newest = max(Version(version) for version in REDIS_PY_TESTED)
    assert _upper_bound(redis) == Version(f"{newest.major}.{newest.minor + 1}")


def _runtime_and_dev() -> list[Requirement]:
    project: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(line) for line in project["dependencies"]] + _optional_dependencies()["dev"]


def test_every_runtime_and_dev_requirement_stops_at_a_tested_version() -> None:
    """A fresh virtualenv takes the newest version each range allows: every range ends (an upper bound
    or a pin), and the version installed here, the one the tests ran, is inside it."""
    for requirement in _runtime_and_dev():
        pinned = any(spec.operator == "==" for spec in requirement.specifier)
        assert pinned or _upper_bound(requirement) is not None, f"{requirement} admits any future release"
        installed = importlib.metadata.version(requirement.name)
        assert requirement.specifier.contains(installed, prereleases=True), (requirement, installed)
