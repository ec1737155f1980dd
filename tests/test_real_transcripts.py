"""Real public transcripts that no one here wrote, replayed with ``mode: unattended``.

Each file under ``tests/data/real/<source>/`` is listed with its repository, path, commit, licence and
what was cut in that directory's ``provenance.yaml``. Healthy sessions must not halt; the real loops
must be stopped or warned with the right code; a call counts as an input error only when the
transcript never answered it; every tool call of a file is counted.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from otelguard.cli import main
from otelguard.replay import SessionKey, ToolCall, replay_inputs

REAL = Path(__file__).parent / "data" / "real"


@pytest.fixture(scope="module")
def unattended(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("config") / "unattended.yaml"
    path.write_text("mode: unattended\nsignature_key: real-transcripts\n")
    return path


def replay(path: Path, config: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code = main(["replay", str(path), "--config", str(config), "--json"])
    document: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert code == (1 if document["errors"] else 0)
    return document


def halts(session: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(h["turn"], h["call"], h["tool"], h["code"]) for h in session["halts"]]


def only_session(document: dict[str, Any]) -> dict[str, Any]:
    assert len(document["sessions"]) == 1
    session: dict[str, Any] = document["sessions"][0]
    return session


# --- what each file must get ---------------------------------------------------------------------

# (file, format, tool calls, decisions, halts): files whose verdict the core rules for cancelled
# calls, cosmetic arguments and repeated errors leave as it is.
STEADY = [
    # the user rejects a blocking TaskOutput call, then interrupts: a refusal, not a loop
    ("claude-code/cc_rejected_taskoutput.jsonl", "claude-code", 5, {}, []),
    # the user rejects two different tool uses
    ("claude-code/cc_short_rejections.jsonl", "claude-code", 2, {}, []),
    # a cancelled sibling re-run by the model: nothing repeats a failure
    ("claude-code/cc_sibling_bash_rerun.jsonl", "claude-code", 4, {}, []),
    # tool output quoting Claude Code's host messages stays tool output
    ("claude-code/cc_templates_inside_output.jsonl", "claude-code", 2, {}, []),
    # a test fixed by edits between four failing runs: a shell failing between successful edits is how
    # a fix is made, so neither the repeated run nor the content-blind count of Bash says anything
    ("claude-code/cc_test_fix_loop.jsonl", "claude-code", 21, {}, []),
    # a commit refused by a pre-commit hook again and again, with edits in between: each edit starts the
    # shell's count over; nothing to say
    ("claude-code/cc_precommit_retries.jsonl", "claude-code", 17, {}, []),
    ("swe-agent/function_calling_simple.traj", "swe-agent", 5, {}, []),
    ("swe-agent/6e44b9__sweagenttestrepo-1c2844.traj", "swe-agent", 5, {}, []),
    # three edits rejected by SWE-agent's linter, the last two the same edit with the same error: that
    # repeat is warned, and the run goes on to fix the file
    ("swe-agent/pydicom__pydicom-1458.traj", "swe-agent", 12, {"exact_failure_warn": 1}, []),
    ("openhands/basic.json", "openhands", 2, {}, []),
    ("openhands/basic_gui_mode.json", "openhands", 4, {}, []),
    ("openhands/wrong_initial_state.json", "openhands", 4, {}, []),
    ("mini-swe-agent/github_issue.traj.json", "mini-swe-agent", 10, {}, []),
    # a tau2-bench results file: a refused flight lookup asked again with the missing date
    ("tau2-bench/grok3_airline_flight_not_found.json", "openai", 3, {}, []),
    # the simulated user's own phone calls are not the agent's
    ("tau2-bench/grok3_telecom_user_device_calls.json", "openai", 1, {}, []),
]


@pytest.mark.parametrize(("name", "fmt", "tool_calls", "decisions", "expected_halts"), STEADY)
def test_real_file_gets_its_decision(
    name: str,
    fmt: str,
    tool_calls: int,
    decisions: dict[str, int],
    expected_halts: list[tuple[Any, ...]],
    unattended: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    document = replay(REAL / name, unattended, capsys)
    assert document["inputs"][0]["format"] == fmt
    assert document["errors"] == []  # every call of these files was answered
    session = only_session(document)
    assert session["tool_calls"] == tool_calls
    assert session["decisions"] == decisions
    assert halts(session) == expected_halts


TAU = REAL / "tau-bench" / "tau_bench_gpt4o_airline.json"
TAU_DECISIONS = {
    "task-0-trial-0": {},
    # get_reservation_details failing three times on reservation ids the user keeps guessing
    "task-3-trial-0": {"same_tool_failure_warn": 1},
    "task-4-trial-0": {},
    # book_reservation retried unchanged after 'payment amount does not add up', then a human handover
    "task-8-trial-1": {"exact_failure_warn": 2},
    # the failing book_reservation between think calls: the call continuing the cycle is rejected, and
    # the model does not send it again
    "task-9-trial-2": {"cycle_reject": 1, "cycle_warn": 2, "exact_failure_warn": 2},
    # the same retry, until the model fixes the amount and the booking succeeds (the retries are
    # exact_failure's; same_tool_failure does not count a call failing again unchanged)
    "task-11-trial-2": {"exact_failure_warn": 2},
}


def test_tau_bench_healthy_tasks_are_not_stopped(
    unattended: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = replay(TAU, unattended, capsys)
    assert document["errors"] == []
    sessions = {s["session_id"]: s for s in document["sessions"]}
    assert {sid: s["decisions"] for sid, s in sessions.items()} == TAU_DECISIONS
    assert [s["tool_calls"] for s in sessions.values()] == [8, 20, 6, 16, 23, 14]
    for session in sessions.values():
        if session["session_id"] != "task-9-trial-2":
            assert session["halts"] == []


def test_tau_bench_book_reservation_loop_is_refused(
    unattended: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """gpt-4o retries a failing book_reservation between think calls: the call continuing the cycle is
    rejected (it does not run, the turn goes on); the model's next call breaks the cycle, so nothing
    halts."""
    session = {s["session_id"]: s for s in replay(TAU, unattended, capsys)["sessions"]}["task-9-trial-2"]
    assert halts(session) == []
    assert session["decisions"]["cycle_reject"] == 1
    assert session["decisions"]["cycle_warn"] == 2
    assert session["prevented_calls"] == 1


def test_tau_bench_blocked_call_is_prevented_and_repeated_errors_add_no_new_code(
    unattended: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The refused book_reservation did not run: it is a prevented call. Where the same 'payment amount
    does not add up' error repeats three times or more, the repeated call itself is already warned by
    exact_failure, which comes first: same_error adds nothing here."""
    sessions = {s["session_id"]: s for s in replay(TAU, unattended, capsys)["sessions"]}
    assert sessions["task-9-trial-2"]["prevented_calls"] == 1
    assert {sid: s["decisions"] for sid, s in sessions.items()} == TAU_DECISIONS


