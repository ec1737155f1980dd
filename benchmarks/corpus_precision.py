"""The detection benchmark: real runs of agents, scored against what each run's own record says.

    python -m benchmarks.corpus_precision [--corpus DIR] [--source NAME] [--json]

Replays every run of the regression corpus, and the Claude Code sessions in
``tests/data/real/claude-code``, through the real replay path (``ReplayRunner`` fed by the format
readers) with the default configuration plus ``mode: unattended`` and a fixed signature key. Each run's
ground truth comes from the run's own record: whether it solved its task (the source's evaluation, in
``ground_truth.yaml``) and whether it ended at a budget limit (read from the transcript, see
``benchmarks.run_records``, or, where the transcript cannot tell, listed in ``ground_truth.yaml``'s
``at_limit``). Per source it prints:

* harmful halts: a run that solved its task was halted, and either it did not end at its limit, or it
  ended at it but changed its files or its world after the stop (an edit, a write, a state-changing
  call: see ``benchmarks.changes``; the passing patch or the final state may have come after the
  stop); and of them, the halts that came after a refusal (``reject``) in the run, which the
  recorded model never read;
* harmless halts: a solved run that ended at its limit was halted after its last change: it lost
  nothing;
* stuck runs (unsolved, ended at the limit): the share halted, the share intervened (refused at
  least once or halted), and the share of their calls that came after the halting call (calls saved);
* harmful refusals: solved runs that had a call refused, when they did not end at their limit or the
  refused call was a change: the run goes on, but the model was told no;
* warnings per 1,000 calls and warned streaks per 1,000 calls (a streak warned at every count of its
  detector is one), in solved runs and in all runs; calls read against calls the runs recorded; input
  errors.

A replayed model never reads a refusal, so a replay shows the most a model might persist: the figures
are the guard's worst case on these runs.

Where a source records the model's replies, they are replayed too (``before_model``/``after_model``),
and a model stop is scored like a tool call's: its place is the last call made before it, and it is
harmful on the same terms. Per source: the replies read, the runs (and stuck runs) whose first stop
was the model's, and the model's decisions among ``decisions``.

The corpus is third-party data kept outside this repository (see docs/replay.md, "The regression
corpus"): ``$OTELGUARD_CORPUS``, else a ``shared/corpus`` folder beside the checkout or one of its
parents. Each source is a folder holding ``runs.tar.xz`` (the runs, whole files, under their paths in
the source repository), ``ground_truth.yaml`` (archive path -> solved true/false/null, or for a file of
several runs session id -> solved; and, optionally, ``at_limit``: the archive paths of the runs that
ended at their limit, for a harness whose transcripts do not say so) and ``provenance.yaml`` (with the source's ``budget`` where the
transcripts do not record their limit). Archives are read in memory; nothing is unpacked to disk.
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

from benchmarks.changes import ChangeClassifier
from benchmarks.run_records import RunRecord, run_records
from otelguard import GuardConfig
from otelguard.config.environment import OTELGUARD_CORPUS
from otelguard.core.decisions import MODEL_TOOL, Decision
from otelguard.readers.events import ModelReply, SessionKey, ToolCall
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
    at_limit: bool
    tool: str
    code: str
    call: int
    """The halting call's index in the run (1-based, counting every tool call read)."""
    after_refusal: bool = False
    """A call of the run was refused (``reject``) before this halt. The recorded model never read
    that refusal, so the replay shows it persisting; a live model may have changed course there."""
    changes_lost: int = 0
    """The run's changes (``benchmarks.changes``) that came after the stop: every one after the
    halting call, and the halting call itself when it was stopped before it ran."""

    @property
    def harmful(self) -> bool:
        """The run solved its task and the halt cost it: it did not end at its limit, or it changed
        something after the stop."""
        return bool(self.solved) and (not self.at_limit or self.changes_lost > 0)


@dataclass
class Run:
    """One session as the benchmark scores it: the run's own record beside what the guard did."""

    name: str
    solved: bool | None
    at_limit: bool
    calls: int
    recorded: int | None
    warnings: int
    halt: Halt | None
    refused: bool = False
    """At least one call was refused (``reject``: it did not run, the turn went on)."""
    refused_changes: int = 0
    """Of the refused calls, the ones that were changes (``benchmarks.changes``)."""
    model_replies: int = 0
    streaks: int = 0
    """Warned streaks: warnings of one detector on one tool whose counts follow each other are one
    streak (a detector that warns at every count from its threshold on warns one streak, not many)."""

    @property
    def stuck(self) -> bool:
        return self.solved is False and self.at_limit

    @property
    def harmfully_refused(self) -> bool:
        """A solved run had a call refused, and it did not end at its limit or a refused call was a
        change: the refusal may have cost the task."""
        return bool(self.solved) and self.refused and (not self.at_limit or self.refused_changes > 0)


