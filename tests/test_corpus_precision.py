"""Precision on the regression corpus: public runs of shell-driven coding agents, with ground truth.

The corpus is third-party data kept outside this repository (docs/replay.md, "The regression corpus"):
``$OTELGUARD_CORPUS``, else ``shared/corpus`` beside the checkout or a parent of it. Every run is
replayed through the real replay path with the defaults plus ``mode: unattended``. A run that solved
its task was not stuck, so a halt there is a false halt. ``pytest -s`` prints the figures per source
(``python -m benchmarks.corpus_precision`` prints the same table).
"""

from __future__ import annotations

import functools
import re
import tarfile
from pathlib import Path
from typing import Any

import pytest

from benchmarks.corpus_precision import (
    ARCHIVE,
    CLAUDE_CODE,
    GROUND_TRUTH,
    PROVENANCE,
    TOTAL,
    SourceResult,
    corpus_sources,
    find_corpus,
    measure_files,
    measure_source,
    read_yaml,
    table,
    total,
)

MAX_HALTED_SHARE = 0.01
"""At most 1% of a source's runs may halt at all (solved or not)."""
MAX_WARNINGS_PER_1000 = 5.0
"""Warnings are text in the model's context: at most 5 per 1,000 calls."""
MIN_RUNS = 200

CORPUS = find_corpus()
SOURCES = corpus_sources(CORPUS) if CORPUS is not None and CORPUS.is_dir() else []
NO_CORPUS = (
    f"no regression corpus (looked in {CORPUS or 'shared/corpus beside the checkout and its parents'}): "
    "set OTELGUARD_CORPUS to a corpus directory or put one in shared/corpus beside the checkout "
    '(docs/replay.md, "The regression corpus")'
)

# Misses measured on a source and explained in docs/replay.md ("The regression corpus"). Strict: once
# a change fixes one, its test fails until the entry is removed.
JAVA = "swe-agent-multi-swe-bench-java"
KNOWN_MISSES = {
    (JAVA, "solved"): "gpt-4o-mini, fasterxml__jackson-databind-3701: the same `edit 10:81` of its own "
    "scratch test, five times back to back with the same output (identical_call_halt on edit, call 22, "
    "the run's last call before its cost limit; the fix itself was made at call 10)",
    (JAVA, "halted"): "26 of 448 runs halt, all but one unsolved: 2024 models looping on identical edits "
    "and open/scroll cycles",
    (JAVA, "warnings"): "16.95 per 1,000 calls: write_streak_warn on runs of 30+ edits in a row, "
    "identical_call and cycle warnings on the looping runs",
}


def per_source(check: str) -> list[Any]:
    if not SOURCES:
        return [pytest.param(None, id="no-corpus", marks=pytest.mark.skip(reason=NO_CORPUS))]
    params = []
    for source in SOURCES:
        reason = KNOWN_MISSES.get((source.name, check))
        marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
        params.append(pytest.param(source, id=source.name, marks=marks))
    return params


@functools.cache
def measured(source: Path) -> SourceResult:
    return measure_source(source)


def test_the_corpus_is_there() -> None:
    if not SOURCES:
        # Third-party runs are not shipped in this repository, so a checkout without the corpus skips
        # this test even where missing binaries fail (OTELGUARD_REQUIRE_E2E): nothing to install.
        pytest.skip(NO_CORPUS)
    results = [measured(source) for source in SOURCES]
    print()
    print(table([*results, total(TOTAL, results), measure_files("claude-code", CLAUDE_CODE)]))
    for result in results:
        for halt in result.halts:
            print(
                f"halt: {result.name}: {halt.run} (solved: {halt.solved}) {halt.code} on {halt.tool}, call {halt.call}"
            )
    assert sum(r.runs for r in results) >= MIN_RUNS


@pytest.mark.parametrize("source", per_source("provenance"))
def test_the_source_says_where_its_runs_come_from(source: Path) -> None:
    provenance = read_yaml(source / PROVENANCE)
    assert provenance["repository"].startswith("https://github.com/")
    assert re.fullmatch("[0-9a-f]{40}", provenance["commit"])
    assert provenance["licence"] and provenance["cut"] and provenance["agent"]
    with tarfile.open(source / ARCHIVE, "r:xz") as archive:
        runs = {m.name for m in archive if m.isfile()}
    truth = read_yaml(source / GROUND_TRUTH)
    assert truth["source"]  # where the verdicts come from
    assert set(truth["runs"]) == runs  # a verdict (or null) for every run, and no other
    assert set(truth["runs"].values()) <= {True, False, None}
    assert provenance["runs"] == len(runs)


@pytest.mark.parametrize("source", per_source("read"))
def test_every_run_is_read_with_exactly_the_known_input_errors(source: Path) -> None:
    result = measured(source)
    provenance = read_yaml(source / PROVENANCE)
    assert result.runs == provenance["runs"]  # one session per run, none lost
    assert result.tool_calls > 0
    known = [(e["path"], e["reason"]) for e in provenance.get("known_input_errors") or []]
    assert [(path, reason) for path, _line, reason in result.errors] == known


@pytest.mark.parametrize("source", per_source("solved"))
def test_no_solved_run_halts(source: Path) -> None:
    false_halts = [(h.run, h.code, h.tool, h.call) for h in measured(source).halts if h.solved]
    assert false_halts == []


@pytest.mark.parametrize("source", per_source("halted"))
def test_at_most_one_run_in_a_hundred_halts(source: Path) -> None:
    result = measured(source)
    assert result.halted_runs <= MAX_HALTED_SHARE * result.runs, [(h.run, h.code) for h in result.halts]


@pytest.mark.parametrize("source", per_source("warnings"))
def test_warnings_stay_under_five_per_thousand_calls(source: Path) -> None:
    result = measured(source)
    assert result.warnings_per_1000 <= MAX_WARNINGS_PER_1000, dict(result.decisions)
