"""What every coding-agent CLI's mapping shares: the base of a mapping on a session host, and the
checks of a payload's fields.

A CLI's mapping (``claude_code.ClaudeCodeHooks``, ``codex.CodexHooks``, ...) turns that CLI's hook
payloads into guard calls and answers as that CLI reads its hook output. It sits on the session
host (``otelguard.core.sessions``) like every adapter and imports no framework and no adapter.

The checks (``required_text``, ``optional_text``, ``optional_bool``, ``optional_count``,
``optional_reply``) serve the hook payloads and
``otelguard serve``'s ``/v1/`` bodies alike: each raises ``HookPayloadError`` naming the field and
what it should be, never its value.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, ClassVar, Final

from otelguard.coding_agents.transcript_tail import Reply, ReplyLedger
from otelguard.config import GuardConfig
from otelguard.core.decisions import Decision
from otelguard.core.guard import Guard
from otelguard.core.sessions import DEFAULT_MAX_SESSIONS, Session, SessionHost
from otelguard.errors import HookPayloadError
from otelguard.hosting import SessionHosted, TelemetryOption

__all__ = [
    "MAX_COUNT",
    "MAX_ID_CHARS",
    "MAX_REPLY_CHARS",
    "AgentHooks",
    "HookPayloadError",
    "optional_bool",
    "optional_count",
    "optional_reply",
    "optional_text",
    "report_replies",
    "required_text",
    "stop_reason",
]

MAX_ID_CHARS: Final = 256
MAX_REPLY_CHARS: Final = 262_144
"""The longest reply text a payload may hand the guard: a quarter of the body limit, far above what
a model writes in one reply; the guard reads a reply's text in process only, never keeps it."""
MAX_COUNT: Final = 10**12
"""The largest count a payload may give (tool calls of a reply, tokens): a number past it is not a
count a provider reports but a mistake, and would only make a cap meaningless."""


class AgentHooks(SessionHosted):
    """The base of a CLI's mapping: ``AgentHooks(config=None, *, telemetry=None, agent=None,
    max_sessions=10_000, host=None)`` (``otelguard.hosting.SessionHosted``). ``handle(payload)``
    returns the hook output as a dict, or ``None`` when the CLI should get no output; it raises
    ``HookPayloadError`` for a payload missing a field it needs (the guard itself never raises).

    A session host handed over (``host=``, the sidecar's one host) may serve several CLIs: the
    sessions this mapping makes there carry the CLI's own name (``default_agent``) as their ``agent``
    label, unless ``label_own_sessions`` is off (then the host's label)."""

    cli: ClassVar[str] = ""
    """The CLI's name, as ``otelguard hook CLI`` and the sidecar's ``/v1/hooks/CLI`` spell it."""
    label_own_sessions: ClassVar[bool] = True
    event_field: ClassVar[str] = "hook_event_name"
    session_field: ClassVar[str] = "session_id"
    end_event: ClassVar[str] = "SessionEnd"
    """The event after which the CLI sends nothing more for the session: the host forgets it."""
    events: ClassVar[Collection[str]] = ()
    """The events ``answer`` is asked about; any other (a session's start, a notification, ...) gets
    no output and touches no guard."""
    model_events: ClassVar[Collection[str]] = ()
    """The events answered with the guard's model calls (``before_model``/``after_model``): with a
    token cap in the shared state, answering them may wait on it."""
    transcript_events: ClassVar[Collection[str]] = ()
    """The events whose answer reads the transcript file the payload names."""

    def __init__(
        self,
        config: GuardConfig | None = None,
        *,
        telemetry: TelemetryOption = None,
        agent: str | None = None,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        host: SessionHost | None = None,
    ) -> None:
        super().__init__(config, telemetry=telemetry, agent=agent, max_sessions=max_sessions, host=host)
        own = host is not None and self.label_own_sessions
        self.agent: str | None = self.default_agent if own else None
        self.reported = ReplyLedger()
        """The replies already reported, per turn stream, for the CLIs whose hooks read a transcript
        (``transcript_events``): a reply read again on a later event is never counted twice."""

    def session(self, session_id: str) -> Session:
        """The session ``session_id``, made on first use with this CLI's label."""
        return self.sessions.session(session_id, self.agent)

    def handle(self, payload: Mapping[str, Any]) -> dict[str, Any] | None:
        """What every CLI's payload goes through first: an object naming its event and its session;
        the session's end forgets the session; an event outside ``events`` gets no output. The rest
        is the CLI's own ``answer``."""
        if not isinstance(payload, Mapping):
            raise HookPayloadError("body", "a JSON object")
        event = required_text(payload, self.event_field)
        session_id = required_text(payload, self.session_field)
        if event == self.end_event:
            self.sessions.end_session(session_id)
            return None
        if event not in self.events:
            return None
        return self.answer(event, session_id, payload)

    def answer(self, event: str, session_id: str, payload: Mapping[str, Any]) -> dict[str, Any] | None:
        """The CLI's answer to one of its ``events``, in the shape that CLI reads."""
        raise NotImplementedError

    def may_wait_on_state(self, body: Mapping[str, Any], charges: Callable[[Any], bool]) -> bool:
        """Whether answering ``body`` may wait on the shared state, read from the body alone and on
        the safe side (``charges(tool_name)``: whether a call of that tool charges a session cap).
        Here: always; each CLI names the events it knows stay away from it."""
        return True


