"""The hot-path constructors build exactly what the classes' own constructors build."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from otelguard.core.decisions import Decision, Signature, allow_decision
from otelguard.core.observers import CallEvent, new_call_event


def test_the_allow_decision_is_a_decision_equal_to_one_built_the_plain_way() -> None:
    sig = Signature("read_file", "0123456789abcdef")
    built = allow_decision("read_file", sig)
    plain = Decision(action="allow", code="allow", tool_name="read_file", signature=sig)
    assert type(built) is Decision
    assert built == plain and hash(built) == hash(plain) and repr(built) == repr(plain)
    assert pickle.loads(pickle.dumps(built)) == plain
    assert dataclasses.replace(built, code="x").code == "x"
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.action = "warn"  # type: ignore[misc]


def test_a_call_event_built_for_the_hot_path_is_a_call_event() -> None:
    sig = Signature("grep", "00ff")
    decision = allow_decision("grep", sig)
    values = ("grep", "read", sig, "c1", "main", "t1", decision, decision, "ok", None, 0, 5, False, 2)
    event = new_call_event(*values)
    assert type(event) is CallEvent
    assert event == CallEvent(*values)
