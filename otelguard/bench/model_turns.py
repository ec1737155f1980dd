"""What a model event costs beside a tool call, measured in one run on one guard.

An agent that asks the model once per tool call makes as many model events as tool calls, so the
guard's ``before_model`` + ``after_model`` must cost no more than its ``before_call`` + ``after_call``
on the quiet path. Each step of a turn is a model reply asking for one call (a short text, the call,
the usage the provider reports), then that call: both timed on their own, on the same guard, in the
same loop, so drift and load touch them alike. Reported: the medians over the rounds, per event and
per call, and their ratio; once with the default config (no token cap: the quiet path) and once
with a token cap on the turn and the session that the workload never reaches.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Final

from otelguard import Guard, GuardConfig
from otelguard.bench.measure import percentile
from otelguard.bench.runners import BENCH_KEY, TURNS_PER_SESSION
from otelguard.config.names import TOKENS
from otelguard.core.scripted import ScriptedCall

__all__ = ["MODEL_TARGET", "model_vs_tool"]

MODEL_TARGET: Final = 1.0
"""A model event may cost at most what a tool call costs (the ratio of their per-event medians)."""

_WARMUP_TURNS: Final = 2
_INPUT_TOKENS: Final = 4_000
_OUTPUT_TOKENS: Final = 120
_UNREACHED: Final = 10**12


def _configs() -> dict[str, GuardConfig]:
    caps = {"turn": {TOKENS: _UNREACHED}, "session": {TOKENS: _UNREACHED}}
    return {
        "quiet": GuardConfig.from_mapping({"signature_key": BENCH_KEY}),
        "token_caps": GuardConfig.from_mapping({"signature_key": BENCH_KEY, "caps": caps}),
    }


def _replies(turn: Sequence[ScriptedCall]) -> list[str]:
    """The text of the reply that asks for each call: short and different each time, as a model's
    words before a call are."""
    return [f"Next I will use {call.tool_name} (step {number})." for number, call in enumerate(turn)]


def _round(guard: Guard, turn: Sequence[ScriptedCall], replies: Sequence[str]) -> tuple[int, int]:
    """One turn: each reply's model event, then its call; (model ns, tool ns)."""
    clock = time.perf_counter_ns
    model_ns = tool_ns = 0
    guard.start_turn()
    for call, text in zip(turn, replies, strict=True):
        start = clock()
        guard.before_model()
        guard.after_model(text, tool_calls=1, input_tokens=_INPUT_TOKENS, output_tokens=_OUTPUT_TOKENS)
        middle = clock()
        decision = guard.before_call(call.tool_name, call.args, call.call_id)
        if decision.allows_execution:
            guard.after_call(call.tool_name, call.args, call.result, failed=call.failed, call_id=call.call_id)
        tool_ns += clock() - middle
        model_ns += middle - start
    guard.end_turn()
    return model_ns, tool_ns


def _measure(make_guard: Callable[[], Guard], turns: Sequence[Sequence[ScriptedCall]]) -> dict[str, Any]:
    replies = [_replies(turn) for turn in turns]
    model: list[float] = []
    tool: list[float] = []
    guard = make_guard()
    for index, turn in enumerate(turns):
        if index % TURNS_PER_SESSION == 0:
            guard = make_guard()
        model_ns, tool_ns = _round(guard, turn, replies[index])
        if index >= _WARMUP_TURNS and turn:
            model.append(model_ns / len(turn))
            tool.append(tool_ns / len(turn))
    if not model:
        return {"model_event_us": None, "tool_call_us": None, "ratio": None, "met": None}
    model_median, tool_median = percentile(model, 0.5), percentile(tool, 0.5)
    ratio = model_median / tool_median if tool_median else float("inf")
    return {
        "model_event_us": round(model_median / 1000.0, 3),
        "tool_call_us": round(tool_median / 1000.0, 3),
        "ratio": round(ratio, 3),
        "met": ratio <= MODEL_TARGET,
    }


def model_vs_tool(turns: Sequence[Sequence[ScriptedCall]]) -> dict[str, Any]:
    """Per configuration (``quiet``, ``token_caps``): the model event's and the tool call's per-event
    µs (medians over the rounds), their ratio, and whether it is within ``MODEL_TARGET``."""
    figures: dict[str, Any] = {"target": MODEL_TARGET}
    for name, config in _configs().items():
        figures[name] = _measure(lambda config=config: Guard(config), turns)  # type: ignore[misc]
    return figures
