"""Results nested deeper than the interpreter recurses, holding themselves, or made of objects whose
text cannot be read: every place the core turns a result into text or a fingerprint answers, and a
loop returning such results is still stopped."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from otelguard.core._slots import ResultSlot
from otelguard.core.detectors import stagnation
from otelguard.core.detectors.stagnation import measure, normalised, sketch
from otelguard.core.results import ResultMemory
from otelguard.core.signatures import ResultFingerprinter
from otelguard.testing import codes, run_script
from tests.test_detectors import make_guard


class Unreadable:
    """An object whose text raises."""

    def __str__(self) -> str:
        raise RuntimeError("no text")

    __repr__ = __str__


class Recursing:
    """An object whose text recurses without end."""

    def __str__(self) -> str:
        return str(self)

    __repr__ = __str__


class Held:
    """A hostile result, shown by how it was made: printing it would recurse as deep as it goes."""

    def __init__(self, value: Any, made: str) -> None:
        self.value = value
        self.made = made

    def __repr__(self) -> str:
        return self.made


def held_nested(depth: int, kinds: list[str], leaf: Any) -> Held:
    return Held(nested(depth, kinds, leaf), f"nested({depth}, {kinds}, <{type(leaf).__name__}>)")


def nested(depth: int, kinds: list[str], leaf: Any) -> Any:
    """``leaf`` inside ``depth`` containers, their kinds taken in turn from ``kinds``."""
    value = leaf
    for level in range(depth):
        kind = kinds[level % len(kinds)]
        if kind == "list":
            value = [value]
        elif kind == "tuple":
            value = (value, level)
        elif kind == "dict":
            value = {"key": value, "n": level}
        elif kind == "int-keyed":
            value = {level: value}
        else:
            value = frozenset({value}) if _hashable(value) else [value]
    return value


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except Exception:
        return False
    return True


def _inside_itself() -> Any:
    outer: dict[str, Any] = {"stdout": "Traceback: KeyError", "blocks": []}
    outer["blocks"].append(outer)
    return outer


leaves = st.one_of(
    st.text(max_size=40),
    st.binary(max_size=40),
    st.integers(),
    st.builds(pow, st.just(10), st.just(5000)),  # past the text conversion limit of ints
    st.floats(),
    st.none(),
    st.builds(Unreadable),
    st.builds(Recursing),
)
hostile = st.one_of(
    st.builds(
        held_nested,
        st.integers(min_value=0, max_value=5000),
        st.lists(
            st.sampled_from(["list", "tuple", "dict", "int-keyed", "frozenset"]), min_size=1, max_size=4
        ),
        leaves,
    ),
    st.builds(lambda: Held(_inside_itself(), "a mapping inside itself")),
    st.recursive(
        leaves, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=5), c, max_size=4)
    ).map(lambda value: Held(value, "a small tree")),
)


@given(hostile)
def test_results_are_turned_into_text_and_fingerprints_without_raising(held: Held) -> None:
    """Each conversion answers, bounded: the text kept for stagnation is at most two ends of
    ``_HEAD`` characters; nothing recurses on the result's depth."""
    result = held.value
    digest, small = sketch(result)
    assert isinstance(digest, int) and 1 <= len(small) <= stagnation._SKETCH
    assert len(stagnation._text(result)) <= 2 * stagnation._HEAD + 1
    assert isinstance(normalised(result), str)
    count, size = measure(result)
    assert count >= -1 and size >= 0
    fingerprints = ResultFingerprinter(("duration_ms", "n"))
    assert isinstance(fingerprints.content(result), int)
    assert isinstance(fingerprints.structured(result), int)
    memory = ResultMemory(("duration_ms", "n"))
    memory.error_fingerprint(result)
    slot = ResultSlot()
    assert memory.same_as_previous(slot, result) in (True, False)


@given(st.integers(min_value=900, max_value=3000), st.sampled_from(['{"n": 1, "k": ', "["]))
def test_json_text_nested_past_the_recursion_limit_is_fingerprinted(depth: int, opener: str) -> None:
    """JSON text the parser accepts (up to its own depth limit) is pruned of its volatile keys
    without recursion."""
    closer = "}" if opener.startswith("{") else "]"
    text = opener * depth + "0" + closer * depth
    fingerprints = ResultFingerprinter(("n",))
    assert isinstance(fingerprints.content(text), int)


def test_a_loop_returning_a_deeply_nested_result_is_answered_and_stopped() -> None:
    """A check whose structured result is a list nested 1,000 deep (about 2 KB of text), its error
    moving in its volatile parts, an edit after each run: no call's decision is an internal error,
    and the loop is stopped well before its 40 runs are done."""
    guard = make_guard(mode="unattended", hard_stop=None)
    script: list[tuple[Any, ...]] = []
    for i in range(40):
        result = nested(1000, ["list"], f"KeyError: 'size' at 0x7f{i:06x}")
        script.append(("execute_bash", {"command": "python check.py"}, result, True))
        script.append(("str_replace_editor", {"path": "lib.py", "new_str": f"fix {i}"}, "edited", False))
    steps = run_script(guard, script)
    got = codes(steps)
    assert "internal_error" not in got
    assert guard.halt_decision is not None and guard.halt_decision.code.startswith("stagnation")
    assert any(step.decision.should_halt or step.before.action == "block" for step in steps[:60])


def test_a_result_of_tuples_nested_thousands_deep_does_not_abort_the_process() -> None:
    """orjson encodes a tuple inside a tuple with no depth limit: a chain of 5,000 of them, handed
    to ``after_call`` as a result, overran its stack and aborted the process. Run in a process of its
    own, the call is answered."""
    script = (
        "from otelguard import Guard, GuardConfig\n"
        "value = 'x'\n"
        "for i in range(5000):\n"
        "    value = (value, i)\n"
        "guard = Guard(GuardConfig(mode='unattended', signature_key='k'))\n"
        "guard.start_turn()\n"
        "for tool in ('lookup', 'bash'):\n"
        "    guard.before_call(tool, {'q': 1})\n"
        "    print(guard.after_call(tool, {'q': 1}, value, failed=tool == 'bash').code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["allow", "allow"]
