"""The loop detectors (docs/detectors.md): thresholds, reset rules, counting, precedence, halted turns."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any, Final

import pytest

from otelguard import Decision, Guard, GuardConfig
from otelguard.core.decisions import Signature
from otelguard.core.detectors import TurnDetectors
from otelguard.testing import ScriptStep, codes, run_script

KEY = "test-signature-key"
DEFAULT_REJECTS = 7  # rejects_before_stop's default, written out: a change of the default fails here
# For tests of what comes after a stop (precedence, halted turns, lapses): one reject reaches it.
ONE_REJECT: Final = {"rejects_before_stop": 1}
_unique = itertools.count()


def make_guard(*, hard_stop: bool | None = True, **config: Any) -> Guard:
    """A guard in a started turn; hard_stop on unless told otherwise."""
    guard = Guard(GuardConfig.from_mapping({"signature_key": KEY, "hard_stop": hard_stop, **config}))
    guard.start_turn()
    return guard


def fresh() -> str:
    return f"v{next(_unique)}"


def ok(tool: str, args: Any = None, result: Any = None) -> tuple[Any, ...]:
    """A successful call; a fresh result unless one is given."""
    return (
        tool,
        args if args is not None else {"k": fresh()},
        result if result is not None else fresh(),
        False,
    )


def fail(tool: str, args: Any = None, text: str | None = None) -> tuple[Any, ...]:
    """A failed call; fresh arguments and a fresh error text unless given (the same error text
    again and again is what same_error counts)."""
    return (tool, args if args is not None else {"k": fresh()}, text or f"Error: boom {fresh()}", True)


def refuse(tool: str, args: Any = None, category: str = "permission_denied") -> tuple[Any, ...]:
    """A call the host's policy gate refused; fresh arguments and refusal text unless given."""
    return (tool, args if args is not None else {"k": fresh()}, f"denied {fresh()}", None, category)


def last(steps: list[ScriptStep]) -> Decision:
    return steps[-1].decision


def no_stops(steps: Iterable[ScriptStep]) -> bool:
    return all(s.before.allows_execution and not s.decision.should_halt for s in steps)


# -- exact_failure -------------------------------------------------------------------------------


def test_exact_failure_warns_at_the_second_consecutive_failure() -> None:
    """exact_failure warns (after_call) at 2 consecutive failures of the same call."""
    steps = run_script(make_guard(), [fail("flaky_api", {"id": 1})] * 2)
    assert codes(steps) == ["allow", "exact_failure_warn"]
    assert last(steps).action == "warn"
    assert last(steps).count == 2


def test_exact_failure_warns_on_every_call_of_the_streak() -> None:
    """From count 2 on, every after_call of the streak warns, with the running count."""
    steps = run_script(make_guard(), [fail("flaky_api", {"id": 1})] * 5)
    assert codes(steps) == ["allow"] + ["exact_failure_warn"] * 4
    assert [s.decision.count for s in steps[1:]] == [2, 3, 4, 5]


def test_exact_failure_blocks_the_next_before_call_after_five() -> None:
    """After 5 consecutive failures the NEXT before_call of that signature is rejected
    (exact_failure_reject: it does not run, the turn goes on), and again each time it is sent, seven
    times in all (rejects_before_stop's default); sent once more, it is block (exact_failure_block)."""
    guard = make_guard()
    steps = run_script(guard, [fail("flaky_api", {"id": 1})] * 5)
    assert all(s.ran for s in steps), "the fifth failing call itself is not refused"
    assert last(steps).action == "warn"
    for _ in range(DEFAULT_REJECTS):
        reject = guard.before_call("flaky_api", {"id": 1})
        assert (reject.action, reject.code, reject.count, reject.limit) == (
            "reject",
            "exact_failure_reject",
            5,
            5,
        )
        assert not reject.allows_execution and not reject.should_halt
        assert guard.halt_decision is None
    decision = guard.before_call("flaky_api", {"id": 1})
    assert (decision.action, decision.code) == ("block", "exact_failure_block")
    assert (decision.count, decision.limit) == (5, 5)
    assert decision.should_halt
    assert guard.halt_decision == decision


def test_exact_failure_four_failures_do_not_block() -> None:
    """Four failures are below the stop threshold: the next call runs."""
    guard = make_guard()
    run_script(guard, [fail("flaky_api", {"id": 1})] * 4)
    assert guard.before_call("flaky_api", {"id": 1}).allows_execution


def test_exact_failure_block_is_per_signature() -> None:
    """The block is for that signature: other arguments of the same tool still run."""
    guard = make_guard()
    run_script(guard, [fail("flaky_api", {"id": 1})] * 5)
    assert guard.before_call("flaky_api", {"id": 2}).allows_execution
    guard.after_call("flaky_api", {"id": 2}, "fine", failed=False)
    for _ in range(DEFAULT_REJECTS):
        assert guard.before_call("flaky_api", {"id": 1}).code == "exact_failure_reject"
    assert guard.before_call("flaky_api", {"id": 1}).code == "exact_failure_block"


def test_exact_failure_reset_by_success_of_that_signature() -> None:
    """A success of that signature resets the count."""
    guard = make_guard()
    x = {"id": 1}
    steps = run_script(guard, [fail("flaky_api", x)] * 4 + [ok("flaky_api", x)] + [fail("flaky_api", x)] * 4)
    assert codes(steps)[4:6] == ["allow", "allow"]
    assert guard.before_call("flaky_api", x).allows_execution


def test_exact_failure_reset_by_any_successful_write() -> None:
    """Any successful write call resets it (a fix between two runs of a test is progress)."""
    guard = make_guard()
    test_run = {"command": "make check"}
    steps = run_script(
        guard, [fail("run_tests", test_run)] * 4 + [ok("write_file")] + [fail("run_tests", test_run)]
    )
    assert last(steps).code != "exact_failure_warn"
    run_script(guard, [fail("run_tests", test_run)] * 3)
    assert guard.before_call("run_tests", test_run).code != "exact_failure_block"


def test_exact_failure_not_reset_by_a_failed_write_or_a_read() -> None:
    """A failed write or a successful read is not a fix: the count goes on."""
    guard = make_guard()
    x = {"id": 1}
    steps = run_script(
        guard, [fail("flaky_api", x)] * 3 + [fail("write_file"), ok("read_file")] + [fail("flaky_api", x)] * 2
    )
    assert last(steps).code == "exact_failure_warn"
    assert last(steps).count == 5
    assert guard.before_call("flaky_api", x).code == "exact_failure_reject"


def test_fix_retest_loop_is_never_blocked() -> None:
    """A failing terminal test run, a successful patch, the test again, … is never blocked or halted."""
    guard = make_guard(mode="unattended", hard_stop=None)
    test_run = {"command": "pytest -x tests/"}
    script = []
    for i in range(25):
        script.append(("terminal", test_run, f"FAILED test_{i}\n1 failed", True))
        script.append(("patch", {"path": "src/app.py", "diff": f"fix attempt {i}"}, "patched", False))
    steps = run_script(guard, script)
    assert no_stops(steps)
    assert "exact_failure_warn" not in codes(steps)
    assert guard.halt_decision is None


