"""Delegation trees in the core: the tree's part of a guard's caps (``TreeLedger``): the depth limit,
delegation cycles and the ``caps.tree`` counters (docs/delegation-trees.md); where an agent sits in a
tree (``DelegationTree``) and the digests that name trees and agents are ``tree_identity``'s.

A tree is the root session and every agent delegated from it, transitively, in any process. The
core never learns where a tree came from: the host resolves it (from the OpenTelemetry context or a
request's ``baggage``, ``otelguard.propagation``) and hands it to the guard. Only keyed digests name
a tree or an agent, so a tree travelling in a header shows no session id or agent name.

Tree counters live in a ``SessionCapStore`` per tree: in process, one per tree digest in a bounded
process-wide table (``local_tree_caps``), so every guard of a tree in this process charges the same
counters under one lock; with a state URL, in Redis under the tree's key (``otelguard.hosting``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from otelguard.core import decisions as codes
from otelguard.core.bounded_map import HeldTable
from otelguard.core.caps import LocalSessionCaps, SessionCapStore
from otelguard.core.decisions import Decision, Signature
from otelguard.core.tree_identity import (
    AGENT_DIGEST_CHARS,
    ROOT_DIGEST_CHARS,
    DelegationTree,
    agent_digest,
    parse_tree,
    read_tree_values,
    reentries,
    root_tree,
    tree_digest,
)

if TYPE_CHECKING:
    from otelguard.config import GuardConfig
    from otelguard.core.edges import Edges

__all__ = [
    "AGENT_DIGEST_CHARS",
    "CYCLE_REFUSED_AT",
    "MAX_TREES",
    "ROOT_DIGEST_CHARS",
    "DelegationTree",
    "TreeLedger",
    "agent_digest",
    "join_tree",
    "local_tree_caps",
    "parse_tree",
    "read_tree_values",
    "reentries",
    "root_tree",
    "tree_digest",
]

MAX_TREES: Final = 4096
"""Trees whose counters this process keeps in memory besides those its guards hold; past it the least
recently used tree no guard holds is forgotten (with a state URL the counters live in Redis instead)."""
CYCLE_REFUSED_AT: Final = 2
"""Re-entries a path may reach before a delegation making one more is refused (with ``hard_stop``):
A hands to B and B back to A is one, warned; A handing to B once more is the second, refused once,
then the turn stops (the rule of a repeating pattern: one reject at most). Two, so that a ping-pong is
stopped well inside the default depth limit of 4 (A B A B is depth 3)."""

_trees: HeldTable[str, LocalSessionCaps] = HeldTable(MAX_TREES)


def local_tree_caps(root: str) -> SessionCapStore:
    """The in-process counters of the tree ``root``: one store per tree in this process, shared by
    every guard of the tree here. A tree's counters are forgotten only once no guard holds them and
    ``MAX_TREES`` trees were used since: however many newer trees come, a tree whose guards live on
    keeps one set of counters, and a guard joining it later charges the same ones."""
    return _trees.get(root, LocalSessionCaps)


class TreeLedger:
    """The tree's part of one guard's caps: the depth limit on spawns and the ``caps.tree``
    counters (charged in the tree's store, all or nothing, with the session caps' refund rules)."""

    __slots__ = ("action", "cycle_rejected", "cycles", "key", "max_depth", "rejects", "store", "tree")

    def __init__(
        self,
        tree: DelegationTree,
        store: SessionCapStore,
        max_depth: int,
        on_hit: str,
        key: bytes,
        cycles: bool = True,
        rejects_before_stop: int = 7,
    ) -> None:
        self.tree = tree
        self.store = store
        self.max_depth = max_depth
        self.action: codes.Action = "block" if on_hit == "block" else "reject"
        self.key = key
        self.cycles = cycles
        self.rejects = min(rejects_before_stop, 1)  # a pattern gets one reject at most; 0: none
        self.cycle_rejected = False
        """This guard's agent had a cycle refused this turn: the next cycle it starts stops the turn."""

    def start_turn(self) -> None:
        self.cycle_rejected = False

    def cycle(self, sig: Signature, agent: str, hard_stop: bool) -> Decision | None:
        """The cycle decision of a delegation to the agent named ``agent``, changing nothing: ``None``
        when ``agent`` is not on the path (or cycles are off). Else, by the re-entries the path would
        then have: a warning at the first, and without ``hard_stop`` at every one; from
        ``CYCLE_REFUSED_AT`` on a reject, then a block.
        ``took`` records the decision the delegation got."""
        if not self.cycles:
            return None
        target = agent_digest(agent if type(agent) is str else str(agent), self.key)
        path = self.tree.path
        if target not in path:  # below a cycle, a delegation to a new agent makes none
            return None
        count = reentries(path, target)
        if not hard_stop or count < CYCLE_REFUSED_AT:
            return self._cycle(sig, "warn", codes.DELEGATION_CYCLE_WARN, count)
        if self.cycle_rejected or self.rejects == 0:
            return self._cycle(sig, "block", codes.DELEGATION_CYCLE_BLOCK, count)
        return self._cycle(sig, "reject", codes.DELEGATION_CYCLE_REJECT, count)

    def took(self, decision: Decision | None) -> None:
        """A delegation got ``decision`` (``None``: allowed): a cycle reject is remembered (the next
        cycle is stopped); a delegation that runs and makes no cycle ends the pattern."""
        if decision is None:
            self.cycle_rejected = False
        elif decision.code == codes.DELEGATION_CYCLE_REJECT:
            self.cycle_rejected = True
        elif decision.allows_execution and decision.code != codes.DELEGATION_CYCLE_WARN:
            self.cycle_rejected = False

    def _cycle(self, sig: Signature, action: codes.Action, code: str, count: int) -> Decision:
        where = (
            f"an agent already on this delegation path (it goes back {count} time{'s' if count > 1 else ''})"
        )
        if action == "warn":
            message = (
                f"This delegation goes back to {where}: the agents may be handing one task around. "
                "Finish the work or report back instead of delegating it again."
            )
        else:
            stop = " The turn stops here." if action == "block" else ""
            message = (
                f"Not run: this delegation would go back to {where}; the agents are handing one task "
                f"around.{stop} Do the work yourself, or report back with what you have."
            )
        return Decision(
            action=action,
            code=code,
            message=message,
            tool_name=sig.tool_name,
            count=count,
            limit=CYCLE_REFUSED_AT,
            signature=sig,
        )

    def subagent(self, agent: str) -> DelegationTree:
        """Where a subagent ``agent`` of this guard's agent sits: one level down."""
        return self.tree.child(
            agent_digest(agent if type(agent) is str else str(agent), self.key), self.max_depth
        )

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

    def add(self, key: str, amount: int) -> int:
        """Add ``amount`` to the tree's ``key`` whatever its limit; the count after (the model's tokens)."""
        return self.store.add(key, amount)


