"""The public Guard API: Decision, call(), wrap(), turns and summaries, fallback classifier."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
from typing import Any

import pytest

from otelguard import Decision, Guard, GuardConfig, Signature, TelemetrySettings, TurnSummary
from otelguard.core.observers import GuardObserver
from otelguard.testing import RecordingObserver, run_script

KEY = "test-signature-key"
CANARY = "CANARY-9d1e"


def make_guard(**config: Any) -> tuple[Guard, RecordingObserver]:
    recorder = RecordingObserver()
    guard = Guard(GuardConfig.from_mapping({"signature_key": KEY, **config}), observers=(recorder,))
    guard.start_turn()
    return guard, recorder


def warn_decision() -> Decision:
    guard, _ = make_guard()
    run_script(guard, [("flaky_api", {"secret": CANARY}, f"Error: {CANARY}", True)])
    guard.before_call("flaky_api", {"secret": CANARY})
    return guard.after_call("flaky_api", {"secret": CANARY}, f"Error: {CANARY}", failed=True)


# -- Decision ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "allows", "halts"),
    [
        ("allow", True, False),
        ("warn", True, False),
        ("reject", False, False),
        ("block", False, True),
        ("halt", False, True),
    ],
)
def test_decision_properties(action: str, allows: bool, halts: bool) -> None:
    """allows_execution is allow/warn; should_halt is block/halt."""
    decision = Decision(action=action, code="x")  # type: ignore[arg-type]
    assert decision.allows_execution is allows
    assert decision.should_halt is halts


def test_decision_is_frozen() -> None:
    """Decision is frozen."""
    decision = warn_decision()
    with pytest.raises(dataclasses.FrozenInstanceError):
        decision.action = "allow"  # type: ignore[misc]


def test_decision_fields() -> None:
    """A decision has action, code, message, tool_name, count, limit and signature (tool_name, args_hash)."""
    decision = warn_decision()
    assert (decision.action, decision.code, decision.tool_name, decision.count) == (
        "warn", "exact_failure_warn", "flaky_api", 2,
    )  # fmt: skip
    assert isinstance(decision.limit, int)
    assert isinstance(decision.message, str) and decision.message
    assert isinstance(decision.signature, Signature)
    assert decision.signature.tool_name == "flaky_api"
    assert len(decision.signature.args_hash) == 16


def test_allow_decision_carries_the_signature() -> None:
    """Every decision, allow included, names its tool and carries its Signature."""
    guard, recorder = make_guard()
    decision = guard.before_call("read_file", {"path": "a"})
    assert decision.action == "allow"
    assert decision.tool_name == "read_file"
    assert decision.signature == recorder.call_starts[-1].signature


def test_to_metadata_has_no_raw_values() -> None:
    """to_metadata() is a dict of codes and counts with none of the raw values."""
    decision = warn_decision()
    meta = decision.to_metadata()
    assert isinstance(meta, dict)
    assert meta["action"] == "warn"
    assert meta["code"] == "exact_failure_warn"
    assert meta["tool_name"] == "flaky_api"
    assert meta["count"] == 2
    assert decision.signature is not None
    assert meta["args_hash"] == decision.signature.args_hash
    assert CANARY not in json.dumps(meta)


def test_synthetic_result_is_json_for_the_model() -> None:
    """synthetic_result() is a JSON string carrying the message, for the model, with no raw values."""
    guard, _ = make_guard(caps={"turn": {"web_search": 1}})
    run_script(guard, [("web_search", {"q": CANARY}, CANARY, False)])
    decision = guard.before_call("web_search", {"q": CANARY + "2"})
    body = json.loads(decision.synthetic_result())
    assert decision.message in json.dumps(body, ensure_ascii=False)
    assert CANARY not in decision.synthetic_result()


@pytest.mark.parametrize("result", ["some output", {"rows": [1, 2]}])
def test_annotate_appends_guidance_for_warn(result: Any) -> None:
    """annotate() appends guidance to the result for a warn; the original result is kept."""
    decision = warn_decision()
    annotated = decision.annotate(result)
    assert annotated != result
    if isinstance(result, str):
        assert annotated.startswith(result)
        assert decision.message in annotated
    else:
        assert {k: annotated[k] for k in result} == result
        assert decision.message in json.dumps(annotated)


def test_annotate_appends_guidance_for_halt() -> None:
    """annotate() appends guidance for a halt."""
    guard, _ = make_guard(hard_stop=True)
    # four runs; the 5th to 11th are rejected (rejects_before_stop, default 7); the 12th runs and halts
    steps = run_script(guard, [("write_file", {"x": 1}, "done", False)] * 12)
    halt = steps[-1].decision
    assert halt.action == "halt"
    assert halt.message in halt.annotate("done")


def test_annotate_leaves_allow_unchanged() -> None:
    """annotate() returns the result unchanged for allow."""
    guard, _ = make_guard()
    decision = guard.before_call("read_file", {"path": "a"})
    result = {"text": "x"}
    assert decision.annotate(result) is result
    assert decision.annotate("text") == "text"


# -- turns ---------------------------------------------------------------------------------------


def test_end_turn_returns_a_summary() -> None:
    """end_turn() returns a TurnSummary: turn_id, agent, tool_calls, halted, halt_decision."""
    recorder = RecordingObserver()
    guard = Guard(GuardConfig(signature_key=KEY), agent="researcher", observers=(recorder,))
    guard.start_turn(turn_id="turn-1")
    run_script(guard, [("read_file", {"p": i}, "x", False) for i in range(3)])
    summary = guard.end_turn()
    assert isinstance(summary, TurnSummary)
    assert (summary.turn_id, summary.agent, summary.tool_calls, summary.halted, summary.halt_decision) == (
        "turn-1", "researcher", 3, False, None,
    )  # fmt: skip
    assert recorder.summaries == (summary,)


def test_start_turn_agent_overrides_the_guards_agent() -> None:
    """start_turn(agent=...) names the agent of that turn."""
    guard = Guard(GuardConfig(signature_key=KEY), agent="main")
    guard.start_turn(turn_id="t", agent="subagent-7")
    assert guard.end_turn().agent == "subagent-7"


def test_tool_calls_count_refused_calls() -> None:
    """TurnSummary.tool_calls counts every before_call of the turn, refused ones included."""
    guard, _ = make_guard(hard_stop=True)
    steps = run_script(guard, [("flaky_api", {"id": 1}, "Error", True)] * 13)
    assert [s.ran for s in steps] == [True] * 5 + [False] * 8  # seven rejects, then the block
    summary = guard.end_turn()
    assert summary.tool_calls == 13
    assert summary.halted is True
    assert summary.halt_decision is not None
    assert summary.halt_decision.code == "exact_failure_block"


def test_halt_decision_lifecycle() -> None:
    """halt_decision is None until the first block/halt, keeps the first one, and clears at the next turn."""
    guard, _ = make_guard(hard_stop=True)
    assert guard.halt_decision is None
    steps = run_script(guard, [("write_file", {"x": 1}, "done", False)] * 11)  # four runs, seven rejects
    assert guard.halt_decision is None
    steps += run_script(guard, [("write_file", {"x": 1}, "done", False)])  # it runs: identical_call_halt
    first = steps[-1].decision
    assert first.code == "identical_call_halt"
    assert guard.halt_decision == first
    guard.before_call("read_file", {"p": 1})
    assert guard.halt_decision == first
    assert guard.end_turn().halt_decision == first
    guard.start_turn()
    assert guard.halt_decision is None


def test_reset_for_turn_is_an_alias_of_start_turn() -> None:
    """reset_for_turn() starts a new turn like start_turn()."""
    guard, recorder = make_guard(hard_stop=True)
    run_script(guard, [("write_file", {"x": 1}, "done", False)] * 5)
    guard.reset_for_turn()
    assert guard.halt_decision is None
    assert len(recorder.turns_started) == 2


def test_turns_are_reported_to_observers() -> None:
    """Observers see turn starts with turn_id and agent."""
    guard, recorder = make_guard()
    guard.start_turn(turn_id="second", agent="a2")
    assert [(t.turn_id, t.agent) for t in recorder.turns_started] == [(None, "default"), ("second", "a2")]


# -- fallback failure classifier -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("result", "outcome"),
    [
        ({"error": "boom"}, "failed"),
        ('{"error": "boom"}', "failed"),
        ('{"success": false, "data": null}', "failed"),
        ({"success": False}, "failed"),
        ('{"exit_code": 2, "stdout": ""}', "failed"),
        ({"exit_code": 1}, "failed"),
        ("Error: file not found", "failed"),
        ('{"exit_code": 0, "stdout": "fine"}', "ok"),
        ({"success": True}, "ok"),
        ("All tests passed", "ok"),
        ("no Error at the start", "ok"),
        (None, "ok"),
        ({"error": None, "data": 1}, "ok"),
    ],
)
def test_fallback_classifier_when_failed_is_none(result: Any, outcome: str) -> None:
    """failed=None: an "error", "success": false, a non-zero "exit_code" or text starting with Error is a failure."""
    guard, recorder = make_guard()
    guard.before_call("custom_tool", {"a": 1})
    guard.after_call("custom_tool", {"a": 1}, result)
    assert recorder.outcomes == [outcome]


def test_failed_defaults_to_none() -> None:
    """after_call's failed defaults to None (the fallback classifier decides)."""
    guard, recorder = make_guard()
    for _ in range(2):
        guard.before_call("custom_tool", {"a": 1})
        decision = guard.after_call("custom_tool", {"a": 1}, "Error: nope")
    assert recorder.outcomes == ["failed", "failed"]
    assert decision.code == "exact_failure_warn"