def report_replies(guard: Guard, replies: Iterable[Reply]) -> Decision | None:
    """``after_model`` for each reply, in order; the first decision that stops the turn, if any."""
    stop: Decision | None = None
    for reply in replies:
        decision = guard.after_model(
            reply.text,
            tool_calls=reply.tool_calls,
            input_tokens=reply.input_tokens,
            output_tokens=reply.output_tokens,
        )
        if stop is None and decision.should_halt:
            stop = decision
    return stop


def stop_reason(decision: Decision) -> str:
    """What the user reads when the guard stops the agent: the code (to look up) and the message."""
    return f"otelguard stopped this turn ({decision.code}): {decision.message}"


def required_text(body: Mapping[str, Any], field: str, limit: int | None = MAX_ID_CHARS) -> str:
    """The field's string: present, not empty, and at most ``limit`` characters (``None``: any length)."""
    value = body.get(field)
    if field not in body:
        raise HookPayloadError(field, "a string (missing)")
    if not isinstance(value, str) or not value or (limit is not None and len(value) > limit):
        expected = f"a string of 1 to {limit} characters" if limit is not None else "a non-empty string"
        raise HookPayloadError(field, expected)
    return value


def optional_text(body: Mapping[str, Any], field: str) -> str | None:
    """The field's string of at most ``MAX_ID_CHARS`` characters, or ``None`` when it is absent or null."""
    value = body.get(field)
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > MAX_ID_CHARS:
        raise HookPayloadError(field, f"a string of at most {MAX_ID_CHARS} characters, or null")
    return value


def optional_bool(body: Mapping[str, Any], field: str) -> bool | None:
    """The field's ``true``/``false``, or ``None`` when it is absent or null."""
    value = body.get(field)
    if value is None or isinstance(value, bool):
        return value
    raise HookPayloadError(field, "true, false or null")


def optional_count(body: Mapping[str, Any], field: str) -> int | None:
    """The field's whole number from 0 to ``MAX_COUNT``, or ``None`` when it is absent or null
    (``true``/``false`` are not numbers here, though JSON parsers make them ints)."""
    value = body.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        raise HookPayloadError(field, f"a whole number from 0 to {MAX_COUNT}, or null")
    return value


def optional_reply(body: Mapping[str, Any], field: str) -> str | None:
    """The field's string of at most ``MAX_REPLY_CHARS`` characters (a model's reply), or ``None``."""
    value = body.get(field)
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > MAX_REPLY_CHARS:
        raise HookPayloadError(field, f"a string of at most {MAX_REPLY_CHARS} characters, or null")
    return value