def test_exact_failure_without_hard_stop_never_blocks() -> None:
    """With hard_stop off exact_failure only warns, however long the streak."""
    guard = make_guard(hard_stop=False)
    steps = run_script(guard, [fail("flaky_api", {"id": 1})] * 12)
    assert no_stops(steps)
    assert codes(steps)[1:] == ["exact_failure_warn"] * 11


# -- same_tool_failure (content-blind) -----------------------------------------------------------


def test_same_tool_failure_warns_at_three() -> None:
    """same_tool_failure warns at 3 failures of one tool, whatever the args or error."""
    steps = run_script(make_guard(), [fail("web_fetch", text=f"Error {i}") for i in range(3)])
    assert codes(steps) == ["allow", "allow", "same_tool_failure_warn"]
    assert last(steps).count == 3


def test_content_blind_bound_halts_at_eight() -> None:
    """5 errors of kind A, 5 of B, 2 of C with varying args trip same_tool_failure halt at the 8th failure."""
    guard = make_guard()
    kinds = ["Error: timeout"] * 5 + ["Error: 404 not found"] * 5 + ["Error: bad gateway"] * 2
    steps = run_script(guard, [fail("web_fetch", text=kind) for kind in kinds])
    eighth = steps[7].decision
    assert (eighth.action, eighth.code) == ("halt", "same_tool_failure_halt")
    assert (eighth.count, eighth.limit) == (8, 8)
    assert codes(steps)[2:7] == ["same_tool_failure_warn"] * 5
    assert guard.halt_decision == eighth
    assert [s.decision.code for s in steps[8:]] == ["turn_halted"] * 4


def test_same_tool_failure_not_cleared_by_another_tools_success() -> None:
    """Another tool succeeding clears nothing."""
    guard = make_guard()
    steps = run_script(
        guard,
        [fail("web_fetch", text="Error: 404") for _ in range(4)]
        + [ok("read_file"), ok("write_file")]
        + [fail("web_fetch", text="Error: 404") for _ in range(4)],
    )
    assert last(steps).code == "same_tool_failure_halt"


def test_same_tool_failure_reset_by_success_of_the_same_tool() -> None:
    """A success of the same tool (any args) resets the count."""
    guard = make_guard()
    steps = run_script(
        guard,
        [fail("web_fetch") for _ in range(7)] + [ok("web_fetch")] + [fail("web_fetch") for _ in range(7)],
    )
    assert no_stops(steps)
    assert last(steps).code == "same_tool_failure_warn"
    assert last(steps).count == 7


@pytest.mark.parametrize("tool", ["terminal", "execute_code", "process"])
def test_failure_tolerant_tools_never_halt_on_same_tool_failure(tool: str) -> None:
    """Tools in failure_tolerant (default terminal, execute_code, process) never halt there; they still
    warn, from 3 failures, a shell (terminal, execute_code) from 4."""
    steps = run_script(make_guard(), [fail(tool) for _ in range(20)])
    assert no_stops(steps)
    quiet = 3 if tool in ("terminal", "execute_code") else 2
    assert codes(steps) == ["allow"] * quiet + ["same_tool_failure_warn"] * (20 - quiet)


def test_configured_failure_tolerant_tool_never_halts() -> None:
    """tools.failure_tolerant extends the list."""
    steps = run_script(
        make_guard(tools={"failure_tolerant": ["flaky_api"]}), [fail("flaky_api") for _ in range(12)]
    )
    assert no_stops(steps)


def test_same_tool_failure_without_hard_stop_only_warns() -> None:
    """With hard_stop off the 8th failure warns instead of halting."""
    steps = run_script(make_guard(hard_stop=False), [fail("web_fetch") for _ in range(10)])
    assert no_stops(steps)
    assert codes(steps)[7] == "same_tool_failure_warn"
    assert "same_tool_failure_reject" not in codes(steps)


def edits_rejected(errors: list[str]) -> list[tuple[Any, ...]]:
    """Different edits of one file, each refused with the given error (a linter's findings)."""
    return [fail("edit", {"start": i, "text": fresh()}, text) for i, text in enumerate(errors)]


def test_same_tool_failure_with_new_errors_is_rejected_before_it_halts() -> None:
    """8 failures of one tool, each with a new error: the 8th only warns, the tool's next call is
    rejected (it does not run, the turn goes on), and the tool failing once more halts the turn."""
    guard = make_guard()
    steps = run_script(guard, edits_rejected([f"Error: E999 at line {i}" for i in range(10)]))
    assert codes(steps) == ["allow"] * 2 + ["same_tool_failure_warn"] * 6 + [
        "same_tool_failure_reject",
        "same_tool_failure_halt",
    ]
    reject, halt = steps[8].decision, steps[9].decision
    assert (reject.action, reject.count, reject.limit) == ("reject", 8, 8)
    assert not steps[8].ran and reject.synthetic_result()
    assert (halt.action, halt.count, halt.limit) == ("halt", 9, 8)
    assert guard.halt_decision == halt


def test_same_tool_failure_reject_lands_on_the_tools_next_call() -> None:
    """Calls of other tools in between run; the reject is the stopped tool's, whenever it comes."""
    guard = make_guard()
    steps = run_script(
        guard,
        [
            *edits_rejected([f"Error: new {i}" for i in range(8)]),
            ok("read_file"),
            fail("web_fetch"),
            *edits_rejected(["Error: new 8"]),
        ],
    )
    assert [s.decision.code for s in steps[8:]] == ["allow", "allow", "same_tool_failure_reject"]


@pytest.mark.parametrize(
    ("new_errors", "code"), [(4, "same_tool_failure_halt"), (5, "same_tool_failure_warn")]
)
def test_same_tool_failure_halts_at_once_when_its_errors_repeat(new_errors: int, code: str) -> None:
    """At the stop, a tool whose failures were new errors at most half the time (4 of 8: the same
    answers whatever it is sent) halts at once; one more new error (5 of 8) and it is refused first."""
    errors = [f"Error: E{i % new_errors}" for i in range(8)]
    steps = run_script(make_guard(), edits_rejected(errors) + edits_rejected(["Error: E0"]))
    assert steps[7].decision.code == code
    assert steps[8].decision.code == ("turn_halted" if code.endswith("halt") else "same_tool_failure_reject")


def test_same_tool_failure_failures_without_an_error_are_new_errors() -> None:
    """A failure with nothing to compare (no result) is a new error each time, never the same one."""
    script = [("web_fetch", {"k": fresh()}, None, True) for _ in range(8)]
    steps = run_script(make_guard(), [*script, ("web_fetch", {"k": 1}, None, True)])
    assert codes(steps)[7:] == ["same_tool_failure_warn", "same_tool_failure_reject"]