def test_explicit_failed_overrides_the_classifier() -> None:
    """An explicit failed=False/True wins over what the result looks like."""
    guard, recorder = make_guard()
    run_script(
        guard, [("custom_tool", {"a": 1}, "Error: looks bad", False), ("custom_tool", {"a": 2}, "fine", True)]
    )
    assert recorder.outcomes == ["ok", "failed"]


# -- guard.call(...) -----------------------------------------------------------------------------


def test_call_context_manager_runs_and_finishes() -> None:
    """with guard.call(...) as call: call.decision, call.allowed, call.finish(result, failed=..., refusal=...)."""
    guard, recorder = make_guard()
    with guard.call("read_file", {"path": "a"}, call_id="c1") as call:
        assert call.allowed is True
        assert call.decision.action == "allow"
        after = call.finish("contents", failed=False)
    assert isinstance(after, Decision)
    assert recorder.outcomes == ["ok"]
    assert recorder.calls[0].call_id == "c1"


def test_call_finish_with_refusal() -> None:
    """call.finish(refusal=...) reports a refusal."""
    guard, recorder = make_guard()
    with guard.call("Bash", {"command": "x"}) as call:
        call.finish("nope", refusal="permission_required")
    assert recorder.outcomes == ["refused"]


def test_call_exception_counts_as_failure_and_is_reraised() -> None:
    """An exception escaping an allowed, unfinished block counts as a failure and is re-raised."""
    guard, recorder = make_guard(hard_stop=True)
    for _ in range(5):
        with pytest.raises(KeyError), guard.call("flaky_api", {"id": 1}) as call:
            assert call.allowed
            raise KeyError("boom")
    assert recorder.outcomes == ["failed"] * 5
    with guard.call("flaky_api", {"id": 1}) as call:
        assert call.allowed is False
        assert call.decision.code == "exact_failure_reject"


