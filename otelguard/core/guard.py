"""The Guard: one per session; the agent runtime asks it about every tool call (see docs/architecture.md).

Thread-safe: parallel tool batches may call ``before_call``/``after_call`` from several threads.
Argument hashing runs outside the lock; state changes and result comparison run under it (a result
is parsed only when a different-bytes repeat of the same call must be compared, see
``otelguard.core.results``); observers run after it is released. The guard never raises into the agent
loop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence
from types import MappingProxyType
from typing import Any, Final, TypeVar

from otelguard.config import GuardConfig
from otelguard.core import decisions as codes
from otelguard.core.caps import (
    DELEGATES,
    HARD_STOP,
    HAS_TREE,
    SESSION_CAPS,
    SPAWNS,
    TREE_CAPS,
    TURN_CAPS,
    Asked,
    CapLedger,
    Charge,
    Gate,
    LocalSessionCaps,
    SessionCapStore,
    TreeCaps,
)
from otelguard.core.classify import ToolFacts, catalog_for, looks_failed
from otelguard.core.decisions import Decision, Outcome, Signature, TurnSummary
from otelguard.core.detectors.precedence import GATES, WALKS
from otelguard.core.detectors.searches import query, searched
from otelguard.core.detectors.state import SessionMemory
from otelguard.core.detectors.turn import TurnDetectors
from otelguard.core.edges import NO_EDGES, Edges
from otelguard.core.model_turns import ModelCalls, ModelTurns
from otelguard.core.observers import GuardObserver, ObserverGroup, TurnInfo, call_event
from otelguard.core.pending_calls import (
    PendingCall,
    PendingCalls,
    TurnState,
    call_key,
    unrecorded,
)
from otelguard.core.results import DEFAULT_HELD_BYTES, ResultMemory
from otelguard.core.signatures import MAX_NAME_CHARS, ArgsHasher, bounded_name, name_of, resolve_signature_key
from otelguard.core.tool_calls import call_context, wrap_tool
from otelguard.core.tree import join_tree
from otelguard.core.tree_identity import DelegationTree

__all__ = ["Guard"]

DEFAULT_AGENT: Final = "default"


_MAX: Final = MAX_NAME_CHARS  # the names the guard takes as they come
_NO_TOKENS: Final[list[object]] = []  # shared and never filled: no observer wants call starts
HELD_BYTES_PER_SIGNATURE: Final = 256
"""Results a guard holds before fingerprinting them, per signature it tracks (at most 1 MiB)."""
_G = TypeVar("_G", bound="Guard")


class Guard(ModelCalls):
    """Watches one session's tool calls and answers each with a ``Decision``.

    ``observers``: hear of every turn, call and decision (shared as they are with subagent guards).
    ``session_id``: the session this guard serves (hosts that know it pass it; it picks the store of
    the session's caps). ``session_caps``: the store of the session's cap counters (any
    ``SessionCapStore``), shared with the session's other guards; by default ``edges`` opens the
    session's (a new in-process one when it has no way to, or the session is unknown).
    ``tree``: its place in a delegation tree (by default ``join_tree`` decides; ``delegation_tree``).
    ``edges``: the host's (``otelguard.core.edges``). ``otelguard.Guard`` (``otelguard.hosting``)
    also takes ``telemetry=`` and resolves it into these.
    """

    def __init__(
        self,
        config: GuardConfig | None = None,
        *,
        agent: str = DEFAULT_AGENT,
        observers: Iterable[GuardObserver] = (),
        session_id: str | None = None,
        session_caps: SessionCapStore | None = None,
        tree: DelegationTree | None = None,
        edges: Edges = NO_EDGES,
    ) -> None:
        self.config = config if config is not None else GuardConfig()
        self.agent = _agent_name(agent) or DEFAULT_AGENT
        self.session_id = session_id
        self._hasher = ArgsHasher(key := resolve_signature_key(self.config.signature_key))
        self._results = ResultMemory(self.config.volatile_result_keys, _held_bytes(self.config))
        self._catalog = catalog_for(self.config)
        self._known_facts = self._catalog.known_facts
        self._caps = _cap_ledger(self.config, self.agent, session_id, session_caps, tree, edges, key)
        self.delegation_tree = self._caps.tree.tree if self._caps.tree is not None else None  # or in none
        self._asks = _asks(self._caps, self.config)  # the guard's part of what the gates ask about
        self._turn_limits = tuple((k, v) for k, v in self.config.caps.turn.items() if v > 0)
        self._lock = threading.Lock()
        self._turn: TurnState | None = None
        self._last_halt: Decision | None = None  # of the turn that ended last, until the next starts
        self._pending = PendingCalls(self.config.max_tracked_signatures)
        # what outlives a turn (per guard, so per session): the calls failing turn after turn
        self._memory = SessionMemory(self.config.max_tracked_signatures)
        all_observers = list(observers)
        self._made_with = (tuple(all_observers), edges)  # what a subagent guard is made with too
        if edges.observer is not None:
            all_observers.append(edges.observer(self.config))
        self._observers = ObserverGroup(all_observers)
        self._observed = self._observers.any
        # observers with no use for an allowed call's start are spared it, and its event
        self._observe_starts = self._observers.wants_call_start
        self._model_turns = ModelTurns(self.config, self._caps, self._lock, self._observers)  # model events

    @property
    def session_caps(self) -> SessionCapStore:
        """The store of this session's cap counters (shared with the session's other guards)."""
        return self._caps.session

    def subagent_guard(self: _G, agent: str | None = None, config: GuardConfig | None = None) -> _G:
        """A guard for a subagent of this guard's session: its own turns and detector state, the same
        config (or ``config``: a host's smaller budget), observers, edges (its own observer from them),
        session and session cap counters (a session cap holds across the main agent and its subagents,
        charged atomically). Of this guard's class, which takes the keywords below."""
        observers, edges = self._made_with
        return type(self)(
            config if config is not None else self.config,
            agent=agent or self.agent,
            observers=observers,
            session_id=self.session_id,
            session_caps=self._caps.session,
            tree=self._caps.tree.subagent(agent or self.agent) if self._caps.tree is not None else None,
            edges=edges,
        )

    # turns -----------------------------------------------------------------------------------

    @property
    def halt_decision(self) -> Decision | None:
        """The first ``block``/``halt`` of the current turn; it stays (after ``end_turn`` too) until the
        next turn starts."""
        turn = self._turn
        return turn.halt if turn is not None else self._last_halt

    @property
    def turn_id(self) -> str | None:
        turn = self._turn
        return turn.turn_id if turn is not None else None

    def start_turn(self, turn_id: str | None = None, agent: str | None = None) -> None:
        """Begin a turn (ending the current one, if any); clears all per-turn state."""
        try:
            # one lock hold ends the current turn and begins the next: from several threads, every
            # turn begun is ended (and counted) exactly once
            with self._lock:
                previous = self._turn
                ended = self._summarise_locked(previous, False) if previous is not None else None
                turn = self._begin_turn(turn_id, agent)
            if ended is not None and self._observed:
                self._observers.turn_ended(ended)
            self._notify_turn_start(turn)
        except Exception as exc:
            self._internal_error("start_turn", exc)

    reset_for_turn = start_turn

    def _begin_turn(self, turn_id: str | None, agent: str | None) -> TurnState:
        self._memory.next_turn()
        turn = TurnState(turn_id, _agent_name(agent) or self.agent, TurnDetectors(self.config, self._memory))
        self._turn = turn
        self._last_halt = None
        # Calls of an earlier turn that never finished: forget them (they pin that turn's state).
        self._pending.clear()
        self._results.reset()
        self._caps.start_turn()
        return turn

    def _current_turn(self) -> TurnState:
        turn = self._turn
        if turn is not None:
            return turn
        with self._lock:
            if self._turn is not None:
                return self._turn
            turn = self._begin_turn(None, None)
        self._notify_turn_start(turn)
        return turn

    def end_turn(self, errored: bool = False) -> TurnSummary:
        """End the current turn and summarise it. Without a current turn, an empty summary.

        ``errored=True``: the turn's run ended in an exception (not the guard's own halt); the turn
        is counted as ``errored`` unless the guard halted it (then ``halted``)."""
        try:
            with self._lock:
                turn, self._turn = self._turn, None
                if turn is None:
                    return _no_turn(self.agent)
                summary = self._summarise_locked(turn, errored)
            if self._observed:
                self._observers.turn_ended(summary)
            return summary
        except Exception as exc:
            self._internal_error("end_turn", exc)
            return _no_turn(self.agent)

    def _summarise_locked(self, turn: TurnState, errored: bool) -> TurnSummary:
        """The summary of ``turn``, which is ending (called with the lock held)."""
        self._last_halt = turn.halt
        return _summary(turn, self._caps, self._turn_limits, errored)

    # calls -----------------------------------------------------------------------------------

    def before_call(
        self, tool_name: str, args: Any = None, call_id: str | None = None, *, delegate_to: str | None = None
    ) -> Decision:
        """Decide whether a call (delegating to ``delegate_to``, if named) may run; refused ones end here."""
        try:
            name = tool_name if type(tool_name) is str and len(tool_name) <= _MAX else name_of(tool_name)
            facts = self._known_facts(name) or self._catalog.facts(name)
            turn = self._turn or self._current_turn()
            if type(call_id) is str and len(call_id) > _MAX:
                call_id = bounded_name(call_id)
            if type(args) is dict or not isinstance(args, (str, bytes)):
                args_hash, parsed = self._hasher.args_hash(args, facts.ignored_args), args
            else:  # JSON-string arguments: read once, for the hash and the spawn count
                args_hash, parsed = self._hasher.text_hash(args, facts.ignored_args)
            sig = Signature(name, args_hash)
            requested = self._catalog.spawn_count(facts, parsed) if facts.spawn_arg is not False else 0
            pending = None
            delegation = None if self._caps.tree is None else _delegation(self._caps.tree, facts, delegate_to)
            charged: list[Charge] = []
            with self._lock:
                turn.tool_calls += 1
                turn.detectors.query = (
                    query(sig, parsed) if facts.search and turn.detectors.reads_query(name) else None
                )
                decision = (  # ``None`` at once when nothing could refuse the call: what ``_decide`` answers
                    _decide(self._caps, self._asks, turn, sig, facts, requested or 1, delegate_to, charged)
                    if turn.halt is not None or self._asks or facts.caps_turn or facts.caps_session
                    else None
                )
                fallback = self._caps.fell_back and self._caps.take_fell_back()  # with state.url only
                if decision is None or decision.allows_execution:  # allowed (a cycle's warning counted)
                    decision = decision or codes.allow_decision(name, sig)
                    charges = tuple(charged) if charged else ()
                    tokens = [] if self._observe_starts else _NO_TOKENS
                    at = time.time_ns() if self._observed else 0
                    pending = PendingCall(
                        sig, turn, charges, requested, decision, at, tokens, fallback, delegation
                    )
                    self._pending.add(  # found by call id, or by (tool, id(args)): args never kept alive
                        call_id if type(call_id) is str else call_key(name, args, call_id), pending
                    )
                else:
                    turn.record(decision)
            if self._observed and (pending is None or self._observe_starts):
                outcome: Outcome | None = None
                record = pending
                if record is None:  # refused: it ends here
                    outcome = "rejected" if decision.action == "reject" else "blocked"
                    record = _refused(sig, turn, requested, decision, fallback, delegation)
                event = call_event(name, facts.tool_class, call_id, turn, decision, outcome, None, record)
                started = self._observers.call_started(event)
                if pending is None:
                    self._observers.call_ended(event, started)
                else:
                    pending.tokens.extend(started)
            return decision
        except Exception as exc:
            return self._internal_error("before_call", exc, tool_name)

    def after_call(
        self,
        tool_name: str,
        args: Any,
        result: Any,
        failed: bool | None = None,
        refusal: str | None = None,
        call_id: str | None = None,
        cancelled: bool = False,
    ) -> Decision:
        """Record how an allowed call ended; return the detectors' verdict (allow, warn or halt).

        ``cancelled=True``: the host dispatched the call but it never ran (a cancelled sibling of a
        parallel batch, a user interrupt). Neither a failure nor a success: no detector counts it, its
        cap charge is refunded, the decision is ``allow``; ``failed`` and ``refusal`` are ignored.
        """
        try:
            name = tool_name if type(tool_name) is str and len(tool_name) <= _MAX else name_of(tool_name)
            facts = self._known_facts(name) or self._catalog.facts(name)
            turn = self._turn or self._current_turn()
            call_id = bounded_name(call_id) if type(call_id) is str and len(call_id) > _MAX else call_id
            tool_class = facts.tool_class
            if cancelled:
                outcome: Outcome = "cancelled"
                refusal = None
            elif refusal is None and failed is not None:  # the host's flag: _outcome without the call
                outcome = "failed" if failed else "ok"
            else:
                outcome = _outcome(result, failed, refusal, tool_class == "shell")
                if refusal is not None and not isinstance(refusal, str):
                    refusal = str(refusal)
            error = self._results.error_fingerprint(result) if outcome == "failed" else None  # unlocked
            gist = result if tool_class == "shell" and (outcome == "ok" or outcome == "failed") else None
            search = searched(args, result) if facts.search and outcome == "ok" else None  # digests
            verdict = None
            with self._lock:
                pending = self._pending.take(
                    call_id if type(call_id) is str else call_key(name, args, call_id)
                )
                if pending is not None:
                    sig = pending.sig
                else:  # no call id, and args equal to (not the very object of) the before_call's
                    sig, pending = self._pending.find(name, args, call_id, self._hasher, facts.ignored_args)
                if (outcome == "refused" or cancelled) and pending is not None:
                    _give_back(GATES, self._caps, pending.charges, same_turn=pending.turn is turn)
                if not cancelled:
                    state = turn.detectors.state(sig)
                    same = (
                        outcome == "ok"
                        and tool_class != "poll"
                        and self._results.same_as_previous(state, result)
                    )
                    verdict = turn.detectors.record_after(
                        sig, state, tool_class, facts.failure_tolerant, outcome, refusal, same, error, gist,
                        search,
                    )  # fmt: skip
                if verdict is None:  # allow, as before_call said (it only ever allows calls that run)
                    decision = pending.before if pending is not None else codes.allow_decision(name, sig)
                else:
                    decision = verdict
                    turn.record(decision)
            if self._observed:
                record = pending or unrecorded(sig, turn, codes.allow_decision(name, sig))  # none on record
                event = call_event(name, tool_class, call_id, turn, decision, outcome, refusal, record)
                self._observers.call_ended(event, pending.tokens if pending is not None else ())
            return decision
        except Exception as exc:
            return self._internal_error("after_call", exc, tool_name)

    def call(self, tool_name: str, args: Any = None, call_id: str | None = None) -> call_context:
        """``with guard.call(name, args) as call:`` — ``call.allowed``, ``call.finish(result, ...)``."""
        return call_context(self, tool_name, args, call_id)

    def wrap(self, fn: Any, tool_name: str | None = None) -> Any:
        """Guard a plain Python tool function (sync or async); see ``otelguard.core.tool_calls.wrap_tool``."""
        return wrap_tool(self, fn, tool_name)

    def _notify_turn_start(self, turn: TurnState) -> None:
        if self._observed:
            self._observers.turn_started(TurnInfo(turn.turn_id, turn.agent, self.delegation_tree))

    # internal errors -------------------------------------------------------------------------

    def _internal_error(self, stage: str, exc: Exception, tool_name: Any = "") -> Decision:
        self._observers.internal_error(stage, exc)
        name = tool_name if isinstance(tool_name, str) else ""
        return Decision(action="allow", code=codes.INTERNAL_ERROR, tool_name=name)


def _cap_ledger(
    config: GuardConfig,
    agent: str,
    session_id: str | None,
    session_caps: SessionCapStore | None,
    tree: DelegationTree | None,
    edges: Edges,
    key: bytes,
) -> CapLedger:
    """A new guard's caps: the session's store (``_session_store`` when not handed one), and its
    place in a delegation tree, if any."""
    if session_caps is None:
        session_caps = _session_store(config, session_id, edges)
    ledger = CapLedger(config.caps.on_hit, session_caps)
    ledger.tree = join_tree(config, agent, session_id, tree, edges, key)
    return ledger


def _asks(caps: CapLedger, config: GuardConfig) -> int:
    """What the gates of ``before_call`` ask about every call of a guard (``caps.HAS_TREE``,
    ``caps.HARD_STOP``): 0 leaves its uncapped calls on the quiet path."""
    return (HAS_TREE if caps.tree is not None else 0) | (HARD_STOP if config.hard_stop_enabled else 0)


def _held_bytes(config: GuardConfig) -> int:
    """The results a guard holds unfingerprinted, in proportion to the signatures it tracks (1 MiB
    at the default 4,096): a session host's small share holds little."""
    return min(DEFAULT_HELD_BYTES, config.max_tracked_signatures * HELD_BYTES_PER_SIGNATURE)


def _session_store(config: GuardConfig, session_id: str | None, edges: Edges) -> SessionCapStore:
    """The store of a new guard's session caps when it is handed none: the one its edges open for
    its session, else a new in-process one (a guard of no known session shares its caps with none)."""
    opener = edges.session_caps
    if opener is None or session_id is None:
        return LocalSessionCaps()
    return opener(config, session_id)


def _agent_name(agent: Any) -> Any:
    """An agent name bounded as tool names are (anything else is kept: telemetry exports it as ``_other``)."""
    return bounded_name(agent) if isinstance(agent, str) else agent


def _summary(
    turn: TurnState, caps: CapLedger, turn_limits: tuple[tuple[str, int], ...], errored: bool
) -> TurnSummary:
    return TurnSummary(
        turn_id=turn.turn_id,
        agent=turn.agent,
        tool_calls=turn.tool_calls,
        halted=turn.halt is not None,
        halt_decision=turn.halt,
        cap_usage=MappingProxyType(dict(caps.turn)),
        cap_usage_ratio=caps.usage_ratios(turn_limits),
        session_cap_usage=MappingProxyType(dict(caps.session.usage())),
        decisions=MappingProxyType(dict(turn.decisions)),
        errored=bool(errored),
    )


def _no_turn(agent: str) -> TurnSummary:
    return TurnSummary(turn_id=None, agent=agent, tool_calls=0, halted=False, halt_decision=None)


def _delegation(tree: TreeCaps | None, facts: ToolFacts, delegate_to: str | None) -> DelegationTree | None:
    """For a delegation by a guard in a tree (a spawn tool, or a call naming the agent it delegates
    to), the place of the agent it starts (its digest ``""`` when not named); ``None`` for any other
    call."""
    if tree is None or (facts.spawn_arg is False and delegate_to is None):
        return None
    return tree.subagent(delegate_to) if delegate_to is not None else tree.tree.child("", tree.max_depth)


def _decide(
    caps: CapLedger,
    asks: int,
    turn: TurnState,
    sig: Signature,
    facts: ToolFacts,
    units: int,
    delegate_to: str | None,
    charged: list[Charge],
) -> Decision | None:
    """The ``before_call`` decision of a call, or ``None`` (allowed): a turn already halted blocks it;
    else a refusal, only looked for when something could refuse: the gates that ask about the call
    (``asks``: the guard's part of its mask). A delegation cycle's warning (the call runs) is counted
    in the turn here; a delegation's decision is told to the tree. What the caps charge for an allowed
    call is added to ``charged``."""
    tree = caps.tree
    if turn.halt is not None:
        decision: Decision | None = _turn_halted(sig, turn.halt)
    elif asks or facts.caps_turn or facts.caps_session:
        spawning = tree is not None and (facts.spawn_arg is not False or delegate_to is not None)
        tree_caps = facts.caps_tree if tree is not None else ()
        gates = WALKS[
            asks
            | (TURN_CAPS if facts.caps_turn else 0)
            | (SESSION_CAPS if facts.caps_session else 0)
            | (TREE_CAPS if tree_caps else 0)
            | (SPAWNS if spawning else 0)
            | (DELEGATES if delegate_to is not None and tree is not None else 0)
        ]
        if not gates:
            return None
        asked = Asked(caps, turn.detectors, sig, facts, units, delegate_to, spawning, tree_caps, charged)
        if len(gates) == 1:  # the common walk (the hard stops, or one cap): what ``_refusal`` comes to
            gate = gates[0]
            decision = gate.before(asked, gate.charges or gate.counts)
            if decision is None and gate.charges:
                gate.passed(asked)
        else:
            decision = _refusal(gates, asked)
        if decision is not None and decision.allows_execution:
            turn.record(decision)
    else:
        return None
    if tree is not None and (facts.spawn_arg is not False or delegate_to is not None):
        tree.took(decision)
    return decision


def _refusal(gates: tuple[Gate, ...], asked: Asked) -> Decision | None:
    """What refuses a call of a turn not yet halted: the first of ``gates`` (``GATES``, less those
    that do not ask about this call) that refuses, in their order. A refused call never holds a
    charge, not even for a moment (another guard of the session or tree would see it one call
    fuller): the gates that charge nothing are asked first, changing nothing (a gate that counts,
    with no gate that charges before it, is asked for real at once: nothing would report a cap
    instead); when one refuses, a gate that charges before it only reads its counts, to report its
    cap instead, and else the refusing gate is asked for real (a detector's reject counted). When
    none refuses, the gates that charge are charged in order (a refusal gives back what those
    before it charged), and then every gate is told the call passed (a detector's rejects spent, a
    turn cap's peak recorded). A delegation cycle's warning is returned when nothing refuses (the
    call runs)."""
    warning = None
    charging = False  # a gate before this one charges
    for index, gate in enumerate(gates):
        if gate.charges:
            charging = True
            continue
        at_once = gate.counts and not charging  # nothing charged before it: asked for real now
        decision = gate.before(asked, at_once)
        if decision is None or decision.allows_execution:  # a warning lets the call run
            warning = decision or warning
            continue
        if at_once:
            return decision
        for earlier in gates[:index]:
            hit = earlier.before(asked, False) if earlier.charges else None
            if hit is not None:
                return hit
        return gate.before(asked, True) if gate.counts else decision
    if not charging:  # every gate that counts was asked for real: the call passed them
        return warning
    for index, gate in enumerate(gates):
        if gate.charges:
            decision = gate.before(asked, True)
            if decision is not None:
                _give_back(gates[:index], asked.ledger, asked.charged, same_turn=True)
                asked.charged.clear()
                return decision
    for gate in gates:
        gate.passed(asked)
    return warning


def _give_back(
    gates: tuple[Gate, ...], ledger: CapLedger, charges: Sequence[Charge], same_turn: bool
) -> None:
    """Return a call's ``charges``: each gate that charges gives back its own, in ``gates``' order."""
    if charges:
        for gate in gates:
            if gate.charges:
                gate.give_back(ledger, charges, same_turn)


def _refused(
    sig: Signature,
    turn: TurnState,
    requested: int,
    decision: Decision,
    fallback: bool,
    delegation: DelegationTree | None,
) -> PendingCall:
    """The record of a refused call, for its observers: it holds no charge and ends as it starts."""
    return PendingCall(sig, turn, (), requested, decision, time.time_ns(), [], fallback, delegation)


def _turn_halted(sig: Signature, halt: Decision) -> Decision:
    return Decision(
        action="block",
        code=codes.TURN_HALTED,
        message=(
            f"Not run: this turn was stopped earlier ({halt.code} on {halt.tool_name}). "
            "Do not call more tools; tell the user what happened."
        ),
        tool_name=sig.tool_name,
        count=halt.count,
        limit=halt.limit,
        signature=sig,
    )


def _outcome(result: Any, failed: bool | None, refusal: object, shell: bool) -> Outcome:
    """A host's refusal wins; then its ``failed`` flag; without one, the fallback classifier decides."""
    if refusal is not None:
        return "refused"
    if failed is None:
        return "failed" if looks_failed(result, shell) else "ok"
    return "failed" if failed else "ok"
