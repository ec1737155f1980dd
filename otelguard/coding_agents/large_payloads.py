"""A hook payload over what the sidecar takes, reduced to what the guard needs instead of dropped.

Claude Code sends a tool's whole result with ``PostToolUse`` (a large file read, a long build log):
more than the sidecar reads in one request. Dropping it would hide the call from the detectors, so
the hook replaces the result's long strings by digests (``DIGEST_PREFIX``, the algorithm, the hex
digest and the length in characters) and sends the rest as it is: keys, numbers, flags and short
strings are untouched, so volatile keys, failure flags and exit codes still read as before. Two
copies of one large result reduce to the same stand-in, and two results that differ anywhere reduce
to different ones, so the guard's "same result again" and "same error again" see a repeated large
result exactly as a repeated small one. A result whose many short strings are still too large
together is replaced whole by the digest of its canonical JSON; then the tool's arguments are
reduced the same way; a payload that is still too large is not sent.

Standard library only (``json``, ``hashlib``): it runs in the hook command, only for large payloads.
"""

from __future__ import annotations

import hashlib
import json

TYPE_CHECKING = False  # not typing's: the hook command pays for every module it imports
if TYPE_CHECKING:
    from typing import Any, Final

__all__ = ["DIGEST_PREFIX", "LONG_STRING_CHARS", "digest_of", "reduced"]

DIGEST_PREFIX: Final = "otelguard-digest:"
LONG_STRING_CHARS: Final = 4096
"""Strings longer than this are replaced by their digest in a reduced payload."""
REDUCED_FIELDS: Final = ("tool_response", "error", "tool_input")
"""What may be reduced, in this order: the result first, the arguments last (they name the call)."""


def digest_of(text: str) -> str:
    """The stand-in for a long string: equal for equal strings, different for different ones."""
    data = text.encode("utf-8", "surrogatepass")
    return f"{DIGEST_PREFIX}blake2b-128:{hashlib.blake2b(data, digest_size=16).hexdigest()}:{len(text)}"


def reduced(payload: bytes, limit: int) -> bytes | None:
    """``payload`` (a JSON object) reduced to at most ``limit`` bytes; ``None`` when it is not a JSON
    object or is still too large once every reducible field is reduced."""
    try:
        document = json.loads(payload)
    except (ValueError, RecursionError):
        return None
    if not isinstance(document, dict):
        return None
    try:
        for whole in (False, True):
            for field in REDUCED_FIELDS:
                if field not in document:
                    continue
                if whole:
                    document[field] = digest_of(_canonical(document[field]))
                else:
                    document[field] = _long_strings_reduced(document[field])
                encoded = _encoded(document)
                if len(encoded) <= limit:
                    return encoded
    except RecursionError:
        return None
    return None


def _long_strings_reduced(value: Any) -> Any:
    """``value`` with every string longer than ``LONG_STRING_CHARS`` (keys too) replaced by its digest."""
    if isinstance(value, str):
        return digest_of(value) if len(value) > LONG_STRING_CHARS else value
    if isinstance(value, list):
        return [_long_strings_reduced(item) for item in value]
    if isinstance(value, dict):
        return {_long_strings_reduced(key): _long_strings_reduced(item) for key, item in value.items()}
    return value


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _encoded(document: dict[str, Any]) -> bytes:
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")
