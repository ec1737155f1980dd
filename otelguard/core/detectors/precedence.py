"""The order of the decision path: this declaration is the order, read by the code that runs (the
guard walks ``GATES`` before a call; its ``HARD_STOPS`` gate is the turn walking ``BEFORE_CALL``; the
turn walks ``AFTER_CALL`` after it), and the docs' "Ordering" (docs/detectors.md) is pinned to it by
tests/test_detector_package.py. A new detector is one new module (an object with the verbs of
``rule.py``) and one line here; a new gate (a cap, a limit) one object with the verb of the gates
in ``caps.py`` and one line in ``GATES``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from otelguard.core import caps, token_caps
from otelguard.core.detectors import checks, cycle, failures, progress, replies, reworded

if TYPE_CHECKING:
    from otelguard.core.detectors.rule import AfterRule, BeforeRule

__all__ = [
    "AFTER_CALL",
    "AFTER_MODEL",
    "BEFORE_CALL",
    "BEFORE_WALKS",
    "GATES",
    "TOKEN_CAPS",
    "UNQUERIED_WALKS",
    "WALKS",
]

# before_call, after an already halted turn: the first gate that refuses is the call's decision (a
# refused call is charged nothing: the caps that charge are charged once no gate refuses)
GATES: Final[tuple[caps.Gate, ...]] = (
    caps.TURN_CAP,
    caps.SESSION_CAP,
    caps.DELEGATION_DEPTH,
    caps.TREE_CAP,
    caps.DELEGATION_CYCLE,
    caps.HARD_STOPS,
)

# HARD_STOPS, the hard-stop refusals, each a reject first
BEFORE_CALL: Final[tuple[BeforeRule, ...]] = (
    failures.EXACT_FAILURE,
    failures.CROSS_TURN_FAILURE,
    progress.NO_PROGRESS,
    progress.IDENTICAL_CALL,
    checks.STAGNATION,
    checks.UNCHANGED_CHECK,
    reworded.REWORDED_QUERY,
    cycle.CYCLE,
    failures.SAME_TOOL_FAILURE,
)

# after_call: the first of these that fires is the call's decision
AFTER_CALL: Final[tuple[AfterRule, ...]] = (
    failures.REFUSAL_HALT,
    failures.SAME_TOOL_FAILURE_HALT,
    failures.SAME_ERROR_HALT,
    progress.IDENTICAL_CALL_HALT,
    checks.STAGNATION_HALT,
    failures.EXACT_FAILURE,
    failures.CROSS_TURN_FAILURE,
    failures.REFUSAL_WARN,
    failures.SAME_TOOL_FAILURE,
    failures.SAME_ERROR_WARN,
    progress.NO_PROGRESS,
    progress.IDENTICAL_CALL,
    checks.STAGNATION,
    reworded.REWORDED_QUERY,
    cycle.CYCLE,
    progress.READ_ONLY_STREAK,
    progress.WRITE_STREAK,
)

# before_model, after an already halted turn: the token caps, the first spent one blocking the model
# call; after_model: the token caps (the reply that spent one halts), then AFTER_MODEL
TOKEN_CAPS: Final[tuple[token_caps.TokenCap, ...]] = (
    token_caps.TURN_TOKENS,
    token_caps.SESSION_TOKENS,
    token_caps.TREE_TOKENS,
)

# the reply a model event counts (after_model's reply with only invalid calls; at before_model, the
# reply before it that called nothing): the first of these that fires is the event's decision
AFTER_MODEL: Final[tuple[replies.ReplyRule, ...]] = (
    replies.REPEATED_REPLY_HALT,
    replies.NO_ACTION_HALT,
    replies.REPEATED_REPLY_WARN,
    replies.NO_ACTION_WARN,
)

TOOL_CLASSES: Final = ("read", "write", "shell", "poll", "unknown")


def _asked_about(rule: object, verb: str, tool_class: str) -> bool:
    """Whether ``rule`` may answer ``verb`` about a call of ``tool_class``: a detector declares the
    classes it judges (``before_classes``, ``after_classes``; by default every one)."""
    return tool_class in getattr(rule, f"{verb}_classes", TOOL_CLASSES)


BEFORE_WALKS: Final[dict[str, tuple[BeforeRule, ...]]] = {
    tool_class: tuple(rule for rule in BEFORE_CALL if _asked_about(rule, "before", tool_class))
    for tool_class in TOOL_CLASSES
}
"""``BEFORE_CALL`` as a call of each tool class walks it: less the detectors that never judge one."""

UNQUERIED_WALKS: Final[dict[str, tuple[BeforeRule, ...]]] = {
    tool_class: tuple(rule for rule in walk if not getattr(rule, "reads_query", False))
    for tool_class, walk in BEFORE_WALKS.items()
}
"""``BEFORE_WALKS`` for a call whose query the guard did not read (``TurnDetectors.query`` is
``None``: no search, or none a streak makes worth reading): less the detectors that judge only a
query (``reads_query``), which would answer ``None`` at once."""


def after_rules(warnings: bool, hard_stop: bool) -> dict[tuple[str | None, bool], tuple[AfterRule, ...]]:
    """``AFTER_CALL`` as a turn with these settings walks it, by the call's tool class and whether it
    succeeded: without ``warnings`` no warning is asked, without ``hard_stop`` no halt (neither could
    fire), nor a detector that never judges a call of the class (``after_classes``) or a success
    (``judges_successes``), so the walk is shorter. Under ``(None, ok)``: the walk of any class."""
    return _AFTER[warnings, hard_stop]


def _walked_after(rule: AfterRule, warnings: bool, hard: bool, tool_class: str | None, ok: bool) -> bool:
    if not (warnings if rule.warns else hard):
        return False
    if ok and not getattr(rule, "judges_successes", True):
        return False
    return tool_class is None or _asked_about(rule, "after", tool_class)


_AFTER: Final = {
    (warnings, hard): {
        (tool_class, ok): tuple(
            rule for rule in AFTER_CALL if _walked_after(rule, warnings, hard, tool_class, ok)
        )
        for tool_class in (*TOOL_CLASSES, None)
        for ok in (False, True)
    }
    for warnings in (False, True)
    for hard in (False, True)
}

WALKS: Final[tuple[tuple[caps.Gate, ...], ...]] = tuple(
    tuple(gate for gate in GATES if gate.asks(call)) for call in range(2 * caps.DELEGATES)
)
"""``GATES`` as a call walks them, by its mask (``caps.HAS_TREE`` ...): less the gates that do not
ask about it. Empty on the quiet path."""