@dataclass
class SourceResult:
    """One source's figures; ``runs`` counts sessions (one per run)."""

    name: str
    runs: list[Run] = field(default_factory=list)
    decisions: Counter[str] = field(default_factory=Counter)
    errors: list[tuple[str, int | None, str]] = field(default_factory=list)

    @property
    def halts(self) -> list[Halt]:
        return [r.halt for r in self.runs if r.halt is not None]

    @property
    def solved(self) -> int:
        return sum(r.solved is True for r in self.runs)

    @property
    def tool_calls(self) -> int:
        return sum(r.calls for r in self.runs)

    @property
    def recorded_calls(self) -> int:
        return sum(r.recorded or 0 for r in self.runs)

    @property
    def warnings(self) -> int:
        return sum(r.warnings for r in self.runs)

    @property
    def streaks(self) -> int:
        return sum(r.streaks for r in self.runs)

    @property
    def halted_runs(self) -> int:
        return len(self.halts)

    @property
    def harmful_halts(self) -> list[Halt]:
        """Halts of solved runs that did not end at their limit, or changed something after the stop."""
        return [h for h in self.halts if h.harmful]

    @property
    def harmful_halts_after_refusal(self) -> list[Halt]:
        """The harmful halts that came after the run had a call refused (see ``Halt.after_refusal``)."""
        return [h for h in self.harmful_halts if h.after_refusal]

    @property
    def harmless_halts(self) -> list[Halt]:
        """Halts of solved runs that ended at their limit and changed nothing after the stop."""
        return [h for h in self.halts if h.solved and not h.harmful]

    @property
    def stuck(self) -> list[Run]:
        return [r for r in self.runs if r.stuck]

    @property
    def stuck_recall(self) -> float:
        stuck = self.stuck
        return sum(r.halt is not None for r in stuck) / len(stuck) if stuck else 0.0

    @property
    def stuck_halted(self) -> float:
        """The share of stuck runs halted (the same as ``stuck_recall``)."""
        return self.stuck_recall

    @property
    def stuck_answered(self) -> float:
        """The share of stuck runs intervened: refused at least once or halted."""
        stuck = self.stuck
        return sum(r.halt is not None or r.refused for r in stuck) / len(stuck) if stuck else 0.0

    @property
    def solved_refused(self) -> int:
        """Solved runs refused harmfully (not a halt: the run goes on, but the model was told no):
        they did not end at their limit, or a refused call was a change."""
        return sum(1 for r in self.runs if r.harmfully_refused)

    @property
    def harmful_refusals(self) -> int:
        """The solved runs refused harmfully (``solved_refused``)."""
        return self.solved_refused

    @property
    def calls_saved(self) -> float:
        """Of the stuck runs' calls, the share that came after the halting call."""
        stuck = self.stuck
        total = sum(r.calls for r in stuck)
        saved = sum(r.calls - r.halt.call for r in stuck if r.halt is not None)
        return saved / total if total else 0.0

    @property
    def solved_calls(self) -> int:
        return sum(r.calls for r in self.runs if r.solved)

    @property
    def solved_warnings_per_1000(self) -> float:
        calls = self.solved_calls
        warnings = sum(r.warnings for r in self.runs if r.solved)
        return 1000 * warnings / calls if calls else 0.0

    @property
    def warnings_per_1000(self) -> float:
        return 1000 * self.warnings / self.tool_calls if self.tool_calls else 0.0

    @property
    def solved_streaks_per_1000(self) -> float:
        calls = self.solved_calls
        streaks = sum(r.streaks for r in self.runs if r.solved)
        return 1000 * streaks / calls if calls else 0.0

    @property
    def streaks_per_1000(self) -> float:
        return 1000 * self.streaks / self.tool_calls if self.tool_calls else 0.0

    @property
    def stuck_calls(self) -> int:
        return sum(r.calls for r in self.stuck)

    @property
    def stuck_calls_saved(self) -> int:
        """The stuck runs' calls made after their halting call (``calls_saved`` as a count, so that
        sources can be pooled)."""
        return sum(r.calls - r.halt.call for r in self.stuck if r.halt is not None)

    @property
    def model_halts(self) -> list[Halt]:
        """Runs whose first stop was the model's (a stop at ``before_model``/``after_model``)."""
        return [h for h in self.halts if h.tool == MODEL_TOOL]

    @property
    def stuck_model_halted(self) -> int:
        return sum(1 for r in self.stuck if r.halt is not None and r.halt.tool == MODEL_TOOL)

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.name,
            "runs": len(self.runs),
            "solved_runs": self.solved,
            "runs_at_limit": sum(r.at_limit for r in self.runs),
            "stuck_runs": len(self.stuck),
            "tool_calls": self.tool_calls,
            "tool_calls_recorded": self.recorded_calls,
            "halted_runs": self.halted_runs,
            "harmful_halts": len(self.harmful_halts),
            "harmful_halts_after_refusal": len(self.harmful_halts_after_refusal),
            "harmless_halts": len(self.harmless_halts),
            "stuck_recall": round(self.stuck_recall, 4),
            "stuck_halted": round(self.stuck_halted, 4),
            "stuck_intervened": round(self.stuck_answered, 4),
            "stuck_calls_saved": round(self.calls_saved, 4),
            "stuck_calls": self.stuck_calls,
            "stuck_calls_saved_count": self.stuck_calls_saved,
            "stuck_refused_or_halted": round(self.stuck_answered, 4),
            "solved_runs_refused": self.solved_refused,
            "harmful_refusals": self.harmful_refusals,
            "warnings": self.warnings,
            "warnings_per_1000_calls": round(self.warnings_per_1000, 2),
            "solved_warnings_per_1000_calls": round(self.solved_warnings_per_1000, 2),
            "warned_streaks": self.streaks,
            "warned_streaks_per_1000_calls": round(self.streaks_per_1000, 2),
            "solved_warned_streaks_per_1000_calls": round(self.solved_streaks_per_1000, 2),
            "input_errors": len(self.errors),
            "model_replies": sum(r.model_replies for r in self.runs),
            "model_halted_runs": len(self.model_halts),
            "harmful_model_halts": sum(1 for h in self.model_halts if h.harmful),
            "stuck_model_halted": self.stuck_model_halted,
            "decisions": dict(sorted(self.decisions.items())),
            "halts": [{**vars(h), "harmful": h.harmful} for h in self.halts],
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