def test_call_refused_block_reports_not_allowed() -> None:
    """A refused call's block sees allowed False and the refusing decision."""
    guard, _ = make_guard(caps={"turn": {"web_search": 1}, "on_hit": "reject"})
    with guard.call("web_search", {"q": 1}) as call:
        call.finish("r", failed=False)
    with guard.call("web_search", {"q": 2}) as call:
        assert call.allowed is False
        assert call.decision.code == "cap_turn"
        result = call.decision.synthetic_result()
    assert json.loads(result)


async def _async_call_block(guard: Guard) -> Decision:
    async with guard.call("read_file", {"path": "a"}) as call:
        await asyncio.sleep(0)
        return call.finish("same", failed=False)


def test_call_works_from_asyncio() -> None:
    """guard.call works from asyncio code (async with)."""
    guard, _ = make_guard()
    first = asyncio.run(_async_call_block(guard))
    second = asyncio.run(_async_call_block(guard))
    assert first.code == "allow"
    assert second.code == "no_progress_warn"


# -- guard.wrap(...) -----------------------------------------------------------------------------


def test_wrap_sync_function() -> None:
    """wrap(fn): tool name defaults to fn.__name__, args are bound to parameter names, fn runs once."""
    guard, recorder = make_guard()
    calls: list[tuple[str, int]] = []

    def read_file(path: str, limit: int = 10) -> str:
        calls.append((path, limit))
        return f"contents of {path}"

    wrapped = guard.wrap(read_file)
    assert wrapped("a.txt", limit=5) == "contents of a.txt"
    assert calls == [("a.txt", 5)]
    event = recorder.calls[0]
    assert event.tool_name == "read_file"
    assert event.outcome == "ok"
    other, other_recorder = make_guard()
    other.before_call("read_file", {"path": "a.txt", "limit": 5})
    assert event.signature == other_recorder.call_starts[0].signature


