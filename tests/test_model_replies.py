"""The reply detectors: ``no_action`` and ``repeated_reply``, the final-answer rule, their resets,
order and bounds, and a reply's text read in process only (docs/model-turns.md)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otelguard import Guard, GuardConfig
from otelguard.core import decisions as codes
from otelguard.core.decisions import MODEL_TOOL, Decision
from otelguard.core.detectors.precedence import AFTER_MODEL
from otelguard.core.detectors.replies import KEPT_REPLIES, TEXT_ENDS, ReplyCounts, bounded_text, chants
from otelguard.core.model_turns import reply_sketch
from otelguard.core.observers import GuardObserver, ModelEvent

CANARY = "CANARY-91bd-reply-text"


def _replies(guard: Guard, texts: list[str], **after: Any) -> list[tuple[str, str]]:
    """Each reply as a harness sends it: ``before_model`` then ``after_model``; both decisions' codes."""
    return [(guard.before_model().code, guard.after_model(text, **after).code) for text in texts]


def _distinct(n: int) -> list[str]:
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]
    return [
        f"Reply {words[i % 10]} {words[(i // 10) % 10]} {words[(i // 100) % 10]} about part {i}."
        for i in range(n)
    ]


# -- no_action ------------------------------------------------------------------------------------


def test_invalid_calls_count_at_once_and_warn_from_the_third() -> None:
    guard = Guard()
    codes_seen = [guard.after_model(text, invalid_tool_calls=1).code for text in _distinct(5)]
    assert codes_seen == ["allow", "allow", "no_action_warn", "no_action_warn", "no_action_warn"]
    warn = guard.after_model("another", invalid_tool_calls=2)
    assert (warn.action, warn.tool_name, warn.count, warn.limit) == ("warn", MODEL_TOOL, 6, 3)
    assert "6 model replies in a row" in warn.message


def test_no_action_halts_at_eight_with_hard_stop() -> None:
    guard = Guard(GuardConfig(mode="unattended"))
    seen = [guard.after_model(text, invalid_tool_calls=1) for text in _distinct(8)]
    assert [d.code for d in seen][2:7] == ["no_action_warn"] * 5
    halt = seen[7]
    assert (halt.action, halt.code, halt.count, halt.limit) == ("halt", "no_action_halt", 8, 8)
    assert guard.halt_decision == halt
    assert guard.before_model().code == "turn_halted"
    assert guard.before_call("read_file", {"path": "a"}).code == "turn_halted"


def test_without_hard_stop_no_action_only_warns() -> None:
    guard = Guard(GuardConfig(mode="interactive"))
    seen = [guard.after_model(text, invalid_tool_calls=1).action for text in _distinct(20)]
    assert set(seen[2:]) == {"warn"} and guard.halt_decision is None


def test_warnings_off_silences_the_warnings_only() -> None:
    guard = Guard(GuardConfig(mode="unattended", warnings=False))
    seen = [guard.after_model(text, invalid_tool_calls=1).code for text in _distinct(8)]
    assert seen == ["allow"] * 7 + ["no_action_halt"]


def test_the_thresholds_are_config() -> None:
    config = GuardConfig(mode="unattended", warn_after={"no_action": 1}, hard_stop_after={"no_action": 2})
    guard = Guard(config)
    assert [guard.after_model(t, invalid_tool_calls=1).code for t in _distinct(2)] == [
        "no_action_warn",
        "no_action_halt",
    ]


def test_a_reply_that_calls_nothing_is_counted_only_when_the_model_is_called_again() -> None:
    guard = Guard()
    # a harness answering replies that call nothing ("call a tool"): counted at each next request
    decisions = _replies(guard, _distinct(4))
    assert decisions == [
        ("allow", "allow"),
        ("allow", "allow"),
        ("allow", "allow"),
        ("no_action_warn", "allow"),
    ]
    warn = guard.before_model()  # the fourth reply, answered by the harness
    assert (warn.action, warn.code, warn.count) == ("warn", "no_action_warn", 4)


def test_the_request_after_the_eighth_such_reply_is_refused() -> None:
    guard = Guard(GuardConfig(mode="unattended"))
    assert {code for pair in _replies(guard, _distinct(8)) for code in pair} == {"allow", "no_action_warn"}
    halt = guard.before_model()  # counts the eighth reply: the model is not called again
    assert (halt.action, halt.code, halt.count, halt.limit) == ("halt", "no_action_halt", 8, 8)
    assert halt.should_halt and guard.halt_decision == halt
    assert guard.before_model().code == "turn_halted"


