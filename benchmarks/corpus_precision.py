"""False halts and warning load on real runs of shell-driven coding agents, per source.

    python -m benchmarks.corpus_precision [--corpus DIR] [--json]

Replays every run of the regression corpus, and the Claude Code sessions in
``tests/data/real/claude-code``, through the real replay path (``ReplayRunner`` fed by the format
readers) with the default configuration plus ``mode: unattended`` and a fixed signature key, and
prints per source: runs, tool calls, halted runs (in solved runs / all runs), warnings and warnings
per 1,000 calls, input errors. A run that solved its task was not stuck: a halt there is a false halt.

The corpus is third-party data kept outside this repository (see docs/replay.md, "The regression
corpus"): ``$OTELGUARD_CORPUS``, else a ``shared/corpus`` folder beside the checkout or one of its
parents. Each source is a folder holding ``runs.tar.xz`` (the runs, whole files, under their paths in
the source repository), ``ground_truth.yaml`` (archive path -> solved true/false/null) and
``provenance.yaml``. Archives are read in memory; nothing is unpacked to disk.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tarfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from otelguard import GuardConfig
from otelguard.environment_variables import OTELGUARD_CORPUS
from otelguard.replay import ReplayReport, ReplayRunner, expand_paths, replay_bytes, replay_inputs

ARCHIVE: Final = "runs.tar.xz"
GROUND_TRUTH: Final = "ground_truth.yaml"
PROVENANCE: Final = "provenance.yaml"
REPO: Final = Path(__file__).resolve().parent.parent
CLAUDE_CODE: Final = REPO / "tests" / "data" / "real" / "claude-code"
TOTAL: Final = "corpus total"
CONFIG: Final = {"mode": "unattended", "signature_key": "corpus-precision"}
_TRANSCRIPTS: Final = (".json", ".jsonl", ".traj")


@dataclass
class Halt:
    run: str
    solved: bool | None
    tool: str
    code: str
    call: int


@dataclass
class SourceResult:
    """One source's figures; ``runs`` counts sessions, one per run for the corpus's formats."""

    name: str
    runs: int = 0
    solved: int = 0
    tool_calls: int = 0
    warnings: int = 0
    decisions: Counter[str] = field(default_factory=Counter)
    halts: list[Halt] = field(default_factory=list)
    errors: list[tuple[str, int | None, str]] = field(default_factory=list)

    @property
    def halted_runs(self) -> int:
        return len({h.run for h in self.halts})

    @property
    def halted_solved_runs(self) -> int:
        return len({h.run for h in self.halts if h.solved})

    @property
    def warnings_per_1000(self) -> float:
        return 1000 * self.warnings / self.tool_calls if self.tool_calls else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.name,
            "runs": self.runs,
            "solved_runs": self.solved,
            "tool_calls": self.tool_calls,
            "halted_runs": self.halted_runs,
            "halted_solved_runs": self.halted_solved_runs,
            "warnings": self.warnings,
            "warnings_per_1000_calls": round(self.warnings_per_1000, 2),
            "input_errors": len(self.errors),
            "decisions": dict(sorted(self.decisions.items())),
            "halts": [vars(h) for h in self.halts],
        }


def find_corpus(start: Path = REPO) -> Path | None:
    """``$OTELGUARD_CORPUS``, else the first ``shared/corpus`` beside ``start`` or a parent of it."""
    named = os.environ.get(OTELGUARD_CORPUS)
    if named:
        return Path(named)
    for folder in (start, *start.parents):
        candidate = folder / "shared" / "corpus"
        if candidate.is_dir():
            return candidate
    return None


def corpus_sources(corpus: Path) -> list[Path]:
    return sorted(p for p in corpus.iterdir() if (p / ARCHIVE).is_file())


def read_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def config() -> GuardConfig:
    return GuardConfig.from_mapping(CONFIG)


def archive_members(source: Path) -> list[tuple[str, bytes]]:
    """The source's transcript files, in archive order, read into memory."""
    members: list[tuple[str, bytes]] = []
    with tarfile.open(source / ARCHIVE, "r:xz") as archive:
        for member in archive:
            if member.isfile() and member.name.endswith(_TRANSCRIPTS):
                stream = archive.extractfile(member)
                assert stream is not None
                members.append((member.name, stream.read()))
    return members


def measure_source(source: Path) -> SourceResult:
    truth: dict[str, bool | None] = read_yaml(source / GROUND_TRUTH)["runs"]
    runner = ReplayRunner(config())
    for name, data in archive_members(source):
        replay_bytes(name, data, "auto", runner)
    return _result(source.name, runner.finish(), truth)


def measure_files(name: str, folder: Path) -> SourceResult:
    """Transcripts on disk with no ground truth (every run's outcome unknown)."""
    runner = ReplayRunner(config())
    replay_inputs(expand_paths([str(folder)]), "auto", runner)
    return _result(name, runner.finish(), {})


def _result(name: str, report: ReplayReport, truth: dict[str, bool | None]) -> SourceResult:
    result = SourceResult(name)
    for session in report.sessions:
        solved = truth.get(session.path)
        result.runs += 1
        result.solved += solved is True
        result.tool_calls += session.tool_calls
        result.warnings += session.warnings
        result.decisions.update(session.decisions)
        for halt in session.halts:
            result.halts.append(Halt(session.path, solved, halt.tool_name, halt.code, halt.call))
    result.errors = [(e.path, e.line, e.reason) for e in report.errors]
    return result


def measure_all(corpus: Path | None) -> list[SourceResult]:
    results = [measure_source(source) for source in corpus_sources(corpus)] if corpus else []
    if len(results) > 1:
        results.append(total(TOTAL, results))
    results.append(measure_files("claude-code (tests/data/real)", CLAUDE_CODE))
    return results


def total(name: str, results: list[SourceResult]) -> SourceResult:
    combined = SourceResult(name)
    for result in results:
        combined.runs += result.runs
        combined.solved += result.solved
        combined.tool_calls += result.tool_calls
        combined.warnings += result.warnings
        combined.decisions.update(result.decisions)
        combined.halts.extend(result.halts)
        combined.errors.extend(result.errors)
    return combined


def table(results: list[SourceResult]) -> str:
    header = (
        "source",
        "runs",
        "solved",
        "calls",
        "halted (solved/all)",
        "warnings",
        "per 1k calls",
        "errors",
    )
    rows = [
        (
            r.name,
            str(r.runs),
            str(r.solved),
            str(r.tool_calls),
            f"{r.halted_solved_runs}/{r.halted_runs}",
            str(r.warnings),
            f"{r.warnings_per_1000:.2f}",
            str(len(r.errors)),
        )
        for r in results
    ]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    lines = [
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in (header, *rows)
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--corpus", type=Path, help=f"corpus folder (default: ${OTELGUARD_CORPUS}, else shared/corpus)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    corpus = args.corpus or find_corpus()
    if corpus is None:
        print(
            f"no corpus found: set {OTELGUARD_CORPUS} or put it in shared/corpus; Claude Code only",
            file=sys.stderr,
        )
    results = measure_all(corpus)
    if args.json:
        print(json.dumps([r.to_json() for r in results], indent=2))
        return 0
    print(table(results))
    for result in results:
        for halt in result.halts if result.name != TOTAL else ():
            print(
                f"halt: {result.name}: {halt.run} (solved: {halt.solved}) {halt.code} on {halt.tool}, call {halt.call}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
