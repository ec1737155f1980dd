"""Feeding the normalised transcript stream through one ``Guard`` per session, as a live agent would.

``prevented_calls`` counts the calls that would not have run: a call the guard refuses at
``before_call`` (``block``, or a cap's ``reject``) and, after the first ``block``/``halt`` of a turn,
every later call of that turn. A well-behaved host stops the turn there, so the replay stops feeding
it to the guard (feeding them would only add ``turn_halted`` decisions and blocked-call metrics that
no live run would have produced). A ``halt`` from ``after_call`` came after its call ran: that call
is not prevented.

A transcript that records the model's replies also drives ``before_model``/``after_model``, one
each per reply, in their place among the calls: the model's decisions count in the session's
``decisions``, and a model stop is a halt of tool ``model`` (its ``call`` is the number of calls the
turn had made before it). A reply after the turn stopped would never have been asked for: it is
counted in ``prevented_replies`` and not fed. Replies leave no text in the report.

A subagent's own conversation (a Claude Code sidechain, read as the session ``<session>:<root>``)
is replayed by a guard one level below its parent session's in the delegation tree, when the
parent's guard is in one (a config with ``caps.tree``): the tree's caps hold across the parent and
its subagents as they would live. Each keeps its own session caps, as the replay always did.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from otelguard import Decision, Guard, GuardConfig
from otelguard.core import decisions as codes
from otelguard.core.observers import GuardObserver
from otelguard.core.scripted import play_call
from otelguard.hosting import TelemetryOption
from otelguard.propagation import use_tree
from otelguard.readers.events import ModelReply, SessionKey, ToolCall
from otelguard.replay.report import (
    MAX_DETAILED_SESSIONS,
    CallRecord,
    ErrorRecord,
    HaltRecord,
    InputReport,
    ReplayReport,
    SessionReport,
)
from otelguard.replay.timeline import (
    CANCELLED,
    IN_PROGRESS,
    NOT_REPLAYED,
    PREVENTED,
    STOPPED,
    SessionMarks,
    Timelines,
    mark_for,
    session_rank,
)

__all__ = ["ReplayRunner"]


@dataclass(slots=True)
class _Session:
    seq: int
    guard: Guard
    report: SessionReport
    turn_open: bool = False
    call_in_turn: int = 0
    halted: bool = False
    marks: SessionMarks | None = None


class ReplayRunner:
    """The event sink that runs the guard. ``finish()`` closes what is open and returns the report.

    With ``timelines`` it also records one mark per call for the HTML report (see ``timeline``).
    """

    def __init__(
        self,
        config: GuardConfig,
        telemetry: TelemetryOption = None,
        agent: str = "replay",
        max_detailed_sessions: int = MAX_DETAILED_SESSIONS,
        timelines: Timelines | None = None,
        observers: Sequence[GuardObserver] = (),
    ) -> None:
        self._config = config
        self.timelines = timelines
        self._telemetry = telemetry
        self._observers = tuple(observers)
        self._agent = agent
        self._open: dict[SessionKey, _Session] = {}
        self._seq = 0
        self.report = ReplayReport(max_detailed_sessions=max_detailed_sessions)

    # EventSink -----------------------------------------------------------------------------

    def describe_input(self, path: str, fmt: str) -> None:
        entry = self.report.inputs.get(path)
        if entry is None:
            self.report.inputs[path] = InputReport(path=path, format=fmt)
        else:
            entry.format = fmt

    def begin_session(self, key: SessionKey) -> None:
        if key in self._open:  # the same id again in the same file: close the earlier one first
            self.end_session(key)
        self._seq += 1
        parent_id, sidechain, _root = key.session_id.rpartition(":")
        parent = self._open.get(SessionKey(key.path, parent_id)) if sidechain else None
        with use_tree(parent.guard.delegation_tree if parent is not None else None):
            guard = Guard(self._config, self._telemetry, agent=self._agent, observers=self._observers)
        report = SessionReport(session_id=key.session_id, path=key.path, seq=self._seq)
        marks = None if self.timelines is None else SessionMarks()
        self._open[key] = _Session(self._seq, guard, report, marks=marks)
        self._input(key.path).sessions += 1

    def start_turn(self, key: SessionKey, time: float | None = None) -> None:
        session = self._session(key)
        if session.turn_open:
            self._end_turn(session)
        session.report.turns += 1
        if session.marks is not None:
            session.marks.start_turn()
        session.guard.start_turn(turn_id=str(session.report.turns))
        session.turn_open = True
        session.call_in_turn = 0
        session.halted = False

    def tool_call(self, key: SessionKey, call: ToolCall) -> None:
        session = self._session(key)
        if not session.turn_open:  # calls before any user message (a system-prompted agent)
            self.start_turn(key)
        session.call_in_turn += 1
        report = session.report
        report.tool_calls += 1
        if session.halted:
            report.prevented_calls += 1
            self._mark(session, PREVENTED, call.tool_name, "prevented")
            return
        if not call.has_result:  # its outcome would be a guess: never fed to the guard
            if call.in_progress:  # still running when the transcript ended: a live session
                report.add_in_progress(
                    CallRecord(
                        report.turns,
                        session.call_in_turn,
                        call.call_id,
                        call.tool_name,
                        session_call=report.tool_calls,
                    )
                )
                self._mark(session, IN_PROGRESS, call.tool_name, "in progress")
            elif call.cancelled:  # reported by the reader as an input error
                self._mark(session, CANCELLED, call.tool_name, "cancelled")
            else:
                self._mark(session, NOT_REPLAYED, call.tool_name, "no result")
            return
        played = play_call(session.guard, call)
        if played.after is None:  # refused at before_call: this call would not have run
            report.prevented_calls += 1
        self._note(session, played.before, call.call_id, call.tool_name)
        if played.after is None:  # refused before it ran
            self._mark(session, mark_for(played.before), call.tool_name, played.before.code)
            return
        self._note(session, played.after, call.call_id, call.tool_name)
        # the mark shows the call's notable decision: a warning at before_call is not lost to an allow
        shown = played.before if played.after.code == codes.ALLOW else played.after
        mark = mark_for(shown, cancelled=call.cancelled)
        self._mark(session, mark, call.tool_name, "cancelled" if mark == CANCELLED else shown.code)

    def model_reply(self, key: SessionKey, reply: ModelReply) -> None:
        session = self._session(key)
        if not session.turn_open:  # a reply before any user message (a system-prompted agent)
            self.start_turn(key)
        report = session.report
        report.model_replies += 1
        if session.halted:
            report.prevented_replies += 1
            return
        guard = session.guard
        before = guard.before_model()
        self._note(session, before, None, codes.MODEL_TOOL, model=True)
        self._model_mark(session, before)
        if not before.allows_execution:  # the model would not have been called
            report.prevented_replies += 1
            return
        after = guard.after_model(
            reply.text,
            tool_calls=reply.tool_calls,
            invalid_tool_calls=reply.invalid_tool_calls,
            input_tokens=reply.input_tokens,
            output_tokens=reply.output_tokens,
        )
        self._note(session, after, None, codes.MODEL_TOOL, model=True)
        self._model_mark(session, after)

    def end_session(self, key: SessionKey) -> None:
        session = self._open.pop(key, None)
        if session is None:
            return
        if session.turn_open:
            self._end_turn(session)
        self.report.add_session(session.report)
        if self.timelines is not None and session.marks is not None:
            report = session.report
            rank = session_rank(report.halts_total, report.decisions, session.seq)
            self.timelines.offer(rank, session.seq, session.marks)

    def error(self, path: str, line: int | None, reason: str) -> None:
        self._input(path).errors += 1
        self.report.add_error(ErrorRecord(path=path, line=line, reason=reason))

    # -------------------------------------------------------------------------------------------

    def finish(self) -> ReplayReport:
        for key in list(self._open):
            self.end_session(key)
        self.report.sort_sessions()
        return self.report

    def open_sessions(self) -> list[SessionReport]:
        return [s.report for s in self._open.values()]

    def _end_turn(self, session: _Session) -> None:
        summary = session.guard.end_turn()
        if self.timelines is not None:
            self.timelines.add_turn(summary.cap_usage_ratio)

    def _mark(self, session: _Session, mark: int, tool: str, code: str) -> None:
        """Record the call's mark (named by its tool and code) when the HTML report is wanted; a call
        that halted its turn (it set ``halted``, and only the halting call reaches here with it set)
        records its position."""
        marks = session.marks
        if marks is None:
            return
        marks.add(mark, tool, code)
        report = session.report
        if mark == STOPPED and session.halted and report.halts_total <= len(report.halts):
            marks.halt_here()

    def _model_mark(self, session: _Session, decision: Decision) -> None:
        """A model decision other than allow is a mark of its own on the timeline (tool ``model``);
        replies the guard let through leave none, so a timeline of calls reads as it always did."""
        if decision.code != codes.ALLOW:
            self._mark(session, mark_for(decision), codes.MODEL_TOOL, decision.code)

    def _note(
        self,
        session: _Session,
        decision: Decision,
        call_id: str | None,
        tool_name: str,
        *,
        model: bool = False,
    ) -> bool:
        """Count a non-allow decision; record the turn's first block/halt. True when the turn halts."""
        if decision.code == codes.ALLOW:
            return False
        report = session.report
        if model:
            report.model_decisions[decision.code] += 1
        report.decisions[decision.code] += 1
        if decision.cap is not None and decision.code in codes.CAP_SCOPES:
            report.cap_hits[decision.cap] += 1
        self.report.actions.setdefault(decision.code, set()).add(decision.action)
        if decision.action == "reject" and report.first_reject_call is None:
            report.first_reject_call = report.tool_calls
        if decision.action == "warn":
            report.add_warning(
                CallRecord(
                    report.turns,
                    session.call_in_turn,
                    call_id,
                    tool_name,
                    decision.code,
                    report.tool_calls,
                )
            )
        if not decision.should_halt:
            return False
        session.halted = True
        report.add_halt(
            HaltRecord(
                turn=report.turns,
                call=session.call_in_turn,
                call_id=call_id,
                tool_name=tool_name,
                action=decision.action,
                code=decision.code,
                session_call=report.tool_calls,
                count=decision.count,
                limit=decision.limit,
                message=decision.message,
            )
        )
        return True

    def _session(self, key: SessionKey) -> _Session:
        session = self._open.get(key)
        if session is None:
            self.begin_session(key)
            session = self._open[key]
        return session

    def _input(self, path: str) -> InputReport:
        entry = self.report.inputs.get(path)
        if entry is None:
            entry = self.report.inputs[path] = InputReport(path=path, format="unknown")
        return entry