def test_a_final_answer_is_never_counted() -> None:
    guard = Guard(
        GuardConfig(mode="unattended", warn_after={"no_action": 1}, hard_stop_after={"no_action": 1})
    )
    for _ in range(5):
        guard.start_turn()
        assert guard.before_model().code == "allow"
        assert guard.after_model("Here is your answer.").code == "allow"  # the turn ends on it
        assert guard.end_turn().halted is False


def test_replies_in_a_row_without_a_request_between_count_once() -> None:
    """Two replies that call nothing with no model request between them: the earlier was no request's
    answer; only the last one is counted, by the next request."""
    guard = Guard(GuardConfig(warn_after={"no_action": 2}))
    for text in _distinct(6):
        guard.after_model(text)
    assert guard.before_model().code == "allow"  # one reply counted


def test_a_valid_tool_call_ends_the_streak() -> None:
    guard = Guard()
    for text in _distinct(2):
        guard.after_model(text, invalid_tool_calls=1)
    assert guard.after_model("Reading the file now.", tool_calls=1, invalid_tool_calls=1).code == "allow"
    assert [guard.after_model(t, invalid_tool_calls=1).code for t in _distinct(5)[2:]] == [
        "allow",
        "allow",
        "no_action_warn",
    ]


def test_a_valid_tool_call_drops_a_waiting_reply() -> None:
    guard = Guard(GuardConfig(warn_after={"no_action": 1}))
    guard.after_model("thinking")
    guard.after_model("calling", tool_calls=1)
    assert guard.before_model().code == "allow"


def test_start_turn_resets_the_streaks() -> None:
    guard = Guard()
    for text in _distinct(2):
        guard.after_model(text, invalid_tool_calls=1)
    guard.after_model("waiting")
    guard.start_turn()
    assert guard.before_model().code == "allow"  # the reply of the earlier turn is not counted
    assert [guard.after_model(t, invalid_tool_calls=1).code for t in _distinct(3)] == [
        "allow",
        "allow",
        "no_action_warn",
    ]


# -- repeated_reply -------------------------------------------------------------------------------


def test_a_reply_near_an_earlier_one_warns_from_its_first_repeat() -> None:
    guard = Guard(GuardConfig(warn_after={"no_action": 8}, hard_stop_after={"no_action": 8}))
    first = "The request to the server failed at 12:01:05 (request 3f2a9c1e77, status 503); I will retry it."
    again = "The request to the server  failed at 12:03:44 (request 9b07d2c4a1, status 502); I will retry it."
    assert guard.after_model(first, invalid_tool_calls=1).code == "allow"
    warn = guard.after_model(again, invalid_tool_calls=1)
    assert (warn.action, warn.code, warn.count, warn.limit) == ("warn", "repeated_reply_warn", 2, 2)


def test_different_replies_are_not_repeats() -> None:
    guard = Guard(GuardConfig(warn_after={"no_action": 8}, hard_stop_after={"no_action": 8}))
    assert {guard.after_model(t, invalid_tool_calls=1).code for t in _distinct(7)} == {"allow"}


def test_repeated_replies_halt_at_five_with_hard_stop() -> None:
    guard = Guard(GuardConfig(mode="unattended"))
    seen = [guard.after_model("Please provide the missing input.", invalid_tool_calls=1) for _ in range(5)]
    assert [d.code for d in seen] == [
        "allow",
        "repeated_reply_warn",
        "repeated_reply_warn",  # the third: repeated_reply's warning comes before no_action's
        "repeated_reply_warn",
        "repeated_reply_halt",
    ]
    assert seen[-1].count == 5 and guard.halt_decision == seen[-1]


def test_a_repeated_reply_that_calls_nothing_is_judged_by_the_next_request() -> None:
    guard = Guard(GuardConfig(warn_after={"no_action": 8}, hard_stop_after={"no_action": 8}))
    assert _replies(guard, ["I am done.", "I am done."]) == [("allow", "allow"), ("allow", "allow")]
    assert guard.before_model().code == "repeated_reply_warn"


def test_a_reply_with_a_valid_call_is_never_a_repeated_reply() -> None:
    guard = Guard(GuardConfig(mode="unattended"))
    text = "Let me look at the file again."
    assert {guard.after_model(text, tool_calls=1).code for _ in range(10)} == {"allow"}
    # nor kept to compare later replies with
    assert guard.after_model(text, invalid_tool_calls=1).code == "allow"