def test_same_tool_failure_refusals_are_no_new_errors() -> None:
    """A refusal counts for the tool, but a gate saying no is no new error: 3 new errors and 5
    refusals halt at once at the 8th."""
    categories = ["permission_denied", "sandbox_denied", "tool_not_enabled", "user_rejected", "hook_denied"]
    script = edits_rejected([f"Error: new {i}" for i in range(3)]) + [
        refuse("edit", category=c) for c in categories
    ]
    steps = run_script(make_guard(), script)
    assert (steps[7].decision.code, steps[7].decision.count) == ("same_tool_failure_halt", 8)


def test_same_tool_failure_success_after_its_reject_resets_the_count() -> None:
    """After the reject, the tool's next call succeeding ends the count: it starts again from 1, and
    the reject is not given again until a new count reaches the stop."""
    guard = make_guard()
    script = (
        edits_rejected([f"Error: new {i}" for i in range(8)])
        + edits_rejected(["Error: new 8"])  # rejected
        + [ok("edit")]
        + edits_rejected([f"Error: again {i}" for i in range(9)])
    )
    steps = run_script(guard, script)
    assert [s.decision.code for s in steps[8:10]] == ["same_tool_failure_reject", "allow"]
    after = codes(steps[10:])
    assert after == ["allow"] * 2 + ["same_tool_failure_warn"] * 6 + ["same_tool_failure_reject"]
    assert guard.halt_decision is None


@pytest.mark.parametrize("rejects", [1, 2, DEFAULT_REJECTS])
def test_same_tool_failure_rejects_before_stop(rejects: int) -> None:
    """rejects_before_stop: 0 halts at the 8th failure as before; any other value gives the tool one
    reject (it refuses every call of the tool, not one call the model keeps sending)."""
    errors = [f"Error: new {i}" for i in range(11)]
    at_once = run_script(make_guard(rejects_before_stop=0), edits_rejected(errors))
    assert codes(at_once)[7] == "same_tool_failure_halt"
    once = codes(run_script(make_guard(rejects_before_stop=rejects), edits_rejected(errors)))
    assert once[7:10] == ["same_tool_failure_warn", "same_tool_failure_reject", "same_tool_failure_halt"]


def test_same_tool_failure_errors_kept_per_tool_are_bounded() -> None:
    """However many new errors a tool gives, its record keeps only enough of them to tell whether
    they are over half of the stop (8 // 2 + 1 = 5)."""
    detectors = TurnDetectors(GuardConfig.from_mapping({"signature_key": KEY, "hard_stop": False}))
    for i in range(500):
        sig = Signature("web_fetch", f"h{i}")
        detectors.record_after(sig, detectors.state(sig), "unknown", False, "failed", None, False, i)
    assert detectors.tool_failures["web_fetch"] == 500
    assert detectors.tool_errors["web_fetch"] == (0, 1, 2, 3, 4)


def test_same_tool_failure_reject_is_cleared_by_start_turn() -> None:
    """The reject waiting for the tool's next call belongs to the turn."""
    guard = make_guard()
    run_script(guard, edits_rejected([f"Error: new {i}" for i in range(8)]))
    guard.start_turn()
    assert guard.before_call("edit", {"start": 1}).code == "allow"


# -- refusal -------------------------------------------------------------------------------------


def test_refusal_warns_at_two() -> None:
    """refusal warns at 2 refusals of one (tool, category), whatever the args or refusal text."""
    steps = run_script(make_guard(), [refuse("write_file"), refuse("write_file")])
    assert codes(steps) == ["allow", "refusal_warn"]
    assert last(steps).count == 2


def test_refusal_halts_at_six() -> None:
    """refusal halts from after_call at 6."""
    guard = make_guard()
    steps = run_script(guard, [refuse("write_file") for _ in range(6)])
    assert codes(steps) == ["allow"] + ["refusal_warn"] * 4 + ["refusal_halt"]
    assert (last(steps).count, last(steps).limit) == (6, 6)
    assert guard.halt_decision == last(steps)


def test_refusal_categories_are_separate_streaks() -> None:
    """The refusal detector is keyed on (tool, category)."""
    steps = run_script(
        make_guard(),
        [refuse("write_file", category="permission_denied"), refuse("write_file", category="sandbox_denied")],
    )
    assert "refusal_warn" not in codes(steps)


def test_refusal_reset_by_success_of_the_same_tool() -> None:
    """A success of the same tool resets the refusal count."""
    steps = run_script(
        make_guard(),
        [refuse("write_file") for _ in range(5)]
        + [ok("write_file")]
        + [refuse("write_file") for _ in range(5)],
    )
    assert no_stops(steps)
    assert last(steps).code == "refusal_warn"
    assert last(steps).count == 5


def test_refusal_not_reset_by_another_tools_success() -> None:
    """Only a success of the same tool resets refusals."""
    steps = run_script(
        make_guard(), [refuse("write_file") for _ in range(5)] + [ok("read_file")] + [refuse("write_file")]
    )
    assert last(steps).code == "refusal_halt"


def test_refusal_without_hard_stop_only_warns() -> None:
    """With hard_stop off the 6th refusal warns."""
    steps = run_script(make_guard(hard_stop=False), [refuse("write_file") for _ in range(7)])
    assert no_stops(steps)
    assert codes(steps)[5] == "refusal_warn"


# -- no_progress ---------------------------------------------------------------------------------


def test_no_progress_counts_include_the_first_call() -> None:
    """The second identical read result makes no_progress count 2 and warns."""
    steps = run_script(make_guard(), [ok("read_file", {"path": "a"}, "same")] * 2)
    assert codes(steps) == ["allow", "no_progress_warn"]
    assert last(steps).count == 2


def test_no_progress_blocks_next_before_call_at_five() -> None:
    """At 5 identical results the NEXT before_call of that read call is rejected (no_progress_reject),
    seven times if the model keeps sending it; once more is block (no_progress_block)."""
    guard = make_guard()
    steps = run_script(guard, [ok("read_file", {"path": "a"}, "same")] * 5)
    assert codes(steps) == ["allow"] + ["no_progress_warn"] * 4
    for _ in range(DEFAULT_REJECTS):
        reject = guard.before_call("read_file", {"path": "a"})
        assert (reject.action, reject.code) == ("reject", "no_progress_reject")
    decision = guard.before_call("read_file", {"path": "a"})
    assert (decision.action, decision.code, decision.count, decision.limit) == (
        "block",
        "no_progress_block",
        5,
        5,
    )


def test_no_progress_reset_by_a_different_result() -> None:
    """A different result resets no_progress."""
    guard = make_guard()
    a = {"path": "a"}
    steps = run_script(guard, [ok("read_file", a, "same")] * 4 + [ok("read_file", a, "changed")])
    assert last(steps).code == "allow"
    assert guard.before_call("read_file", a).allows_execution


def test_no_progress_reset_by_a_failure_of_that_signature() -> None:
    """A failure of that signature resets no_progress."""
    guard = make_guard()
    a = {"path": "a"}
    steps = run_script(
        guard, [ok("read_file", a, "same")] * 4 + [fail("read_file", a)] + [ok("read_file", a, "same")] * 4
    )
    assert codes(steps)[5] == "allow"
    assert guard.before_call("read_file", a).allows_execution


