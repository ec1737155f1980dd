"""The replay report: the data behind the JSON document (docs/replay.md) and the CLI's tables.

It holds tool names, call ids, codes and counts only: never argument values, results, error texts or
the model's replies. A session whose transcript records the model's replies also counts them
(``model_replies``, ``prevented_replies``, and its model decisions, which are in ``decisions`` too);
a session without replies reads as it always did.
"""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = ["CallRecord", "ErrorRecord", "HaltRecord", "InputReport", "ReplayReport", "SessionReport"]

MAX_LISTED: Final = 1000
"""Halts and calls in progress per session, and errors per run, kept in the report; the rest are
counted as omitted so a huge input cannot grow the report without bound."""
MAX_LISTED_WARNINGS: Final = 100
"""Warned calls listed per session (warnings are far more common than halts); the rest are counted."""
MAX_DETAILED_SESSIONS: Final = 10_000
"""Sessions whose detail (halts, call ids, anything a reader or the HTML report adds to a
``SessionReport``) is kept; the ones that halted or warned most are kept first. Every session is
still counted in the totals, so memory does not grow with the number of sessions."""


@dataclass(frozen=True, slots=True)
class HaltRecord:
    """The call that halted its turn: its place (``turn``, ``call`` within the turn, ``session_call``
    within the session, all from 1) and what the guard said (the decision's count, limit and message:
    the guard's own text, built from the tool name and the counts, never from a value)."""

    turn: int
    call: int
    call_id: str | None
    tool_name: str
    action: str
    code: str
    session_call: int = 0
    count: int = 0
    limit: int = 0
    message: str = ""


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One call named by its place (``turn``, ``call`` within the turn, ``session_call`` within the
    session): a warned call (with the warning's code), or a call still in progress when its
    transcript ended (``code`` is ``None``)."""

    turn: int
    call: int
    call_id: str | None
    tool_name: str
    code: str | None = None
    session_call: int = 0

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "session_call": self.session_call,
            "turn": self.turn,
            "call": self.call,
            "call_id": self.call_id,
            "tool": self.tool_name,
        }
        if self.code is not None:
            doc["code"] = self.code
        return doc


@dataclass(frozen=True, slots=True)
class ErrorRecord:
    path: str
    line: int | None
    reason: str


@dataclass(slots=True)
class InputReport:
    path: str
    format: str
    sessions: int = 0
    errors: int = 0


@dataclass(slots=True)
class SessionReport:
    session_id: str
    path: str
    seq: int = 0
    turns: int = 0
    tool_calls: int = 0
    decisions: Counter[str] = field(default_factory=Counter)
    cap_hits: Counter[str] = field(default_factory=Counter)
    halts: list[HaltRecord] = field(default_factory=list)
    halts_total: int = 0
    prevented_calls: int = 0
    warned_calls: list[CallRecord] = field(default_factory=list)
    in_progress: list[CallRecord] = field(default_factory=list)
    in_progress_total: int = 0
    model_replies: int = 0
    prevented_replies: int = 0
    """Replies made after the turn had stopped (or that a model block refused): never asked for live."""
    model_decisions: Counter[str] = field(default_factory=Counter)
    """The model's decisions other than allow (``before_model``/``after_model``), by code."""
    first_reject_call: int | None = None
    """The session's first refused call (``reject``: it did not run, the turn went on), by its index in
    the session; a replay cannot show how the model would have answered the refusal."""

    @property
    def warnings(self) -> int:
        return sum(n for code, n in self.decisions.items() if code.endswith("_warn"))

    def detail_rank(self) -> tuple[int, int, int]:
        """Higher ranks keep their detail when there are too many sessions: halts, then warnings,
        then the earlier session."""
        return (self.halts_total, self.warnings, -self.seq)

    def add_halt(self, halt: HaltRecord) -> None:
        self.halts_total += 1
        if len(self.halts) < MAX_LISTED:
            self.halts.append(halt)

    def add_warning(self, call: CallRecord) -> None:
        """A warning decision (its count is in ``decisions``)."""
        if len(self.warned_calls) < MAX_LISTED_WARNINGS:
            self.warned_calls.append(call)

    def add_in_progress(self, call: CallRecord) -> None:
        self.in_progress_total += 1
        if len(self.in_progress) < MAX_LISTED:
            self.in_progress.append(call)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "session_id": self.session_id,
            "path": self.path,
            "turns": self.turns,
            "tool_calls": self.tool_calls,
            "decisions": dict(sorted(self.decisions.items())),
            "cap_hits": dict(sorted(self.cap_hits.items())),
            "halts": [_halt_json(h) for h in self.halts],
            "prevented_calls": self.prevented_calls,
            "warned_calls": [call.to_json() for call in self.warned_calls],
            "in_progress": [call.to_json() for call in self.in_progress],
        }
        if self.model_replies:
            doc["model"] = {
                "replies": self.model_replies,
                "prevented": self.prevented_replies,
                "decisions": dict(sorted(self.model_decisions.items())),
            }
        if self.halts_total > len(self.halts):
            doc["halts_omitted"] = self.halts_total - len(self.halts)
        if self.warnings > len(self.warned_calls):
            doc["warned_calls_omitted"] = self.warnings - len(self.warned_calls)
        if self.in_progress_total > len(self.in_progress):
            doc["in_progress_omitted"] = self.in_progress_total - len(self.in_progress)
        return doc


