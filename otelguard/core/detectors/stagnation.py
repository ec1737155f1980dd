"""Stagnation: a shell command that keeps returning what it already returned, whatever its exit status.

An agent stuck on a task reruns the same check (``python reproduce.py``, the tests) after each edit
and gets the same failure back in other words; or it lists the same directory again and again. No
exact rule sees it when the output differs in a timestamp, an address or a line number, or when an
edit comes between two runs. Here a shell result is normalised (ANSI codes, timestamps, hex addresses
and ids, temporary paths and every number out, whitespace collapsed) and compared with the results
that same command gave earlier in the turn: equal normalised text, or a near duplicate by a bottom-k
sketch of its word shingles (an estimate of their Jaccard similarity). A run returning a result the
command already gave counts; a result new for the command resets its count.

Bounded and private: per turn at most ``_CHECKS`` commands, each keeping its last ``_KEPT`` results
as a 64-bit digest and a sketch of ``_SKETCH`` 64-bit shingle hashes (no text); only the count and
the code leave the process, in the decision.
"""

from __future__ import annotations

import json
import re
from heapq import nsmallest
from typing import Any, Final

import xxhash

from otelguard.core.bounded_map import BoundedMap
from otelguard.core.decisions import Signature

__all__ = ["ResultSketch", "StagnationMemory", "normalised", "sketch"]

_CHECKS: Final = 256  # commands tracked per turn
_KEPT: Final = 8  # results kept per command
_SKETCH: Final = 16  # shingle hashes per result
_SHINGLE: Final = 3  # words per shingle
_NEAR: Final = 0.8  # estimated Jaccard similarity from which two results are the same
_HEAD: Final = 4096  # characters read from each end of a long result: a traceback ends at the bottom

_VOLATILE: Final = re.compile(
    r"\x1b\[[0-9;?]*[A-Za-z]"  # ANSI codes
    r"|\d{4}-\d\d-\d\d[T ]\d\d:\d\d(?::\d\d(?:[.,]\d+)?)?(?:Z|[+-]\d\d:?\d\d)?"  # timestamps
    r"|\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"  # uuids
    r"|0x[0-9a-fA-F]+|\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{8,}\b"  # addresses, hex ids
    r"|(?:/tmp|/var/folders|/private/var)/\S+"  # temporary paths
    r"|(?<![A-Za-z_])\d+(?:\.\d+)?"  # durations, pids, counters, line numbers (not test_3's 3)
)
_SPACES: Final = re.compile(r"\s+")
_hash64: Final = xxhash.xxh3_64_intdigest

ResultSketch = tuple[int, tuple[int, ...]]
"""A result as compared here: the digest of its normalised text and its shingle sketch."""


def _text(result: Any) -> str:
    if isinstance(result, str):
        text = result
    elif isinstance(result, (bytes, bytearray)):
        text = bytes(result).decode("utf-8", "replace")
    else:
        try:
            text = json.dumps(result, sort_keys=True, default=str)
        except (TypeError, ValueError, RecursionError):
            text = repr(result)
    if len(text) > 2 * _HEAD:
        text = text[:_HEAD] + " " + text[-_HEAD:]
    return text


def normalised(result: Any) -> str:
    """The result's text with its volatile parts replaced by ``#`` and its whitespace collapsed."""
    return _SPACES.sub(" ", _VOLATILE.sub("#", _text(result))).strip()


def sketch(result: Any) -> ResultSketch:
    """The digest of the normalised result and the ``_SKETCH`` smallest hashes of its word shingles."""
    text = normalised(result)
    words = text.split(" ")
    digest = _hash64(text.encode("utf-8", "replace"))
    if len(words) <= _SHINGLE:
        return digest, (digest,)
    shingles = {
        _hash64(" ".join(words[i : i + _SHINGLE]).encode("utf-8", "replace"))
        for i in range(len(words) - _SHINGLE + 1)
    }
    return digest, tuple(sorted(nsmallest(_SKETCH, shingles)))


def _near(a: ResultSketch, b: ResultSketch) -> bool:
    if a[0] == b[0]:
        return True
    small_a, small_b = a[1], b[1]
    if not small_a or not small_b:
        return False
    union = nsmallest(_SKETCH, set(small_a) | set(small_b))
    shared = set(small_a) & set(small_b)
    return sum(1 for h in union if h in shared) >= _NEAR * len(union)


class _Check:
    __slots__ = ("rejects", "results", "stale")

    def __init__(self) -> None:
        self.results: tuple[ResultSketch, ...] = ()
        self.stale = 0  # runs returning a result the command already returned, since a new one
        self.rejects = 0  # rejects given since then


class StagnationMemory:
    """Per turn: the results each shell command returned, and how often it returned one again."""

    __slots__ = ("checks",)

    def __init__(self) -> None:
        self.checks: BoundedMap[Signature, _Check] = BoundedMap(_CHECKS)

    def record(self, sig: Signature, raw: Any) -> int:
        """Count a run of the command ``sig`` that returned ``raw``; returns its stale count.

        A command's first run is only noted: most commands run once, and sketching a result costs
        more than the rest of the call. So the count starts with the second run's result, one run
        later than if the first had been sketched (the thresholds were measured this way)."""
        check = self.checks.get(sig)
        if check is None:
            self.checks.touch(sig, _Check)
            return 0
        self.checks.move_to_end(sig)
        result = sketch(raw)
        if any(_near(result, seen) for seen in check.results):
            check.stale += 1
        else:
            check.stale = check.rejects = 0
        check.results = (*check.results[-(_KEPT - 1) :], result)
        return check.stale

    def stale(self, sig: Signature) -> _Check | None:
        return self.checks.get(sig) if self.checks else None
