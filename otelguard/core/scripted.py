"""The driver of a scripted tool call: one call put to a guard the way a host makes it.

``play_call(guard, call)`` asks ``before_call`` and, unless the call is refused, reports its result
through ``after_call``; it returns one ``ScriptStep``. ``call`` is any record with the seven fields
of a ``ScriptedCall`` (``CallRecord``): the demo's scenarios and the bench's workloads build
``ScriptedCall``s, replay passes the transcript's own ``ToolCall``, and ``otelguard.testing`` runs a
user's scripts through the same function.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from otelguard.core.decisions import Decision
from otelguard.core.tool_calls import CallGuard

__all__ = ["CallRecord", "ScriptStep", "ScriptedCall", "play_call"]


class CallRecord(Protocol):
    """What ``play_call`` reads of a call: a ``ScriptedCall``, or a record with the same fields."""

    @property
    def tool_name(self) -> str: ...

    @property
    def args(self) -> Any: ...

    @property
    def result(self) -> Any: ...

    @property
    def failed(self) -> bool | None: ...

    @property
    def refusal(self) -> str | None: ...

    @property
    def call_id(self) -> str | None: ...

    @property
    def cancelled(self) -> bool: ...


class ScriptedCall(NamedTuple):
    """One tool call of a script. ``failed=None`` lets the guard's fallback classifier decide;
    ``cancelled=True`` is a call the host dispatched but never ran."""

    tool_name: str
    args: Any = None
    result: Any = None
    failed: bool | None = None
    refusal: str | None = None
    call_id: str | None = None
    cancelled: bool = False


@dataclass(frozen=True, slots=True)
class ScriptStep:
    """What the guard said about one call. ``after`` is ``None`` when the call was refused."""

    call: CallRecord
    before: Decision
    after: Decision | None

    @property
    def decision(self) -> Decision:
        """The call's final decision: ``after_call``'s when it ran, else ``before_call``'s."""
        return self.after if self.after is not None else self.before

    @property
    def ran(self) -> bool:
        return self.after is not None


def play_call(guard: CallGuard, call: CallRecord) -> ScriptStep:
    """One call the way a host makes it: ``before_call``; then, unless refused, ``after_call``."""
    before = guard.before_call(call.tool_name, call.args, call_id=call.call_id)
    after: Decision | None = None
    if before.allows_execution:
        after = guard.after_call(
            call.tool_name,
            call.args,
            call.result,
            failed=call.failed,
            refusal=call.refusal,
            call_id=call.call_id,
            cancelled=call.cancelled,
        )
    return ScriptStep(call=call, before=before, after=after)
