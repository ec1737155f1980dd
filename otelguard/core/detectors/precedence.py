"""The order the detectors are consulted in, as data: the docs' "Ordering" (docs/detectors.md), pinned
against it by tests/test_detector_package.py. A new detector takes its place here, in its module, in
its thresholds and in its docs."""

from __future__ import annotations

from typing import Final

from otelguard.core import decisions as codes

__all__ = ["AFTER_CALL", "BEFORE_CALL"]

# before_call, after an already halted turn and the caps: the hard-stop refusals, each a reject first
BEFORE_CALL: Final[tuple[str, ...]] = (
    "exact_failure",
    "cross_turn_failure",
    "no_progress",
    "identical_call",
    "stagnation",
    "unchanged_check",
    "cycle",
    "same_tool_failure",
)

# after_call: the first of these that fires is the call's decision
AFTER_CALL: Final[tuple[str, ...]] = (
    codes.REFUSAL_HALT,
    codes.SAME_TOOL_FAILURE_HALT,
    codes.SAME_ERROR_HALT,
    codes.IDENTICAL_CALL_HALT,
    codes.STAGNATION_HALT,
    codes.EXACT_FAILURE_WARN,
    codes.CROSS_TURN_FAILURE_WARN,
    codes.REFUSAL_WARN,
    codes.SAME_TOOL_FAILURE_WARN,
    codes.SAME_ERROR_WARN,
    codes.NO_PROGRESS_WARN,
    codes.IDENTICAL_CALL_WARN,
    codes.STAGNATION_WARN,
    codes.CYCLE_WARN,
    codes.READ_ONLY_STREAK_WARN,
    codes.WRITE_STREAK_WARN,
)