def test_wrap_positional_and_keyword_calls_are_one_signature() -> None:
    """Arguments are bound to parameter names: f(1) and f(x=1) are the same call."""
    guard, recorder = make_guard()

    def lookup(key: str) -> str:
        return "v"

    wrapped = guard.wrap(lookup)
    wrapped("k")
    wrapped(key="k")
    assert recorder.calls[0].signature == recorder.calls[1].signature


def test_wrap_tool_name_override() -> None:
    """wrap(fn, tool_name=...) overrides the tool name."""
    guard, recorder = make_guard()
    guard.wrap(lambda q: "r", tool_name="web_search")("x")
    assert recorder.calls[0].tool_name == "web_search"


def test_wrap_exception_counts_as_failure_and_is_reraised() -> None:
    """An exception from the wrapped function counts as a failure and is re-raised."""
    guard, recorder = make_guard()

    def flaky_api(item: int) -> str:
        raise RuntimeError("down")

    wrapped = guard.wrap(flaky_api)
    with pytest.raises(RuntimeError):
        wrapped(1)
    assert recorder.outcomes == ["failed"]


def test_wrap_refused_call_returns_synthetic_result_without_calling_fn() -> None:
    """A refused call returns decision.synthetic_result() without calling fn."""
    guard, _ = make_guard(hard_stop=True)
    runs: list[int] = []

    def flaky_api(item: int) -> str:
        runs.append(item)
        raise RuntimeError("down")

    wrapped = guard.wrap(flaky_api)
    for _ in range(5):
        with pytest.raises(RuntimeError):
            wrapped(1)
    for _ in range(7):  # rejected each time (rejects_before_stop, default 7): fn is not called
        rejected = wrapped(1)
        assert json.loads(rejected)["otelguard"]["code"] == "exact_failure_reject"
        assert guard.halt_decision is None
    result = wrapped(1)
    assert len(runs) == 5
    assert guard.halt_decision is not None
    assert result == guard.halt_decision.synthetic_result()


def test_wrap_async_function() -> None:
    """wrap works on async functions: the wrapper is awaitable and returns the result."""
    guard, recorder = make_guard()

    async def web_fetch(url: str) -> str:
        await asyncio.sleep(0)
        return f"page {url}"

    wrapped = guard.wrap(web_fetch)
    assert asyncio.iscoroutinefunction(wrapped)
    assert asyncio.run(wrapped("https://example.org")) == "page https://example.org"
    assert recorder.calls[0].tool_name == "web_fetch"
    assert recorder.outcomes == ["ok"]


