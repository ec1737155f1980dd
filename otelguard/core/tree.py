"""Delegation trees in the core: where an agent sits in one (``DelegationTree``), the keyed digests
that name trees and agents, and the tree's part of a guard's caps (``TreeLedger``): the depth limit
and the ``caps.tree`` counters (docs/delegation-trees.md).

A tree is the root session and every agent delegated from it, transitively, in any process. The
core never learns where a tree came from: the host resolves it (from the OpenTelemetry context or a
request's ``baggage``, ``otelguard.propagation``) and hands it to the guard. Only keyed digests name
a tree or an agent, so a tree travelling in a header shows no session id or agent name.

Tree counters live in a ``SessionCapStore`` per tree: in process, one per tree digest in a bounded
process-wide table (``local_tree_caps``), so every guard of a tree in this process charges the same
counters under one lock; with a state URL, in Redis under the tree's key (``otelguard.hosting``).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from otelguard.core import _resolvers
from otelguard.core import decisions as codes
from otelguard.core.bounded_map import BoundedMap
from otelguard.core.caps import LocalSessionCaps, SessionCapStore
from otelguard.core.decisions import Decision, Signature

if TYPE_CHECKING:
    from otelguard.config import GuardConfig

__all__ = [
    "AGENT_DIGEST_CHARS",
    "MAX_TREES",
    "ROOT_DIGEST_CHARS",
    "DelegationTree",
    "TreeLedger",
    "agent_digest",
    "join_tree",
    "local_tree_caps",
    "parse_tree",
    "root_tree",
    "tree_digest",
]

ROOT_DIGEST_CHARS: Final = 32
AGENT_DIGEST_CHARS: Final = 12
"""Short: the path rides in a header, one entry per level; 48 bits tell the agents of one path apart."""
MAX_DEPTH_ACCEPTED: Final = 32
"""The deepest tree a header may claim (``delegation.max_depth`` cannot be set deeper)."""
MAX_TREES: Final = 4096
"""Trees whose counters this process keeps in memory; past it the least recently used tree's counters
are forgotten (with a state URL they live in Redis instead)."""
_TREE_PERSON: Final = b"otelguard.tree"
_AGENT_PERSON: Final = b"otelguard.agnt"
_HEX: Final = frozenset("0123456789abcdef")


class DelegationTree(NamedTuple):
    """Where one agent sits in a delegation tree: the tree's root digest, the agent's depth (the root
    is 0) and its path (short agent digests, root first, the agent itself last)."""

    root: str
    depth: int
    path: tuple[str, ...]

    def child(self, agent: str, max_depth: int) -> DelegationTree:
        """The agent ``agent`` (an agent digest) delegated to from this one: one level down. The path
        keeps at most ``max_depth + 1`` entries (an agent deeper than that may not delegate anyway)."""
        return DelegationTree(self.root, self.depth + 1, (*self.path, agent)[: max_depth + 1])

    def on_path(self, agent: str) -> bool:
        """Whether the agent ``agent`` (an agent digest) is this one or one of its delegators."""
        return agent in self.path


def _digest(data: str, key: bytes, size: int, person: bytes) -> str:
    return hashlib.blake2b(
        data.encode("utf-8", "surrogatepass"), key=key, digest_size=size, person=person
    ).hexdigest()


def tree_digest(session_id: str, key: bytes) -> str:
    """The name of the tree rooted at ``session_id``: 32 hex characters, the same in every process
    that shares the signature key, irreversible without it (and never a session's own digest)."""
    return _digest(session_id, key, ROOT_DIGEST_CHARS // 2, _TREE_PERSON)


def agent_digest(agent: str, key: bytes) -> str:
    """The short name of an agent on a tree's path."""
    return _digest(agent, key, AGENT_DIGEST_CHARS // 2, _AGENT_PERSON)


def root_tree(session_id: str, agent: str, key: bytes) -> DelegationTree:
    """The root of a tree: the agent of the session ``session_id``, at depth 0."""
    return DelegationTree(tree_digest(session_id, key), 0, (agent_digest(agent, key),))


def _is_hex(text: str, length: int) -> bool:
    return len(text) == length and _HEX.issuperset(text)


def parse_tree(root: object, depth: object, path: object) -> DelegationTree | None:
    """A tree from the three values a header carries (strings), or ``None`` when any is malformed:
    a root that is not 32 lowercase hex characters, a depth that is not a small non-negative integer,
    a path whose entries are not agent digests or whose length is not ``depth + 1`` (a forged depth)."""
    if not isinstance(root, str) or not isinstance(depth, str) or not isinstance(path, str):
        return None
    if not _is_hex(root, ROOT_DIGEST_CHARS) or not depth.isascii() or not depth.isdigit() or len(depth) > 2:
        return None
    level = int(depth)
    if level > MAX_DEPTH_ACCEPTED or len(path) > (MAX_DEPTH_ACCEPTED + 1) * (AGENT_DIGEST_CHARS + 1):
        return None
    entries = tuple(path.split(",")) if path else ()
    if len(entries) != level + 1 or not all(_is_hex(entry, AGENT_DIGEST_CHARS) for entry in entries):
        return None
    return DelegationTree(root, level, entries)


_trees: BoundedMap[str, LocalSessionCaps] = BoundedMap(MAX_TREES)
_trees_lock = threading.Lock()


def local_tree_caps(root: str) -> SessionCapStore:
    """The in-process counters of the tree ``root``: one store per tree in this process, shared by
    every guard of the tree here."""
    with _trees_lock:
        store = _trees.use(root)
        if store is None:
            store = LocalSessionCaps()
            _trees.put(root, store)
        return store


class TreeLedger:
    """The tree's part of one guard's caps: the depth limit on spawns and the ``caps.tree``
    counters (charged in the tree's store, all or nothing, with the session caps' refund rules)."""

    __slots__ = ("action", "key", "max_depth", "store", "tree")

    def __init__(
        self, tree: DelegationTree, store: SessionCapStore, max_depth: int, on_hit: str, key: bytes
    ) -> None:
        self.tree = tree
        self.store = store
        self.max_depth = max_depth
        self.action: codes.Action = "block" if on_hit == "block" else "reject"
        self.key = key

    def subagent(self, agent: str) -> DelegationTree:
        """Where a subagent ``agent`` of this guard's agent sits: one level down."""
        return self.tree.child(agent_digest(agent, self.key), self.max_depth)

    def depth_refusal(self, sig: Signature) -> Decision | None:
        """The refusal of a spawn by an agent at the depth limit (only the spawn: ``reject``)."""
        depth = self.tree.depth
        if depth < self.max_depth:
            return None
        return Decision(
            action="reject",
            code=codes.DELEGATION_DEPTH,
            message=(
                f"Not run: this agent is at delegation depth {depth}, the limit is {self.max_depth}; "
                "it may not start more agents. Do the work yourself, or report back with what you have."
            ),
            tool_name=sig.tool_name,
            count=depth,
            limit=self.max_depth,
            signature=sig,
        )

    def charge(
        self, sig: Signature, caps: Sequence[tuple[str, int]], amount: int
    ) -> tuple[Decision | None, bool]:
        """Charge the tree caps ``caps``: ``(None, fell_back)`` when every one was charged, else the
        refusal of the first one the call would overshoot (nothing charged)."""
        refusal, fell_back = self.store.charge(caps, amount)
        if refusal is None:
            return None, fell_back
        return self._hit(sig, *refusal, amount), fell_back

    def hit(self, sig: Signature, caps: Sequence[tuple[str, int]], amount: int) -> Decision | None:
        """The refusal of the first tree cap ``caps`` a charge of ``amount`` would overshoot, read
        from the store's usage (charging nothing), or ``None``."""
        usage = self.store.usage()
        for key, limit in caps:
            used = usage.get(key, 0)
            if used + amount > limit:
                return self._hit(sig, key, used, limit, amount)
        return None

    def _hit(self, sig: Signature, key: str, used: int, limit: int, amount: int) -> Decision:
        message = f"Not run: this delegation tree already used {used} of its {limit} {key} calls."
        if amount > 1:
            message += f" This call would add {amount} more."
        message += " Work with what you have, or report back that the limit was reached."
        return Decision(
            action=self.action,
            code=codes.CAP_TREE,
            message=message,
            tool_name=sig.tool_name,
            count=used,
            limit=limit,
            signature=sig,
            cap=key,
        )

    def refund(self, keys: Sequence[str], amount: int) -> None:
        self.store.refund(keys, amount)


def join_tree(
    config: GuardConfig,
    agent: str,
    session_id: str | None,
    tree: DelegationTree | None,
    telemetry: Any,
    key: bytes,
) -> TreeLedger | None:
    """The tree part of a new guard's caps, or ``None`` for a guard in no tree.

    ``tree``: the guard's place, as its host resolved it. Without one, a tree current where the guard
    is made (the host's ``current_tree``: the delegating agent's place) is joined one level down;
    with none current, a guard with ``caps.tree`` keys (or a ``max_depth`` of 0) is the root of a tree
    named by its session (a random one without a session id: a tree of this process alone). Any
    other guard is in no tree and pays nothing for trees.
    """
    delegation = config.delegation
    if tree is None:
        current = _resolvers.current_tree() if _resolvers.current_tree is not None else None
        if current is not None:
            tree = current.child(agent_digest(agent, key), delegation.max_depth)
        elif config.caps.tree or delegation.max_depth == 0:
            tree = root_tree(session_id if session_id is not None else os.urandom(16).hex(), agent, key)
        else:
            return None
    resolve = _resolvers.tree_caps
    store = local_tree_caps(tree.root) if resolve is None else resolve(config, tree.root, telemetry)
    return TreeLedger(tree, store, delegation.max_depth, config.caps.on_hit, key)
