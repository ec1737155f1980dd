"""What a host hands the core: the observer of ``telemetry=``, the backend of a session's caps, and
the session host every adapter is built on.

``TelemetryOption`` is what ``telemetry=`` takes wherever a host takes it: ``None`` (or ``False``:
pure), ``True`` (the process-wide ``Telemetry.default()``), a ``Telemetry`` (or any object with
``bind(settings)``), or a ``GuardObserver`` used as it is. ``SessionHosted`` is the base of the
hosts whose public constructor is ``(config, *, telemetry, agent, max_sessions)`` (the framework
adapters): it builds their ``SessionHost`` once, or takes a ready one (``host=``);
``session_host`` does the same for hosts whose constructor says more.

The core knows a session-cap backend only as the ``SessionCapStore`` protocol and an observer only
as a ``GuardObserver``; this edge turns a ``GuardConfig`` and a guard's ``telemetry`` argument into
them. ``session_cap_store`` picks the Redis backend for a config with a state URL and wires its
health reports to the telemetry; ``observer_for`` turns ``telemetry=True`` into the process-wide
``Telemetry.default()``. The package registers both as the core's defaults (``otelguard.core._resolvers``),
so ``Guard(config, telemetry=True, session_id=...)`` works as the README shows; a host may call them
itself and hand the guard what they return.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar, TypeAlias, cast

from otelguard.config import GuardConfig
from otelguard.core.caps import LocalSessionCaps, SessionCapStore
from otelguard.core.observers import GuardObserver, TelemetryBinder
from otelguard.core.sessions import DEFAULT_IDLE_SECONDS, DEFAULT_MAX_SESSIONS, SessionHost
from otelguard.core.signatures import resolve_signature_key, uses_random_key

if TYPE_CHECKING:
    from otelguard.state.reports import StateReport

__all__ = [
    "SessionHosted",
    "TelemetryOption",
    "observer_for",
    "session_cap_store",
    "session_host",
    "state_listener",
]

TelemetryOption: TypeAlias = TelemetryBinder | GuardObserver | bool | None
"""What ``telemetry=`` takes: ``None``/``False`` (no telemetry), ``True`` (``Telemetry.default()``),
a ``Telemetry`` or any ``TelemetryBinder`` (bound to each guard's config), or a ``GuardObserver``."""


def session_host(
    config: GuardConfig | None = None,
    *,
    telemetry: TelemetryOption = None,
    agent: str | None = None,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    idle_seconds: float = DEFAULT_IDLE_SECONDS,
    host: SessionHost | None = None,
    max_signatures: int | None = None,
    default_agent: str | None = None,
) -> SessionHost:
    """The session host of a host made with these arguments: ``host`` when one is handed over (then
    the others stay at their defaults: the session host already holds its config, telemetry, agent
    label and bounds), else a new one, labelled ``agent`` or else the host's ``default_agent``."""
    if host is None:
        return SessionHost(
            config,
            telemetry=telemetry,
            agent=agent or default_agent,
            max_sessions=max_sessions,
            idle_seconds=idle_seconds,
            max_signatures=max_signatures,
        )
    if not isinstance(host, SessionHost):
        raise TypeError(
            f"host: expected a SessionHost (otelguard.core.sessions) or None, not {type(host).__name__}"
        )
    given = {
        "config": config is not None,
        "telemetry": telemetry is not None,
        "agent": agent is not None,
        "max_sessions": max_sessions != DEFAULT_MAX_SESSIONS,
        "idle_seconds": idle_seconds != DEFAULT_IDLE_SECONDS,
        "max_signatures": max_signatures is not None,
    }
    clash = [name for name, set_too in given.items() if set_too]
    if clash:
        raise TypeError(f"host: a session host holds its own {', '.join(clash)}: pass one or the other")
    return host


class SessionHosted:
    """The base of a host of sessions whose public constructor is ``(config, *, telemetry, agent,
    max_sessions)``: ``sessions`` is its ``SessionHost``, built once from those (``agent`` defaults
    to the class's ``default_agent``), or the one handed over as ``host=``. A subclass sets up the
    rest of its state in ``_set_up``, which runs once ``sessions`` exists."""

    default_agent: ClassVar[str | None] = None
    """The ``agent`` label of a host made without one (``None``: the guard's default)."""

    def __init__(
        self,
        config: GuardConfig | None = None,
        *,
        telemetry: TelemetryOption = None,
        agent: str | None = None,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        host: SessionHost | None = None,
    ) -> None:
        super().__init__()
        self.sessions = session_host(
            config,
            telemetry=telemetry,
            agent=agent,
            max_sessions=max_sessions,
            host=host,
            default_agent=self.default_agent,
        )
        self._set_up()

    def _set_up(self) -> None:
        """What the host keeps besides its sessions (nothing here)."""


def session_cap_store(
    config: GuardConfig,
    session_id: str | None,
    telemetry: TelemetryOption = None,
    *,
    listener: Callable[[StateReport], None] | None = None,
) -> SessionCapStore:
    """The store a guard of session ``session_id`` keeps its session caps in: in process, unless a
    shared state URL is set (``state.url`` or ``OTELGUARD_STATE_URL``) and the session is known.
    The shared store reports its health to ``listener``, by default to ``telemetry``'s metrics."""
    if session_id is None:
        return LocalSessionCaps()
    state = config.effective_state()
    if state.url is None:
        return LocalSessionCaps()
    # Imported here so that only a process with a state URL loads the redis client.
    from otelguard.state.redis_caps import open_session_caps

    if listener is None:
        listener = state_listener(telemetry)
    return open_session_caps(state, resolve_signature_key(config.signature_key), session_id, listener)


def state_listener(telemetry: TelemetryOption) -> Callable[[StateReport], None] | None:
    """Where a shared store's health goes for a guard made with ``telemetry``: otelguard's own
    ``Telemetry`` counts it (``otelguard_state_*``); any other observer does not hear of it."""
    if telemetry is None or telemetry is False:
        return None
    from otelguard.telemetry import Telemetry

    if telemetry is True:
        return Telemetry.default().state_reported
    if isinstance(telemetry, Telemetry):
        return telemetry.state_reported
    return None


def observer_for(telemetry: TelemetryOption, config: GuardConfig) -> GuardObserver:
    """The observer a guard made with ``telemetry`` reports to: ``True`` is the process-wide
    ``Telemetry.default()``; an object with ``bind(settings)`` is bound to the config's ``telemetry``
    section; anything else observes the guard itself."""
    bind = None if telemetry is True else getattr(telemetry, "bind", None)
    if telemetry is not True and not callable(bind):
        return cast(GuardObserver, telemetry)
    # Imported here: a guard whose observers are not otelguard's telemetry never loads OpenTelemetry.
    from otelguard.telemetry import Telemetry

    if telemetry is True:
        telemetry = Telemetry.default()
    if isinstance(telemetry, Telemetry):
        # it says once, when it first exports a hash, that a random key's hashes match no other process's
        random_key = uses_random_key(config.signature_key)
        caps = tuple(
            (cap, scope)
            for scope, limits in (("turn", config.caps.turn), ("session", config.caps.session))
            for cap, limit in limits.items()
            if limit > 0
        )
        return telemetry.bind(config.telemetry, random_signature_key=random_key, caps=caps)
    assert bind is not None
    return cast(GuardObserver, bind(config.telemetry))