def test_a_valid_call_resets_the_repeat_count_not_the_memory() -> None:
    guard = Guard(GuardConfig(mode="unattended"))
    text = "Please provide the missing input."
    for _ in range(4):
        guard.after_model(text, invalid_tool_calls=1)
    guard.after_model("ok", tool_calls=1)
    again = guard.after_model(text, invalid_tool_calls=1)
    assert (again.code, again.count) == ("repeated_reply_warn", 2)


@pytest.mark.parametrize("blank", ["", "   \n\t", None, b""])
def test_replies_without_words_are_not_repeats(blank: Any) -> None:
    """A reply whose content is only its invalid calls (an empty text) says nothing twice: only
    ``no_action`` counts it."""
    guard = Guard(GuardConfig(mode="unattended"))
    seen = [guard.after_model(blank, invalid_tool_calls=1).code for _ in range(8)]
    assert seen == ["allow", "allow"] + ["no_action_warn"] * 5 + ["no_action_halt"]


def test_a_chanting_reply_is_a_repeated_reply_at_once() -> None:
    guard = Guard(GuardConfig(warn_after={"no_action": 8}, hard_stop_after={"no_action": 8}))
    chant = "I will now call the search tool. " * 40
    assert guard.after_model(chant, invalid_tool_calls=1).code == "repeated_reply_warn"


def test_the_order_is_the_declared_one() -> None:
    assert tuple(rule.code for rule in AFTER_MODEL) == (
        codes.REPEATED_REPLY_HALT,
        codes.NO_ACTION_HALT,
        codes.REPEATED_REPLY_WARN,
        codes.NO_ACTION_WARN,
    )
    config = GuardConfig(
        mode="unattended",
        warn_after={"no_action": 2, "repeated_reply": 2},
        hard_stop_after={"no_action": 3, "repeated_reply": 3},
    )
    guard = Guard(config)
    seen = [guard.after_model("same words here", invalid_tool_calls=1).code for _ in range(3)]
    assert seen == ["allow", "repeated_reply_warn", "repeated_reply_halt"]
    guard.start_turn()
    seen = [guard.after_model(t, invalid_tool_calls=1).code for t in _distinct(3)]
    assert seen == ["allow", "no_action_warn", "no_action_halt"]


# -- chanting ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "The answer is 42.\n" * 30,
        "I apologize for the confusion. " * 25,
        "Let me think about this. " + "and then and then " * 60,
        "Introduction to the answer follows here.\n" + "- call tool(search)\n" * 20,
        "0 " * 500,
    ],
)
def test_chanting_is_seen(text: str) -> None:
    assert chants(text)


def _table(rows: int) -> str:
    lines = ["| rank | title | url | score |", "|---|---|---|---|"]
    lines += [
        f"| {i} | Result number {i * 7 % 31} | https://example.org/{i} | {i * 0.37:.2f} |"
        for i in range(rows)
    ]
    return "\n".join(lines)


@pytest.mark.parametrize(
    "text",
    [
        _table(60),
        "\n".join(f"{i}. test_case_{i} PASSED in {i * 3} ms" for i in range(80)),
        "\n".join(
            f"- {name}: status ok, version 1.{i}" for i, name in enumerate(f"service{i}" for i in range(50))
        ),
        " ".join(f"Sentence {i} says something new about topic {i * 13}." for i in range(60)),
        "def f():\n    if x:\n        return 1\n    }\n" * 3 + "".join(f"x{i} = {i}\n" for i in range(60)),
        "ok. " * 20,  # too short to be a runaway
    ],
)
def test_rows_alike_with_other_values_are_not_chanting(text: str) -> None:
    assert not chants(text)


# -- bounds and privacy -------------------------------------------------------------------------------


def test_a_turn_keeps_a_bounded_number_of_sketches_and_no_text() -> None:
    guard = Guard(GuardConfig(warn_after={"no_action": 1000}, hard_stop_after={"no_action": 1000}))
    first = f"{CANARY} the very first reply of this turn, about the build failing"
    guard.after_model(first, invalid_tool_calls=1)
    for text in _distinct(KEPT_REPLIES):
        guard.after_model(text + CANARY, invalid_tool_calls=1)
    counts = guard._turn.model  # type: ignore[union-attr]
    assert isinstance(counts, ReplyCounts) and len(counts.sketches) == KEPT_REPLIES
    for slot in ReplyCounts.__slots__:
        assert CANARY not in repr(getattr(counts, slot))
        assert "reply" not in repr(getattr(counts, slot))
    # the first reply's sketch was dropped: the same reply again is no longer a repeat
    assert guard.after_model(first, invalid_tool_calls=1).code == "allow"


