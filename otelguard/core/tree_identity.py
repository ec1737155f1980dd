"""Where an agent sits in a delegation tree (``DelegationTree``), and the keyed digests that name
trees and agents: the values a tree is known by, in a guard, on the OpenTelemetry context and in a
``baggage`` header. Only keyed digests name a tree or an agent, so a tree travelling in a header
shows no session id or agent name. Standard library only: every part of the core may hold a tree.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Final, NamedTuple

__all__ = [
    "AGENT_DIGEST_CHARS",
    "MAX_DEPTH_ACCEPTED",
    "ROOT_DIGEST_CHARS",
    "DelegationTree",
    "agent_digest",
    "parse_tree",
    "reentries",
    "root_tree",
    "tree_digest",
]

ROOT_DIGEST_CHARS: Final = 32
AGENT_DIGEST_CHARS: Final = 12
"""Short: the path rides in a header, one entry per level; 48 bits tell the agents of one path apart."""
MAX_DEPTH_ACCEPTED: Final = 32
"""The deepest tree a header may claim (``delegation.max_depth`` cannot be set deeper)."""
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


def reentries(path: Sequence[str], agent: str) -> int:
    """How many times the path ``path`` followed by ``agent`` goes back to an agent already on it
    (digests compared): ``A B`` then ``A`` is 1, ``A B A B`` then ``A`` is 3, and an agent handing to
    itself is 1. The path alone tells, so a cycle is seen across processes with no state but the
    baggage."""
    seen: set[str] = set()
    count = 0
    for entry in (*path, agent):
        if entry in seen:
            count += 1
        else:
            seen.add(entry)
    return count


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