def test_no_progress_only_watches_read_tools() -> None:
    """no_progress is keyed on signatures of read tools: write and unknown tools never get it."""
    for tool in ("write_file", "custom_tool"):
        steps = run_script(make_guard(hard_stop=False), [ok(tool, {"x": 1}, "same")] * 6)
        assert not [c for c in codes(steps) if c.startswith("no_progress")]


def test_no_progress_without_hard_stop_never_blocks() -> None:
    """With hard_stop off no_progress only warns."""
    steps = run_script(make_guard(hard_stop=False), [ok("read_file", {"path": "a"}, "same")] * 8)
    assert no_stops(steps)


def test_same_result_from_different_signatures_is_not_no_progress() -> None:
    """no_progress is per signature: different reads with equal results do not count."""
    steps = run_script(make_guard(), [ok("read_file", {"path": p}, "same") for p in "abcdef"])
    assert "no_progress_warn" not in codes(steps)


# -- identical_call ------------------------------------------------------------------------------


@pytest.mark.parametrize("tool", ["write_file", "custom_tool"])
def test_identical_call_warns_at_three(tool: str) -> None:
    """identical_call (write/unknown tools): the same call with the same result back to back warns at 3."""
    steps = run_script(make_guard(), [ok(tool, {"x": 1}, "done")] * 3)
    assert codes(steps) == ["allow", "allow", "identical_call_warn"]
    assert last(steps).count == 3


def test_identical_call_halts_at_five() -> None:
    """identical_call: the call that would be the 5th is rejected first, seven times if the model keeps
    sending it; sent once more, it runs and halts from after_call at 5."""
    guard = make_guard()
    steps = run_script(guard, [ok("write_file", {"x": 1}, "done")] * (5 + DEFAULT_REJECTS))
    rejected = steps[4:-1]
    assert [s.before.code for s in rejected] == ["identical_call_reject"] * DEFAULT_REJECTS
    assert all((s.before.count, s.before.limit, s.ran) == (4, 5, False) for s in rejected)
    assert steps[-1].before.code == "allow"
    assert codes(steps)[-1] == "identical_call_halt"
    assert (last(steps).count, last(steps).limit) == (5, 5)
    assert guard.halt_decision == last(steps)


def test_identical_call_warns_once_before_its_refusal() -> None:
    """With hard_stop, the streak is warned at 3 and its next repeat is the one refused: the 4th is
    not warned again (the refusal says why); without a refusal first, or without hard_stop, every
    repeat from the 3rd warns."""
    same = ok("edit", {"command": "edit 10:81"}, "File updated.")
    assert codes(run_script(make_guard(), [same] * (5 + DEFAULT_REJECTS))) == [
        "allow", "allow", "identical_call_warn", "allow", *["identical_call_reject"] * DEFAULT_REJECTS,
        "identical_call_halt",
    ]  # fmt: skip
    assert codes(run_script(make_guard(rejects_before_stop=0), [same] * 5)) == [
        "allow", "allow", "identical_call_warn", "identical_call_warn", "identical_call_halt",
    ]  # fmt: skip
    assert (
        codes(run_script(make_guard(hard_stop=False), [same] * 6))
        == ["allow"] * 2 + ["identical_call_warn"] * 4
    )
    later = {"warn_after": {"identical_call": 4}, "hard_stop_after": {"identical_call": 5}}
    assert codes(run_script(make_guard(**later), [same] * 5))[3:] == [
        "identical_call_warn", "identical_call_reject",
    ]  # fmt: skip


def test_identical_call_counts_only_ok_calls() -> None:
    """Identical failures belong to exact_failure, not identical_call."""
    steps = run_script(make_guard(hard_stop=False), [fail("custom_tool", {"x": 1}, "Error: same")] * 8)
    assert not [c for c in codes(steps) if c.startswith("identical_call")]


def test_identical_call_reset_by_any_different_call_in_between() -> None:
    """Any different call in between resets identical_call."""
    x = ok("write_file", {"x": 1}, "done")
    steps = run_script(make_guard(), [x, x, ok("custom_tool"), x, x])
    assert codes(steps) == ["allow"] * 5


def test_identical_call_needs_the_same_result() -> None:
    """identical_call is keyed on (signature, fingerprint): a different result is a different call."""
    steps = run_script(make_guard(), [ok("write_file", {"x": 1}, r) for r in ["a", "a", "b", "b"]])
    assert codes(steps) == ["allow"] * 4


def test_poll_tools_never_count_as_identical_calls() -> None:
    """poll tools never count for identical_call."""
    steps = run_script(make_guard(), [ok("process", {"action": "poll", "id": 1}, "running")] * 12)
    assert codes(steps) == ["allow"] * 12


def test_identical_call_without_hard_stop_only_warns() -> None:
    """With hard_stop off the 5th identical call warns."""
    steps = run_script(make_guard(hard_stop=False), [ok("write_file", {"x": 1}, "done")] * 7)
    assert no_stops(steps)
    assert codes(steps)[4] == "identical_call_warn"


# -- cycle ---------------------------------------------------------------------------------------


def pattern(*tools: str, repeats: int) -> list[tuple[Any, ...]]:
    """Each tool name is one signature (fixed args); results vary so only the cycle can fire."""
    return [ok(t, {"fixed": t}) for _ in range(repeats) for t in tools]


def test_cycle_warns_at_two_repeats() -> None:
    """A B A B is a count of 2 and warns."""
    steps = run_script(make_guard(), pattern("tool_a", "tool_b", repeats=2))
    assert codes(steps) == ["allow", "allow", "allow", "cycle_warn"]
    assert last(steps).count == 2


def test_cycle_blocks_a_call_continuing_the_pattern_after_three_repeats() -> None:
    """At 3 repeats the next before_call that continues the pattern is block (cycle_block)."""
    guard = make_guard()
    steps = run_script(guard, pattern("tool_a", "tool_b", repeats=3))
    assert last(steps).code == "cycle_warn"
    assert last(steps).count == 3
    reject = guard.before_call("tool_a", {"fixed": "tool_a"})
    assert (reject.action, reject.code, reject.count, reject.limit) == ("reject", "cycle_reject", 3, 3)
    decision = guard.before_call("tool_a", {"fixed": "tool_a"})
    assert (decision.action, decision.code, decision.count, decision.limit) == ("block", "cycle_block", 3, 3)


@pytest.mark.parametrize(
    "breaker", [("tool_c", {"fixed": "tool_c"}), ("tool_b", {"fixed": "tool_b"}), ("tool_a", {"other": 1})]
)
def test_cycle_call_that_breaks_the_pattern_is_allowed(breaker: tuple[str, Any]) -> None:
    """At the stop threshold a call that breaks the pattern is allowed."""
    guard = make_guard()
    run_script(guard, pattern("tool_a", "tool_b", repeats=3))
    assert guard.before_call(*breaker).allows_execution


