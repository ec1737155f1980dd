"""A delegation tree's identity across processes: W3C Baggage beside ``traceparent``
(docs/delegation-trees.md).

In a process the tree rides the OpenTelemetry context: inside ``use_tree(tree)`` or ``extract(headers)``
a guard that is made joins the tree one level down. Across processes it rides the W3C ``baggage``
header, as three entries: ``otelguard.tree`` (the keyed
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

``extract`` keeps the caller's context and adds the request's trace and baggage on top; ``inject``
merges otelguard's entries into a ``baggage`` header already there. Baggage is read and written here,
by W3C Baggage's rules and limits as OpenTelemetry applies them (8192 bytes a header), never handed
raw to OpenTelemetry's propagator, which logs a header it rejects, values and all.

Bad baggage (too large to read, malformed, a depth its path does not bear out) is ignored: the
request is served as if it carried no tree, the count of ignored headers goes up
(``ignored_baggage()``) and the first of each reason is logged, without any value. Nothing here
raises into a call.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from typing import Any, Final
from urllib.parse import quote_plus, unquote_plus

from opentelemetry import baggage, context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from otelguard.core.tree import DelegationTree, read_tree_values
from otelguard.hosting import provide_current_tree

__all__ = [
    "BAGGAGE_DEPTH",
    "BAGGAGE_PATH",
    "BAGGAGE_TREE",
    "MAX_BAGGAGE_BYTES",
    "MAX_BAGGAGE_READ_BYTES",
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
MAX_BAGGAGE_BYTES: Final = 8192
"""The W3C limit of a whole ``baggage`` header, in UTF-8 bytes as OpenTelemetry measures it: a longer
header brings none of its entries into the context, and ``inject`` never writes one."""
MAX_BAGGAGE_READ_BYTES: Final = 4 * MAX_BAGGAGE_BYTES
"""The largest ``baggage`` header otelguard reads its own entries from: over the W3C limit (some
senders and proxies go past it), the tree still counts; a larger header is not read at all."""
_MAX_MEMBER_BYTES: Final = 4096
_MAX_MEMBERS: Final = 180
_OWN: Final = (BAGGAGE_TREE, BAGGAGE_DEPTH, BAGGAGE_PATH)

# W3C Baggage's grammar, as OpenTelemetry checks a member before it takes it
_KEY: Final = r"[\x21\x23-\x27\x2a\x2b\x2d\x2e\x30-\x39\x41-\x5a\x5e-\x7a\x7c\x7e]+"
_VALUE: Final = r"[\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]*"
_PROPERTY: Final = rf"[ \t]*{_KEY}[ \t]*(?:=[ \t]*{_VALUE}[ \t]*)?"
_MEMBER: Final = re.compile(rf"[ \t]*({_KEY})[ \t]*=[ \t]*({_VALUE}(?:[ \t]*;{_PROPERTY})*)[ \t]*")
_DELIMITER: Final = re.compile(r"[ \t]*,[ \t]*")

_TREE: Final = context.create_key("otelguard.delegation_tree")
_TRACE: Final = TraceContextTextMapPropagator()

_REASONS: Final = {
    "forged depth": "its depth is lower than its path bears out (a forged depth)",
    "malformed": "an otelguard entry is missing or not of its form",
    "oversized": f"the header is over {MAX_BAGGAGE_READ_BYTES} bytes, too large to read",
    "not text": "the header is not text",
}
_ignored = 0
_logged: set[str] = set()
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
    and no current tree write no otelguard entries (other baggage and the trace still go).

    A ``baggage`` header already in ``headers`` is merged, not replaced: otelguard's entries are
    updated, its other well-formed entries kept, then the context's baggage entries it does not name;
    within the W3C limits, otelguard's entries first (a member that does not fit is left out whole)."""
    try:
        tree = getattr(guard, "delegation_tree", None) if guard is not None else None
        if tree is None:
            tree = current_tree()
        ctx = context.get_current()
        name = "Baggage" if "baggage" not in headers and "Baggage" in headers else "baggage"
        value = _merged(headers.get(name), tree, ctx)
        if value:
            headers[name] = value
        _TRACE.inject(headers, ctx)
    except Exception as exc:  # a header that could not be written must not fail the call
        _count_ignored(f"write {type(exc).__name__}")


def read_tree(headers: Mapping[str, Any]) -> DelegationTree | None:
    """The tree a request's ``baggage`` header carries, or ``None`` (no tree, or bad baggage: counted,
    and the first of each reason logged)."""
    try:
        value = _header(headers, "baggage")
        return None if value is None else _read(value)[0]
    except Exception as exc:
        _count_ignored(type(exc).__name__)
        return None


@contextmanager
def extract(headers: Mapping[str, Any]) -> Iterator[DelegationTree | None]:
    """Inside the block, the tree in ``headers`` is current (guards made in it join the tree one
    level down); yields the tree, or ``None``. The caller's context stays, with the request's trace
    (``traceparent``) and baggage on top of it, as OpenTelemetry's propagators add them: the
    request's entries join the current baggage, and otelguard's are set to those of the tree made
    current (a bad tree's are not taken)."""
    tree: DelegationTree | None = None
    token = None
    try:
        ctx = context.get_current()
        value = _header(headers, "baggage")
        if value is not None:
            tree, entries = _read(value)
            for key, entry in entries:
                ctx = baggage.set_baggage(key, entry, ctx)
        if tree is not None:
            ctx = context.set_value(_TREE, tree, _with_own(tree, ctx))
        traceparent = _header(headers, "traceparent")
        if isinstance(traceparent, str):
            # traceparent alone: OpenTelemetry logs a bad ``tracestate`` member raw
            ctx = _TRACE.extract({"traceparent": traceparent}, ctx)
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


