"""Convenience wrappers around ``before_call``/``after_call``: a context manager and a decorator."""

from __future__ import annotations

import functools
import inspect
from types import TracebackType
from typing import Any, Protocol

from otelguard.core.decisions import Decision

__all__ = ["CallGuard", "GuardedCall", "call_context", "wrap_tool"]


class CallGuard(Protocol):
    """The two entry points of a ``Guard``: all that these wrappers (and ``otelguard.core.scripted``) use."""

    def before_call(self, tool_name: str, args: Any = None, call_id: str | None = None) -> Decision: ...

    def after_call(
        self,
        tool_name: str,
        args: Any,
        result: Any,
        failed: bool | None = None,
        refusal: str | None = None,
        call_id: str | None = None,
        cancelled: bool = False,
    ) -> Decision: ...


class GuardedCall:
    """One call under ``with guard.call(...) as call``. ``decision`` is updated by ``finish``."""

    def __init__(
        self, guard: CallGuard, tool_name: str, args: Any, call_id: str | None, decision: Decision
    ) -> None:
        self._guard = guard
        self.tool_name = tool_name
        self.args = args
        self.call_id = call_id
        self.decision = decision
        self.allowed = decision.allows_execution
        self.finished = False

    def finish(
        self, result: Any, failed: bool | None = None, refusal: str | None = None, *, cancelled: bool = False
    ) -> Decision:
        """Report the result of an allowed call; returns (and stores) the ``after_call`` decision.

        ``cancelled=True``: the call was dispatched but never ran (see ``Guard.after_call``)."""
        if not self.allowed or self.finished:
            return self.decision
        self.finished = True
        self.decision = self._guard.after_call(
            self.tool_name,
            self.args,
            result,
            failed=failed,
            refusal=refusal,
            call_id=self.call_id,
            cancelled=cancelled,
        )
        return self.decision


class call_context:
    """Context manager behind ``Guard.call``. An exception escaping an allowed, unfinished block counts
    as a failure and is re-raised; a clean exit without ``finish`` records an ``ok`` call with no result."""

    def __init__(self, guard: CallGuard, tool_name: str, args: Any, call_id: str | None) -> None:
        self._guard, self._tool_name, self._args, self._call_id = guard, tool_name, args, call_id
        self._call: GuardedCall | None = None

    def __enter__(self) -> GuardedCall:
        decision = self._guard.before_call(self._tool_name, self._args, self._call_id)
        self._call = GuardedCall(self._guard, self._tool_name, self._args, self._call_id, decision)
        return self._call

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        call = self._call
        if call is not None and call.allowed and not call.finished:
            call.finish(None, failed=exc_type is not None)

    async def __aenter__(self) -> GuardedCall:
        return self.__enter__()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.__exit__(exc_type, exc, tb)


def wrap_tool(guard: CallGuard, fn: Any, tool_name: str | None = None) -> Any:
    """Guard a plain Python tool function, sync or async.

    The tool name defaults to ``fn.__name__``; ``args`` are the call's arguments bound to parameter
    names (defaults applied). A refused call returns ``decision.synthetic_result()`` without calling
    ``fn``; an exception counts as a failure and is re-raised; a result gets ``annotate``d.
    """
    name: str = tool_name or str(getattr(fn, "__name__", "tool"))
    try:
        signature: inspect.Signature | None = inspect.signature(fn)
    except (TypeError, ValueError):
        signature = None

    def bind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        if signature is not None:
            try:
                bound = signature.bind(*args, **kwargs)
                bound.apply_defaults()
                return dict(bound.arguments)
            except TypeError:
                pass
        return {"args": list(args), "kwargs": kwargs}

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            bound = bind(args, kwargs)
            decision = guard.before_call(name, bound)
            if not decision.allows_execution:
                return decision.synthetic_result()
            try:
                result = await fn(*args, **kwargs)
            except BaseException:
                guard.after_call(name, bound, None, failed=True)
                raise
            return guard.after_call(name, bound, result).annotate(result)

        return async_wrapper

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        bound = bind(args, kwargs)
        decision = guard.before_call(name, bound)
        if not decision.allows_execution:
            return decision.synthetic_result()
        try:
            result = fn(*args, **kwargs)
        except BaseException:
            guard.after_call(name, bound, None, failed=True)
            raise
        return guard.after_call(name, bound, result).annotate(result)

    return wrapper