def _halt_json(halt: HaltRecord) -> dict[str, Any]:
    return {
        "session_call": halt.session_call,
        "turn": halt.turn,
        "call": halt.call,
        "call_id": halt.call_id,
        "tool": halt.tool_name,
        "action": halt.action,
        "code": halt.code,
        "count": halt.count,
        "limit": halt.limit,
        "message": halt.message,
    }


@dataclass(slots=True)
class _Totals:
    sessions: int = 0
    turns: int = 0
    tool_calls: int = 0
    halts: int = 0
    prevented_calls: int = 0
    in_progress: int = 0
    decisions: Counter[str] = field(default_factory=Counter)
    cap_hits: Counter[str] = field(default_factory=Counter)
    model_replies: int = 0
    prevented_replies: int = 0
    model_decisions: Counter[str] = field(default_factory=Counter)

    def add(self, session: SessionReport) -> None:
        self.sessions += 1
        self.turns += session.turns
        self.tool_calls += session.tool_calls
        self.halts += session.halts_total
        self.prevented_calls += session.prevented_calls
        self.in_progress += session.in_progress_total
        self.decisions.update(session.decisions)
        self.cap_hits.update(session.cap_hits)
        self.model_replies += session.model_replies
        self.prevented_replies += session.prevented_replies
        self.model_decisions.update(session.model_decisions)


@dataclass(slots=True)
class ReplayReport:
    inputs: dict[str, InputReport] = field(default_factory=dict)
    errors: list[ErrorRecord] = field(default_factory=list)
    errors_total: int = 0
    actions: dict[str, set[str]] = field(default_factory=dict)
    """The actions seen per decision code (caps are ``block`` or ``reject`` depending on config)."""
    max_detailed_sessions: int = MAX_DETAILED_SESSIONS
    _detailed: list[tuple[tuple[int, int, int], int, SessionReport]] = field(default_factory=list)
    _totals: _Totals = field(default_factory=_Totals)

    @property
    def sessions(self) -> list[SessionReport]:
        """The sessions whose detail was kept (all of them, up to ``max_detailed_sessions``), in order."""
        return sorted((entry[2] for entry in self._detailed), key=lambda s: s.seq)

    @property
    def sessions_omitted(self) -> int:
        return self._totals.sessions - len(self._detailed)

    def add_session(self, session: SessionReport) -> None:
        self._totals.add(session)
        entry = (session.detail_rank(), -self._totals.sessions, session)  # unique: never compares sessions
        if len(self._detailed) < self.max_detailed_sessions:
            heapq.heappush(self._detailed, entry)
        elif self._detailed and entry[:2] > self._detailed[0][:2]:
            heapq.heapreplace(self._detailed, entry)  # the lowest-ranked kept session is only counted

    def add_error(self, error: ErrorRecord) -> None:
        self.errors_total += 1
        if len(self.errors) < MAX_LISTED:
            self.errors.append(error)

    def sort_sessions(self) -> None:
        """Kept for callers; ``sessions`` is always in session order."""

    def totals(self) -> dict[str, Any]:
        totals = self._totals
        doc: dict[str, Any] = {
            "sessions": totals.sessions,
            "turns": totals.turns,
            "tool_calls": totals.tool_calls,
            "halts": totals.halts,
            "prevented_calls": totals.prevented_calls,
            "in_progress": totals.in_progress,
            "decisions": dict(sorted(totals.decisions.items())),
            "cap_hits": dict(sorted(totals.cap_hits.items())),
            "errors": self.errors_total,
        }
        if totals.model_replies:
            doc["model"] = {
                "replies": totals.model_replies,
                "prevented": totals.prevented_replies,
                "decisions": dict(sorted(totals.model_decisions.items())),
            }
        return doc

    def to_json(self) -> dict[str, Any]:
        """The replay document of docs/replay.md (plus ``cap_hits`` and error/halt overflow counts)."""
        doc: dict[str, Any] = {
            "inputs": [
                {"path": i.path, "format": i.format, "sessions": i.sessions, "errors": i.errors}
                for i in self.inputs.values()
            ],
            "sessions": [s.to_json() for s in self.sessions],
            "totals": self.totals(),
            "errors": [{"path": e.path, "line": e.line, "reason": e.reason} for e in self.errors],
        }
        if self.errors_total > len(self.errors):
            doc["errors_omitted"] = self.errors_total - len(self.errors)
        if self.sessions_omitted:
            doc["sessions_omitted"] = self.sessions_omitted
        return doc