class Positions:
    """Forwards every event to the runner and counts each session's calls per turn, so that a halt
    (recorded as turn and call in that turn) can be placed in the run."""

    def __init__(self, runner: ReplayRunner) -> None:
        self.runner = runner
        self.turns: dict[tuple[str, str], list[int]] = {}

    def describe_input(self, path: str, fmt: str) -> None:
        self.runner.describe_input(path, fmt)

    def begin_session(self, key: SessionKey) -> None:
        self.turns[(key.path, key.session_id)] = []
        self.runner.begin_session(key)

    def start_turn(self, key: SessionKey, time: float | None = None) -> None:
        self.turns.setdefault((key.path, key.session_id), []).append(0)
        self.runner.start_turn(key, time)

    def tool_call(self, key: SessionKey, call: ToolCall) -> None:
        turns = self.turns.setdefault((key.path, key.session_id), [])
        if not turns:
            turns.append(0)
        turns[-1] += 1
        self.runner.tool_call(key, call)

    def model_reply(self, key: SessionKey, reply: ModelReply) -> None:
        turns = self.turns.setdefault((key.path, key.session_id), [])
        if not turns:  # the runner opens a turn for a reply before any request, as for a call
            turns.append(0)
        self.runner.model_reply(key, reply)

    def end_session(self, key: SessionKey) -> None:
        self.runner.end_session(key)

    def error(self, path: str, line: int | None, reason: str) -> None:
        self.runner.error(path, line, reason)

    def index(self, path: str, session_id: str, turn: int, call: int) -> int:
        turns = self.turns.get((path, session_id), [])
        return sum(turns[: turn - 1]) + call


