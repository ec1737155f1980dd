"""Provenance: a refusal is decided only from ``refusal=``, never from result text."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from otelguard import Guard, GuardConfig
from otelguard.testing import RecordingObserver, codes, run_script

KEY = "test-signature-key"
_unique = itertools.count()

REFUSAL_TEXTS = [
    "permission denied",
    "Error: Permission denied (publickey).",
    '{"error": "permission_denied", "message": "sandbox refused the command"}',
    "bash: /etc/shadow: Permission denied",
    "Error: operation not permitted; the sandbox denied this action",
    "This tool is not enabled: tool_not_enabled",
]


def make_guard(**config: Any) -> tuple[Guard, RecordingObserver]:
    recorder = RecordingObserver()
    guard = Guard(
        GuardConfig.from_mapping({"signature_key": KEY, "hard_stop": True, **config}), observers=(recorder,)
    )
    guard.start_turn()
    return guard, recorder


def fresh_args() -> dict[str, str]:
    return {"path": f"/srv/file-{next(_unique)}"}


@pytest.mark.parametrize("failed", [True, None])
def test_failed_result_saying_permission_denied_is_a_failure_not_a_refusal(failed: bool | None) -> None:
    """A tool that prints "permission denied" and fails is a failure, not a refusal."""
    guard, recorder = make_guard()
    script = [("write_file", fresh_args(), f"Error: {REFUSAL_TEXTS[i % 6]}", failed) for i in range(7)]
    steps = run_script(guard, script)
    assert set(recorder.outcomes) == {"failed"}
    assert not [c for c in codes(steps) if c.startswith("refusal")]
    assert codes(steps)[2:] == ["same_tool_failure_warn"] * 5


@pytest.mark.parametrize("text", REFUSAL_TEXTS)
def test_ok_result_with_refusal_words_is_ok(text: str) -> None:
    """Result text never makes a call refused: with failed=False it is ok."""
    guard, recorder = make_guard()
    run_script(guard, [("read_file", fresh_args(), text, False)])
    assert recorder.outcomes == ["ok"]
    assert recorder.calls[0].refusal is None


def test_refusal_argument_makes_the_outcome_refused_whatever_failed_says() -> None:
    """When refusal is set the outcome is refused, whatever failed says (True, False or None)."""
    guard, recorder = make_guard()
    run_script(
        guard,
        [
            ("write_file", fresh_args(), "ok", False, "permission_required"),
            ("write_file", fresh_args(), "Error: x", True, "permission_required"),
            ("write_file", fresh_args(), None, None, "sandbox_denied"),
        ],
    )
    assert recorder.outcomes == ["refused"] * 3
    assert [e.refusal for e in recorder.calls] == [
        "permission_required",
        "permission_required",
        "sandbox_denied",
    ]


def test_refusals_with_varying_text_and_args_form_one_streak() -> None:
    """Refusals of one (tool, category) form one streak whatever the args or refusal text."""
    guard, _ = make_guard()
    script = [
        ("terminal", {"command": f"cmd {i}"}, REFUSAL_TEXTS[i], None, "sandbox_denied") for i in range(6)
    ]
    steps = run_script(guard, script)
    assert codes(steps) == ["allow"] + ["refusal_warn"] * 4 + ["refusal_halt"]
    assert [s.decision.count for s in steps[1:]] == [2, 3, 4, 5, 6]


def test_refusal_halts_even_failure_tolerant_tools() -> None:
    """failure_tolerant exempts a tool from same_tool_failure only: repeated refusals still halt it."""
    guard, _ = make_guard()
    steps = run_script(
        guard, [("terminal", {"command": f"c{i}"}, "no", None, "permission_denied") for i in range(6)]
    )
    assert steps[-1].decision.code == "refusal_halt"


def test_refusal_counts_for_the_content_blind_counter() -> None:
    """A refusal counts as a failure for same_tool_failure: 4 failures + 4 refusals halt at 8."""
    guard, _ = make_guard()
    categories = ["permission_denied", "permission_required", "sandbox_denied", "tool_not_enabled"]
    script: list[tuple[Any, ...]] = []
    for category in categories:
        script.append(("web_fetch", fresh_args(), "Error: 500", True))
        script.append(("web_fetch", fresh_args(), "nope", None, category))
    steps = run_script(guard, script)
    assert codes(steps)[2:7] == ["same_tool_failure_warn"] * 5
    assert steps[-1].decision.code == "same_tool_failure_halt"
    assert steps[-1].decision.count == 8


def test_refusals_alone_trip_same_tool_failure_warn() -> None:
    """Refusals of different categories still add up for the content-blind counter."""
    guard, _ = make_guard()
    categories = ["permission_denied", "sandbox_denied", "tool_not_enabled"]
    steps = run_script(guard, [("web_fetch", fresh_args(), "no", None, c) for c in categories])
    assert codes(steps) == ["allow", "allow", "same_tool_failure_warn"]


def test_a_refusal_resets_nothing_a_success_would() -> None:
    """A refused call is not a success: it does not reset exact_failure or no_progress of its tool."""
    guard, _ = make_guard()
    x = {"id": 1}
    steps = run_script(
        guard, [("flaky_api", x, "Error", True)] * 3 + [("flaky_api", x, "no", None, "permission_denied")]
        + [("flaky_api", x, "Error", True)]
    )  # fmt: skip
    assert steps[-1].decision.code == "exact_failure_warn"


def test_refused_write_is_not_a_fix() -> None:
    """A refused write call is not a successful write: it does not reset exact_failure."""
    guard, _ = make_guard()
    x = {"command": "pytest"}
    steps = run_script(
        guard, [("run_tests", x, "1 failed", True)] * 4 + [("patch", {"p": 1}, "no", None, "permission_denied")]
        + [("run_tests", x, "1 failed", True)]
    )  # fmt: skip
    assert steps[-1].decision.code == "exact_failure_warn"
    assert guard.before_call("run_tests", x).code == "exact_failure_reject"


def test_refusal_category_is_reported_to_observers() -> None:
    """Observers get the host's refusal category."""
    guard, recorder = make_guard()
    run_script(guard, [("Bash", {"command": "rm x"}, "no", None, "permission_required")])
    assert recorder.calls[0].outcome == "refused"
    assert recorder.calls[0].refusal == "permission_required"
