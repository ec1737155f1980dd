"""Model events in a timed replay's metrics (``replay --openmetrics``, ``backtest``): kept in time
order beside the calls, played into the same families as a live exporter's, and a model stop or a
token cap hit marked for the alerts' intervals."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import orjson

from otelguard.backtest.run import _write_marks
from otelguard.config import TelemetrySettings
from otelguard.core.decisions import Decision
from otelguard.core.observers import ModelEvent
from otelguard.readers.events import SessionKey
from otelguard.replay.openmetrics import write_openmetrics
from otelguard.replay.timed import MODEL, Clock, MarkedCall, TimedEvents, TimeSortedSpill

T0 = 1_741_000_000.0
ALLOW = Decision("allow", "allow", tool_name="model")
HALT = Decision("halt", "repeated_reply_halt", "Stop.", tool_name="model", count=4, limit=4)
TOKENS = Decision("block", "cap_session", "spent", tool_name="model", count=9, limit=9, cap="tokens")


def reply(decision: Decision = ALLOW, **fields: Any) -> ModelEvent:
    return ModelEvent(
        agent="replay",
        turn_id="t",
        decision=decision,
        outcome=fields.pop("outcome", "no_tool_call"),
        **fields,
    )


def test_model_events_are_stamped_and_played_into_the_model_families(tmp_path: Path) -> None:
    clock = Clock()
    spill = TimeSortedSpill(tmp_path)
    events = TimedEvents(clock, spill)
    key = SessionKey("s1.jsonl", "s1")
    clock.key = key
    clock.now = None
    events.on_model_call(reply(input_tokens=5))  # before the session showed a time: left out
    for minute, event in enumerate(
        [
            reply(outcome="tool_calls", tool_calls=1, input_tokens=1000, output_tokens=50),
            reply(input_tokens=1100, output_tokens=60),
            reply(HALT, input_tokens=1200, output_tokens=70),
            ModelEvent(agent="replay", turn_id="t2", decision=TOKENS),
        ]
    ):
        clock.now = T0 + 60 * minute
        events.on_model_call(event)
    assert events.untimed_events == 1 and events.failure is None
    kept = list(spill.drain())
    assert [item[0] for _, item in kept] == [MODEL] * 4
    assert [type(item[1]).__name__ for _, item in kept] == [
        "ModelEvent",
        "ModelEvent",
        "MarkedCall",
        "MarkedCall",
    ]

    out = io.StringIO()
    write_openmetrics(out, kept, T0, T0 + 180, 15, TelemetrySettings())
    text = out.getvalue()
    last: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("otelguard_"):
            series, value, _ = line.rsplit(" ", 2)
            last[series] = value
    labels = 'job="otelguard_replay",instance="replay"'
    assert last[f'otelguard_model_calls_total{{agent="replay",outcome="no_tool_call",{labels}}}'] == "2.0"
    assert last[f'otelguard_model_calls_total{{agent="replay",outcome="tool_calls",{labels}}}'] == "1.0"
    assert last[f'otelguard_model_tokens_total{{agent="replay",kind="input",{labels}}}'] == "3300.0"
    assert last[f'otelguard_model_tokens_total{{agent="replay",kind="output",{labels}}}'] == "180.0"
    decision = (
        'otelguard_decisions_total{agent="replay",tool="model",action="halt",code="repeated_reply_halt",'
    )
    assert last[decision + labels + "}"] == "1.0"
    assert last[f'otelguard_cap_hits_total{{agent="replay",cap="tokens",scope="session",{labels}}}'] == "1.0"


def test_a_model_stop_and_a_token_cap_hit_are_marked_for_the_alert_intervals() -> None:
    key = SessionKey("s1.jsonl", "s1")
    stream = io.BytesIO()
    _write_marks(stream, T0, MarkedCall(reply(HALT), key))
    _write_marks(stream, T0 + 60, MarkedCall(ModelEvent(agent="replay", turn_id="t", decision=TOKENS), key))
    marks = [orjson.loads(line) for line in stream.getvalue().splitlines()]
    assert marks == [
        [T0, "halt", {"session_id": "s1", "path": "s1.jsonl", "call_id": None, "agent": "replay", "tool": "model",
                      "action": "halt", "code": "repeated_reply_halt"}],
        [T0 + 60, "cap_hit", {"session_id": "s1", "path": "s1.jsonl", "call_id": None, "agent": "replay",
                              "tool": "model", "action": "block", "code": "cap_session", "cap": "tokens",
                              "scope": "session"}],
        [T0 + 60, "halt", {"session_id": "s1", "path": "s1.jsonl", "call_id": None, "agent": "replay",
                           "tool": "model", "action": "block", "code": "cap_session", "cap": "tokens",
                           "scope": "session"}],
    ]  # fmt: skip
