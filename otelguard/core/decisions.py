"""What the guard answers: decisions, signatures, turn summaries, and decision codes."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, Literal, NamedTuple

import orjson

__all__ = [
    "ACTIONS",
    "CAP_SCOPES",
    "CODES",
    "LOOP_CODES",
    "MODEL_OUTCOMES",
    "MODEL_TOOL",
    "NON_LOOP_CODES",
    "TURN_OUTCOMES",
    "Action",
    "Decision",
    "ModelOutcome",
    "Outcome",
    "Signature",
    "ToolClass",
    "TurnOutcome",
    "TurnSummary",
    "slotted_twin",
]

Action = Literal["allow", "warn", "reject", "block", "halt"]
ACTIONS: Final = ("allow", "warn", "reject", "block", "halt")
ToolClass = Literal["read", "write", "shell", "poll", "unknown"]
Outcome = Literal["ok", "failed", "refused", "blocked", "rejected", "cancelled"]
TurnOutcome = Literal["completed", "halted", "errored"]
TURN_OUTCOMES: Final[tuple[TurnOutcome, ...]] = ("completed", "halted", "errored")
"""How a turn ended: ``halted`` by a ``block``/``halt``; else ``errored`` when the host said its run
ended in an exception; else ``completed``."""

ALLOW: Final = "allow"
INTERNAL_ERROR: Final = "internal_error"
TURN_HALTED: Final = "turn_halted"
CAP_TURN: Final = "cap_turn"
CAP_SESSION: Final = "cap_session"
EXACT_FAILURE_WARN: Final = "exact_failure_warn"
EXACT_FAILURE_BLOCK: Final = "exact_failure_block"
SAME_TOOL_FAILURE_WARN: Final = "same_tool_failure_warn"
SAME_TOOL_FAILURE_HALT: Final = "same_tool_failure_halt"
REFUSAL_WARN: Final = "refusal_warn"
REFUSAL_HALT: Final = "refusal_halt"
NO_PROGRESS_WARN: Final = "no_progress_warn"
NO_PROGRESS_BLOCK: Final = "no_progress_block"
IDENTICAL_CALL_WARN: Final = "identical_call_warn"
IDENTICAL_CALL_HALT: Final = "identical_call_halt"
CYCLE_WARN: Final = "cycle_warn"
CYCLE_BLOCK: Final = "cycle_block"
READ_ONLY_STREAK_WARN: Final = "read_only_streak_warn"
WRITE_STREAK_WARN: Final = "write_streak_warn"
SAME_ERROR_WARN: Final = "same_error_warn"
SAME_ERROR_HALT: Final = "same_error_halt"
EXACT_FAILURE_REJECT: Final = "exact_failure_reject"
NO_PROGRESS_REJECT: Final = "no_progress_reject"
IDENTICAL_CALL_REJECT: Final = "identical_call_reject"
CYCLE_REJECT: Final = "cycle_reject"
CROSS_TURN_FAILURE_WARN: Final = "cross_turn_failure_warn"
CROSS_TURN_FAILURE_REJECT: Final = "cross_turn_failure_reject"
CROSS_TURN_FAILURE_BLOCK: Final = "cross_turn_failure_block"
SAME_TOOL_FAILURE_REJECT: Final = "same_tool_failure_reject"
CAP_TREE: Final = "cap_tree"
DELEGATION_DEPTH: Final = "delegation_depth"
DELEGATION_CYCLE_WARN: Final = "delegation_cycle_warn"
DELEGATION_CYCLE_REJECT: Final = "delegation_cycle_reject"
DELEGATION_CYCLE_BLOCK: Final = "delegation_cycle_block"
STAGNATION_WARN: Final = "stagnation_warn"
STAGNATION_REJECT: Final = "stagnation_reject"
STAGNATION_BLOCK: Final = "stagnation_block"
STAGNATION_HALT: Final = "stagnation_halt"
NO_ACTION_WARN: Final = "no_action_warn"
NO_ACTION_HALT: Final = "no_action_halt"
REPEATED_REPLY_WARN: Final = "repeated_reply_warn"
REPEATED_REPLY_HALT: Final = "repeated_reply_halt"
REWORDED_QUERY_WARN: Final = "reworded_query_warn"
REWORDED_QUERY_REJECT: Final = "reworded_query_reject"
REWORDED_QUERY_BLOCK: Final = "reworded_query_block"

MODEL_TOOL: Final = "model"
"""The ``tool_name`` of a decision about a model reply (and its ``tool`` label in the metrics)."""
ModelOutcome = Literal["tool_calls", "invalid_tool_call", "no_tool_call"]
MODEL_OUTCOMES: Final[tuple[ModelOutcome, ...]] = ("tool_calls", "invalid_tool_call", "no_tool_call")
"""What a model reply asked for: at least one valid tool call; else at least one the harness could
not run; else none."""

CODES: Final = (
    ALLOW,
    INTERNAL_ERROR,
    TURN_HALTED,
    CAP_TURN,
    CAP_SESSION,
    EXACT_FAILURE_WARN,
    EXACT_FAILURE_BLOCK,
    SAME_TOOL_FAILURE_WARN,
    SAME_TOOL_FAILURE_HALT,
    REFUSAL_WARN,
    REFUSAL_HALT,
    NO_PROGRESS_WARN,
    NO_PROGRESS_BLOCK,
    IDENTICAL_CALL_WARN,
    IDENTICAL_CALL_HALT,
    CYCLE_WARN,
    CYCLE_BLOCK,
    READ_ONLY_STREAK_WARN,
    WRITE_STREAK_WARN,
    SAME_ERROR_WARN,
    SAME_ERROR_HALT,
    EXACT_FAILURE_REJECT,
    NO_PROGRESS_REJECT,
    IDENTICAL_CALL_REJECT,
    CYCLE_REJECT,
    CROSS_TURN_FAILURE_WARN,
    CROSS_TURN_FAILURE_REJECT,
    CROSS_TURN_FAILURE_BLOCK,
    SAME_TOOL_FAILURE_REJECT,
    CAP_TREE,
    DELEGATION_DEPTH,
    DELEGATION_CYCLE_WARN,
    DELEGATION_CYCLE_REJECT,
    DELEGATION_CYCLE_BLOCK,
    STAGNATION_WARN,
    STAGNATION_REJECT,
    STAGNATION_BLOCK,
    STAGNATION_HALT,
    NO_ACTION_WARN,
    NO_ACTION_HALT,
    REPEATED_REPLY_WARN,
    REPEATED_REPLY_HALT,
    REWORDED_QUERY_WARN,
    REWORDED_QUERY_REJECT,
    REWORDED_QUERY_BLOCK,
)
"""Every decision code, stable: they are metric label values."""

NON_LOOP_CODES: Final = (CAP_TURN, CAP_SESSION, CAP_TREE, DELEGATION_DEPTH, TURN_HALTED, INTERNAL_ERROR)
"""Refusal and failure codes that no loop detector makes: caps are budgets, ``turn_halted`` repeats an
earlier halt, ``internal_error`` is the guard failing open. Telemetry, the dashboards' loop rate and
replay all take the loop codes as "every code but ``allow`` and these", so a detector added later
counts as a loop without touching them."""

LOOP_CODES: Final = frozenset(CODES) - {ALLOW, *NON_LOOP_CODES}
"""Codes produced by the loop detectors."""

CAP_SCOPES: Final[Mapping[str, str]] = MappingProxyType(
    {CAP_TURN: "turn", CAP_SESSION: "session", CAP_TREE: "tree"}
)
"""The cap codes, each with the ``scope`` its hits are counted under: every one of them is a cap hit,
in the metrics, replay's report and the backtest alike."""


