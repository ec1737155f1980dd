"""An observer that fails is counted, and a telemetry observer still records what it can of the event."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from prometheus_client import CollectorRegistry

from otelguard import Guard, GuardConfig
from otelguard.core.observers import GuardObserver
from otelguard.telemetry import Telemetry

KEY = "test-signature-key"


class AgentObject:
    """What a host passes where the agent's name goes."""


def _run(guard: Guard, turns: int = 3, calls: int = 5) -> None:
    for _ in range(turns):
        guard.start_turn()
        for i in range(calls):
            guard.before_call("search", {"q": i})
            guard.after_call("search", {"q": i}, "r")
        guard.end_turn()


def _value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


def test_an_agent_object_where_a_name_goes_loses_no_call_and_no_turn() -> None:
    registry = CollectorRegistry()
    guard = Guard(GuardConfig(signature_key=KEY), Telemetry(TracerProvider(), registry), agent=AgentObject())  # type: ignore[arg-type]
    _run(guard)
    calls = _value(registry, "otelguard_tool_calls_total", agent="_other", tool="search", outcome="ok")
    turns = _value(registry, "otelguard_turns_total", agent="_other", outcome="completed")
    assert (calls, turns) == (15, 3)


class FailingProcessor(SpanProcessor):
    """A span pipeline that breaks at the end of every span (a real SDK provider runs it)."""

    def on_end(self, span: ReadableSpan) -> None:
        raise RuntimeError("exporter broke")


def test_a_failing_span_step_is_counted_and_the_call_still_counts() -> None:
    registry = CollectorRegistry()
    provider = TracerProvider()
    provider.add_span_processor(FailingProcessor())
    guard = Guard(GuardConfig(signature_key=KEY), Telemetry(provider, registry), agent="a")
    _run(guard, turns=1, calls=4)
    assert _value(registry, "otelguard_tool_calls_total", agent="a", tool="search", outcome="ok") == 4
    assert _value(registry, "otelguard_turns_total", agent="a", outcome="completed") == 1
    # four call spans failed to end: each failure is one internal error
    assert _value(registry, "otelguard_internal_errors_total", stage="observer") == 4


class Broken(GuardObserver):
    def __init__(self) -> None:
        self.stages: list[str] = []

    def on_call_end(self, call: Any, token: object) -> None:
        raise RuntimeError("observer bug")

    def on_internal_error(self, stage: str) -> None:
        self.stages.append(stage)


def test_an_observer_hears_of_its_own_failure() -> None:
    broken = Broken()
    guard = Guard(GuardConfig(signature_key=KEY), observers=[broken])
    _run(guard, turns=1, calls=3)
    assert broken.stages == ["observer"] * 3


def test_a_failing_telemetry_observer_counts_its_own_failure() -> None:
    """The group tells the failing observer too, so a lone telemetry observer's failure is counted."""

    class BrokenTelemetry(Telemetry):
        def bind(self, *args: Any, **kwargs: Any) -> Any:
            observer = super().bind(*args, **kwargs)

            def on_turn_start(turn: Any) -> None:
                raise RuntimeError("broken")

            observer.on_turn_start = on_turn_start  # type: ignore[method-assign]
            return observer

    registry = CollectorRegistry()
    guard = Guard(GuardConfig(signature_key=KEY), BrokenTelemetry(TracerProvider(), registry), agent="a")
    _run(guard, turns=2, calls=1)
    assert _value(registry, "otelguard_internal_errors_total", stage="observer") == 2
    assert _value(registry, "otelguard_tool_calls_total", agent="a", tool="search", outcome="ok") == 2
