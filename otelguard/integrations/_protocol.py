"""What every framework adapter does the same way; an adapter only translates its framework's hooks.

* **Sessions**: a ``SessionHost`` (``otelguard.core.sessions``) per adapter instance, keyed by the
  framework's conversation id (``None``: one default session).
* **Before a tool runs**: ``refusal(guard, ...)`` is ``None`` when the call may run; otherwise the
  model gets the refusal's ``synthetic_result()`` through the framework's own "tool refused" path,
  and the tool never runs.
* **After it ran**: ``guidance(guard, ...)`` records how the call ended and returns the ``warn``/
  ``halt`` decision whose ``annotate(result)`` the model must read, or ``None``; ``raised(guard,
  ...)`` records a tool's exception as a failure (the framework then handles it as it would
  without the adapter).
* **Before the next model call**: after a ``block``/``halt`` the run ends. ``halt_of(session)``
  for frameworks with a way to end a run; ``stop_if_halted(session)`` raises ``GuardHalted`` for
  those that can only stop a run by raising.
* **Model requests**: ``model_stop(guard)`` before each (``before_model``): the ``block``/``halt``
  that keeps the model from being called (a halted turn, a spent token cap), ended like a tool
  halt; ``replied(guard, ...)`` after each response (``after_model``) with what the framework
  reports (its text, its valid and invalid tool calls, its token usage). A model warning (from
  either) is kept in the adapter's ``ModelNotes`` when one is given, and ``ModelNotes.take(guard)``
  hands its text to the next request of the same turn, for frameworks that let an extension add to
  the request; without one it is recorded only.
* **When a run raises**: its turn ends as ``errored`` (``end_run(session, run, error)``), unless the
  exception is the adapter's own ``GuardHalted`` (that turn was halted) or not an ``Exception`` at
  all (a cancellation or an interrupt is control flow, not an error).

Also: the ``ImportError`` for a missing framework, and ``CallMemory`` for what one hook of a call
learns and a later hook of the same call needs.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Hashable, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Final, Generic, TypeVar

from otelguard.core.bounded_map import BoundedMap
from otelguard.core.decisions import Decision
from otelguard.core.guard import Guard
from otelguard.core.sessions import Session
from otelguard.errors import GuardHalted
from otelguard.propagation import use_tree

__all__ = [
    "DELEGATES_TO",
    "MAX_TRACKED_CALLS",
    "CallMemory",
    "ModelNotes",
    "delegate_of",
    "end_run",
    "error_result",
    "errored",
    "guidance",
    "halt_of",
    "in_tree",
    "missing_framework",
    "model_stop",
    "raised",
    "refusal",
    "replied",
    "stop_if_halted",
    "tokens",
]

DELEGATES_TO: Final = "otelguard.delegates_to"
"""The key of a tool's metadata (where the framework gives tools metadata) naming the agent the tool
runs: each of its calls is a delegation to that agent (``before_call(..., delegate_to=...)``)."""

MAX_TRACKED_CALLS: Final = 4096
"""Calls an adapter remembers between two hooks of the same call."""

V = TypeVar("V")


def missing_framework(framework: str, extra: str) -> ImportError:
    """The error an adapter raises when its framework is not installed."""
    return ImportError(
        f'otelguard\'s {framework} adapter needs the {framework} package: pip install "otelguard[{extra}]"'
    )


def refusal(
    guard: Guard, tool_name: str, args: Any, call_id: str | None, delegate_to: str | None = None
) -> Decision | None:
    """Ask before a call runs: ``None`` to run it, else the decision that refuses it.
    ``delegate_to``: the agent the call runs, when the framework tells (a delegation)."""
    decision = guard.before_call(tool_name, args, call_id=call_id, delegate_to=delegate_to)
    return None if decision.allows_execution else decision


def guidance(
    guard: Guard,
    tool_name: str,
    args: Any,
    result: Any,
    *,
    failed: bool | None,
    call_id: str | None,
    refusal: str | None = None,
) -> Decision | None:
    """Record how a call ended; the ``warn``/``halt`` whose guidance the model should read, else ``None``."""
    decision = guard.after_call(tool_name, args, result, failed=failed, refusal=refusal, call_id=call_id)
    return decision if decision.action in ("warn", "halt") else None


def raised(guard: Guard, tool_name: str, args: Any, error: BaseException, call_id: str | None) -> None:
    """Record a tool's exception as the call's failure."""
    guard.after_call(tool_name, args, error_result(error), failed=True, call_id=call_id)


def delegate_of(metadata: object) -> str | None:
    """The agent a tool runs, from its metadata (``DELEGATES_TO``), or ``None``."""
    agent = metadata.get(DELEGATES_TO) if isinstance(metadata, Mapping) else None
    return agent if isinstance(agent, str) and agent else None


def in_tree(guard: Guard) -> AbstractContextManager[object]:
    """Around a tool's run: the guard's place in its delegation tree is current, so an agent the
    tool runs joins the tree one level down (``otelguard.propagation``). A guard in no tree gets a
    shared no-op (no context switch; measured in docs/delegation-trees.md)."""
    tree = guard.delegation_tree
    return _NO_TREE if tree is None else use_tree(tree)


_NO_TREE: Final = nullcontext()


def error_result(error: BaseException) -> str:
    """What a failed call returned when its result is an exception: compared with other failures'
    results (the same error again), never exported."""
    return f"{type(error).__name__}: {error}"


def halt_of(session: Session) -> Decision | None:
    """The ``block``/``halt`` that ends the session's run before its next model call, if any."""
    return session.main.halt_decision


