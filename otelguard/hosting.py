"""What a host hands the core: the observer of ``telemetry=``, and the backend of a session's caps.

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
from typing import TYPE_CHECKING, cast

from otelguard.config import GuardConfig
from otelguard.core.caps import LocalSessionCaps, SessionCapStore
from otelguard.core.observers import GuardObserver
from otelguard.core.signatures import resolve_signature_key, uses_random_key

if TYPE_CHECKING:
    from otelguard.state.reports import StateReport

__all__ = ["observer_for", "session_cap_store", "state_listener"]


def session_cap_store(
    config: GuardConfig,
    session_id: str | None,
    telemetry: object = None,
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


def state_listener(telemetry: object) -> Callable[[StateReport], None] | None:
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


def observer_for(telemetry: object, config: GuardConfig) -> GuardObserver:
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
        return telemetry.bind(config.telemetry, random_signature_key=random_key)
    assert bind is not None
    return cast(GuardObserver, bind(config.telemetry))
