"""Per-call marks for the replay's HTML report: one byte per call, bounded per session and per run.

A mark's low bits are the call's class (allowed, warned, stopped, prevented, cancelled, not replayed);
``TURN_START`` flags the first call of a turn. A session longer than ``MAX_STORED_MARKS`` calls is
folded in place (neighbouring marks merge, the most severe class wins, flags are kept), so a session
never holds more than that many bytes. Only the ``keep`` highest-ranked sessions (most halts, then
most warnings, then earliest) keep their marks once they end; they are shrunk to at most
``MAX_COLUMNS`` marks, so what the report holds is bounded whatever the input's size.

Nothing here is transcript text: classes, counts and call positions only.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from otelguard.decisions import Decision

__all__ = [
    "ALLOWED",
    "CANCELLED",
    "CAP_USAGE_BUCKETS",
    "CLASS_MASK",
    "MARK_CLASSES",
    "MAX_COLUMNS",
    "NOT_REPLAYED",
    "PREVENTED",
    "STOPPED",
    "TURN_START",
    "WARNED",
    "CapUsage",
    "SessionMarks",
    "Timelines",
    "mark_for",
    "session_rank",
    "warning_count",
]

ALLOWED: Final = 0
WARNED: Final = 1
STOPPED: Final = 2
"""Refused or stopped by the guard: ``block``, ``halt`` or ``reject``."""
PREVENTED: Final = 3
"""Later in a turn that had already stopped: the call would not have run."""
CANCELLED: Final = 4
NOT_REPLAYED: Final = 5
"""The transcript has no result for the call, so it was never fed to the guard."""
CLASS_MASK: Final = 0x07
TURN_START: Final = 0x80

MARK_CLASSES: Final = ("allowed", "warned", "stopped", "prevented", "cancelled", "not-replayed")
"""Class names by value (CSS class suffixes and legend keys of the report)."""

_SEVERITY: Final = (0, 3, 5, 2, 4, 1)
"""Which class a merged mark shows: a stop outranks everything, so a halt never disappears."""

MAX_STORED_MARKS: Final = 1 << 16
MAX_COLUMNS: Final = 300
DEFAULT_KEEP: Final = 200

CAP_USAGE_BUCKETS: Final = ("unused", "under 50%", "50–79%", "80–99%", "at the cap")


def mark_for(decision: Decision, *, cancelled: bool = False) -> int:
    """The mark of a call the guard saw; a cancelled call is marked so unless the guard stopped it."""
    if not decision.allows_execution:
        return STOPPED
    if decision.should_halt:  # a halt from after_call: the call ran, then the turn stopped
        return STOPPED
    if cancelled:
        return CANCELLED
    return WARNED if decision.action == "warn" else ALLOWED


def merge(a: int, b: int) -> int:
    """Two marks as one: the more severe class, both marks' flags."""
    left, right = a & CLASS_MASK, b & CLASS_MASK
    chosen = left if _SEVERITY[left] >= _SEVERITY[right] else right
    return chosen | ((a | b) & ~CLASS_MASK)


def group(marks: bytes | bytearray, size: int) -> bytearray:
    """Every ``size`` consecutive marks merged into one."""
    out = bytearray()
    for start in range(0, len(marks), size):
        value = marks[start]
        for other in marks[start + 1 : start + size]:
            value = merge(value, other)
        out.append(value)
    return out


@dataclass(slots=True)
class SessionMarks:
    """The marks of one session; ``calls_per_mark`` grows when a long session is folded."""

    marks: bytearray = field(default_factory=bytearray)
    calls: int = 0
    calls_per_mark: int = 1
    halt_calls: list[int] = field(default_factory=list)
    """0-based call position of each listed halt, aligned with the session report's ``halts``."""
    _next_flags: int = 0

    def start_turn(self) -> None:
        self._next_flags = TURN_START

    def add(self, mark: int) -> None:
        mark |= self._next_flags
        self._next_flags = 0
        calls = self.calls
        self.calls = calls + 1
        if self.calls_per_mark == 1 and calls < MAX_STORED_MARKS:  # the common case, kept short
            self.marks.append(mark)
        elif calls % self.calls_per_mark:
            self.marks[-1] = merge(self.marks[-1], mark)
        else:
            if len(self.marks) >= MAX_STORED_MARKS:
                self.marks = group(self.marks, 2)
                self.calls_per_mark *= 2
            self.marks.append(mark)

    def halt_here(self) -> None:
        """The call just added halted its turn (and the session report listed the halt)."""
        self.halt_calls.append(self.calls - 1)

    def shrink(self, columns: int) -> None:
        """At most ``columns`` marks, merging neighbours."""
        if len(self.marks) <= columns:
            return
        size = -(-len(self.marks) // columns)
        self.marks = group(self.marks, size)
        self.calls_per_mark *= size


@dataclass(slots=True)
class CapUsage:
    """Turns by how close they came to one turn cap (``CAP_USAGE_BUCKETS``), and the highest ratio."""

    turns: list[int] = field(default_factory=lambda: [0] * len(CAP_USAGE_BUCKETS))
    highest: float = 0.0

    def add(self, ratio: float) -> None:
        if ratio <= 0:
            bucket = 0
        elif ratio >= 1:
            bucket = 4
        else:
            bucket = 1 if ratio < 0.5 else 2 if ratio < 0.8 else 3
        self.turns[bucket] += 1
        self.highest = max(self.highest, ratio)


def warning_count(decisions: Mapping[str, int]) -> int:
    return sum(count for code, count in decisions.items() if code.endswith("_warn"))


def session_rank(halts: int, decisions: Mapping[str, int], seq: int) -> tuple[int, int, int]:
    """Higher is shown first: most halts, then most warnings, then the earliest session."""
    return (halts, warning_count(decisions), -seq)


class Timelines:
    """What the HTML report draws beyond the JSON document: the kept sessions' marks and cap usage."""

    def __init__(self, keep: int = DEFAULT_KEEP) -> None:
        self.keep = keep
        self._heap: list[tuple[tuple[int, int, int], int, SessionMarks]] = []
        self.cap_usage: dict[str, CapUsage] = {}

    def offer(self, rank: tuple[int, int, int], seq: int, marks: SessionMarks) -> None:
        """A session ended: keep its marks if it ranks among the ``keep`` highest so far."""
        if self.keep <= 0:
            return
        if len(self._heap) >= self.keep:
            if rank <= self._heap[0][0]:
                return
            heapq.heappop(self._heap)
        marks.shrink(MAX_COLUMNS)
        heapq.heappush(self._heap, (rank, seq, marks))

    def add_turn(self, cap_usage_ratio: Mapping[str, float]) -> None:
        for cap, ratio in cap_usage_ratio.items():
            usage = self.cap_usage.get(cap)
            if usage is None:
                usage = self.cap_usage[cap] = CapUsage()
            usage.add(ratio)

    def kept(self) -> dict[int, SessionMarks]:
        """The kept sessions' marks by session sequence number."""
        return {seq: marks for _, seq, marks in self._heap}
