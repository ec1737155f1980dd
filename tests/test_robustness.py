"""Robustness: the guard never raises into the agent loop, is thread-safe and bounded in memory."""

from __future__ import annotations

import gc
import logging
import os
import subprocess
import sys
import threading
import tracemalloc
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otelguard import Decision, Guard, GuardConfig
from otelguard.testing import RecordingObserver

KEY = "test-signature-key"


class HostileStr:
    """An object whose __str__, __repr__ and __format__ raise."""

    def __str__(self) -> str:
        raise RuntimeError("no str for you")

    def __repr__(self) -> str:
        raise RuntimeError("no repr for you")

    def __format__(self, spec: str) -> str:
        raise RuntimeError("no format for you")


class HostileMapping(Mapping[str, Any]):
    """A Mapping whose every access raises."""

    def __getitem__(self, key: str) -> Any:
        raise RuntimeError("getitem")

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("iter")

    def __len__(self) -> int:
        raise RuntimeError("len")


class HostileList(list[Any]):
    def __iter__(self) -> Iterator[Any]:
        raise RuntimeError("iter")


surrogates = st.integers(0xD800, 0xDFFF).map(chr)
weird_text = st.one_of(
    st.text(max_size=20), st.lists(surrogates | st.text(max_size=3), max_size=5).map("".join)
)
weird_keys = st.one_of(
    weird_text,
    st.integers(),
    st.none(),
    st.booleans(),
    st.floats(allow_nan=True),
    st.tuples(st.integers(), weird_text),
    st.binary(max_size=8),
    st.builds(HostileStr),
)
weird_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([5000, 6000]).map(lambda e: 10**e),  # past int->str's 4300-digit limit
    st.sampled_from([5000, 6000]).map(lambda e: -(10**e)),
    st.floats(allow_nan=True, allow_infinity=True),
    weird_text,
    st.binary(max_size=20),
    st.binary(max_size=8).map(bytearray),
    st.complex_numbers(allow_nan=True),
    st.decimals(allow_nan=True),
    st.datetimes(),
    st.builds(object),
    st.builds(HostileStr),
)
weird_values = st.recursive(
    weird_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(weird_keys, inner, max_size=4),
        st.frozensets(st.integers() | weird_text, max_size=4),
        st.sets(st.integers() | weird_text | st.builds(HostileStr), max_size=4),
    ),
    max_leaves=16,
)
tool_names = st.one_of(
    st.sampled_from(["read_file", "web_search", "terminal", "delegate_task", "process", "Task", "custom"]),
    weird_text,
    st.none(),
    st.integers(),
    st.builds(HostileStr),
)
refusals = st.one_of(
    st.none(), st.sampled_from(["permission_denied", "sandbox_denied"]), weird_text, st.integers()
)
failed_flags = st.one_of(st.none(), st.booleans(), st.integers(), weird_text)
call_ids = st.one_of(st.none(), weird_text, st.integers(), st.builds(HostileStr))


def make_guard(**config: Any) -> Guard:
    guard = Guard(GuardConfig.from_mapping({"signature_key": KEY, "hard_stop": True, **config}))
    guard.start_turn()
    return guard


def drive(guard: Guard, tool: Any, args: Any, result: Any, failed: Any = False, refusal: Any = None,
          call_id: Any = None) -> list[Decision]:  # fmt: skip
    """One call through before_call and after_call; each must answer with a Decision."""
    before = guard.before_call(tool, args, call_id=call_id)
    assert isinstance(before, Decision)
    after = guard.after_call(tool, args, result, failed=failed, refusal=refusal, call_id=call_id)
    assert isinstance(after, Decision)
    return [before, after]


def use(decision: Decision, result: Any) -> None:
    """What a host does with a decision: none of it may raise."""
    decision.to_metadata()
    decision.synthetic_result()
    decision.annotate(result)
    _ = (decision.allows_execution, decision.should_halt)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(
    tool=tool_names,
    args=weird_values,
    result=weird_values,
    failed=failed_flags,
    refusal=refusals,
    call_id=call_ids,
)
def test_no_input_makes_the_guard_raise(
    tool: Any, args: Any, result: Any, failed: Any, refusal: Any, call_id: Any
) -> None:
    """No input (surrogates, NaN, sets, bytes, non-str keys, huge ints, hostile objects, None) makes the guard raise."""
    guard = make_guard()
    for _ in range(3):
        drive(guard, tool, args, result, failed, refusal, call_id)
    assert guard.end_turn() is not None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tool=tool_names, args=weird_values, result=weird_values)