SIBLINGS = REAL / "claude-code" / "cc_subagent_sibling_reads.jsonl"


def test_cancelled_siblings_do_not_stop_a_healthy_subagent(
    unattended: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A subagent's batch of Reads: one fails, Claude Code cancels the 7 others. Those never ran; the
    subagent recovers and reads the right files. No halt, no warning."""
    document = replay(SIBLINGS, unattended, capsys)
    session = only_session(document)
    assert session["tool_calls"] == 17
    assert session["halts"] == []
    assert session["decisions"] == {}
    assert session["prevented_calls"] == 0


class _Calls:
    def __init__(self) -> None:
        self.calls: list[ToolCall] = []
        self.errors: list[tuple[int | None, str]] = []

    def describe_input(self, path: str, fmt: str) -> None: ...

    def begin_session(self, key: SessionKey) -> None: ...

    def start_turn(self, key: SessionKey, time: float | None = None) -> None: ...

    def end_session(self, key: SessionKey) -> None: ...

    def tool_call(self, key: SessionKey, call: ToolCall) -> None:
        self.calls.append(call)

    def error(self, path: str, line: int | None, reason: str) -> None:
        self.errors.append((line, reason))


def read_calls(path: Path) -> _Calls:
    sink = _Calls()
    replay_inputs([str(path)], "auto", sink)
    return sink


def test_real_sibling_cancellations_are_read_as_cancelled() -> None:
    sink = read_calls(SIBLINGS)
    cancelled = [(c.tool_name, c.line) for c in sink.calls if c.cancelled]
    assert cancelled == [("Read", line) for line in (9, 11, 13, 15, 17, 19, 21)]
    failed = [c for c in sink.calls if c.failed and not c.cancelled]
    assert [(c.tool_name, c.result) for c in failed] == [
        ("Read", "<tool_use_error>File does not exist.</tool_use_error>")
    ]
    bash = read_calls(REAL / "claude-code" / "cc_sibling_bash_rerun.jsonl")
    assert [(c.tool_name, c.cancelled, c.failed) for c in bash.calls] == [
        ("Bash", False, True),
        ("Bash", True, True),
        ("Bash", False, False),
        ("Grep", False, False),
    ]


def test_real_user_rejections_are_refusals() -> None:
    taskoutput = read_calls(REAL / "claude-code" / "cc_rejected_taskoutput.jsonl")
    assert [(c.tool_name, c.refusal) for c in taskoutput.calls if c.refusal] == [
        ("TaskOutput", "user_rejected")
    ]
    short = read_calls(REAL / "claude-code" / "cc_short_rejections.jsonl")
    assert [(c.tool_name, c.refusal) for c in short.calls] == [
        ("Bash", "user_rejected"),
        ("Glob", "user_rejected"),
    ]


def test_real_templates_quoted_inside_tool_output_stay_tool_output() -> None:
    sink = read_calls(REAL / "claude-code" / "cc_templates_inside_output.jsonl")
    assert len(sink.calls) == 2
    quoting = sink.calls[1].result
    assert "The user doesn't want to proceed with this tool use." in quoting
    assert "[Request interrupted by user for tool use]" in quoting
    for call in sink.calls:
        assert (call.cancelled, call.refusal, call.failed) == (False, None, False)


def test_real_swe_agent_steps_are_its_commands_or_the_shell() -> None:
    """gpt-4 on pydicom without function calls: SWE-agent's own commands keep their names, and
    `python reproduce_bug.py` and `rm reproduce_bug.py` are the one bash shell they ran in."""
    sink = read_calls(REAL / "swe-agent" / "pydicom__pydicom-1458.traj")
    assert [c.tool_name for c in sink.calls] == [
        "create", "edit", "bash", "find_file", "open", "edit", "edit", "edit", "edit", "bash", "bash", "submit",
    ]  # fmt: skip
    assert sink.calls[2].args == {"command": "python reproduce_bug.py\n"}


# --- every call counted ---------------------------------------------------------------------------


def _raw_call_count(path: Path) -> int:
    """Tool calls counted straight from the file, independently of the readers."""
    if path.suffix == ".jsonl":
        ids = set()
        for line in path.read_text().splitlines():
            content = json.loads(line).get("message", {}).get("content")
            for block in content if isinstance(content, list) else ():
                if block.get("type") == "tool_use":
                    ids.add(block["id"])
        return len(ids)
    document = json.loads(path.read_text())
    if path.parent.name == "openhands":
        return sum(1 for e in document if "action" in e and isinstance(e.get("tool_call_metadata"), dict))
    if path.parent.name == "swe-agent":
        steps = document.get("trajectory")
        if steps:
            return len(steps)
        return sum(len(h.get("tool_calls") or []) for h in document["history"] if not h.get("is_demo"))
    if path.parent.name == "mini-swe-agent":
        return sum(
            len(re.findall("```mswea_bash_command", m["content"]))
            for m in document
            if m["role"] == "assistant"
        )
    if path.parent.name == "tau2-bench":  # the agent's calls, not the simulated user's
        messages = [m for sim in document["simulations"] for m in sim["messages"]]
        return sum(len(m.get("tool_calls") or []) for m in messages if m["role"] == "assistant")
    return sum(len(m.get("tool_calls") or []) for record in document for m in record["traj"])


@pytest.mark.parametrize(
    "path",
    sorted(p for p in REAL.rglob("*") if p.is_file() and p.name not in ("provenance.yaml", "LICENSE")),
    ids=lambda p: f"{p.parent.name}/{p.name}",
)
def test_every_tool_call_of_a_real_file_is_counted(
    path: Path, unattended: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = replay(path, unattended, capsys)
    assert document["errors"] == []
    assert document["totals"]["tool_calls"] == _raw_call_count(path) > 0


def test_every_real_file_has_its_provenance() -> None:
    for source in sorted(p for p in REAL.iterdir() if p.is_dir()):
        entries = yaml.safe_load((source / "provenance.yaml").read_text())
        listed = {entry["file"] for entry in entries}
        present = {p.name for p in source.iterdir() if p.name not in ("provenance.yaml", "LICENSE")}
        assert listed == present, source.name
        for entry in entries:
            assert re.fullmatch("[0-9a-f]{40}", entry["commit"])
            assert entry["repository"].startswith("https://github.com/")
            assert entry["licence"].startswith("MIT")
            assert entry["path"] and entry["cut"]
        assert (source / "LICENSE").read_text().strip()
