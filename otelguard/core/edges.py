"""What a host hands the core to reach its edges: typed, passed in, never looked up.

The core knows an observer only as a ``GuardObserver`` and a counter store shared beyond one guard
only as a ``SessionCapStore``. A host gives a guard (and every guard a ``SessionHost`` makes, and
every subagent guard made from one of them) its edges as one ``Edges`` value: how to make each new
guard's own observer (otelguard's telemetry keeps a guard's open turn span, so each guard gets its
own), and how to open the store of a known session's caps (Redis with a state URL). ``otelguard.hosting``
builds one from the ``telemetry=`` conveniences the README shows; a guard made with none has
no observer of its own and keeps its caps in process.

The same goes for a delegation tree: the store of a tree's counters (shared by every agent of the
tree, in any process: Redis with a state URL) and the tree current where a guard is made (the
delegating agent's place, which otelguard's propagation keeps on the OpenTelemetry context).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from otelguard.config import GuardConfig
    from otelguard.core.caps import SessionCapStore
    from otelguard.core.observers import GuardObserver
    from otelguard.core.tree_identity import DelegationTree

__all__ = ["NO_EDGES", "Edges"]


@dataclass(frozen=True, slots=True)
class Edges:
    """A host's edges, as the core takes them."""

    observer: Callable[[GuardConfig], GuardObserver] | None = None
    """``observer(config)``: a new guard's own observer, made once per guard with its config
    (``None``: no observer besides the ones the guard is handed)."""
    session_caps: Callable[[GuardConfig, str], SessionCapStore] | None = None
    """``session_caps(config, session_id)``: the store of the caps of the session ``session_id``, for a
    guard that knows its session and is handed no store (``None``: a new in-process store)."""
    tree_caps: Callable[[GuardConfig, str], SessionCapStore] | None = None
    """``tree_caps(config, root)``: the store of the counters of the delegation tree ``root`` (``None``:
    this process's table of trees)."""
    current_tree: Callable[[], DelegationTree | None] | None = None
    """``current_tree()``: the delegation tree current where a guard is made, which a guard not handed
    its place joins one level down (``None``, or an answer of ``None``: no tree is current)."""


NO_EDGES: Final = Edges()
"""A guard's edges when its host hands it none: no observer of its own, caps in process."""
