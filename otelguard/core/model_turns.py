"""Model turns: the guard's two model events, ``before_model`` and ``after_model`` (docs/model-turns.md).

A turn's model calls come between its tool calls: one ``before_model`` per model request, one
``after_model`` per response. ``before_model`` answers ``allow``, or ``block`` when the turn is
halted (``turn_halted``) or a token cap is spent (``cap_turn``/``cap_session``/``cap_tree``, cap
``tokens``): the model is not called. It also counts the reply before it when that reply called
nothing (only now is it known not to be a final answer) and may answer its ``no_action`` or
``repeated_reply`` warning (the model is called) or halt. ``after_model`` charges the tokens, counts
a reply that made only invalid calls, and answers ``allow``, ``warn`` or ``halt``. Every decision
about the model has ``tool_name`` ``"model"``; a block or halt halts the turn as a tool's does.

Like the tool calls: the reply's text is read outside the guard's lock (into a bounded sketch,
never kept), counts change under it, observers hear of each event after it is released (a
``ModelEvent``, with no text), and nothing raises into the agent loop.
"""

from __future__ import annotations

import math
import operator
import threading
from collections.abc import Callable
from heapq import nsmallest
from typing import TYPE_CHECKING, Any, Final, Protocol

import xxhash

from otelguard.core import decisions as codes
from otelguard.core.decisions import MODEL_TOOL, Decision, ModelOutcome
from otelguard.core.detectors.precedence import AFTER_MODEL, TOKEN_CAPS
from otelguard.core.detectors.replies import NO_TEXT, Reply, ReplyCounts, Sketch, bounded_text, chants
from otelguard.core.detectors.stagnation import near, sketch
from otelguard.core.observers import ModelEvent, ObserverGroup

if TYPE_CHECKING:
    from otelguard.config import GuardConfig
    from otelguard.core.caps import CapLedger
    from otelguard.core.pending_calls import TurnState
    from otelguard.core.token_caps import TokenCap

__all__ = ["MAX_COUNT", "MAX_TOKENS", "ModelCalls", "ModelTurns", "reply_sketch"]

MAX_TOKENS: Final = 10**12
"""Tokens one reply may report for one kind: more is taken as this many (a counter never overflows)."""
MAX_COUNT: Final = 10**6
"""Tool calls one reply may report: more is taken as this many."""
_CHUNK: Final = 4096  # characters sketched at a time: stagnation's sketch reads no more of a text
_SKETCH: Final = 16  # shingle digests a sketch keeps, as stagnation's
_ALLOW: Final = Decision(action="allow", code=codes.ALLOW, tool_name=MODEL_TOOL)
_hash64: Final = xxhash.xxh3_64_intdigest


class ModelTurns:
    """The model events of one guard: its token caps and its reply detectors, walked in the order
    ``precedence`` declares, under the guard's lock; its observers told after."""

    __slots__ = ("_caps", "_gates", "_lock", "_observers", "_reads", "_rules", "_tree")

    def __init__(
        self, config: GuardConfig, caps: CapLedger, lock: threading.Lock, observers: ObserverGroup
    ) -> None:
        self._caps = caps
        self._lock = lock
        self._observers = observers
        self._tree = caps.tree.tree if caps.tree is not None else None
        # the token caps with a limit (a tree's only for a guard in a tree), in their order
        self._gates: tuple[tuple[TokenCap, int], ...] = tuple(
            (cap, limit)
            for cap in TOKEN_CAPS
            if (limit := cap.limit(config)) > 0 and (cap.scope != "tree" or caps.tree is not None)
        )
        # the reply detectors that may fire with these settings, each with its threshold
        self._rules = tuple(
            (rule, (config.warn_after if rule.warns else config.hard_stop_after)[rule.name])
            for rule in AFTER_MODEL
            if (config.warnings if rule.warns else config.hard_stop_enabled)
        )
        self._reads = bool(self._rules)  # no detector, no text read

    def before(self, current_turn: Callable[[], TurnState]) -> Decision:
        try:
            turn = current_turn()
            with self._lock:
                if turn.halt is not None:
                    decision = _turn_halted(turn.halt)
                else:
                    counts = turn.model
                    judged = self._judge(counts) if counts is not None and counts.take_pending(near) else None
                    decision = self._spent(0, "block") or judged or _ALLOW
                if decision is not _ALLOW:
                    turn.record(decision)
            if self._observers.any:
                self._observers.model_called(ModelEvent(turn.agent, turn.turn_id, decision, tree=self._tree))
            return decision
        except Exception as exc:
            return self._failed("before_model", exc)

    def after(
        self,
        current_turn: Callable[[], TurnState],
        text: Any,
        tool_calls: Any,
        invalid_tool_calls: Any,
        input_tokens: Any,
        output_tokens: Any,
    ) -> Decision:
        try:
            calls, invalid = _count(tool_calls), _count(invalid_tool_calls)
            tokens_in, tokens_out = _tokens(input_tokens), _tokens(output_tokens)
            outcome: ModelOutcome = (
                "tool_calls" if calls else "invalid_tool_call" if invalid else "no_tool_call"
            )
            reply = _read(text) if self._reads and not calls else NO_TEXT  # outside the lock
            turn = current_turn()
            with self._lock:
                decision = self._after_locked(turn, outcome, reply, (tokens_in or 0) + (tokens_out or 0))
            if self._observers.any:
                event = ModelEvent(
                    turn.agent,
                    turn.turn_id,
                    decision,
                    outcome,
                    calls,
                    invalid,
                    tokens_in,
                    tokens_out,
                    self._tree,
                )
                self._observers.model_called(event)
            return decision
        except Exception as exc:
            return self._failed("after_model", exc)

    def _after_locked(self, turn: TurnState, outcome: ModelOutcome, reply: Reply, tokens: int) -> Decision:
        counts = turn.model
        if counts is None:
            counts = turn.model = ReplyCounts()
        capped = self._spent(tokens, "halt") if tokens else None  # charged whatever follows
        judged = None
        if outcome == "tool_calls":
            counts.valid_call()
        elif outcome == "invalid_tool_call":
            counts.count(reply, near)
            judged = self._judge(counts)
        else:
            counts.defer(reply)
        decision = _turn_halted(turn.halt) if turn.halt is not None else capped or judged or _ALLOW
        if decision is not _ALLOW:
            turn.record(decision)
        return decision

    def _spent(self, amount: int, action: codes.Action) -> Decision | None:
        """Charge ``amount`` tokens to every token cap (0: read them); the first spent one's decision."""
        spent = None
        for cap, limit in self._gates:
            used = cap.used(self._caps, amount, limit)
            if spent is None and used >= limit:
                spent = cap.spent(used, limit, action)
        return spent

    def _judge(self, counts: ReplyCounts) -> Decision | None:
        for rule, limit in self._rules:
            decision = rule.judge(counts, limit)
            if decision is not None:
                return decision
        return None

    def _failed(self, stage: str, exc: Exception) -> Decision:
        self._observers.internal_error(stage, exc)
        return Decision(action="allow", code=codes.INTERNAL_ERROR, tool_name=MODEL_TOOL)


