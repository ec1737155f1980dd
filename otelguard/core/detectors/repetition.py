"""Repetition: the back-to-back cycle window of ``cycle`` (``no_progress`` and ``identical_call``
count on a signature's state, in ``turn.py``)."""

from __future__ import annotations

from typing import Final

from otelguard.core.decisions import Signature

__all__ = ["Cycle"]

_CYCLE_PERIODS: Final = (2, 3, 4)


class Cycle:
    """Back-to-back repeats of a period of 2–4 signatures, tracked incrementally in O(1) per call.

    ``last``, ``second``, ``third``, ``fourth``: the last four signatures, newest first (``None``
    before there are four). ``run2``, ``run3``, ``run4``: for each period p, the consecutive
    positions i with seq[i] == seq[i - p]. Plain attributes, not a list and a dict: this runs on
    every call."""

    __slots__ = ("fourth", "last", "run2", "run3", "run4", "second", "third")

    def __init__(self) -> None:
        self.last: Signature | None = None
        self.second: Signature | None = None
        self.third: Signature | None = None
        self.fourth: Signature | None = None
        self.run2 = self.run3 = self.run4 = 0

    def push(self, sig: Signature) -> None:
        second, third = self.second, self.third
        self.run2 = self.run2 + 1 if second == sig else 0
        self.run3 = self.run3 + 1 if third == sig else 0
        fourth = self.fourth
        self.run4 = self.run4 + 1 if fourth == sig else 0
        self.fourth = third  # one at a time: four at once would build a tuple
        self.third = second
        self.second = self.last
        self.last = sig

    def runs_any(self) -> bool:
        return bool(self.run2 or self.run3 or self.run4)

    def _run(self, period: int) -> int:
        return self.run2 if period == 2 else self.run3 if period == 3 else self.run4

    def _recent(self, period: int) -> tuple[Signature | None, ...]:
        """The last ``period`` signatures, newest first."""
        return (self.last, self.second, self.third, self.fourth)[:period]

    def best(self) -> tuple[int, int]:
        """``(count, period)`` of the strongest current cycle; count 0 when there is none."""
        best_count, best_period = 0, 0
        for period in _CYCLE_PERIODS:
            run = self._run(period)
            if run == 0:
                continue
            count = (run + period) // period
            if count > best_count and len(set(self._recent(period))) >= 2:
                best_count, best_period = count, period
        return best_count, best_period

    def would_continue(self, sig: Signature, threshold: int) -> tuple[int, int]:
        """``(count, period)`` of a cycle of at least ``threshold`` repeats that ``sig`` would continue."""
        for period in _CYCLE_PERIODS:
            run = self._run(period)
            count = (run + period) // period
            if run and count >= threshold:
                recent = self._recent(period)
                if recent[-1] == sig and len(set(recent)) >= 2:
                    return count, period
        return 0, 0
