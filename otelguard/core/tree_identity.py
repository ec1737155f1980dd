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
    "MAX_DEPTH_CARRIED",
    "ROOT_DIGEST_CHARS",
    "DelegationTree",
    "agent_digest",
    "parse_tree",
    "read_tree_values",
    "reentries",
    "root_tree",
    "tree_digest",
]

ROOT_DIGEST_CHARS: Final = 32
AGENT_DIGEST_CHARS: Final = 12
"""Short: the path rides in a header, one entry per level; 48 bits tell the agents of one path apart."""
MAX_DEPTH_ACCEPTED: Final = 32
"""The longest path a header may carry is ``MAX_DEPTH_ACCEPTED + 1`` agents (``delegation.max_depth``
cannot be set deeper, and a path keeps at most ``max_depth + 1`` of them)."""
MAX_DEPTH_CARRIED: Final = 99
"""The depth an agent is given at most: deeper agents are carried at this depth. Nothing that deep may
delegate (``max_depth`` is at most 32), so the cap only keeps a tree, and its budget, whole however
long a chain of services grows; two digits in a header."""
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
        """The agent ``agent`` (an agent digest) delegated to from this one: one level down, in the
        same tree at any depth. The path keeps at most ``max_depth + 1`` entries, root first: an agent
        deeper than that may not delegate, so it needs no cycle check, and a path cut short (here or
        by a sender with a lower limit) gets no entry after its gap."""
        path = self.path
        if len(path) == self.depth + 1 and len(path) <= max_depth:
            path = (*path, agent)
        return DelegationTree(self.root, min(self.depth + 1, MAX_DEPTH_CARRIED), path)

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
    """A tree from the three values a header carries (strings), or ``None`` when they make none (see
    ``read_tree_values`` for why)."""
    tree = read_tree_values(root, depth, path)
    return tree if isinstance(tree, DelegationTree) else None


def read_tree_values(root: object, depth: object, path: object) -> DelegationTree | str:
    """A tree from the three values a header carries (strings), else why they make none:
    ``"forged depth"`` for a path longer than its depth bears out (an agent claiming to sit higher
    than it does), ``"malformed"`` for a value missing or not of its form (a root that is not 32
    lowercase hex characters, a depth that is not an integer from 0 to 99, a path of anything but
    one to 33 agent digests). A path shorter than ``depth + 1`` is one cut at the sender's
    ``max_depth + 1`` entries: the tree stands, at its depth."""
    if not isinstance(root, str) or not isinstance(depth, str) or not isinstance(path, str):
        return "malformed"
    if not _is_hex(root, ROOT_DIGEST_CHARS) or not depth.isascii() or not depth.isdigit() or len(depth) > 2:
        return "malformed"
    if not path or len(path) > (MAX_DEPTH_ACCEPTED + 1) * (AGENT_DIGEST_CHARS + 1):
        return "malformed"
    entries = tuple(path.split(","))
    if not all(_is_hex(entry, AGENT_DIGEST_CHARS) for entry in entries):
        return "malformed"
    level = int(depth)
    if len(entries) > level + 1:
        return "forged depth"
    return DelegationTree(root, level, entries)