class Signature(NamedTuple):
    """Identity of a call: the tool and a keyed hash of its canonical arguments."""

    tool_name: str
    args_hash: str


@dataclass(frozen=True, slots=True)
class Decision:
    """The guard's answer about one tool call. Frozen; safe to share between threads.

    ``message`` is written for the model: it names the tool and the counts, never argument values or
    result text. ``count``/``limit`` are the detector's count and threshold (for caps: the usage before
    the call and the cap's limit). ``cap`` is the cap key for ``cap_turn``/``cap_session``.
    """

    action: Action
    code: str
    message: str = ""
    tool_name: str = ""
    count: int = 0
    limit: int = 0
    signature: Signature | None = None
    cap: str | None = None

    @property
    def allows_execution(self) -> bool:
        return self.action in ("allow", "warn")

    @property
    def should_halt(self) -> bool:
        return self.action in ("block", "halt")

    def to_metadata(self) -> dict[str, Any]:
        """The decision as a flat dict for logs and traces: codes and counts, no raw values."""
        meta: dict[str, Any] = {
            "action": self.action,
            "code": self.code,
            "tool_name": self.tool_name,
            "count": self.count,
            "limit": self.limit,
            "args_hash": self.signature.args_hash if self.signature else None,
        }
        if self.cap is not None:
            meta["cap"] = self.cap
        return meta

    def synthetic_result(self) -> str:
        """A JSON tool result to hand back to the model in place of a call that did not run."""
        body = {
            "error": self.message or f"The call to {self.tool_name} was not run.",
            "otelguard": {"action": self.action, "code": self.code, "count": self.count, "limit": self.limit},
        }
        try:
            return orjson.dumps(body).decode()
        except orjson.JSONEncodeError:  # a tool name with a lone surrogate: escape it
            return json.dumps(body)

    def annotate(self, result: Any) -> Any:
        """Append this decision's guidance to a tool result for ``warn``/``halt``; else return it unchanged.

        Strings get a trailing note; dicts get an ``otelguard`` entry (a new dict); anything else is
        returned as is.
        """
        if self.action not in ("warn", "halt") or not self.message:
            return result
        try:
            return self._annotated(result)
        except Exception:
            return result  # a result that cannot be read or copied goes back as it came: never raise

    def _annotated(self, result: Any) -> Any:
        if isinstance(result, str):
            return f"{result}\n\n[otelguard {self.action}: {self.code}] {self.message}"
        if isinstance(result, Mapping):
            annotated = dict(result)
            annotated["otelguard"] = {"action": self.action, "code": self.code, "message": self.message}
            return annotated
        return result