def test_decisions_on_any_input_are_usable(tool: Any, args: Any, result: Any) -> None:
    """Whatever the input, a decision's to_metadata/synthetic_result/annotate never raise."""
    guard = make_guard()
    for _ in range(5):  # allow, exact_failure warns, then exact_failure_block
        for decision in drive(guard, tool, args, result, True):
            use(decision, result)
    use(guard.before_call(tool, args), result)


def test_a_refused_call_of_a_tool_named_with_a_lone_surrogate_has_a_synthetic_result() -> None:
    """A refused call's synthetic_result() works even when the tool name holds a lone surrogate."""
    guard = make_guard()
    for _ in range(5):
        drive(guard, "tool\ud800", {"a": 1}, "Error", True)
    refused = guard.before_call("tool\ud800", {"a": 1})
    assert refused.code == "exact_failure_reject"
    assert isinstance(refused.synthetic_result(), str)
    assert isinstance(refused.annotate("text"), str)


def deep_dict(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth):
        value = {"a": value, "timestamp": 1}
    return value


def deep_list(depth: int) -> list[Any]:
    value: list[Any] = [1]
    for _ in range(depth):
        value = [value]
    return value


EXPLICIT_INPUTS: list[tuple[str, Any, Any]] = [
    ("none", None, None),
    ("lone-surrogates", {"p": "\ud800", "\udfff": ["\udc80"]}, "out \ud83d put"),
    ("nan-inf", {"x": float("nan"), "y": float("inf"), "z": [float("-inf")]}, {"score": float("nan")}),
    ("sets", {"s": {1, "a", (2, 3)}, "f": frozenset({"x"})}, {1, 2, 3}),
    ("bytes", {"b": b"\x00\xff", "ba": bytearray(b"xy"), "mv": memoryview(b"z")}, b"\xff\xfe raw"),
    ("non-str-keys", {1: "a", None: "b", (1, 2): "c", 1.5: "d", (): "e", b"k": "f"}, {2: "x", None: None}),
    ("huge-ints", {"n": 10**5000, "m": -(10**6000)}, 10**5000),
    ("hostile-str", {"o": HostileStr(), HostileStr(): 1}, HostileStr()),
    ("hostile-mapping", HostileMapping(), HostileMapping()),
    ("hostile-list", {"l": HostileList([1, 2])}, HostileList([3])),
    ("deep-dict-10k", deep_dict(10_000), deep_dict(10_000)),
    ("deep-list-10k", deep_list(10_000), deep_list(10_000)),
    ("deep-json-string-10k", "[" * 10_000 + "]" * 10_000, '{"a":' * 10_000 + "1" + "}" * 10_000),
    ("10MB-strings", {"content": "x" * 10_000_000}, "y" * 10_000_000),
    ("10MB-json-result", {"path": "big"}, '{"data": "' + "z" * 10_000_000 + '", "elapsed": 1}'),
    ("non-json-string-args", "this is { not json", "Error: plain text"),
    ("json-list-args", "[1, 2, 3]", "[]"),
    ("objects", {"o": object(), "t": type, "f": len}, object()),
]


BIG = {"deep-dict-10k", "deep-list-10k", "deep-json-string-10k", "10MB-strings", "10MB-json-result"}
EXPLICIT_CASES = [
    pytest.param(tool, args, result, id=f"{tool}-{name}")
    for name, args, result in EXPLICIT_INPUTS
    for tool in (
        ["read_file", "custom"] if name in BIG else ["read_file", "terminal", "delegate_task", "custom"]
    )
]


@pytest.mark.parametrize(("tool", "args", "result"), EXPLICIT_CASES)
def test_explicit_hostile_inputs_do_not_raise(tool: str, args: Any, result: Any) -> None:
    """The documented hostile inputs (10 MB strings, 10k-deep nesting, …) never make the guard raise."""
    guard = make_guard()
    for failed in (False, None, True):
        drive(guard, tool, args, result, failed)
    drive(guard, tool, args, result, refusal="permission_denied")
    guard.end_turn()