@pytest.mark.parametrize("tools", [("tool_a", "tool_b", "tool_c"), ("tool_a", "tool_b", "tool_c", "tool_d")])
def test_cycles_of_period_three_and_four(tools: tuple[str, ...]) -> None:
    """Periods of 3 and 4 signatures are cycles too: two full repeats warn."""
    steps = run_script(make_guard(), pattern(*tools, repeats=2))
    assert codes(steps)[-1] == "cycle_warn"
    assert codes(steps)[:-1] == ["allow"] * (len(steps) - 1)


def test_period_with_a_repeated_signature_is_a_cycle() -> None:
    """A period needs at least two distinct signatures: A A B A A B is a cycle."""
    steps = run_script(make_guard(), pattern("tool_a", "tool_a", "tool_b", repeats=2))
    assert codes(steps)[-1] == "cycle_warn"


def test_one_signature_repeated_is_not_a_cycle() -> None:
    """One signature repeated is not a cycle (it is identical_call/no_progress)."""
    guard = make_guard()
    steps = run_script(guard, [ok("custom_tool", {"fixed": 1}) for _ in range(10)])
    assert codes(steps) == ["allow"] * 10
    assert guard.before_call("custom_tool", {"fixed": 1}).allows_execution


def test_period_five_is_not_a_cycle() -> None:
    """Only periods of 2 to 4 are cycles."""
    steps = run_script(make_guard(), pattern("t1", "t2", "t3", "t4", "t5", repeats=3))
    assert not [c for c in codes(steps) if c.startswith("cycle")]


def test_cycle_reset_when_the_pattern_breaks() -> None:
    """The pattern breaking resets the count: A B A B C A B does not warn at the end."""
    steps = run_script(
        make_guard(),
        [
            *pattern("tool_a", "tool_b", repeats=2),
            ok("tool_c", {"fixed": "tool_c"}),
            *pattern("tool_a", "tool_b", repeats=1),
        ],
    )
    assert codes(steps)[3] == "cycle_warn"
    assert codes(steps)[4:] == ["allow"] * 3


def test_poll_tools_never_form_a_cycle() -> None:
    """poll tools never count for cycles."""
    guard = make_guard()
    script = [ok("process", {"id": i % 2}) for i in range(8)]
    steps = run_script(guard, script)
    assert codes(steps) == ["allow"] * 8
    assert guard.before_call("process", {"id": 0}).allows_execution


def test_cycle_without_hard_stop_never_blocks() -> None:
    """With hard_stop off a cycle only warns."""
    guard = make_guard(hard_stop=False)
    steps = run_script(guard, pattern("tool_a", "tool_b", repeats=5))
    assert no_stops(steps)
    assert guard.before_call("tool_a", {"fixed": "tool_a"}).allows_execution


# -- read_only_streak / write_streak ------------------------------------------------------------


def reads(n: int) -> list[tuple[Any, ...]]:
    return [ok("read_file", {"path": fresh()}) for _ in range(n)]


def writes(n: int) -> list[tuple[Any, ...]]:
    return [ok("write_file", {"path": fresh()}) for _ in range(n)]


def test_read_only_streak_warns_at_forty() -> None:
    """40 consecutive read calls with no write call warn (read_only_streak_warn)."""
    steps = run_script(make_guard(), reads(40))
    assert codes(steps) == ["allow"] * 39 + ["read_only_streak_warn"]
    assert last(steps).count == 40


def test_read_only_streak_never_stops() -> None:
    """read_only_streak never stops, even with hard_stop: it keeps warning."""
    steps = run_script(make_guard(), reads(120))
    assert no_stops(steps)
    assert set(codes(steps)[39:]) == {"read_only_streak_warn"}


@pytest.mark.parametrize("write", [ok("write_file"), fail("terminal")], ids=["ok-write", "failed-write"])
def test_read_only_streak_reset_by_a_write_call(write: tuple[Any, ...]) -> None:
    """A write call resets read_only_streak."""
    steps = run_script(make_guard(), [*reads(39), write, *reads(39)])
    assert "read_only_streak_warn" not in codes(steps)


def test_read_only_streak_ignores_poll_and_unknown_calls() -> None:
    """poll and unknown calls neither count nor reset read_only_streak."""
    middle = [ok("process", {"id": fresh()}) for _ in range(5)] + [ok("custom_tool") for _ in range(5)]
    steps = run_script(make_guard(), [*reads(20), *middle, *reads(20)])
    assert codes(steps) == ["allow"] * 49 + ["read_only_streak_warn"]


def test_calls_outside_a_streak_do_not_carry_its_warning() -> None:
    """poll and unknown calls are not part of the read-only streak: their own after_call does not warn for it."""
    guard = make_guard()
    steps = run_script(guard, [*reads(45), ok("process", {"id": fresh()}), ok("custom_tool"), *reads(1)])
    assert codes(steps)[-3:] == ["allow", "allow", "read_only_streak_warn"]
    assert last(steps).count == 46


def test_write_streak_warns_at_thirty() -> None:
    """30 consecutive write calls with no successful read warn (write_streak_warn)."""
    steps = run_script(make_guard(), writes(30))
    assert codes(steps) == ["allow"] * 29 + ["write_streak_warn"]
    assert last(steps).count == 30


def test_write_streak_never_stops() -> None:
    """write_streak never stops."""
    steps = run_script(make_guard(), writes(90))
    assert no_stops(steps)


def test_write_streak_reset_by_a_successful_read() -> None:
    """A successful read call resets write_streak."""
    steps = run_script(make_guard(), [*writes(29), ok("read_file"), *writes(29)])
    assert "write_streak_warn" not in codes(steps)


def test_write_streak_not_reset_by_a_failed_read() -> None:
    """A failed read does not reset write_streak."""
    steps = run_script(make_guard(), [*writes(29), fail("read_file"), *writes(1)])
    assert last(steps).code == "write_streak_warn"
    assert last(steps).count == 30


def test_a_failed_read_does_not_carry_the_write_streak_warning() -> None:
    """A failed read neither counts nor resets write_streak, so its own after_call does not warn for it."""
    steps = run_script(make_guard(), [*writes(31), fail("read_file"), *writes(1)])
    assert codes(steps)[-2:] == ["allow", "write_streak_warn"]
    assert last(steps).count == 32


def test_write_streak_ignores_poll_and_unknown_calls() -> None:
    """poll and unknown calls neither count nor reset write_streak."""
    middle = [ok("process", {"id": fresh()}) for _ in range(5)] + [ok("custom_tool") for _ in range(5)]
    steps = run_script(make_guard(), [*writes(15), *middle, *writes(15)])
    assert codes(steps) == ["allow"] * 39 + ["write_streak_warn"]


@pytest.mark.parametrize("spawn", ["Task", "Agent", "delegate_task", "spawn_agent"])
def test_subagent_spawns_are_not_writes(spawn: str) -> None:
    """A spawn tool is not an edit: 60 spawns with different prompts give no write_streak_warn, and
    spawns between writes neither count nor reset the streak."""
    guard = make_guard(caps={"turn": {"subagents": 0}})
    spawns = [ok(spawn, {"prompt": f"research topic {i}"}) for i in range(60)]
    assert set(codes(run_script(guard, spawns))) == {"allow"}
    steps = run_script(make_guard(caps={"turn": {"subagents": 0}}), [*writes(15), *spawns[:20], *writes(15)])
    assert codes(steps) == ["allow"] * 49 + ["write_streak_warn"]


