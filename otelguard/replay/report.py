"""The replay report: the data behind the JSON document (docs/replay.md) and the CLI's tables.

It holds tool names, call ids, codes and counts only: never argument values, results or error texts.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = ["ErrorRecord", "HaltRecord", "InputReport", "ReplayReport", "SessionReport"]

MAX_LISTED: Final = 1000
"""Halts per session and errors per run kept in the report; the rest are counted as omitted so a
huge input cannot grow the report without bound."""


@dataclass(frozen=True, slots=True)
class HaltRecord:
    turn: int
    call: int
    call_id: str | None
    tool_name: str
    action: str
    code: str


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

    def add_halt(self, halt: HaltRecord) -> None:
        self.halts_total += 1
        if len(self.halts) < MAX_LISTED:
            self.halts.append(halt)

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
        }
        if self.halts_total > len(self.halts):
            doc["halts_omitted"] = self.halts_total - len(self.halts)
        return doc


def _halt_json(halt: HaltRecord) -> dict[str, Any]:
    return {
        "turn": halt.turn,
        "call": halt.call,
        "call_id": halt.call_id,
        "tool": halt.tool_name,
        "action": halt.action,
        "code": halt.code,
    }


@dataclass(slots=True)
class ReplayReport:
    inputs: dict[str, InputReport] = field(default_factory=dict)
    sessions: list[SessionReport] = field(default_factory=list)
    errors: list[ErrorRecord] = field(default_factory=list)
    errors_total: int = 0
    actions: dict[str, set[str]] = field(default_factory=dict)
    """The actions seen per decision code (caps are ``block`` or ``reject`` depending on config)."""

    def add_session(self, session: SessionReport) -> None:
        self.sessions.append(session)

    def add_error(self, error: ErrorRecord) -> None:
        self.errors_total += 1
        if len(self.errors) < MAX_LISTED:
            self.errors.append(error)

    def sort_sessions(self) -> None:
        self.sessions.sort(key=lambda s: s.seq)

    def totals(self) -> dict[str, Any]:
        decisions: Counter[str] = Counter()
        cap_hits: Counter[str] = Counter()
        for session in self.sessions:
            decisions.update(session.decisions)
            cap_hits.update(session.cap_hits)
        return {
            "sessions": len(self.sessions),
            "turns": sum(s.turns for s in self.sessions),
            "tool_calls": sum(s.tool_calls for s in self.sessions),
            "halts": sum(s.halts_total for s in self.sessions),
            "prevented_calls": sum(s.prevented_calls for s in self.sessions),
            "decisions": dict(sorted(decisions.items())),
            "cap_hits": dict(sorted(cap_hits.items())),
            "errors": self.errors_total,
        }

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
        return doc