def test_wrap_async_refused_and_exceptions() -> None:
    """An async wrapped tool: exceptions count as failures and are re-raised; a refused call is not awaited."""
    guard, recorder = make_guard(hard_stop=True)
    runs: list[str] = []

    async def flaky_api(item: str) -> str:
        runs.append(item)
        raise ValueError("down")

    wrapped = guard.wrap(flaky_api)

    async def drive() -> Any:
        for _ in range(5):
            with pytest.raises(ValueError):
                await wrapped("x")
        return await wrapped("x")

    result = asyncio.run(drive())
    assert len(runs) == 5
    assert recorder.outcomes[:5] == ["failed"] * 5
    assert json.loads(result)["otelguard"]["code"] == "exact_failure_reject"


def test_wrap_annotates_warnings_into_the_result() -> None:
    """A wrapped tool's result carries the guard's guidance when the call warns."""
    guard, _ = make_guard()

    def read_file(path: str) -> str:
        return "same"

    wrapped = guard.wrap(read_file)
    assert wrapped("a") == "same"
    second = wrapped("a")
    assert second.startswith("same")
    assert "no_progress_warn" in second or "same result" in second


# -- construction and telemetry binding ----------------------------------------------------------


def test_guard_with_no_arguments_works() -> None:
    """Guard() with the default config and no telemetry works (pure)."""
    guard = Guard()
    guard.start_turn()
    assert guard.before_call("read_file", {"path": "x"}).allows_execution
    assert guard.after_call("read_file", {"path": "x"}, "data", failed=False).allows_execution
    assert guard.end_turn().tool_calls == 1


def test_calls_before_start_turn_work() -> None:
    """A guard answers even when the host never called start_turn()."""
    guard = Guard(GuardConfig(signature_key=KEY))
    assert guard.before_call("read_file", {"path": "x"}).allows_execution
    guard.after_call("read_file", {"path": "x"}, "data", failed=False)
    assert guard.end_turn().tool_calls == 1


class _BindingTelemetry:
    """An object with ``bind(settings)`` that is not otelguard's ``Telemetry``."""

    def bind(self, settings: TelemetrySettings) -> GuardObserver:
        return RecordingObserver()


