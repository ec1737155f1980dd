"""Without the regression corpus, every corpus test skips saying what is missing and where to get it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.markdown_docs import REPO


def test_every_corpus_test_skips_naming_the_corpus_and_where_to_put_it(tmp_path: Path) -> None:
    missing = tmp_path / "no-corpus-here"
    env = {**os.environ, "OTELGUARD_CORPUS": str(missing), "OTELGUARD_REQUIRE_E2E": ""}
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
            "tests/test_corpus_precision.py",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    skips = [line for line in run.stdout.splitlines() if line.startswith("SKIPPED")]
    assert len(skips) >= 5, run.stdout  # the five tests that replay the corpus
    for line in skips:
        assert "empty parameter set" not in line
        assert "no regression corpus" in line and str(missing) in line
        assert "OTELGUARD_CORPUS" in line and "shared/corpus beside the checkout" in line