# -- precedence of after_call decisions ----------------------------------------------------------


def test_exact_failure_warn_before_same_tool_failure_warn() -> None:
    """exact_failure_warn comes before same_tool_failure_warn."""
    steps = run_script(make_guard(), [fail("web_fetch", {"u": 1})] * 3)
    assert last(steps).code == "exact_failure_warn"


def test_refusal_warn_before_same_tool_failure_warn() -> None:
    """refusal_warn comes before same_tool_failure_warn."""
    steps = run_script(make_guard(), [fail("write_file"), refuse("write_file"), refuse("write_file")])
    assert last(steps).code == "refusal_warn"


def test_refusal_halt_before_same_tool_failure_halt() -> None:
    """refusal_halt comes before same_tool_failure_halt when both fire on one call."""
    steps = run_script(
        make_guard(), [fail("write_file"), fail("write_file")] + [refuse("write_file") for _ in range(6)]
    )
    assert last(steps).code == "refusal_halt"


def test_a_call_failing_again_unchanged_is_exact_failures_not_same_tool_failures() -> None:
    """same_tool_failure does not count a call failing again unchanged (exact_failure's loop, which is
    refused before it stops): the repeat warns exact_failure_warn, and the tool's count reaches its
    stop only with the next different call."""
    x = {"u": "same"}
    same = "Error: 503 service unavailable"
    script = [fail("web_fetch", text=same) for _ in range(6)] + [fail("web_fetch", x, same)] * 2
    steps = run_script(make_guard(), [*script, fail("web_fetch", text=same)])
    assert codes(steps)[5:] == [
        "same_tool_failure_warn", "same_tool_failure_warn", "exact_failure_warn", "same_tool_failure_halt",
    ]  # fmt: skip
    assert (last(steps).count, last(steps).limit) == (8, 8)


def test_identical_call_halt_before_write_streak_warn() -> None:
    """identical_call_halt comes before write_streak_warn."""
    guard = make_guard(warn_after={"write_streak": 5}, **ONE_REJECT)
    steps = run_script(guard, [ok("write_file", {"x": 1}, "done")] * 6)
    assert last(steps).code == "identical_call_halt"


def test_identical_call_warn_before_write_streak_warn() -> None:
    """identical_call_warn comes before write_streak_warn."""
    steps = run_script(make_guard(warn_after={"write_streak": 3}), [ok("write_file", {"x": 1}, "done")] * 3)
    assert last(steps).code == "identical_call_warn"


def test_no_progress_warn_before_cycle_warn() -> None:
    """no_progress_warn comes before cycle_warn."""
    script = [ok("read_file", {"path": p}, f"content {p}") for p in "abab"]
    steps = run_script(make_guard(), script)
    assert last(steps).code == "no_progress_warn"


def test_no_progress_warn_before_read_only_streak_warn() -> None:
    """no_progress_warn comes before read_only_streak_warn."""
    same = ok("read_file", {"path": "x"}, "same")
    steps = run_script(make_guard(), [*reads(38), same, same])
    assert last(steps).code == "no_progress_warn"


def test_cycle_warn_before_read_only_streak_warn() -> None:
    """cycle_warn comes before read_only_streak_warn."""
    cyc = [ok("read_file", {"path": p}) for p in "abab"]
    steps = run_script(make_guard(), [*reads(36), *cyc])
    assert last(steps).code == "cycle_warn"


def test_cycle_warn_before_write_streak_warn() -> None:
    """cycle_warn comes before write_streak_warn."""
    cyc = [ok("write_file", {"path": p}) for p in "abab"]
    steps = run_script(make_guard(), [*writes(26), *cyc])
    assert last(steps).code == "cycle_warn"


# -- order of before_call checks -----------------------------------------------------------------


def test_halted_turn_checked_before_caps() -> None:
    """An already halted turn comes first: a call that would also hit a cap is turn_halted."""
    guard = make_guard(caps={"turn": {"web_search": 1}})
    run_script(guard, [ok("web_search")])
    run_script(guard, [refuse("write_file") for _ in range(6)])
    assert guard.before_call("web_search", {"q": "again"}).code == "turn_halted"


def test_caps_checked_before_hard_stop_refusals() -> None:
    """Caps are checked before exact_failure_block."""
    guard = make_guard(caps={"turn": {"web_search": 5}})
    run_script(guard, [fail("web_search", {"q": "x"})] * 5)
    assert guard.before_call("web_search", {"q": "x"}).code == "cap_turn"


def test_turn_caps_checked_before_session_caps() -> None:
    """Turn caps come before session caps."""
    guard = make_guard(caps={"turn": {"web_search": 2}, "session": {"web_search": 2}})
    run_script(guard, [ok("web_search"), ok("web_search")])
    assert guard.before_call("web_search", {"q": fresh()}).code == "cap_turn"


def test_exact_failure_block_before_cycle_block() -> None:
    """exact_failure_block comes before cycle_block."""
    guard = make_guard(hard_stop_after={"exact_failure": 3, "cycle": 3}, **ONE_REJECT)
    run_script(guard, [fail(t, {"fixed": t}) for _ in range(3) for t in ("tool_a", "tool_b")])
    assert guard.before_call("tool_a", {"fixed": "tool_a"}).code == "exact_failure_reject"
    assert guard.before_call("tool_a", {"fixed": "tool_a"}).code == "exact_failure_block"


def test_no_progress_block_before_cycle_block() -> None:
    """no_progress_block comes before cycle_block."""
    guard = make_guard(hard_stop_after={"no_progress": 3, "cycle": 3}, **ONE_REJECT)
    run_script(guard, [ok("read_file", {"path": p}, f"content {p}") for _ in range(3) for p in "ab"])
    assert guard.before_call("read_file", {"path": "a"}).code == "no_progress_reject"
    assert guard.before_call("read_file", {"path": "a"}).code == "no_progress_block"


# -- halted turns, hard_stop and warnings --------------------------------------------------------


def test_every_later_call_of_a_halted_turn_is_turn_halted() -> None:
    """After a halt every later call in the turn, of any tool, is block/turn_halted."""
    guard = make_guard(**ONE_REJECT)
    steps = run_script(guard, [ok("write_file", {"x": 1}, "done")] * 6)
    halt = last(steps)
    assert halt.code == "identical_call_halt"
    later = run_script(guard, [ok("read_file"), ok("web_search"), ok("terminal"), ok("custom_tool")])
    assert [(s.before.action, s.before.code) for s in later] == [("block", "turn_halted")] * 4
    assert not any(s.ran for s in later)
    assert guard.halt_decision == halt


