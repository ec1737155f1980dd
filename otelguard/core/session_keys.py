"""The keyed digest of a session id: the name every process gives one session in shared state, and
the ``X-Otelguard-Session`` header the Claude Code hook sends for load-balancer affinity.

Standard library only: the hook command imports this on every tool call.
"""

from __future__ import annotations

import hashlib

TYPE_CHECKING = False  # not typing's: the hook command pays for every module it imports
if TYPE_CHECKING:
    from typing import Final

__all__ = ["SESSION_HEADER", "key_bytes", "session_digest"]

SESSION_HEADER: Final = "X-Otelguard-Session"
_BLAKE2B_MAX_KEY: Final = 64
_PERSON: Final = b"otelguard.sess"
"""Keeps session digests apart from argument hashes made with the same key."""


def key_bytes(secret: str) -> bytes:
    """The BLAKE2b key for a configured secret (a secret longer than BLAKE2b allows is hashed first)."""
    raw = secret.encode("utf-8", "surrogatepass")
    return raw if len(raw) <= _BLAKE2B_MAX_KEY else hashlib.blake2b(raw).digest()


def session_digest(session_id: str, key: bytes) -> str:
    """32 hex characters naming ``session_id`` under ``key``; without the key it cannot be reversed."""
    data = session_id.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, key=key, digest_size=16, person=_PERSON).hexdigest()