@dataclass
class Changes:
    """Per run (path, session id): the calls that changed its files or its world, by their index in
    the run, and what the replay did with them."""

    made: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    not_run: dict[tuple[str, str], set[int]] = field(default_factory=dict)
    """The changes the replay did not run: refused, or stopped (the halting call refused at
    ``before_call``, and every call after a halt in its turn)."""
    refused: Counter[tuple[str, str]] = field(default_factory=Counter)
    """Changes refused (``reject``: the turn went on without them)."""

    def lost_after(self, run: tuple[str, str], halt: int) -> int:
        """The run's changes after its halting call ``halt``, and that call when it did not run."""
        not_run = self.not_run.get(run, set())
        return sum(
            1 for index in self.made.get(run, ()) if index > halt or (index == halt and index in not_run)
        )


class StreakRunner(ReplayRunner):
    """The replay runner, also counting each session's warned streaks and noting its changes.

    A warning continues a streak when the same detector warned on the same tool with the count just
    before (a detector warning at every count from its threshold on is one streak); any other warning
    starts a new one."""

    def __init__(self, config: GuardConfig) -> None:
        super().__init__(config)
        self.streaks: Counter[tuple[str, str]] = Counter()
        self.changes = Changes()
        self._classifier = ChangeClassifier(config)
        self._last: dict[tuple[str, str, str, str], int] = {}
        self._call: ToolCall | None = None
        """The call being replayed (its decisions name it; a model decision has none)."""

    def tool_call(self, key: SessionKey, call: ToolCall) -> None:
        report = self._session(key).report
        prevented = report.prevented_calls
        self._call = call
        super().tool_call(key, call)
        self._call = None
        if self._classifier.changes(call):
            run = (key.path, key.session_id)
            self.changes.made.setdefault(run, []).append(report.tool_calls)
            if report.prevented_calls > prevented:
                self.changes.not_run.setdefault(run, set()).add(report.tool_calls)

    def _note(
        self, session: Any, decision: Decision, call_id: str | None, tool_name: str, *, model: bool = False
    ) -> bool:
        report = session.report
        run = (report.path, report.session_id)
        call = self._call
        if decision.action == "warn":
            key = (*run, decision.code, tool_name)
            last = self._last.get(key)
            if last is None or decision.count != last + 1:
                self.streaks[run] += 1
            self._last[key] = decision.count
        elif decision.action == "reject" and call is not None and self._classifier.changes(call):
            self.changes.refused[run] += 1
        return super()._note(session, decision, call_id, tool_name, model=model)


Truth = dict[str, Any]
"""Archive path -> solved (``true``/``false``/``null``), or, for a file of several runs, a mapping of
session id -> solved."""


def measure_source(source: Path) -> SourceResult:
    ground = read_yaml(source / GROUND_TRUTH)
    truth: Truth = ground["runs"]
    listed = frozenset(ground.get("at_limit") or ())
    provenance = read_yaml(source / PROVENANCE) or {}
    budget = provenance.get("budget") or {}
    runner = StreakRunner(config())
    positions = Positions(runner)
    records: dict[tuple[str, str | None], RunRecord] = {}
    for name, data in archive_members(source):
        replay_bytes(name, data, "auto", positions)
        for session_id, record in run_records(data, budget).items():
            records[(name, session_id)] = record
    return score_report(
        source.name, runner.finish(), truth, records, positions, runner.streaks, runner.changes, listed
    )


def measure_files(name: str, folder: Path) -> SourceResult:
    """Transcripts on disk with no ground truth (every run's outcome unknown)."""
    runner = StreakRunner(config())
    positions = Positions(runner)
    replay_inputs(expand_paths([str(folder)]), "auto", positions)
    return score_report(name, runner.finish(), {}, {}, positions, runner.streaks, runner.changes)


def _verdict(truth: Truth, path: str, session_id: str) -> bool | None:
    verdict = truth.get(path)
    if isinstance(verdict, dict):
        return verdict.get(session_id)
    return verdict