def test_hostile_inputs_hash_deterministically() -> None:
    """Hostile inputs still give one stable signature per input (so loops on them are still seen)."""
    guard = make_guard()
    args = {"o": HostileStr(), "s": "\ud800", "n": 10**5000, "d": deep_dict(2_000)}
    codes = []
    for _ in range(5):
        guard.before_call("flaky_api", args)
        codes.append(guard.after_call("flaky_api", args, "Error", failed=True).code)
    assert codes == ["allow"] + ["exact_failure_warn"] * 4
    assert guard.before_call("flaky_api", args).code == "exact_failure_reject"


CYCLIC_SCRIPT = """
import resource
resource.setrlimit(resource.RLIMIT_AS, (1_500_000_000, 1_500_000_000))
from otelguard import Guard, GuardConfig
guard = Guard(GuardConfig(signature_key="k"))
guard.start_turn()
loop_list = []
loop_list.append(loop_list)
loop_dict = {"x": 1}
loop_dict["self"] = loop_dict
for args in (loop_list, loop_dict):
    guard.before_call("custom", args)
    guard.after_call("custom", args, args, failed=None)
print("done")
"""


def test_self_referencing_arguments_do_not_hang_or_raise() -> None:
    """Self-referencing args/results (a list containing itself) return a decision; no hang, no raise."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", CYCLIC_SCRIPT],
            capture_output=True,
            text=True,
            timeout=30,
            env=dict(os.environ),
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the guard did not return within 30 s on self-referencing arguments")
    assert proc.stdout.strip() == "done", proc.stderr[-2000:]


# -- internal errors -----------------------------------------------------------------------------


class ExplodingObserver(RecordingObserver):
    """An observer that raises from every hook."""

    def on_turn_start(self, turn: Any) -> None:
        raise RuntimeError("turn start")

    def on_call_start(self, call: Any) -> object:
        raise RuntimeError("call start")

    def on_call_end(self, call: Any, token: object) -> None:
        raise RuntimeError("call end")

    def on_turn_end(self, summary: Any) -> None:
        raise RuntimeError("turn end")

    def on_internal_error(self, stage: str) -> None:
        raise RuntimeError("internal error")


def test_an_observer_that_raises_does_not_break_the_loop(caplog: pytest.LogCaptureFixture) -> None:
    """An error in an observer never reaches the tool loop; detectors keep working; it is logged once."""
    healthy = RecordingObserver()
    guard = Guard(GuardConfig(signature_key=KEY, hard_stop=True), observers=(ExplodingObserver(), healthy))
    with caplog.at_level(logging.DEBUG, logger="otelguard"):
        guard.start_turn()
        decisions = []
        for _ in range(5):
            guard.before_call("flaky_api", {"id": 1})
            decisions.append(guard.after_call("flaky_api", {"id": 1}, "Error", failed=True).code)
        rejected = [guard.before_call("flaky_api", {"id": 1}).code for _ in range(7)]
        blocked = guard.before_call("flaky_api", {"id": 1})
        summary = guard.end_turn()
    assert decisions == ["allow"] + ["exact_failure_warn"] * 4
    assert rejected == ["exact_failure_reject"] * 7 and blocked.code == "exact_failure_block"
    assert summary.tool_calls == 13
    assert len(healthy.calls) == 13, "a failing observer does not starve the others"
    per_hook = [r for r in caplog.records if "on_call_start" in r.getMessage()]
    assert len(per_hook) <= 1, "logged once, not once per call"


def test_internal_error_is_allow_with_code_internal_error() -> None:
    """An internal error yields allow/internal_error and is reported to observers, never raised."""
    recorder = RecordingObserver()
    guard = Guard(GuardConfig(signature_key=KEY), observers=(recorder,))
    guard.start_turn()
    unhashable_name: Any = ["web_search"]
    decisions = [
        guard.before_call(unhashable_name, {"q": 1}),
        guard.after_call(unhashable_name, {"q": 1}, "r"),
    ]
    for decision in decisions:
        assert decision.action == "allow"
        assert decision.code in ("allow", "internal_error")
        if decision.code == "internal_error":
            assert recorder.internal_errors


def test_internal_errors_are_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    """An internal error is logged once, not once per call, and the log has no argument values."""
    guard = Guard(GuardConfig(signature_key=KEY))
    guard.start_turn()
    bad: Any = {"CANARY-LOG": 1}  # an unhashable tool name: the args dict itself
    with caplog.at_level(logging.DEBUG, logger="otelguard"):
        for _ in range(20):
            guard.before_call(bad, {"q": "CANARY-LOG-ARG"})
            guard.after_call(bad, {"q": "CANARY-LOG-ARG"}, "CANARY-LOG-RESULT")
    records = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(records) <= 2, [r.getMessage() for r in records]
    for record in caplog.records:
        assert "CANARY-LOG" not in record.getMessage()


# -- threads -------------------------------------------------------------------------------------


def test_eight_threads_hammering_one_guard() -> None:
    """8 threads calling before_call/after_call on one guard: no error, exact counts, caps never overshoot."""
    recorder = RecordingObserver()
    guard = Guard(
        GuardConfig.from_mapping(
            {
                "signature_key": KEY,
                "hard_stop": False,
                "caps": {"on_hit": "reject", "turn": {"web_search": 100}},
            }
        ),
        observers=(recorder,),
    )
    guard.start_turn()
    per_thread = 400
    errors: list[BaseException] = []
    allowed_searches = [0] * 8
    barrier = threading.Barrier(8)

    def worker(n: int) -> None:
        try:
            barrier.wait()
            for i in range(per_thread):
                tool = ("web_search", "read_file", "terminal", "flaky_api")[i % 4]
                args = {"thread": n, "i": i % 50}
                decision = guard.before_call(tool, args, call_id=f"{n}-{i}")
                if decision.allows_execution:
                    if tool == "web_search":
                        allowed_searches[n] += 1
                    failed = tool == "flaky_api"
                    guard.after_call(tool, args, f"r{i % 7}", failed=failed, call_id=f"{n}-{i}")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors
    summary = guard.end_turn()
    assert summary.tool_calls == 8 * per_thread
    assert sum(allowed_searches) == 100
    assert summary.cap_usage["web_search"] == 100
    assert recorder.internal_errors == ()
    assert recorder.unmatched_tokens == 0
    assert len(recorder.calls) == 8 * per_thread


# -- memory --------------------------------------------------------------------------------------


def _distinct_calls(guard: Guard, start: int, stop: int) -> None:
    tools = ("read_file", "write_file", "custom", "web_fetch")
    for i in range(start, stop):
        tool = tools[i % 4] if i % 10 else f"dynamic_tool_{i}"  # new tool names too: per-tool state
        args = {"path": f"/data/{i}", "n": i}
        call_id = f"call-{i}"
        decision = guard.before_call(tool, args, call_id=call_id)
        if i % 13 == 0:
            continue  # the host never reports back: pending state must not pile up either
        if decision.allows_execution:
            guard.after_call(tool, args, f"result {i}", failed=bool(i % 3 == 0), call_id=call_id)


def test_memory_stays_bounded_over_200k_distinct_calls() -> None:
    """Per-guard state stays bounded (max_tracked_signatures) over 200,000 distinct calls in one turn."""
    guard = Guard(
        GuardConfig.from_mapping({"signature_key": KEY, "hard_stop": False, "max_tracked_signatures": 1024})
    )
    guard.start_turn()
    _distinct_calls(guard, 0, 20_000)  # warm up: fill every bounded structure
    gc.collect()
    blocks_at_20k = sys.getallocatedblocks()
    _distinct_calls(guard, 20_000, 170_000)
    gc.collect()
    blocks_at_170k = sys.getallocatedblocks()
    # Unbounded per-call state would hold several blocks per call: 150,000 calls → >300,000 blocks.
    assert blocks_at_170k - blocks_at_20k < 30_000, (blocks_at_20k, blocks_at_170k)
    # tracemalloc over the last 30,000 calls only (tracing is slow): what they left behind is bounded.
    tracemalloc.start()
    try:
        _distinct_calls(guard, 170_000, 200_000)
        gc.collect()
        retained, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Bounded state turns over within ~1.5 MB here; unbounded state retains ~800 bytes per call: >20 MB.
    assert retained < 4_000_000, retained
    assert guard.end_turn().tool_calls == 200_000
