"""Per-call marks for the replay's HTML report: one byte per call, bounded per session and per run.

A mark's low bits are the call's class (allowed, warned, stopped, prevented, cancelled, not replayed,
in progress);
``TURN_START`` flags the first call of a turn. A session longer than ``MAX_STORED_MARKS`` calls is
folded in place (neighbouring marks merge, the most severe class wins, flags are kept), so a session
never holds more than that many bytes. Only the ``keep`` highest-ranked sessions (most halts, then
most warnings, then earliest) keep their marks once they end; they are shrunk to at most
``MAX_COLUMNS`` marks, so what the report holds is bounded whatever the input's size.

Each mark also names its call's tool and decision code (the report's hover text), as a two-byte
index into the session's table of distinct (tool, code) pairs: at most ``MAX_LABELS`` of them, the
rest named as many tools at once. A folded mark is named after the call whose class it shows.

Nothing here is transcript text: classes, tool names, codes, counts and call positions only.
"""

from __future__ import annotations

import heapq
from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from otelguard.core.decisions import Decision

__all__ = [
    "ALLOWED",
    "CANCELLED",
    "CAP_USAGE_BUCKETS",
    "CLASS_MASK",
    "IN_PROGRESS",
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
IN_PROGRESS: Final = 6
"""Still running when the transcript ended (a live session): not fed to the guard either."""
CLASS_MASK: Final = 0x07
TURN_START: Final = 0x80

MARK_CLASSES: Final = (
    "allowed",
    "warned",
    "stopped",
    "prevented",
    "cancelled",
    "not-replayed",
    "in-progress",
)
"""Class names by value (CSS class suffixes and legend keys of the report)."""

_SEVERITY: Final = (0, 4, 6, 3, 5, 1, 2)
"""Which class a merged mark shows: a stop outranks everything, so a halt never disappears."""

MAX_STORED_MARKS: Final = 1 << 16
MAX_LABELS: Final = 1024
"""Distinct (tool, code) pairs named per session; index 0 stands for any pair past them."""
MAX_LABEL_TOOL_CHARS: Final = 80
MANY_TOOLS: Final = ("(one of many tools)", "")
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
    return _fold(marks, array("H", bytes(2 * len(marks))), size)[0]


def _fold(marks: bytes | bytearray, labels: array[int], size: int) -> tuple[bytearray, array[int]]:
    """Every ``size`` consecutive marks merged into one, named after the mark whose class it shows."""
    out, named = bytearray(), array("H")
    for start in range(0, len(marks), size):
        value, label = marks[start], labels[start]
        for offset in range(start + 1, min(start + size, len(marks))):
            merged = merge(value, marks[offset])
            if merged & CLASS_MASK != value & CLASS_MASK:
                label = labels[offset]
            value = merged
        out.append(value)
        named.append(label)
    return out, named


@dataclass(slots=True)
class SessionMarks:
    """The marks of one session; ``calls_per_mark`` grows when a long session is folded."""

    marks: bytearray = field(default_factory=bytearray)
    calls: int = 0
    calls_per_mark: int = 1
    halt_calls: list[int] = field(default_factory=list)
    """0-based call position of each listed halt, aligned with the session report's ``halts``."""
    labels: array[int] = field(default_factory=lambda: array("H"))
    """Per mark, the index of its (tool, code) in ``names``."""
    names: list[tuple[str, str]] = field(default_factory=lambda: [MANY_TOOLS])
    _index: dict[tuple[str, str], int] = field(default_factory=dict)
    _next_flags: int = 0

    def start_turn(self) -> None:
        self._next_flags = TURN_START

    def add(self, mark: int, tool: str = "", code: str = "") -> None:
        """One call's mark, named by its tool and the code of the decision it shows."""
        mark |= self._next_flags
        self._next_flags = 0
        label = self._label(tool, code)
        calls = self.calls
        self.calls = calls + 1
        if self.calls_per_mark == 1 and calls < MAX_STORED_MARKS:  # the common case, kept short
            self.marks.append(mark)
            self.labels.append(label)
        elif calls % self.calls_per_mark:
            merged = merge(self.marks[-1], mark)
            if merged & CLASS_MASK != self.marks[-1] & CLASS_MASK:
                self.labels[-1] = label
            self.marks[-1] = merged
        else:
            if len(self.marks) >= MAX_STORED_MARKS:
                self.marks, self.labels = _fold(self.marks, self.labels, 2)
                self.calls_per_mark *= 2
            self.marks.append(mark)
            self.labels.append(label)

    def name(self, column: int) -> tuple[str, str]:
        """The (tool, code) the mark in ``column`` is named after."""
        return self.names[self.labels[column]]

    def _label(self, tool: str, code: str) -> int:
        key = (tool[:MAX_LABEL_TOOL_CHARS], code)
        index = self._index.get(key)
        if index is None:
            if len(self.names) > MAX_LABELS:
                return 0
            index = self._index[key] = len(self.names)
            self.names.append(key)
        return index

    def halt_here(self) -> None:
        """The call just added halted its turn (and the session report listed the halt)."""
        self.halt_calls.append(self.calls - 1)

    def shrink(self, columns: int) -> None:
        """At most ``columns`` marks, merging neighbours."""
        if len(self.marks) <= columns:
            return
        size = -(-len(self.marks) // columns)
        self.marks, self.labels = _fold(self.marks, self.labels, size)
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