def test_a_block_halts_the_turn_too() -> None:
    """The first block of a turn becomes halt_decision; later calls are turn_halted and do not replace it."""
    guard = make_guard(**ONE_REJECT)
    run_script(guard, [fail("flaky_api", {"id": 1})] * 5)
    assert guard.before_call("flaky_api", {"id": 1}).code == "exact_failure_reject"
    block = guard.before_call("flaky_api", {"id": 1})
    assert block.code == "exact_failure_block"
    assert guard.before_call("read_file", {"path": "x"}).code == "turn_halted"
    assert guard.halt_decision == block


def test_start_turn_clears_the_halt() -> None:
    """halt_decision stays until the next turn; start_turn clears it and calls run again."""
    guard = make_guard(**ONE_REJECT)
    run_script(guard, [ok("write_file", {"x": 1}, "done")] * 6)
    assert guard.halt_decision is not None
    guard.start_turn()
    assert guard.halt_decision is None
    assert guard.before_call("write_file", {"x": 1}).allows_execution


@pytest.mark.parametrize(
    ("config", "blocks"),
    [
        ({"hard_stop": None}, False),
        ({"hard_stop": None, "mode": "interactive"}, False),
        ({"hard_stop": None, "mode": "unattended"}, True),
        ({"hard_stop": True, "mode": "interactive"}, True),
        ({"hard_stop": False, "mode": "unattended"}, False),
    ],
)
def test_hard_stop_follows_mode_unless_set(config: dict[str, Any], blocks: bool) -> None:
    """hard_stop defaults to off in interactive mode and on in unattended mode; an explicit value wins."""
    guard = make_guard(**config)
    steps = run_script(guard, [fail("flaky_api", {"id": 1})] * (5 + DEFAULT_REJECTS + 1))
    assert [s.before.code for s in steps[5:]] == (
        ["exact_failure_reject"] * DEFAULT_REJECTS + ["exact_failure_block"] if blocks else ["allow"] * 8
    )
    assert all(s.before.allows_execution for s in steps[:5])


def test_warnings_false_silences_warnings_only() -> None:
    """warnings: false silences warnings; blocks and halts still happen."""
    guard = make_guard(warnings=False)
    steps = run_script(guard, [fail("flaky_api", {"id": 1})] * 5)
    assert codes(steps) == ["allow"] * 5
    for _ in range(DEFAULT_REJECTS):
        assert guard.before_call("flaky_api", {"id": 1}).code == "exact_failure_reject"
    assert guard.before_call("flaky_api", {"id": 1}).code == "exact_failure_block"
    other = make_guard(warnings=False)
    steps = run_script(other, [ok("write_file", {"x": 1}, "done")] * (5 + DEFAULT_REJECTS))
    assert codes(steps) == ["allow"] * 4 + ["identical_call_reject"] * DEFAULT_REJECTS + [
        "identical_call_halt"
    ]


def test_warnings_false_and_hard_stop_off_allows_everything() -> None:
    """With warnings off and hard_stop off loop detectors say nothing at all."""
    guard = make_guard(warnings=False, hard_stop=False)
    script = (
        [fail("flaky_api", {"id": 1})] * 8 + [ok("read_file", {"p": 1}, "s")] * 6 + reads(45) + writes(35)
    )
    steps = run_script(guard, script)
    assert set(codes(steps)) == {"allow"}


# -- per-turn state ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("before", "after", "stop_code"),
    [
        ([fail("flaky_api", {"id": 1})] * 4, [fail("flaky_api", {"id": 1})] * 4, "exact_failure"),
        ([fail("web_fetch") for _ in range(7)], [fail("web_fetch") for _ in range(7)], "same_tool_failure"),
        ([refuse("write_file") for _ in range(5)], [refuse("write_file") for _ in range(5)], "refusal"),
        ([ok("read_file", {"p": 1}, "s")] * 4, [ok("read_file", {"p": 1}, "s")] * 4, "no_progress"),
        ([ok("write_file", {"x": 1}, "d")] * 4, [ok("write_file", {"x": 1}, "d")] * 4, "identical_call"),
        (pattern("tool_a", "tool_b", repeats=2), pattern("tool_a", "tool_b", repeats=2), "cycle"),
        (reads(39), reads(39), "read_only_streak"),
        (writes(29), writes(29), "write_streak"),
        (
            [(f"editor_{i}", {"k": fresh()}, "Error: same", True) for i in range(5)],
            [(f"editor_{i}", {"k": fresh()}, "Error: same", True) for i in range(5)],
            "same_error",
        ),
    ],
)
def test_detector_state_is_cleared_by_start_turn(
    before: list[tuple[Any, ...]], after: list[tuple[Any, ...]], stop_code: str
) -> None:
    """All detector state is per turn and cleared by start_turn()."""
    guard = make_guard()
    run_script(guard, before)
    guard.start_turn()
    steps = run_script(guard, after)
    assert no_stops(steps)
    first_turn_like = run_script(make_guard(), after)
    assert codes(steps) == codes(first_turn_like), f"{stop_code} state leaked into the next turn"


def test_reset_for_turn_is_start_turn() -> None:
    """reset_for_turn() clears per-turn state like start_turn()."""
    guard = make_guard()
    run_script(guard, [fail("flaky_api", {"id": 1})] * 5)
    guard.reset_for_turn()
    assert guard.before_call("flaky_api", {"id": 1}).allows_execution


# -- messages ------------------------------------------------------------------------------------

CANARY_ARG = "CANARY-ARG-7f3a9"
CANARY_RESULT = "CANARY-RESULT-b21c"


def canary_scripts() -> list[tuple[dict[str, Any], list[tuple[Any, ...]]]]:
    def args(i: Any) -> dict[str, Any]:
        return {"secret": f"{CANARY_ARG}-{i}", "path": f"/home/{CANARY_ARG}/{i}"}

    res = f"Error: {CANARY_RESULT}"
    return [
        ({}, [("flaky_api", args(0), res, True)] * (5 + DEFAULT_REJECTS + 1)),
        ({}, [("web_fetch", args(i), f"{res}{i}", True) for i in range(10)]),
        ({}, [("fetch_page", args(i), res, True) for i in range(8)]),
        ({}, [("write_file", args(i), res, None, "permission_denied") for i in range(6)]),
        ({}, [(f"editor_{i}", args(i), res, True) for i in range(6)]),
        ({}, [("read_file", args(0), CANARY_RESULT, False)] * (5 + DEFAULT_REJECTS + 1)),
        ({}, [("write_file", args(0), CANARY_RESULT, False)] * (5 + DEFAULT_REJECTS)),
        ({}, [("bash", args(0), CANARY_RESULT, False)] * 6),
        (
            {},
            [(t, args(t), f"{CANARY_RESULT}{i}", False) for i in range(3) for t in ("tool_a", "tool_b")]
            + [("tool_a", args("tool_a"), CANARY_RESULT, False)] * 2,
        ),
        ({}, [("read_file", args(i), f"{CANARY_RESULT}{i}", False) for i in range(41)]),
        ({}, [("write_file", args(i), f"{CANARY_RESULT}{i}", False) for i in range(31)]),
        (
            {"caps": {"turn": {"web_search": 1}}},
            [("web_search", args(i), CANARY_RESULT, False) for i in range(3)],
        ),
    ]