def stop_if_halted(session: Session, run: object = None) -> None:
    """For frameworks that can only stop a run by raising: after a ``block``/``halt``, end the turn
    of ``run`` (when given) and raise ``GuardHalted``."""
    halt = session.main.halt_decision
    if halt is not None:
        if run is not None:
            session.leave_run(run)
        raise GuardHalted(halt)


def model_stop(guard: Guard, notes: ModelNotes | None = None) -> Decision | None:
    """Before a model request: the ``block``/``halt`` after which the model is not called (the
    run ends as after a tool halt), else ``None``; a warning goes to ``notes``. A turn already
    halted is not asked again."""
    halt = guard.halt_decision
    if halt is not None:
        return halt
    decision = guard.before_model()
    if notes is not None:
        notes.keep(guard, decision)
    return decision if decision.action in ("block", "halt") else None


def replied(
    guard: Guard,
    text: str | None,
    *,
    tool_calls: int,
    invalid_tool_calls: int = 0,
    input_tokens: int | None = None,
    output_tokens: int | None = None,
    notes: ModelNotes | None = None,
) -> Decision:
    """Record one model response, as the framework reports it (``None``: usage not reported); a
    warning goes to ``notes``."""
    decision = guard.after_model(
        text or None,
        tool_calls=tool_calls,
        invalid_tool_calls=invalid_tool_calls,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
    )
    if notes is not None:
        notes.keep(guard, decision)
    return decision


class ModelNotes:
    """The model warning each guard's model has not read yet (``no_action_warn``,
    ``repeated_reply_warn``): kept from ``before_model``/``after_model``, taken for the next model
    request of the same turn. Its text is the decision's message, which names counts, never the
    reply. One note per guard, the latest; a guard the session pool dropped takes its note with it.
    Thread-safe."""

    def __init__(self) -> None:
        self._notes: weakref.WeakKeyDictionary[Guard, tuple[str | None, Decision]] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()

    def keep(self, guard: Guard, decision: Decision) -> None:
        if decision.action == "warn" and decision.message:
            with self._lock:
                self._notes[guard] = (guard.turn_id, decision)

    def take(self, guard: Guard) -> str | None:
        """The text to add to the request about to be sent, or ``None``: a note of an earlier turn
        (a run that ended after the warning) is dropped."""
        with self._lock:
            kept = self._notes.pop(guard, None)
        if kept is None or kept[0] != guard.turn_id or guard.halt_decision is not None:
            return None
        note: str = kept[1].annotate("").lstrip()
        return note


def tokens(value: object) -> int | None:
    """A token count a framework reported: a non-negative ``int``, else ``None`` (not reported)."""
    return value if type(value) is int and value >= 0 else None


def errored(error: BaseException | None) -> bool:
    """Whether a run that ended with ``error`` (``None``: it returned) ended in an error."""
    return isinstance(error, Exception) and not isinstance(error, GuardHalted)


def end_run(session: Session, run: object, error: BaseException | None = None) -> None:
    """End the turn of ``run``: ``errored`` when it raised ``error`` (see ``errored``)."""
    session.leave_run(run, errored=errored(error))


class CallMemory(Generic[V]):
    """What an adapter learns in one hook of a call and needs in a later one, by call key (a
    ``None`` key is not remembered). Calls that never reach the later hook must not pile up: past
    ``limit`` the oldest are forgotten. Thread-safe."""

    def __init__(self, limit: int = MAX_TRACKED_CALLS) -> None:
        self._entries: BoundedMap[Hashable, V] = BoundedMap(limit)
        self._lock = threading.Lock()

    def add(self, key: Hashable | None, value: V) -> None:
        if key is not None:
            with self._lock:
                self._entries.put(key, value)

    def take(self, key: Hashable | None) -> V | None:
        """The value added under ``key`` (``None`` when there is none); it is forgotten."""
        if key is None:
            return None
        with self._lock:
            return self._entries.pop(key, None)