def join_tree(
    config: GuardConfig,
    agent: str,
    session_id: str | None,
    tree: DelegationTree | None,
    edges: Edges,
    key: bytes,
) -> TreeLedger | None:
    """The tree part of a new guard's caps, or ``None`` for a guard in no tree.

    ``tree``: the guard's place, as its host resolved it. Without one, a tree current where the guard
    is made (``edges.current_tree``: the delegating agent's place) is joined one level down;
    with none current, a guard with ``caps.tree`` keys (or a ``max_depth`` of 0) is the root of a tree
    named by its session (a random one without a session id: a tree of this process alone). Any
    other guard is in no tree and pays nothing for trees.
    """
    delegation = config.delegation
    if tree is None:
        current = edges.current_tree() if edges.current_tree is not None else None
        if current is not None:
            tree = current.child(agent_digest(agent, key), delegation.max_depth)
        elif config.caps.tree or delegation.max_depth == 0:
            tree = root_tree(session_id if session_id is not None else os.urandom(16).hex(), agent, key)
        else:
            return None
    opener = edges.tree_caps
    store = local_tree_caps(tree.root) if opener is None else opener(config, tree.root)
    return TreeLedger(
        tree,
        store,
        delegation.max_depth,
        config.caps.on_hit,
        key,
        delegation.cycles,
        config.rejects_before_stop,
    )
