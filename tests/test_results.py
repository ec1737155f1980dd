"""ResultMemory: "same answer again" by content, parsing JSON only when it must (otelguard.core.results)."""

from __future__ import annotations

import json

from otelguard.core.detectors import SignatureState
from otelguard.core.results import ResultMemory, ResultSlot

VOLATILE = ("timestamp", "duration_ms")


def test_equal_bytes_are_the_same_result_without_parsing() -> None:
    """Equal raw bytes are equal content; the first JSON result is held, not parsed."""
    memory, slot = ResultMemory(VOLATILE), ResultSlot()
    assert memory.same_as_previous(slot, '{"a": 1}') is False
    assert slot.fingerprint is None and slot.held == '{"a": 1}'
    assert memory.same_as_previous(slot, '{"a": 1}') is True


def test_json_differing_only_in_order_whitespace_and_volatile_keys_is_the_same() -> None:
    memory, slot = ResultMemory(VOLATILE), ResultSlot()
    memory.same_as_previous(slot, json.dumps({"a": 1, "b": [1, {"timestamp": 1}]}))
    assert memory.same_as_previous(slot, json.dumps({"b": [1, {"timestamp": 2}], "a": 1}, indent=2))
    assert not memory.same_as_previous(slot, json.dumps({"a": 2, "b": [1, {"timestamp": 2}]}))


def test_text_compares_by_bytes() -> None:
    memory, slot = ResultMemory(VOLATILE), ResultSlot()
    memory.same_as_previous(slot, "line one")
    assert not memory.same_as_previous(slot, "line  one")
    assert memory.same_as_previous(slot, "line  one")


def test_a_structured_result_matches_equal_json_text() -> None:
    """A host's dict and the same content as JSON text are the same result."""
    memory, slot = ResultMemory(VOLATILE), ResultSlot()
    memory.same_as_previous(slot, {"a": 1, "timestamp": 5})
    assert memory.same_as_previous(slot, '{"timestamp": 9, "a": 1}')


def test_held_results_stay_within_the_byte_budget() -> None:
    """References are bounded by held_bytes whatever the number of signatures."""
    memory = ResultMemory(VOLATILE, held_bytes=10_000)
    slots = [SignatureState() for _ in range(100)]
    for i, slot in enumerate(slots):
        memory.same_as_previous(slot, json.dumps({"i": i, "pad": "x" * 500}))
    held = [slot for slot in slots if slot.held is not None]
    assert 0 < len(held) < 20
    assert held == slots[-len(held) :]  # the most recent ones


def test_a_released_result_falls_back_to_raw_comparison() -> None:
    """Past the window, a content-equal result with other bytes counts as new (documented bound)."""
    memory = ResultMemory(VOLATILE, held_bytes=2_000)
    slot = SignatureState()
    memory.same_as_previous(slot, '{"a": 1, "timestamp": 1}')
    for i in range(20):
        memory.same_as_previous(SignatureState(), json.dumps({"other": i, "pad": "y" * 300}))
    assert slot.held is None
    assert memory.same_as_previous(slot, '{"a": 1, "timestamp": 2}') is False
    assert memory.same_as_previous(slot, '{"a": 1, "timestamp": 3}') is True  # compared by content again
