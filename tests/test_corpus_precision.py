"""Precision on the regression corpus: public runs of shell-driven coding agents, with ground truth.

The corpus is third-party data kept outside this repository (docs/replay.md, "The regression corpus"):
``$OTELGUARD_CORPUS``, else ``shared/corpus`` beside the checkout or a parent of it. Every run is
replayed through the real replay path with the defaults plus ``mode: unattended``. A run that solved
its task was not stuck, so a halt there is a false halt. ``pytest -s`` prints the figures per source
(``python -m benchmarks.corpus_precision`` prints the same table).
"""

from __future__ import annotations

import os
import re
import tarfile
from pathlib import Path

import pytest

from benchmarks.corpus_precision import (
    ARCHIVE,
    CLAUDE_CODE,
    GROUND_TRUTH,
    PROVENANCE,
    SourceResult,
    corpus_sources,
    find_corpus,
    measure_files,
    measure_source,
    read_yaml,
    table,
    total,
)
from otelguard.environment_variables import OTELGUARD_REQUIRE_E2E

MAX_HALTED_SHARE = 0.01
"""At most 1% of the corpus's runs may halt at all (solved or not)."""
MAX_WARNINGS_PER_1000 = 5.0
"""Warnings are text in the model's context: at most 5 per 1,000 calls on runs like these."""
MIN_RUNS = 200


@pytest.fixture(scope="module")
def corpus() -> Path:
    found = find_corpus()
    if found is None or not corpus_sources(found):
        reason = "no regression corpus: set OTELGUARD_CORPUS or put it in shared/corpus"
        if os.environ.get(OTELGUARD_REQUIRE_E2E) == "1":
            pytest.fail(f"{reason}; {OTELGUARD_REQUIRE_E2E}=1 forbids skipping", pytrace=False)
        pytest.skip(reason)
    return found


@pytest.fixture(scope="module")
def results(corpus: Path) -> list[SourceResult]:
    measured = [measure_source(source) for source in corpus_sources(corpus)]
    print()
    print(table([*measured, total("corpus total", measured), measure_files("claude-code", CLAUDE_CODE)]))
    for result in measured:
        for halt in result.halts:
            print(
                f"halt: {result.name}: {halt.run} (solved: {halt.solved}) {halt.code} on {halt.tool}, call {halt.call}"
            )
    return measured


def test_every_source_says_where_its_runs_come_from(corpus: Path) -> None:
    for source in corpus_sources(corpus):
        provenance = read_yaml(source / PROVENANCE)
        assert provenance["repository"].startswith("https://github.com/"), source.name
        assert re.fullmatch("[0-9a-f]{40}", provenance["commit"]), source.name
        assert provenance["licence"] and provenance["cut"] and provenance["agent"], source.name
        with tarfile.open(source / ARCHIVE, "r:xz") as archive:
            runs = {m.name for m in archive if m.isfile()}
        truth = read_yaml(source / GROUND_TRUTH)
        assert truth["source"], source.name  # where the verdicts come from
        assert set(truth["runs"]) == runs, source.name  # a verdict (or null) for every run, no other
        assert set(truth["runs"].values()) <= {True, False, None}, source.name
        assert provenance["runs"] == len(runs), source.name


def test_the_corpus_is_large_enough_and_every_run_is_read(corpus: Path, results: list[SourceResult]) -> None:
    assert sum(r.runs for r in results) >= MIN_RUNS
    for source, result in zip(corpus_sources(corpus), results, strict=True):
        provenance = read_yaml(source / PROVENANCE)
        assert result.runs == provenance["runs"], source.name  # one session per run, none lost
        assert result.tool_calls > 0
        # input errors: exactly the ones the source is known to hold (listed in its provenance)
        known = [(e["path"], e["reason"]) for e in provenance.get("known_input_errors") or []]
        assert [(path, reason) for path, _line, reason in result.errors] == known, source.name


def test_no_solved_run_halts(results: list[SourceResult]) -> None:
    false_halts = [(r.name, h.run, h.code, h.tool, h.call) for r in results for h in r.halts if h.solved]
    assert false_halts == []


def test_at_most_one_run_in_a_hundred_halts(results: list[SourceResult]) -> None:
    combined = total("corpus total", results)
    assert combined.halted_runs <= MAX_HALTED_SHARE * combined.runs, [(h.run, h.code) for h in combined.halts]


def test_warnings_stay_under_five_per_thousand_calls(results: list[SourceResult]) -> None:
    combined = total("corpus total", results)
    assert combined.warnings_per_1000 <= MAX_WARNINGS_PER_1000, dict(combined.decisions)