def _member(member: str) -> tuple[str, str] | None:
    """A ``baggage`` member's key and value, decoded as OpenTelemetry decodes them (a value keeps its
    properties), or ``None`` for one OpenTelemetry would drop: its text may be anything."""
    if not member or len(member) > _MAX_MEMBER_BYTES or not member.isascii():
        return None
    match = _MEMBER.fullmatch(member)
    if match is None:
        return None
    return unquote_plus(match.group(1)).strip(), unquote_plus(match.group(2)).strip()


def _read(value: Any) -> tuple[DelegationTree | None, list[tuple[str, str]]]:
    """The tree a ``baggage`` header carries (``None``: none, or a bad one, counted) and the other
    entries a context takes from it: none from a header over the W3C limit, as OpenTelemetry reads
    it. otelguard's own entries are read from a header up to ``MAX_BAGGAGE_READ_BYTES``."""
    if not isinstance(value, str):
        _count_ignored("not text")
        return None, []
    size = len(value) if len(value) > MAX_BAGGAGE_READ_BYTES else len(value.encode("utf-8", "replace"))
    if size > MAX_BAGGAGE_READ_BYTES:
        _count_ignored("oversized")
        return None, []
    own: dict[str, str | None] = {}
    entries: list[tuple[str, str]] = []
    for member in _DELIMITER.split(value):
        pair = _member(member)
        if pair is None:
            loose = unquote_plus(member.partition("=")[0]).strip()
            if loose in _OWN:
                own[loose] = None  # one of ours, not of its form
        elif pair[0] in _OWN:
            own[pair[0]] = pair[1]
        elif size <= MAX_BAGGAGE_BYTES and len(entries) < _MAX_MEMBERS:
            entries.append(pair)
    if not own:
        return None, entries  # baggage of someone else's, no tree in it
    found = read_tree_values(*(own.get(key) for key in _OWN))
    if isinstance(found, str):
        _count_ignored(found)
        return None, entries
    return found, entries


def _with_own(tree: DelegationTree, ctx: context.Context) -> context.Context:
    ctx = baggage.set_baggage(BAGGAGE_TREE, tree.root, ctx)
    ctx = baggage.set_baggage(BAGGAGE_DEPTH, str(tree.depth), ctx)
    return baggage.set_baggage(BAGGAGE_PATH, ",".join(tree.path), ctx)


def _merged(existing: Any, tree: DelegationTree | None, ctx: context.Context) -> str:
    """The ``baggage`` header ``inject`` writes: otelguard's entries of ``tree`` (or else those of the
    context), the other well-formed members of ``existing`` as written, then the context's other
    entries, each key once, as many whole members as fit the W3C limits."""
    members: list[str] = []
    seen: set[str] = set()
    current = baggage.get_all(ctx)
    if tree is not None:
        own: Mapping[str, object] = {
            BAGGAGE_TREE: tree.root,
            BAGGAGE_DEPTH: str(tree.depth),
            BAGGAGE_PATH: ",".join(tree.path),
        }
    else:
        own = {key: current[key] for key in _OWN if key in current}
    for key, entry in own.items():
        members.append(f"{quote_plus(key)}={quote_plus(str(entry))}")
        seen.add(key)
    if isinstance(existing, str) and len(existing) <= MAX_BAGGAGE_READ_BYTES:
        for member in _DELIMITER.split(existing):
            pair = _member(member)
            if pair is not None and pair[0] not in seen:
                members.append(member.strip(" \t"))
                seen.add(pair[0])
    for key, entry in current.items():
        if key not in seen:
            members.append(f"{quote_plus(str(key))}={quote_plus(str(entry))}")
            seen.add(key)
    kept: list[str] = []
    size = -1
    for member in members:
        if len(kept) == _MAX_MEMBERS:
            break
        if len(member) <= _MAX_MEMBER_BYTES and size + 1 + len(member) <= MAX_BAGGAGE_BYTES:
            kept.append(member)
            size += 1 + len(member)
    return ",".join(kept)


def _count_ignored(why: str) -> None:
    global _ignored
    with _ignored_lock:
        _ignored += 1
        first = why not in _logged and len(_logged) < 16
        if first:
            _logged.add(why)
    if not first:
        return
    if why.startswith("write "):  # the exception's type only: its text may quote the headers
        logger.warning(
            "otelguard could not write the delegation tree into a baggage header (%s); the request "
            "goes without it; later failures of this kind are only counted",
            why[6:],
        )
        return
    logger.warning(  # the reason only: the header's value may hold anything
        "otelguard ignored the delegation tree in a baggage header: %s. The request is served "
        "outside any tree; later headers ignored for this reason are only counted",
        _REASONS.get(why, f"it could not be read ({why})"),
    )


# Every host (otelguard.hosting) finds the tree this module makes current from now on.
provide_current_tree(current_tree)