def score_report(
    name: str,
    report: ReplayReport,
    truth: Truth,
    records: dict[tuple[str, str | None], RunRecord],
    positions: Positions,
    streaks: Counter[tuple[str, str]] | None = None,
    changes: Changes | None = None,
    limited: frozenset[str] = frozenset(),
) -> SourceResult:
    """The source's figures. Without ``changes`` no run is known to have changed anything after a
    stop, and a halt of a solved run at its limit is harmless. ``limited``: the archive paths the
    ground truth lists as ended at their limit (a harness whose transcripts do not say it)."""
    changes = changes or Changes()
    result = SourceResult(name)
    rejects = {code for code, actions in report.actions.items() if "reject" in actions}
    for session in report.sessions:
        solved = _verdict(truth, session.path, session.session_id)
        record = records.get((session.path, session.session_id))
        run_name = f"{session.path}#{session.session_id}"
        if record is None:  # a file of one run
            record = records.get((session.path, None))
            run_name = session.path
        at_limit = (record is not None and record.at_limit) or session.path in limited
        halt = None
        if session.halts:
            first = session.halts[0]
            index = positions.index(session.path, session.session_id, first.turn, first.call)
            first_reject = session.first_reject_call
            after_refusal = first_reject is not None and first_reject < first.session_call
            lost = changes.lost_after((session.path, session.session_id), index)
            halt = Halt(run_name, solved, at_limit, first.tool_name, first.code, index, after_refusal, lost)
        recorded = record.calls if record is not None else None
        refused = any(code in rejects for code in session.decisions)
        run = Run(run_name, solved, at_limit, session.tool_calls, recorded, session.warnings, halt, refused)
        run.refused_changes = changes.refused[(session.path, session.session_id)]
        run.model_replies = session.model_replies
        run.streaks = (streaks or Counter())[(session.path, session.session_id)]
        result.runs.append(run)
        result.decisions.update(session.decisions)
    result.errors = [(e.path, e.line, e.reason) for e in report.errors]
    return result


def measure_all(corpus: Path | None, only: list[str] | None = None) -> list[SourceResult]:
    sources = corpus_sources(corpus) if corpus else []
    results = [measure_source(s) for s in sources if not only or s.name in only]
    if len(results) > 1:
        results.append(total(TOTAL, results))
    results.append(measure_files("claude-code (tests/data/real)", CLAUDE_CODE))
    return results


def total(name: str, results: list[SourceResult]) -> SourceResult:
    combined = SourceResult(name)
    for result in results:
        combined.runs.extend(result.runs)
        combined.decisions.update(result.decisions)
        combined.errors.extend(result.errors)
    return combined


COLUMNS: Final = (
    ("source", lambda r: r.name),
    ("runs", lambda r: str(len(r.runs))),
    ("solved", lambda r: str(r.solved)),
    ("stuck", lambda r: str(len(r.stuck))),
    ("calls read/recorded", lambda r: f"{r.tool_calls}/{r.recorded_calls}"),
    ("harmful halts", lambda r: str(len(r.harmful_halts))),
    ("of them after a refusal", lambda r: str(len(r.harmful_halts_after_refusal))),
    ("harmless", lambda r: str(len(r.harmless_halts))),
    ("halted", lambda r: str(r.halted_runs)),
    ("stuck halted", lambda r: f"{100 * r.stuck_halted:.1f}%"),
    ("stuck intervened", lambda r: f"{100 * r.stuck_answered:.1f}%"),
    ("calls saved", lambda r: f"{100 * r.calls_saved:.1f}%"),
    ("harmful refusals", lambda r: str(r.harmful_refusals)),
    ("warn/1k solved", lambda r: f"{r.solved_warnings_per_1000:.2f}"),
    ("warn/1k all", lambda r: f"{r.warnings_per_1000:.2f}"),
    ("streaks/1k solved", lambda r: f"{r.solved_streaks_per_1000:.2f}"),
    ("streaks/1k all", lambda r: f"{r.streaks_per_1000:.2f}"),
    ("errors", lambda r: str(len(r.errors))),
)


def table(results: list[SourceResult]) -> str:
    header = tuple(title for title, _ in COLUMNS)
    rows = [tuple(cell(r) for _, cell in COLUMNS) for r in results]
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
    parser.add_argument("--source", action="append", help="measure only this source (repeatable)")
    args = parser.parse_args(argv)
    corpus = args.corpus or find_corpus()
    if corpus is None:
        print(
            f"no corpus found: set {OTELGUARD_CORPUS} or put it in shared/corpus; Claude Code only",
            file=sys.stderr,
        )
    results = measure_all(corpus, args.source)
    if args.json:
        print(json.dumps([r.to_json() for r in results], indent=2))
        return 0
    print(table(results))
    for result in results:
        for halt in result.halts if result.name != TOTAL else ():
            print(
                f"halt: {result.name}: {halt.run} (solved: {halt.solved}, at limit: {halt.at_limit},"
                f" changes after: {halt.changes_lost}) {halt.code} on {halt.tool}, call {halt.call}"
                f"{', after a refusal' if halt.after_refusal else ''}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