class _ModelGuard(Protocol):
    _model_turns: ModelTurns

    def _current_turn(self) -> TurnState: ...


class ModelCalls:
    """The model events of the guard (``otelguard.core.guard.Guard`` has them from here)."""

    __slots__ = ()

    def before_model(self: _ModelGuard) -> Decision:
        """Before each model request: ``allow``, or ``block`` when the turn is halted or a token cap is
        spent (do not call the model; stop the turn). May answer the ``no_action`` or
        ``repeated_reply`` verdict on the reply before, which the harness answered: a warning (call
        the model, passing on ``decision.message``) or a halt. Never raises."""
        return self._model_turns.before(self._current_turn)

    def after_model(
        self: _ModelGuard,
        text: Any = None,
        *,
        tool_calls: int = 0,
        invalid_tool_calls: int = 0,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
    ) -> Decision:
        """After each model response: ``text`` (read in process only), the valid tool calls the harness
        will run, the ones it cannot (unparseable, unknown tool, wrong arguments), and the tokens as
        the provider reports them (``None``: not reported). ``allow``, ``warn`` or ``halt`` (a spent
        token cap, a stalled model: stop the turn). Never raises."""
        return self._model_turns.after(
            self._current_turn, text, tool_calls, invalid_tool_calls, input_tokens, output_tokens
        )


def _turn_halted(halt: Decision) -> Decision:
    return Decision(
        action="block",
        code=codes.TURN_HALTED,
        message=(
            f"Not called: this turn was stopped earlier ({halt.code} on {halt.tool_name}). "
            "Do not call the model again in this turn; tell the user what happened."
        ),
        tool_name=MODEL_TOOL,
        count=halt.count,
        limit=halt.limit,
    )


def _count(value: Any) -> int:
    """A count of tool calls as a host reports it: a whole number from 0 to ``MAX_COUNT`` (``True``:
    1); anything else (a negative, a string, a NaN) is 0."""
    number = int(value) if type(value) is bool else _whole(value)
    return min(number, MAX_COUNT) if number is not None and number >= 0 else 0


def _tokens(value: Any) -> int | None:
    """Tokens as a provider reports them: a whole number from 0 to ``MAX_TOKENS``; anything else
    (``None``, a negative, a ``bool``, a string, a NaN) is unknown usage, which charges nothing."""
    number = None if type(value) is bool else _whole(value)
    return min(number, MAX_TOKENS) if number is not None and number >= 0 else None


def _whole(value: Any) -> int | None:
    """A number as a whole number: an ``int`` (or anything that is one, a NumPy integer), a finite
    float cut to its whole part; ``None`` for anything else, whatever its methods do."""
    if type(value) is float:
        return int(value) if math.isfinite(value) else None
    try:
        number = operator.index(value)
    except Exception:
        return None
    return number if type(number) is int else None


def _read(text: Any) -> Reply:
    """What a reply without a valid tool call leaves for its judgement: the sketch of its (bounded)
    text and whether it chants; no text. A blank text is not compared (a reply whose only content is
    its invalid calls says nothing twice)."""
    bounded = bounded_text(text)
    if bounded is None or not bounded or bounded.isspace():  # no words: the reply is its calls alone
        return NO_TEXT
    return Reply(reply_sketch(bounded), chants(bounded))


def reply_sketch(text: str) -> Sketch:
    """The sketch of a reply as stagnation sketches a result (``detectors.stagnation.sketch``:
    normalised words, three-word shingles), over the whole of a long text: each ``_CHUNK`` of it
    sketched, the smallest shingle digests of all kept (those of the whole, but for the shingles
    across a chunk's edge)."""
    if len(text) <= _CHUNK:
        return sketch(text)
    digests: list[int] = []
    smallest: set[int] = set()
    for start in range(0, len(text), _CHUNK):
        digest, hashes = sketch(text[start : start + _CHUNK])
        digests.append(digest)
        smallest.update(hashes)
    whole = _hash64(b"".join(d.to_bytes(8, "little") for d in digests))
    return whole, tuple(sorted(nsmallest(_SKETCH, smallest)))