def plain_allow_decision(tool_name: str, signature: Signature) -> Decision:
    """``allow_decision`` through the class's own constructor."""
    return Decision("allow", ALLOW, "", tool_name, 0, 0, signature, None)


# Fast construction of frozen slotted dataclasses for the per-call hot path.
#
# A frozen dataclass ``__init__`` sets each field through ``object.__setattr__``. The hot-path
# constructors (``decisions.allow_decision``, ``observers.new_call_event``, written out by hand) set
# the fields on an instance of a plain slotted twin of the class instead (the same slots, in the same
# order: the same memory layout), whose attribute stores the interpreter specialises, and the instance
# then becomes an instance of the class itself (``__class__`` assignment, which CPython allows between
# layouts that match). The object is exactly what the class's ``__init__`` would have built. Kept
# because it pays: the allow decision and the call event are built on every call, and ``otelguard
# bench`` measures the guard with these constructors and with the classes' own side by side
# (``hot_path_tricks``); where the assignment is refused, the classes' own constructors are used.


def slotted_twin(cls: type[Any]) -> type[Any] | None:
    """A plain class with the slots of ``cls`` (a frozen slotted dataclass), whose instances can become
    instances of ``cls``; ``None`` when the interpreter does not allow it (or ``cls`` adds more than
    its slots): then the hot-path constructor calls the class itself."""
    if cls.__bases__ != (object,):
        return None
    twin = type(f"_{cls.__name__}Twin", (), {"__slots__": cls.__slots__})
    try:
        probe = twin()
        probe.__class__ = cls
    except TypeError:
        return None
    return twin


_DecisionTwin: Final[Any] = slotted_twin(Decision)  # a class, or None


def _allow_by_twin(tool_name: str, signature: Signature) -> Decision:
    decision = _DecisionTwin()  # see ``slotted_twin``: every slot set, then the class swapped
    decision.action = "allow"
    decision.code = ALLOW
    decision.message = ""
    decision.tool_name = tool_name
    decision.count = 0
    decision.limit = 0
    decision.signature = signature
    decision.cap = None
    decision.__class__ = Decision
    return decision  # type: ignore[no-any-return]


allow_decision: Final[Callable[[str, Signature], Decision]] = (
    plain_allow_decision if _DecisionTwin is None else _allow_by_twin
)
"""``allow_decision(tool_name, signature)``: an ``allow`` for one call (built without the dataclass
``__init__``: it runs on every call)."""


@dataclass(frozen=True, slots=True)
class TurnSummary:
    """What one turn did, returned by ``Guard.end_turn()``.

    ``cap_usage`` maps each turn cap key to the units used in the turn; ``cap_usage_ratio`` maps each
    cap key with a turn limit to the highest used/limit reached (0 when unused). ``errored``: the host
    said the turn's run ended in an exception (``end_turn(errored=True)``); ``outcome`` is
    ``halted`` when the guard halted the turn, whatever came after, else ``errored`` or ``completed``.
    """

    turn_id: str | None
    agent: str
    tool_calls: int
    halted: bool
    halt_decision: Decision | None
    cap_usage: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    cap_usage_ratio: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    session_cap_usage: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    decisions: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    errored: bool = False

    @property
    def outcome(self) -> TurnOutcome:
        if self.halted:
            return "halted"
        return "errored" if self.errored else "completed"