def test_only_the_ends_of_a_long_reply_are_read() -> None:
    middle = "the same middle sentence again. " * 100_000
    text = "A" * (TEXT_ENDS + 10) + middle + "Z" * (TEXT_ENDS + 10)
    read = bounded_text(text)
    assert read is not None and len(read) == 2 * TEXT_ENDS + 1
    assert "middle" not in read
    assert (
        bounded_text(text.encode()) is not None
        and len(bounded_text(text.encode()) or "") <= 8 * TEXT_ENDS + 1
    )


def test_non_text_is_not_read() -> None:
    class Loud:
        def __str__(self) -> str:
            raise AssertionError("never converted")

    class Sneaky(str):
        def __str__(self) -> str:
            raise AssertionError("never asked")

    assert bounded_text(Loud()) is None and bounded_text(12) is None
    assert bounded_text(Sneaky("plain text")) == "plain text"
    guard = Guard()
    assert guard.after_model(Loud(), invalid_tool_calls=1).code == "allow"


def test_a_long_reply_is_compared_whole() -> None:
    """Two long replies alike from start to end are near; two sharing only their first and last
    pages are not (a sketch of the ends alone would call them the same)."""
    head, tail = "Starting the report. " * 100, " End of the report." * 100
    body = " ".join(f"finding {i} concerns module m{i} and its owner o{i * 3}" for i in range(2000))
    other = " ".join(f"observation {i} touches library l{i} kept by team t{i * 7}" for i in range(2000))
    from otelguard.core.detectors.stagnation import near

    assert near(reply_sketch(head + body + tail), reply_sketch(head + body + " extra words" + tail))
    assert not near(reply_sketch(head + body + tail), reply_sketch(head + other + tail))


class _Events(GuardObserver):
    def __init__(self) -> None:
        self.events: list[ModelEvent] = []

    def on_model_call(self, event: ModelEvent) -> None:
        self.events.append(event)


def test_reply_decisions_carry_no_text() -> None:
    seen = _Events()
    guard = Guard(GuardConfig(mode="unattended"), observers=[seen])
    for _ in range(5):
        guard.before_model()
        guard.after_model(f"{CANARY} stuck", invalid_tool_calls=1)
    assert guard.halt_decision is not None
    for event in seen.events:
        assert CANARY not in repr(event) and CANARY not in event.decision.message


_HOSTILE = st.one_of(
    st.none(),
    st.text(max_size=3000),
    st.binary(max_size=3000),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.lists(st.integers(), max_size=5),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=5),
    st.builds(lambda n: "x" * n, st.integers(0, 300_000)),
    st.builds(lambda s, n: s * n, st.text(min_size=1, max_size=20), st.integers(0, 2000)),
)


@settings(max_examples=300, deadline=None)
@given(
    text=_HOSTILE,
    tool_calls=_HOSTILE,
    invalid=_HOSTILE,
    tokens_in=_HOSTILE,
    tokens_out=_HOSTILE,
    mode=st.sampled_from(["interactive", "unattended"]),
)
def test_after_model_never_raises(
    text: Any, tool_calls: Any, invalid: Any, tokens_in: Any, tokens_out: Any, mode: str
) -> None:
    guard = Guard(GuardConfig(mode=mode, caps={"turn": {"tokens": 1000}, "session": {"tokens": 5000}}))
    for _ in range(3):
        before = guard.before_model()
        after = guard.after_model(
            text,
            tool_calls=tool_calls,
            invalid_tool_calls=invalid,
            input_tokens=tokens_in,
            output_tokens=tokens_out,
        )
        for decision in (before, after):
            assert isinstance(decision, Decision) and decision.tool_name == MODEL_TOOL
            assert decision.code != codes.INTERNAL_ERROR
            assert decision.code in codes.CODES
    usage = guard.end_turn().cap_usage.get("tokens", 0)
    assert 0 <= usage <= 6 * 10**12 and not math.isnan(usage)
