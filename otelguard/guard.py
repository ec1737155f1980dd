"""The Guard: one per session; the agent runtime asks it about every tool call (SPEC §3).

Thread-safe: parallel tool batches may call ``before_call``/``after_call`` from several threads.
Argument hashing runs outside the lock; state changes and result comparison run under it (a result
is parsed only when a different-bytes repeat of the same call must be compared, see
``otelguard.results``); observers run after it is released. The guard never raises into the agent
loop.
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Iterable
from types import MappingProxyType
from typing import Any, Final, NamedTuple

import orjson

from otelguard import decisions as codes
from otelguard.caps import CapLedger, Charge
from otelguard.classify import catalog_for, looks_failed
from otelguard.config import GuardConfig
from otelguard.decisions import Decision, Signature, TurnSummary
from otelguard.detectors import TurnDetectors
from otelguard.observers import CallEvent, GuardObserver, Outcome, TurnInfo, new_call_event
from otelguard.results import ResultMemory
from otelguard.signatures import ArgsHasher, resolve_signature_key
from otelguard.tool_calls import call_context, wrap_tool

__all__ = ["Guard"]

logger = logging.getLogger("otelguard")

DEFAULT_AGENT: Final = "default"


class _Turn:
    __slots__ = ("agent", "decisions", "detectors", "halt", "tool_calls", "turn_id")

    def __init__(self, turn_id: str | None, agent: str, config: GuardConfig) -> None:
        self.turn_id = turn_id
        self.agent = agent
        self.detectors = TurnDetectors(config)
        self.tool_calls = 0
        self.halt: Decision | None = None
        self.decisions: Counter[str] = Counter()


class _Pending(NamedTuple):
    """A call between ``before_call`` and ``after_call``: what must not be computed twice.

    ``tokens`` holds the observers' ``on_call_start`` tokens once they are known (filled in place).
    """

    args: Any
    sig: Signature
    turn: _Turn
    charges: tuple[Charge, ...]
    spawn_count: int
    before: Decision
    start_time_ns: int
    tokens: list[object]


_NO_TOKENS: Final[list[object]] = []  # shared and never filled: no observer wants call starts
_new_pending = tuple.__new__
_new_signature = tuple.__new__
_time_ns = time.time_ns


class Guard:
    """Watches one session's tool calls and answers each with a ``Decision``.

    ``telemetry``: ``None`` (pure), ``True`` (the process-wide ``Telemetry.default()``: global tracer
    provider, default registry), or an object; one with ``bind(settings)`` is bound to this
    config's ``telemetry`` section, anything else is used as a ``GuardObserver``.
    """

    def __init__(
        self,
        config: GuardConfig | None = None,
        telemetry: Any = None,
        *,
        agent: str = DEFAULT_AGENT,
        observers: Iterable[GuardObserver] = (),
    ) -> None:
        self.config = config if config is not None else GuardConfig()
        self.agent = agent or DEFAULT_AGENT
        self._hasher = ArgsHasher(resolve_signature_key(self.config.signature_key))
        self._results = ResultMemory(self.config.volatile_result_keys)
        self._catalog = catalog_for(self.config)
        self._facts = self._catalog.cache
        self._caps = CapLedger(self.config.caps.on_hit)
        self._turn_limits = tuple((k, v) for k, v in self.config.caps.turn.items() if v > 0)
        self._lock = threading.Lock()
        self._turn: _Turn | None = None
        self._last_halt: Decision | None = None  # of the turn that ended last, until the next starts
        self._pending: OrderedDict[object, list[_Pending]] = OrderedDict()
        self._pending_count = 0
        # The common host runs one call at a time: its pending call skips the map.
        self._last_key: object = None
        self._last_pending: _Pending | None = None
        self._reported: set[tuple[str, str]] = set()
        all_observers = list(observers)
        if telemetry is not None and telemetry is not False:
            all_observers.append(self._bind_telemetry(telemetry))
        self._observers: tuple[GuardObserver, ...] = tuple(all_observers)
        # Observers that say they have no use for the start of an allowed call are spared it
        # (and the guard builds no event for it): metrics-only telemetry counts calls at their end.
        self._start_observers = tuple(o for o in self._observers if getattr(o, "wants_call_start", True))

    def _bind_telemetry(self, telemetry: Any) -> GuardObserver:
        if telemetry is True:
            # Imported on demand so the pure core never loads OpenTelemetry or prometheus_client.
            telemetry = importlib.import_module("otelguard.telemetry").Telemetry.default()
        bind = getattr(telemetry, "bind", None)
        observer: GuardObserver = bind(self.config.telemetry) if callable(bind) else telemetry
        return observer

    # turns -----------------------------------------------------------------------------------

    @property
    def halt_decision(self) -> Decision | None:
        """The first ``block``/``halt`` of the current turn; it stays (after ``end_turn`` too) until the
        next turn starts."""
        turn = self._turn
        return turn.halt if turn is not None else self._last_halt

    @property
    def turn_id(self) -> str | None:
        turn = self._turn
        return turn.turn_id if turn is not None else None

    def start_turn(self, turn_id: str | None = None, agent: str | None = None) -> None:
        """Begin a turn (ending the current one, if any); clears all per-turn state."""
        try:
            if self._turn is not None:
                self.end_turn()
            with self._lock:
                turn = self._begin_turn(turn_id, agent)
            self._notify_turn_start(turn)
        except Exception as exc:
            self._internal_error("start_turn", exc)

    reset_for_turn = start_turn

    def _begin_turn(self, turn_id: str | None, agent: str | None) -> _Turn:
        turn = _Turn(turn_id, agent or self.agent, self.config)
        self._turn = turn
        self._last_halt = None
        # Calls of an earlier turn that never finished: forget them (they pin that turn's state).
        self._pending.clear()
        self._pending_count = 0
        self._last_key, self._last_pending = None, None
        self._results.reset()
        self._caps.start_turn()
        return turn

    def _current_turn(self) -> _Turn:
        turn = self._turn
        if turn is not None:
            return turn
        with self._lock:
            if self._turn is not None:
                return self._turn
            turn = self._begin_turn(None, None)
        self._notify_turn_start(turn)
        return turn

    def end_turn(self) -> TurnSummary:
        """End the current turn and summarise it. Without a current turn, an empty summary."""
        try:
            with self._lock:
                turn, self._turn = self._turn, None
                if turn is not None:
                    self._last_halt = turn.halt
                if turn is None:
                    return TurnSummary(
                        turn_id=None, agent=self.agent, tool_calls=0, halted=False, halt_decision=None
                    )
                summary = TurnSummary(
                    turn_id=turn.turn_id,
                    agent=turn.agent,
                    tool_calls=turn.tool_calls,
                    halted=turn.halt is not None,
                    halt_decision=turn.halt,
                    cap_usage=MappingProxyType(dict(self._caps.turn)),
                    cap_usage_ratio=self._caps.usage_ratios(self._turn_limits),
                    session_cap_usage=MappingProxyType(dict(self._caps.session)),
                    decisions=MappingProxyType(dict(turn.decisions)),
                )
            self._notify("on_turn_end", summary)
            return summary
        except Exception as exc:
            self._internal_error("end_turn", exc)
            return TurnSummary(turn_id=None, agent=self.agent, tool_calls=0, halted=False, halt_decision=None)

    # calls -----------------------------------------------------------------------------------

    def before_call(self, tool_name: str, args: Any = None, call_id: str | None = None) -> Decision:
        """Decide whether a call may run. Refused calls end here; allowed ones await ``after_call``."""
        try:
            return self._before_call(tool_name, args, call_id)
        except Exception as exc:
            return self._internal_error("before_call", exc, tool_name)

    def _before_call(self, tool_name: str, args: Any, call_id: str | None) -> Decision:
        name = tool_name if type(tool_name) is str else str(tool_name)
        facts = self._facts.get(name) or self._catalog.facts(name)
        sig = _new_signature(Signature, (name, self._hasher.args_hash(args)))
        requested = self._catalog.spawn_count(facts, _parsed(args)) if facts.spawn_arg is not False else 0
        turn = self._turn or self._current_turn()
        pending = None
        with self._lock:
            turn.tool_calls += 1
            if turn.halt is not None:
                decision: Decision | None = _turn_halted(sig, turn.halt)
            else:
                decision = None
                if facts.caps_turn or facts.caps_session:
                    decision = self._caps.check(sig, facts.caps_turn, facts.caps_session, requested or 1)
                if decision is None and turn.detectors.hard_stop:
                    decision = turn.detectors.refuse_before(sig, facts.tool_class)
            if decision is None:
                decision = codes.allow_decision(name, sig)
                charges: tuple[Charge, ...] = ()
                if facts.caps_turn or facts.caps_session:
                    charges = self._caps.charge(facts.caps_turn, facts.caps_session, requested or 1)
                tokens = [] if self._start_observers else _NO_TOKENS
                # Without a call id, after_call finds the call by the identity of its args object;
                # with one, the args are not kept alive.
                kept_args = args if call_id is None else None
                pending = _new_pending(
                    _Pending, (kept_args, sig, turn, charges, requested, decision, _time_ns(), tokens)
                )
                self._remember((name, id(args)) if call_id is None else _call_key(call_id), pending)
            else:
                turn.decisions[decision.code] += 1
                if decision.should_halt and turn.halt is None:
                    turn.halt = decision
        if self._observers and (pending is None or self._start_observers):
            outcome: Outcome | None = None
            if pending is None:
                outcome = "rejected" if decision.action == "reject" else "blocked"
            event = new_call_event(
                name, facts.tool_class, sig, call_id, turn.agent, turn.turn_id, decision, decision, outcome, None,
                requested, pending.start_time_ns if pending is not None else _time_ns(),
            )  # fmt: skip
            started = self._notify_call_start(event)
            if pending is None:
                self._notify_call_end(event, started)
            else:
                pending.tokens.extend(started)
        return decision

    def after_call(
        self,
        tool_name: str,
        args: Any,
        result: Any,
        failed: bool | None = None,
        refusal: str | None = None,
        call_id: str | None = None,
    ) -> Decision:
        """Record how an allowed call ended; return the detectors' verdict (allow, warn or halt)."""
        try:
            return self._after_call(tool_name, args, result, failed, refusal, call_id)
        except Exception as exc:
            return self._internal_error("after_call", exc, tool_name)

    def _after_call(
        self,
        tool_name: str,
        args: Any,
        result: Any,
        failed: bool | None,
        refusal: str | None,
        call_id: str | None,
    ) -> Decision:
        name = tool_name if type(tool_name) is str else str(tool_name)
        facts = self._facts.get(name) or self._catalog.facts(name)
        outcome: Outcome
        if refusal is not None:
            outcome = "refused"
            refusal = refusal if isinstance(refusal, str) else str(refusal)
        elif failed is None:
            outcome = "failed" if looks_failed(result) else "ok"
        else:
            outcome = "failed" if failed else "ok"
        turn = self._turn or self._current_turn()
        with self._lock:
            pending = self._take((name, id(args)) if call_id is None else _call_key(call_id), args)
            if pending is not None:
                sig = pending.sig
            else:
                sig = Signature(name, self._hasher.args_hash(args))
                if call_id is None:
                    pending = self._take_by_signature(sig)
            state = turn.detectors.state(sig)
            same = (
                outcome == "ok"
                and facts.tool_class != "poll"
                and self._results.same_as_previous(state, result)
            )
            if outcome == "refused" and pending is not None:
                self._caps.refund(pending.charges, same_turn=pending.turn is turn)
            verdict = turn.detectors.record_after(
                sig, state, facts.tool_class, facts.failure_tolerant, outcome, refusal, same
            )
            if verdict is None:  # allow, as before_call said (it only ever allows calls that run)
                decision = pending.before if pending is not None else codes.allow_decision(name, sig)
            else:
                decision = verdict
                turn.decisions[decision.code] += 1
                if decision.should_halt and turn.halt is None:
                    turn.halt = decision
        if self._observers:
            if pending is not None:
                before = pending.before
            else:  # no before_call on record: the allow decision made above stands for it too
                before = decision if verdict is None else codes.allow_decision(name, sig)
            spawned, started = (pending.spawn_count, pending.start_time_ns) if pending is not None else (0, 0)
            event = new_call_event(
                name, facts.tool_class, sig, call_id, turn.agent, turn.turn_id, decision, before, outcome, refusal,
                spawned, started,
            )  # fmt: skip
            self._notify_call_end(event, tuple(pending.tokens) if pending is not None else ())
        return decision

    def call(self, tool_name: str, args: Any = None, call_id: str | None = None) -> call_context:
        """``with guard.call(name, args) as call:`` — ``call.allowed``, ``call.finish(result, ...)``."""
        return call_context(self, tool_name, args, call_id)

    def wrap(self, fn: Any, tool_name: str | None = None) -> Any:
        """Guard a plain Python tool function (sync or async); see ``otelguard.tool_calls.wrap_tool``."""
        return wrap_tool(self, fn, tool_name)

    # pending calls ---------------------------------------------------------------------------

    def _remember(self, key: object, pending: _Pending) -> None:
        if self._last_pending is not None:
            self._queue(self._last_key, self._last_pending)
        self._last_key, self._last_pending = key, pending

    def _queue(self, key: object, pending: _Pending) -> None:
        queue = self._pending.get(key)
        if queue is None:
            self._pending[key] = [pending]
        else:
            queue.append(pending)
        self._pending_count += 1
        # Calls that never get an after_call (timeouts, cancellations) must not pile up.
        while self._pending_count > self.config.max_tracked_signatures:
            oldest = next(iter(self._pending.values()))
            del oldest[0]
            self._pending_count -= 1
            if not oldest:
                self._pending.popitem(last=False)

    def _take(self, key: object, args: Any) -> _Pending | None:
        last = self._last_pending
        if last is not None and self._last_key == key and (not isinstance(key, tuple) or last.args is args):
            self._last_key, self._last_pending = None, None
            return last
        queue = self._pending.get(key)
        if not queue:
            return None
        for i, pending in enumerate(queue):
            if not isinstance(key, tuple) or pending.args is args:
                return self._unqueue(key, queue, i)
        return None

    def _take_by_signature(self, sig: Signature) -> _Pending | None:
        """The host passed an equal but not identical ``args`` object: match on the signature."""
        last = self._last_pending
        if last is not None and last.sig == sig:
            self._last_key, self._last_pending = None, None
            return last
        for key, queue in self._pending.items():
            if isinstance(key, tuple):
                for i, pending in enumerate(queue):
                    if pending.sig == sig:
                        return self._unqueue(key, queue, i)
        return None

    def _unqueue(self, key: object, queue: list[_Pending], index: int) -> _Pending:
        pending = queue.pop(index)
        self._pending_count -= 1
        if not queue:
            del self._pending[key]
        return pending

    # observers and internal errors -----------------------------------------------------------

    def _notify_turn_start(self, turn: _Turn) -> None:
        if self._observers:
            self._notify("on_turn_start", TurnInfo(turn_id=turn.turn_id, agent=turn.agent))

    def _notify_call_start(self, event: CallEvent) -> tuple[object, ...]:
        tokens: list[object] = []
        for observer in self._observers:
            if observer not in self._start_observers:
                tokens.append(None)
                continue
            try:
                tokens.append(observer.on_call_start(event))
            except Exception as exc:
                self._observer_failed(observer, "on_call_start", exc)
                tokens.append(None)
        return tuple(tokens)

    def _notify_call_end(self, event: CallEvent, tokens: tuple[object, ...]) -> None:
        for i, observer in enumerate(self._observers):
            try:
                observer.on_call_end(event, tokens[i] if i < len(tokens) else None)
            except Exception as exc:
                self._observer_failed(observer, "on_call_end", exc)

    def _notify(self, method: str, arg: Any) -> None:
        for observer in self._observers:
            try:
                getattr(observer, method)(arg)
            except Exception as exc:
                self._observer_failed(observer, method, exc)

    def _observer_failed(self, observer: GuardObserver, method: str, exc: Exception) -> None:
        self._log_once(f"observer {type(observer).__name__}.{method}", exc)
        self._report_internal_error("observer", skip=observer)

    def _internal_error(self, stage: str, exc: Exception, tool_name: Any = "") -> Decision:
        self._log_once(stage, exc)
        self._report_internal_error(stage)
        name = tool_name if isinstance(tool_name, str) else ""
        return Decision(action="allow", code=codes.INTERNAL_ERROR, tool_name=name)

    def _report_internal_error(self, stage: str, skip: object = None) -> None:
        for observer in self._observers:
            if observer is skip:
                continue
            try:
                observer.on_internal_error(stage)
            except Exception as exc:
                self._log_once(f"observer {type(observer).__name__}.on_internal_error", exc)

    def _log_once(self, where: str, exc: BaseException) -> None:
        # Only the exception type: its message may quote argument values or results.
        key = (where, type(exc).__name__)
        if key in self._reported:
            return
        self._reported.add(key)
        logger.error(
            "otelguard internal error in %s (%s); the call was allowed and the agent loop goes on",
            where,
            type(exc).__name__,
        )


def _call_key(call_id: Any) -> object:
    """Pending calls are keyed by call id, or by ``(tool, id(args))`` (a tuple) without one."""
    return call_id if isinstance(call_id, str) else str(call_id)


def _parsed(args: Any) -> Any:
    if isinstance(args, (str, bytes)):
        try:
            return orjson.loads(args)
        except orjson.JSONDecodeError:
            return None
    return args


def _turn_halted(sig: Signature, halt: Decision) -> Decision:
    return Decision(
        action="block",
        code=codes.TURN_HALTED,
        message=(
            f"Not run: this turn was stopped earlier ({halt.code} on {halt.tool_name}). "
            "Do not call more tools; tell the user what happened."
        ),
        tool_name=sig.tool_name,
        count=halt.count,
        limit=halt.limit,
        signature=sig,
    )
