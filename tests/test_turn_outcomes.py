"""How a turn ended: ``completed``, ``halted`` or ``errored`` (``end_turn(errored=True)``), on the summary,
the ``otelguard_turns_total`` counter and the ``invoke_agent`` turn span."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from prometheus_client import CollectorRegistry

from otelguard import Decision, Guard, GuardConfig, GuardHalted, Telemetry
from otelguard.core.decisions import TURN_OUTCOMES
from otelguard.core.sessions import SessionHost
from otelguard.hosting import edges_for
from otelguard.integrations._protocol import end_run, errored

KEY = "test-signature-key"
CAPPED = GuardConfig(signature_key=KEY, mode="unattended", caps={"turn": {"web_search": 1}})


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    spans = InMemorySpanExporter()
    yield spans
    spans.clear()


def metered(exporter: InMemorySpanExporter, registry: CollectorRegistry) -> Telemetry:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Telemetry(provider, registry, turn_spans=True)


def turns(registry: CollectorRegistry, agent: str = "bot") -> dict[str, float]:
    return {
        outcome: registry.get_sample_value("otelguard_turns_total", {"agent": agent, "outcome": outcome})
        or 0.0
        for outcome in TURN_OUTCOMES
    }


def turn_span(exporter: InMemorySpanExporter) -> ReadableSpan:
    (span,) = [s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent ")]
    exporter.clear()
    return span


def halt(guard: Guard) -> None:
    guard.before_call("web_search", {"q": 1})
    guard.after_call("web_search", {"q": 1}, "r", failed=False)
    assert guard.before_call("web_search", {"q": 2}).should_halt


def test_end_turn_errored_is_counted_as_errored_and_a_halt_wins(exporter: InMemorySpanExporter) -> None:
    registry = CollectorRegistry()
    guard = Guard(CAPPED, metered(exporter, registry), agent="bot")
    guard.start_turn()
    guard.before_call("read_file", {"p": 1})
    summary = guard.end_turn(errored=True)
    assert (summary.errored, summary.halted, summary.outcome, summary.tool_calls) == (
        True,
        False,
        "errored",
        1,
    )
    assert turns(registry) == {"completed": 0, "halted": 0, "errored": 1}

    guard.start_turn()
    halt(guard)
    halted = guard.end_turn(errored=True)  # the run raised after the guard had halted it
    assert (halted.errored, halted.outcome) == (True, "halted")

    guard.start_turn()
    assert guard.end_turn().outcome == "completed"
    assert turns(registry) == {"completed": 1, "halted": 1, "errored": 1}


def test_only_end_turn_says_errored(exporter: InMemorySpanExporter) -> None:
    """A turn that the next ``start_turn`` ends, or one never begun, is not an errored one."""
    registry = CollectorRegistry()
    guard = Guard(CAPPED, metered(exporter, registry), agent="bot")
    assert guard.end_turn(errored=True).outcome == "completed"  # no turn: nothing is counted
    guard.start_turn()
    guard.start_turn()
    guard.end_turn()
    assert turns(registry) == {"completed": 2, "halted": 0, "errored": 0}


def test_every_turn_outcome_starts_at_zero() -> None:
    registry = CollectorRegistry()
    Telemetry(registry=registry).prime("bot")
    assert {
        outcome: registry.get_sample_value("otelguard_turns_total", {"agent": "bot", "outcome": outcome})
        for outcome in TURN_OUTCOMES
    } == {"completed": 0.0, "halted": 0.0, "errored": 0.0}


def test_the_turn_span_says_how_the_turn_ended(exporter: InMemorySpanExporter) -> None:
    guard = Guard(CAPPED, metered(exporter, CollectorRegistry()), agent="bot")
    guard.start_turn()
    guard.end_turn(errored=True)
    span = turn_span(exporter)
    attributes = dict(span.attributes or {})
    assert span.status.status_code is StatusCode.ERROR
    assert attributes["otelguard.turn.outcome"] == "errored" and attributes["error.type"] == "run_error"
    assert attributes["otelguard.turn.halted"] is False and "otelguard.turn.halt_code" not in attributes

    guard.start_turn()
    guard.end_turn()
    span = turn_span(exporter)
    assert span.status.status_code is StatusCode.UNSET
    assert dict(span.attributes or {})["otelguard.turn.outcome"] == "completed"
    assert "error.type" not in dict(span.attributes or {})

    guard.start_turn()
    halt(guard)
    guard.end_turn(errored=True)
    attributes = dict(turn_span(exporter).attributes or {})
    assert attributes["otelguard.turn.outcome"] == "halted" and attributes["error.type"] == "cap_turn"


def test_a_session_run_left_in_error_ends_errored_once() -> None:
    registry = CollectorRegistry()
    host = SessionHost(CAPPED, edges=edges_for(Telemetry(registry=registry)), agent="bot")
    session = host.session("s")
    run = object()
    session.enter_run(run)
    end_run(session, run, ValueError("boom"))
    end_run(session, run, ValueError("boom"))  # that run's turn is over: nothing more
    session.enter_run(object())
    assert session.end_turn(errored=True) is not None
    assert turns(registry) == {"completed": 0, "halted": 0, "errored": 2}


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (None, False),
        (ValueError("boom"), True),
        (
            GuardHalted(Decision(action="halt", code="cap_turn")),
            False,
        ),  # the adapter's own halt: that turn was halted
        (asyncio.CancelledError(), False),  # control flow: the caller cancelled the run
        (KeyboardInterrupt(), False),
    ],
)
def test_which_exceptions_make_a_run_errored(error: BaseException | None, expected: bool) -> None:
    assert errored(error) is expected