def non_allow_decisions() -> list[Decision]:
    found: list[Decision] = []
    for config, script in canary_scripts():
        for step in run_script(make_guard(**config), script):
            found += [d for d in (step.before, step.after) if d is not None and d.action != "allow"]
    return found


def test_canary_scripts_cover_every_non_allow_code() -> None:
    """(The message tests below see every detector's warn/block/halt, a cap and a halted turn.)"""
    assert {d.code for d in non_allow_decisions()} >= {
        "exact_failure_warn", "exact_failure_block", "same_tool_failure_warn", "same_tool_failure_halt",
        "refusal_warn", "refusal_halt", "no_progress_warn", "no_progress_block", "identical_call_warn",
        "identical_call_halt", "cycle_warn", "cycle_block", "read_only_streak_warn", "write_streak_warn",
        "same_error_warn", "same_error_halt", "cap_turn", "turn_halted", "exact_failure_reject",
        "no_progress_reject", "identical_call_reject", "cycle_reject", "same_tool_failure_reject",
    }  # fmt: skip


def test_messages_never_contain_argument_values_or_result_text() -> None:
    """Messages, metadata, synthetic results and reprs never contain argument values or result text."""
    for decision in non_allow_decisions():
        for text in (
            decision.message,
            str(decision.to_metadata()),
            decision.synthetic_result(),
            repr(decision),
        ):
            assert CANARY_ARG not in text, decision.code
            assert CANARY_RESULT not in text, decision.code


def test_messages_name_the_tool_and_the_count() -> None:
    """A decision's message names the tool and the count (turn_halted names the earlier halt instead)."""
    for decision in non_allow_decisions():
        if decision.code == "turn_halted":
            continue
        assert str(decision.count) in decision.message, decision.code
        if decision.code.startswith("cap_"):
            continue  # the documented cap example names the cap ("50 web searches"), checked in test_caps
        assert decision.tool_name in decision.message, decision.code
        assert str(decision.count) in decision.message, decision.code


# -- a reject before a stop ----------------------------------------------------------------------


def test_a_reject_lapses_after_a_successful_write() -> None:
    """A reject stands until the call runs or a write succeeds: after a fix, the call is not stopped
    for having been refused before."""
    guard = make_guard(hard_stop_after={"no_progress": 2}, **ONE_REJECT)
    same = ok("read_file", {"path": "a"}, "same")
    run_script(guard, [same] * 2)
    assert guard.before_call("read_file", {"path": "a"}).code == "no_progress_reject"
    run_script(guard, [ok("write_file")])
    assert guard.before_call("read_file", {"path": "a"}).code == "no_progress_reject"  # rejected again
    assert guard.before_call("read_file", {"path": "a"}).code == "no_progress_block"


def test_an_edit_rejected_eleven_times_then_changed_is_refused_but_never_stopped() -> None:
    """A model resending the same failing edit 11 times and then changing it (a recorded run that
    went on to solve its task): from the 6th send on it is refused, the turn is never stopped, and
    the changed edit runs."""
    guard = make_guard()
    same_edit = fail(
        "edit", {"command": "edit 22:34"}, "Your proposed edit has introduced new syntax error(s)."
    )
    steps = run_script(guard, [same_edit] * 11 + [ok("edit", {"command": "edit 22:35"})])
    assert [s.ran for s in steps] == [True] * 5 + [False] * 6 + [True]
    assert {s.before.code for s in steps[5:11]} == {"exact_failure_reject"}
    assert guard.halt_decision is None


def test_a_lookup_resent_with_the_same_answer_is_refused_but_never_stopped() -> None:
    """The same lookup 11 times in a row with the same answer, then another call: refused from the 5th
    on, never stopped."""
    guard = make_guard()
    lookup = ok("list_order_items", {"order_id": "#W1"}, '{"name": "Garden Hose"}')
    steps = run_script(guard, [lookup] * 11 + [ok("get_order_details", {"order_id": "#W1"})])
    assert [s.before.code for s in steps[4:11]] == ["identical_call_reject"] * 7
    assert guard.halt_decision is None and steps[-1].ran


def test_rejects_before_stop_defaults_to_seven() -> None:
    assert GuardConfig().rejects_before_stop == DEFAULT_REJECTS


@pytest.mark.parametrize("rejects", [0, 1, 2, 3])
def test_rejects_before_stop_sets_how_many_rejects_come_first(rejects: int) -> None:
    guard = make_guard(rejects_before_stop=rejects)
    steps = run_script(guard, [fail("flaky_api", {"id": 1})] * (5 + rejects + 1))
    assert codes(steps)[5:] == ["exact_failure_reject"] * rejects + ["exact_failure_block"]
    assert guard.halt_decision is not None and guard.halt_decision.code == "exact_failure_block"


def test_rejects_before_stop_zero_halts_identical_calls_at_once() -> None:
    steps = run_script(make_guard(rejects_before_stop=0), [ok("write_file", {"x": 1}, "done")] * 5)
    assert codes(steps)[-1] == "identical_call_halt"


def test_a_cycle_continued_after_its_reject_is_blocked() -> None:
    """The rejected call is taken as part of the sequence: the other half of the cycle, next, goes on
    with it and stops the turn."""
    guard = make_guard()
    run_script(guard, pattern("tool_a", "tool_b", repeats=3))
    assert guard.before_call("tool_a", {"fixed": "tool_a"}).code == "cycle_reject"
    decision = guard.before_call("tool_b", {"fixed": "tool_b"})
    assert (decision.action, decision.code) == ("block", "cycle_block")


def test_a_cycle_broken_after_its_reject_starts_over() -> None:
    """A call that breaks the cycle ends its rejects: a new cycle is rejected first again."""
    guard = make_guard()
    run_script(guard, pattern("tool_a", "tool_b", repeats=3))
    assert guard.before_call("tool_a", {"fixed": "tool_a"}).code == "cycle_reject"
    run_script(guard, [ok("tool_c"), ok("tool_c")])
    run_script(guard, pattern("tool_a", "tool_b", repeats=3))
    assert guard.before_call("tool_a", {"fixed": "tool_a"}).code == "cycle_reject"


def test_a_reject_does_not_stop_the_turn_and_other_calls_run() -> None:
    guard = make_guard()
    run_script(guard, [fail("flaky_api", {"id": 1})] * 5)
    assert guard.before_call("flaky_api", {"id": 1}).action == "reject"
    steps = run_script(guard, [ok("read_file"), ok("write_file")])
    assert all(s.ran for s in steps) and guard.halt_decision is None
    assert guard.end_turn().decisions["exact_failure_reject"] == 1


def test_interactive_mode_never_rejects() -> None:
    steps = run_script(make_guard(hard_stop=False), [fail("flaky_api", {"id": 1})] * 9)
    assert all(s.ran for s in steps)
