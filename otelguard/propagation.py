"""A delegation tree's identity across processes: W3C Baggage beside ``traceparent``
(docs/delegation-trees.md).

In a process the tree rides the OpenTelemetry context: inside ``use_tree(tree)`` or ``extract(headers)``
a guard that is made joins the tree one level down. Across processes it rides the ``baggage`` header,
written and read by OpenTelemetry's own propagator, as three entries: ``otelguard.tree`` (the keyed
digest of the root session), ``otelguard.depth`` (the depth of the agent that sent the request) and
``otelguard.path`` (short keyed digests of the agents from the root to it, comma-separated). No session
id or agent name ever leaves the process.

A caller::

    headers: dict[str, str] = {}
    otelguard.propagation.inject(headers, guard)   # baggage (and traceparent when a span records)
    httpx.post(url, headers=headers, ...)

A callee::

    with otelguard.propagation.extract(request.headers):
        guard = Guard(config, telemetry=True, session_id=...)   # one level down in the caller's tree

Bad baggage (oversized, malformed, a depth its path does not bear out) is ignored: the request is
served as if it carried no tree, the count of ignored headers goes up (``ignored_baggage()``) and the
first one is logged, without its value. Nothing here raises into a call.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from typing import Any, Final

from opentelemetry import baggage, context
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from otelguard.core.tree import DelegationTree, parse_tree

__all__ = [
    "BAGGAGE_DEPTH",
    "BAGGAGE_PATH",
    "BAGGAGE_TREE",
    "MAX_BAGGAGE_CHARS",
    "current_tree",
    "extract",
    "ignored_baggage",
    "inject",
    "read_tree",
    "use_tree",
]

logger = logging.getLogger("otelguard")

BAGGAGE_TREE: Final = "otelguard.tree"
BAGGAGE_DEPTH: Final = "otelguard.depth"
BAGGAGE_PATH: Final = "otelguard.path"
MAX_BAGGAGE_CHARS: Final = 8192
"""A longer ``baggage`` header is not read at all (the W3C limit for the whole header)."""

_TREE: Final = context.create_key("otelguard.delegation_tree")
_BAGGAGE: Final = W3CBaggagePropagator()
_TRACE: Final = TraceContextTextMapPropagator()

_ignored = 0
_ignored_lock = threading.Lock()


def current_tree() -> DelegationTree | None:
    """The tree current in this context: the place of the agent that delegated the work at hand."""
    tree = context.get_value(_TREE)
    return tree if isinstance(tree, DelegationTree) else None


@contextmanager
def use_tree(tree: DelegationTree | None) -> Iterator[DelegationTree | None]:
    """Make ``tree`` current inside the block (``None``: leave the context as it is)."""
    if tree is None:
        yield None
        return
    token = context.attach(context.set_value(_TREE, tree))
    try:
        yield tree
    finally:
        context.detach(token)


def inject(headers: MutableMapping[str, str], guard: Any = None) -> None:
    """Write the tree into ``headers``: the ``baggage`` of ``guard``'s place in its tree (a ``Guard``),
    else of the tree current here; and ``traceparent`` when a span is recording. A guard in no tree
    and no current tree write no otelguard entries (other baggage and the trace still go)."""
    try:
        tree = getattr(guard, "delegation_tree", None) if guard is not None else None
        if tree is None:
            tree = current_tree()
        ctx = context.get_current()
        if tree is not None:
            ctx = baggage.set_baggage(BAGGAGE_TREE, tree.root, ctx)
            ctx = baggage.set_baggage(BAGGAGE_DEPTH, str(tree.depth), ctx)
            ctx = baggage.set_baggage(BAGGAGE_PATH, ",".join(tree.path), ctx)
        _BAGGAGE.inject(headers, ctx)
        _TRACE.inject(headers, ctx)
    except Exception as exc:  # a header that could not be written must not fail the call
        _count_ignored(type(exc).__name__)


def read_tree(headers: Mapping[str, Any]) -> DelegationTree | None:
    """The tree a request's ``baggage`` header carries, or ``None`` (no tree, or bad baggage: counted
    and logged once)."""
    try:
        value = _header(headers, "baggage")
        if value is None:
            return None
        if not isinstance(value, str) or len(value) > MAX_BAGGAGE_CHARS:
            _count_ignored("oversized" if isinstance(value, str) else "not text")
            return None
        entries = baggage.get_all(_BAGGAGE.extract({"baggage": value}))
        given = [entries.get(name) for name in (BAGGAGE_TREE, BAGGAGE_DEPTH, BAGGAGE_PATH)]
        if all(each is None for each in given):
            return None  # baggage of someone else's, no tree in it
        tree = parse_tree(*given)
        if tree is None:
            _count_ignored("malformed")
        return tree
    except Exception as exc:
        _count_ignored(type(exc).__name__)
        return None


@contextmanager
def extract(headers: Mapping[str, Any]) -> Iterator[DelegationTree | None]:
    """Inside the block, the tree in ``headers`` is current (guards made in it join the tree one
    level down) and so is the caller's trace (``traceparent``); yields the tree, or ``None``."""
    tree = read_tree(headers)
    token = None
    try:
        carrier = {"traceparent": _header(headers, "traceparent")}
        ctx = _TRACE.extract(carrier) if isinstance(carrier["traceparent"], str) else context.get_current()
        if tree is not None:
            ctx = context.set_value(_TREE, tree, ctx)
        token = context.attach(ctx)
    except Exception as exc:
        _count_ignored(type(exc).__name__)
    try:
        yield tree
    finally:
        if token is not None:
            context.detach(token)


def ignored_baggage() -> int:
    """How many ``baggage`` headers with a tree this process ignored as bad."""
    return _ignored


def _header(headers: Mapping[str, Any], name: str) -> Any:
    value = headers.get(name)
    if value is None:
        value = headers.get(name.title())
    return value


def _count_ignored(why: str) -> None:
    global _ignored
    with _ignored_lock:
        _ignored += 1
        first = _ignored == 1
    if first:  # the reason only: the header's value may hold anything
        logger.warning(
            "otelguard ignored a bad delegation tree in a baggage header (%s); counting the rest", why
        )
