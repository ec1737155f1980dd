"""A full signature map reuses the state it drops for the new signature, and nothing tells.

``TurnDetectors.state`` resets and reuses the least recently used state instead of freeing it, unless
the results' held queue may still refer to it. Whatever the calls, every comparison and decision must
be the one a fresh state (``BoundedMap.touch`` with ``SignatureState()``) gives.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from otelguard import GuardConfig
from otelguard.core.decisions import Signature
from otelguard.core.detectors import SignatureState, TurnDetectors
from otelguard.core.results import ResultMemory, ResultSlot

KEY = "test-signature-key"
VOLATILE = ("timestamp",)
FRESH_FIELDS = {
    name: getattr(SignatureState(), name) for name in ResultSlot.__slots__ + SignatureState.__slots__
}


def detectors(capacity: int) -> TurnDetectors:
    config = GuardConfig.from_mapping(
        {"signature_key": KEY, "hard_stop": True, "max_tracked_signatures": capacity}
    )
    return TurnDetectors(config)


def fields(state: SignatureState) -> dict[str, Any]:
    return {name: getattr(state, name) for name in FRESH_FIELDS}


def test_a_full_map_reuses_the_dropped_state_reset_for_the_new_signature() -> None:
    turn, memory = detectors(2), ResultMemory(VOLATILE)
    first = turn.state(Signature("read_file", "a"))
    memory.same_as_previous(first, '{"lines": 3}')
    first.exact_failures, first.no_progress, first.rejects = 2, 3, 1
    turn.state(Signature("read_file", "b"))
    reused = turn.state(Signature("read_file", "c"))  # drops a
    assert reused is first and fields(reused) == FRESH_FIELDS
    assert list(turn.signatures) == [Signature("read_file", "b"), Signature("read_file", "c")]


def test_a_queue_entry_of_the_state_before_its_reuse_releases_nothing_of_the_new_signature() -> None:
    """The held queue still has an entry of the state's first signature when the state is reused, for
    the very same result object: releasing that entry leaves the new signature's result held, so a
    content-equal repeat with other bytes still matches."""
    turn, memory = detectors(1), ResultMemory(VOLATILE, held_bytes=700)
    shared = '{"items": [1, 2, 3], "pad": "' + "x" * 60 + '"}'  # one object, returned twice
    state = turn.state(Signature("search", "a"))
    memory.same_as_previous(state, shared)  # held, queued
    memory.same_as_previous(state, '{"items": [4]}')  # parsed both: fingerprinted, the entry stays
    assert turn.state(Signature("search", "b")) is state  # a dropped, its state reused for b
    assert not memory.same_as_previous(state, shared)  # b's first result: held, queued again
    memory.same_as_previous(ResultSlot(), '{"other": "' + "y" * 80 + '"}')  # past the budget: a's entry goes
    assert state.held is shared
    assert memory.same_as_previous(state, '{"pad": "' + "x" * 60 + '", "items": [1, 2, 3]}')


# Results shared by object between signatures (a host returning one constant object), content-equal
# JSON with other bytes (whitespace, key order, volatile keys), plain text and structured results.
_SHARED = json.dumps({"status": "ok", "items": list(range(40))})
_RESULTS: tuple[Any, ...] = (
    _SHARED,
    _SHARED,
    '{"items": [1, 2], "timestamp": 1}',
    '{"timestamp": 2, "items": [1, 2]}',
    '{ "items" : [1, 2] }',
    '{"items": [3]}',
    "plain text",
    "other text",
    {"items": [1, 2]},
    json.dumps({"pad": "x" * 300}),
)
_CALLS = st.lists(
    st.tuples(
        st.integers(0, 7),  # which signature
        st.sampled_from(("read", "write", "unknown")),
        st.integers(0, len(_RESULTS) - 1),
        st.sampled_from(("ok", "ok", "ok", "failed", "refused")),
    ),
    max_size=120,
)


@settings(max_examples=150, deadline=None)
@given(calls=_CALLS, capacity=st.integers(1, 4), held_bytes=st.sampled_from((0, 700, 1500, 1 << 20)))
def test_reused_states_decide_exactly_as_fresh_ones(
    calls: list[tuple[int, str, int, str]], capacity: int, held_bytes: int
) -> None:
    reusing, fresh = detectors(capacity), detectors(capacity)
    reusing_memory, fresh_memory = ResultMemory(VOLATILE, held_bytes), ResultMemory(VOLATILE, held_bytes)
    for which, tool_class, result_index, outcome in calls:
        sig = Signature(f"tool{which % 3}", f"args{which}")
        result = _RESULTS[result_index]
        answers: list[tuple[Any, ...]] = []
        for turn, memory, state_of in (
            (reusing, reusing_memory, reusing.state),
            (fresh, fresh_memory, lambda s: fresh.signatures.touch(s, SignatureState)),
        ):
            refused = turn.refuse_before(sig, tool_class)  # type: ignore[arg-type]
            if refused is not None:
                answers.append(("refused", refused.code, refused.count))
                continue
            state = state_of(sig)
            same = outcome == "ok" and memory.same_as_previous(state, result)
            error = 7 if outcome == "failed" else None
            refusal = "policy" if outcome == "refused" else None
            verdict = turn.record_after(sig, state, tool_class, False, outcome, refusal, same, error)  # type: ignore[arg-type]
            answers.append(("ran", same, verdict.code if verdict else None, verdict.count if verdict else 0))
        assert answers[0] == answers[1]
    assert list(reusing.signatures) == list(fresh.signatures)
