""" "Same call, same answer again?" — comparing a result with the previous result of its signature.

JSON results compare by content (key order, whitespace and volatile keys do not matter); parsing
is what costs, so it happens only when needed. Equal raw bytes are equal content, without parsing.
A JSON result whose raw bytes differ from the previous one is parsed, and so is the previous one,
which is why the previous result is held by reference (the host holds it in its conversation
anyway) until the comparison is needed. Held references are bounded by ``held_bytes`` per guard
(1 MiB of the most recent results): past it the oldest is released unparsed, and a successor with
different bytes is then compared by its raw bytes. So the rule is exact for any repeat within the
last 1 MiB of results, which covers every back-to-back loop; a repeat further apart whose bytes
differ only in volatile keys, key order or whitespace counts as a new result. Parsing at release
instead would make every call pay for a parse once the window is full (per-call cost growing with
the turn), which the bound exists to prevent.
"""

from __future__ import annotations

import re
from collections import deque
from typing import Any, Final

import xxhash

from otelguard.core._slots import ResultSlot
from otelguard.core.signatures import ResultFingerprinter

__all__ = ["DEFAULT_HELD_BYTES", "ResultMemory", "ResultSlot"]

DEFAULT_HELD_BYTES: Final = 1 << 20
_JSON_OPENERS: Final = (b"{", b"[")
_xxh3: Final = xxhash.xxh3_128_intdigest
_ERROR_CACHE_SIZE: Final = 256
_ENTRY_OVERHEAD: Final = 200  # the queue entry itself, so many tiny results stay bounded too


_BARE_EXIT_STATUS = re.compile(
    rb"\s*(?:error:?\s*)?(?:exit(?:ed with)? (?:code|status)|return ?code)\s*[:=]?\s*-?\d+\s*", re.IGNORECASE
)


def _is_bare_exit_status(text: str | bytes | bytearray) -> bool:
    if len(text) > 64:
        return False
    data = text.encode("utf-8", "replace") if isinstance(text, str) else bytes(text)
    return _BARE_EXIT_STATUS.fullmatch(data) is not None


class ResultMemory:
    """Compares results with their signature's previous result; one per guard, reset every turn."""

    def __init__(self, volatile_keys: tuple[str, ...], held_bytes: int = DEFAULT_HELD_BYTES) -> None:
        self._fingerprints = ResultFingerprinter(volatile_keys)
        self._budget = held_bytes
        self._held_total = 0
        # (slot, result, raw digest, size) per held result, flat: four items each, no tuple to make
        # and free per call (see _hold)
        self._held: deque[Any] = deque()
        self._error_fingerprints: dict[int, int] = {}  # raw digest of a JSON error -> its fingerprint

    def error_fingerprint(self, result: Any) -> int | None:
        """The content fingerprint of a failed call's result; ``None`` when it says nothing about which
        error it was: no result (an exception), blank text, or a bare exit status. Six different
        ``grep``s that each find nothing all end in ``Exit code 1``; that is not one error repeated."""
        if result is None:
            return None
        if isinstance(result, (str, bytes, bytearray)) and (
            not result or result.isspace() or _is_bare_exit_status(result)
        ):
            return None
        raw = _raw_bytes(result)
        if raw is None:
            return self._fingerprints.structured(result)
        raw_digest: int = _xxh3(raw)
        if raw.lstrip()[:1] not in _JSON_OPENERS:
            return raw_digest
        # A loop repeats the same bytes: parse each distinct JSON error once (plain dict operations,
        # so threads calling this outside the guard's lock never see a broken cache).
        fingerprint = self._error_fingerprints.get(raw_digest)
        if fingerprint is None:
            fingerprint = self._fingerprints.json_text(raw, raw_digest)
            if len(self._error_fingerprints) >= _ERROR_CACHE_SIZE:
                self._error_fingerprints.clear()
            self._error_fingerprints[raw_digest] = fingerprint
        return fingerprint

    def reset(self) -> None:
        self._held.clear()
        self._held_total = 0

    def same_as_previous(self, slot: ResultSlot, result: Any) -> bool:
        """Whether ``result`` equals the slot's previous result; then remember ``result`` in the slot."""
        if type(result) is str:
            try:
                raw = result.encode()
            except UnicodeEncodeError:
                raw = result.encode("utf-8", "surrogatepass")
        else:
            raw_or_none = _raw_bytes(result)
            if raw_or_none is None:  # a structured result from the host: fingerprint its content now
                fingerprint = self._fingerprints.structured(result)
                same = slot.raw is None and slot.fingerprint == fingerprint
                self._store(slot, None, fingerprint, None)
                return same
            raw = raw_or_none
        raw_digest: int = _xxh3(raw)
        if slot.raw == raw_digest:
            return True
        if raw.lstrip()[:1] not in _JSON_OPENERS:
            same = slot.held is None and slot.fingerprint == raw_digest
            slot.raw = slot.fingerprint = raw_digest
            slot.held = None
            return same
        if slot.raw is None and slot.fingerprint is None:  # first result of this signature
            slot.raw, slot.fingerprint, slot.held = raw_digest, None, result
            self._hold(slot, result, len(raw))
            return False
        previous = self._previous_fingerprint(slot)
        if previous is None and slot.raw is not None and slot.held is None:
            # the previous result was released unfingerprinted (budget): compare by raw bytes
            self._store(slot, raw_digest, None, result)
            self._hold(slot, result, len(raw))
            return False
        fingerprint = self._fingerprints.json_text(raw, raw_digest)
        self._store(slot, raw_digest, fingerprint, None)
        return previous == fingerprint

    def _previous_fingerprint(self, slot: ResultSlot) -> int | None:
        if slot.fingerprint is None and slot.held is not None:
            slot.fingerprint = self._fingerprints.content(slot.held)
            slot.held = None
        return slot.fingerprint

    @staticmethod
    def _store(slot: ResultSlot, raw: int | None, fingerprint: int | None, held: Any) -> None:
        slot.raw, slot.fingerprint, slot.held = raw, fingerprint, held

    def _hold(self, slot: ResultSlot, result: Any, size: int) -> None:
        """Queue the slot's new ``held`` result (its ``raw`` just set), releasing the oldest past the
        budget. An entry outlives what it held when the slot moves on (fingerprinted, another result)
        or is reset for another signature; so a release empties ``held`` only while the slot still
        holds that very result with that very digest object (a new result's digest is a new int,
        even for the same result object)."""
        size += _ENTRY_OVERHEAD
        held = self._held
        held.append(slot)
        held.append(result)
        held.append(slot.raw)
        held.append(size)
        self._held_total += size
        while self._held_total > self._budget and held:
            old_slot = held.popleft()
            old_result = held.popleft()
            old_raw = held.popleft()
            self._held_total -= held.popleft()
            if old_slot.held is old_result and old_slot.raw is old_raw:
                old_slot.held = None


def _raw_bytes(result: Any) -> bytes | None:
    if isinstance(result, str):
        try:
            return result.encode()
        except UnicodeEncodeError:
            return result.encode("utf-8", "surrogatepass")
    if isinstance(result, (bytes, bytearray, memoryview)):
        return bytes(result)
    return None