def test_telemetry_is_bound_once_with_the_config_section() -> None:
    """A ``Telemetry`` is bound to the guard's ``config.telemetry``: ``span_mode: decisions`` makes a
    span of the call that carried a decision and of none other."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from prometheus_client import CollectorRegistry

    from otelguard import Telemetry

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    registry = CollectorRegistry()
    config = GuardConfig.from_mapping({"signature_key": KEY, "telemetry": {"span_mode": "decisions"}})
    guard = Guard(config, telemetry=Telemetry(provider, registry, turn_spans=False))
    guard.start_turn()
    run_script(guard, [("read_file", {"p": 1}, "x", False)] * 2)
    guard.end_turn()
    labels = {"agent": "default", "tool": "read_file", "outcome": "ok"}
    assert registry.get_sample_value("otelguard_tool_calls_total", labels) == 2
    assert [span.attributes["otelguard.decision.code"] for span in spans.get_finished_spans()] == [  # type: ignore[index]
        "no_progress_warn"
    ]


@pytest.mark.parametrize("nothing", [None, False])
def test_no_telemetry_is_no_observer(nothing: bool | None) -> None:
    from otelguard.hosting import edges_for

    assert edges_for(nothing).observer is None
    recorder = RecordingObserver()
    guard = Guard(GuardConfig(signature_key=KEY), nothing, observers=[recorder])
    guard.start_turn()
    run_script(guard, [("read_file", {"p": 1}, "x", False)])
    assert recorder.outcomes == ["ok"]


@pytest.mark.parametrize(
    ("telemetry", "hint"),
    [
        (RecordingObserver(), "RecordingObserver; an observer goes to observers="),
        (_BindingTelemetry(), "_BindingTelemetry"),
        ("yes", "str"),
        (1, "int"),
    ],
)
def test_telemetry_of_any_other_kind_is_a_type_error_naming_the_parameter(
    telemetry: object, hint: str
) -> None:
    """``telemetry=`` takes a ``Telemetry``, ``True`` or nothing; an observer goes to ``observers=``."""
    from otelguard.hosting import session_host

    expected = f"telemetry: expected an otelguard.Telemetry, True (the process-wide default) or None/False, not {hint}"
    with pytest.raises(TypeError) as raised:
        Guard(GuardConfig(signature_key=KEY), telemetry)  # type: ignore[arg-type]
    assert str(raised.value) == expected
    with pytest.raises(TypeError, match=r"^telemetry: expected"):
        session_host(GuardConfig(signature_key=KEY), telemetry=telemetry)  # type: ignore[arg-type]


def test_an_observer_of_ones_own_goes_to_observers() -> None:
    recorder = RecordingObserver()
    guard = Guard(GuardConfig(signature_key=KEY), observers=[recorder])
    guard.start_turn()
    run_script(guard, [("read_file", {"p": 1}, "x", False)])
    assert recorder.outcomes == ["ok"]


def test_observers_run_in_registration_order() -> None:
    """Observers run in registration order."""
    order: list[str] = []

    class Named(RecordingObserver):
        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name

        def on_call_start(self, call: Any) -> object:
            order.append(self.name)
            return super().on_call_start(call)

    guard = Guard(GuardConfig(signature_key=KEY), observers=(Named("first"), Named("second"), Named("third")))
    guard.start_turn()
    guard.before_call("read_file", {"p": 1})
    assert order == ["first", "second", "third"]


def test_observer_tokens_are_handed_back() -> None:
    """The token on_call_start returns is handed back to on_call_end for the same call."""
    guard, recorder = make_guard(caps={"turn": {"web_search": 1}})
    run_script(
        guard,
        [("read_file", {"p": i}, "x", False) for i in range(3)]
        + [("web_search", {"q": i}, "r", False) for i in range(2)],
    )
    assert recorder.unmatched_tokens == 0
    assert len(recorder.calls) == 5


class _Parses:
    """Counts the JSON parses (``orjson.loads``, ``json.loads``) made while it is installed, through
    the interpreter's profiler hook: nothing is replaced, the real parsers run."""

    def __init__(self) -> None:
        self.count = 0

    def __enter__(self) -> _Parses:
        import orjson

        def hook(frame: Any, event: str, arg: Any) -> None:
            orjson_parse = event == "c_call" and arg is orjson.loads
            if orjson_parse or (event == "call" and frame.f_code is json.loads.__code__):
                self.count += 1

        sys.setprofile(hook)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(None)


@pytest.mark.parametrize(
    "args",
    [
        '{"tasks": [{"goal": "a"}, {"goal": "b"}], "context": "x"}',
        b'{"tasks": [{"goal": "\\u00e9"}], "z": [[[[{"deep": true}]]]]}',
    ],
)
def test_json_string_args_are_parsed_once_per_call(args: str | bytes) -> None:
    """JSON-string arguments are read once for a call: the signature and the spawn count of a spawn
    tool come from one parse, and the after_call of the same call (by call id, or the same args
    object) parses nothing (it used to be once for the hash and again for the spawn count)."""
    guard, recorder = make_guard()
    with _Parses() as parses:
        before = guard.before_call("delegate_task", args, call_id="call-1")
        guard.after_call("delegate_task", args, "done", failed=False, call_id="call-1")
    assert parses.count == 1
    with _Parses() as parses, guard.call("delegate_task", args) as call:
        call.finish("done", failed=False)
    assert parses.count == 1
    assert (
        before.signature
        == Guard(GuardConfig(signature_key=KEY)).before_call("delegate_task", json.loads(args)).signature
    )
    assert [event.spawn_count for event in recorder.calls] == [len(json.loads(args)["tasks"])] * 2
