"""The conveniences a host takes, resolved into what the core takes: ``telemetry=`` into each
guard's observer, a config's state URL into the store of a session's caps; the ``Guard`` the package
exports; the session host every adapter is built on.

``TelemetryOption`` is what ``telemetry=`` takes wherever a host takes it: ``None`` (or ``False``:
pure), ``True`` (the process-wide ``Telemetry.default()``) or a ``Telemetry``; anything else is a
``TypeError`` naming ``telemetry`` (``checked_telemetry``): a host's own observer goes to
``observers=``. ``edges_for`` turns one into the core's ``Edges`` (``otelguard.core.edges``): nothing is looked up at run time, the core
is handed what it uses. ``Guard`` is the core's guard with ``telemetry=`` as its second argument,
as the README shows. ``SessionHosted`` is the base of the hosts whose public constructor is
``(config, *, telemetry, agent, max_sessions)`` (the framework adapters): it builds their
``SessionHost`` once, or takes a ready one (``host=``); ``session_host`` does the same for hosts
whose constructor says more.

``session_cap_store`` picks the Redis backend for a config with a state URL and wires its health
reports to the telemetry; ``observer_for`` turns ``telemetry=True`` into the process-wide
``Telemetry.default()``. A host may call them itself and hand the guard what they return.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from functools import partial
from typing import TYPE_CHECKING, ClassVar, TypeAlias

from otelguard.config import GuardConfig
from otelguard.config.environment import OTELGUARD_STATE_URL
from otelguard.core import guard as core_guard
from otelguard.core.bounded_map import HeldTable
from otelguard.core.caps import LocalSessionCaps, SessionCapStore
from otelguard.core.edges import Edges
from otelguard.core.observers import GuardObserver
from otelguard.core.sessions import DEFAULT_IDLE_SECONDS, DEFAULT_MAX_SESSIONS, SessionHost
from otelguard.core.signatures import resolve_signature_key, uses_random_key
from otelguard.core.tree import MAX_TREES, DelegationTree, local_tree_caps

if TYPE_CHECKING:
    from otelguard.state.redis_caps import RedisSessionCaps
    from otelguard.state.reports import StateReport
    from otelguard.telemetry import Telemetry

__all__ = [
    "Guard",
    "SessionHosted",
    "TelemetryOption",
    "checked_config",
    "checked_telemetry",
    "edges_for",
    "observer_for",
    "provide_current_tree",
    "session_cap_store",
    "session_host",
    "state_listener",
]


TelemetryOption: TypeAlias = "Telemetry | bool | None"
"""What ``telemetry=`` takes, wherever a host takes it: a ``Telemetry``, ``True`` (the process-wide
``Telemetry.default()``) or nothing (``None``/``False``). An observer of one's own goes to
``observers=``; a host resolved further hands ``edges=``."""


def checked_telemetry(telemetry: object) -> Telemetry | None:
    """The ``Telemetry`` that ``telemetry=`` stands for (``None``: no telemetry); a ``TypeError``
    naming the parameter for anything else."""
    if telemetry is None or telemetry is False:
        return None
    # Imported here: a host made without telemetry never loads OpenTelemetry.
    from otelguard.telemetry import Telemetry

    if telemetry is True:
        return Telemetry.default()
    if isinstance(telemetry, Telemetry):
        return telemetry
    hint = "; an observer goes to observers=" if hasattr(telemetry, "on_call_end") else ""
    raise TypeError(
        f"telemetry: expected an otelguard.Telemetry, True (the process-wide default) or None/False, "
        f"not {type(telemetry).__name__}{hint}"
    )


def edges_for(telemetry: TelemetryOption = None) -> Edges:
    """The core's edges for a host made with ``telemetry`` (checked here: ``checked_telemetry``): each
    guard's observer from it (``observer_for``), and the store of a known session's caps from the
    guard's config (``session_cap_store``: Redis with a state URL, its health reported to the
    telemetry)."""
    resolved = checked_telemetry(telemetry)
    return Edges(
        observer=None if resolved is None else partial(_bound, resolved),
        session_caps=partial(_session_store_of, resolved),
        tree_caps=partial(_tree_store_of, resolved),
        current_tree=_current_tree,
    )


def _session_store_of(telemetry: Telemetry | None, config: GuardConfig, session_id: str) -> SessionCapStore:
    return session_cap_store(config, session_id, telemetry)


def _tree_store_of(telemetry: Telemetry | None, config: GuardConfig, root: str) -> SessionCapStore:
    return tree_cap_store(config, root, telemetry)


_tree_source: Callable[[], DelegationTree | None] | None = None


def provide_current_tree(source: Callable[[], DelegationTree | None]) -> None:
    """Where every host finds the delegation tree current where a guard is made: ``source()``.
    ``otelguard.propagation`` hands its ``current_tree`` here when it is imported; a tree is current
    only once it put one there, so a process that never propagates a tree never loads OpenTelemetry's
    context for it."""
    global _tree_source
    _tree_source = source


def _current_tree() -> DelegationTree | None:
    source = _tree_source
    return source() if source is not None else None


class Guard(core_guard.Guard):
    """The guard (``otelguard.core.guard.Guard``) with the conveniences the README shows: ``telemetry``
    is ``None``/``False`` (pure), ``True`` (the process-wide ``Telemetry.default()``: global tracer
    provider, default registry) or a ``Telemetry`` (bound to this config's ``telemetry`` section);
    a host's own observers go to ``observers``. A guard that knows its session (``session_id``)
    and is handed no store keeps its session caps in Redis when the config has a state URL.
    ``edges``: the core's edges, for a host that resolved them itself (then ``telemetry`` stays
    ``None``)."""

    def __init__(
        self,
        config: GuardConfig | None = None,
        telemetry: TelemetryOption = None,
        *,
        agent: str = core_guard.DEFAULT_AGENT,
        observers: Iterable[GuardObserver] = (),
        session_id: str | None = None,
        session_caps: SessionCapStore | None = None,
        tree: DelegationTree | None = None,
        edges: Edges | None = None,
    ) -> None:
        if edges is None:
            if config is not None:
                checked_config(config)  # a host that hands its edges checked its config when it made them
            edges = edges_for(telemetry)
        elif telemetry is not None:
            raise TypeError("Guard: pass telemetry or edges, not both (edges hold the telemetry's observer)")
        super().__init__(
            config,
            agent=agent,
            observers=observers,
            session_id=session_id,
            session_caps=session_caps,
            tree=tree,
            edges=edges,
        )


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
        if config is not None:
            checked_config(config)
        return SessionHost(
            config,
            edges=edges_for(telemetry),
            guard_class=Guard,
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
    from otelguard.state.urls import checked_state

    state = checked_state(config)

    if listener is None:
        listener = state_listener(telemetry)
    return open_session_caps(state, resolve_signature_key(config.signature_key), session_id, listener)


def checked_config(config: GuardConfig) -> GuardConfig:
    """``config``, its ``state`` section checked by the shared-state edge when it names a store: the
    URL's grammar, the password file, the redis client (``otelguard.state.urls.checked_state``; the
    core's config holds a URL only as present). A ``ConfigError`` when a host is built, not at a
    session's first call."""
    state = config.state
    if state.url is not None or state.password_file is not None or os.environ.get(OTELGUARD_STATE_URL):
        from otelguard.state.urls import checked_state  # only a process with a state section reads it

        checked_state(config)
    return config


def tree_cap_store(config: GuardConfig, root: str, telemetry: TelemetryOption = None) -> SessionCapStore:
    """The store of the counters of the delegation tree ``root`` (a tree digest): in this process's
    table of trees, unless a shared state URL is set; then in Redis under
    ``<key_prefix>:tree:{<root>}``, shared by every process of the tree and expiring as sessions do."""
    state = config.effective_state()
    if state.url is None:
        return local_tree_caps(root)
    from otelguard.state.redis_caps import RedisSessionCaps, link_for

    link = link_for(state)
    key = f"{state.key_prefix}:tree:{{{root}}}"
    # One store per tree in this process: every guard of the tree here shares its fallback counts,
    # so an outage costs a tree what it costs a session (what was charged while Redis was away).
    # A store its guards still hold is never replaced by a second one, however many trees came since.
    return _tree_stores.get(
        (id(link), key),
        lambda: RedisSessionCaps(link, key, state.ttl_seconds, state_listener(telemetry)),
        lambda store: store.link is link,
    )


_tree_stores: HeldTable[tuple[int, str], RedisSessionCaps] = HeldTable(MAX_TREES)


def state_listener(telemetry: TelemetryOption) -> Callable[[StateReport], None] | None:
    """Where a shared store's health goes for a guard made with ``telemetry``: its ``Telemetry``
    counts it (``otelguard_state_*``); without telemetry nobody hears of it."""
    resolved = checked_telemetry(telemetry)
    return None if resolved is None else resolved.state_reported


def observer_for(telemetry: TelemetryOption, config: GuardConfig) -> GuardObserver | None:
    """The observer a guard made with ``telemetry`` and ``config`` reports to: the ``Telemetry`` bound
    to the config's ``telemetry`` section (``True``: the process-wide ``Telemetry.default()``);
    ``None`` without telemetry."""
    resolved = checked_telemetry(telemetry)
    return None if resolved is None else _bound(resolved, config)


def _bound(telemetry: Telemetry, config: GuardConfig) -> GuardObserver:
    # it says once, when it first exports a hash, that a random key's hashes match no other process's
    random_key = uses_random_key(config.signature_key)
    caps = tuple(
        (cap, scope)
        for scope, limits in (("turn", config.caps.turn), ("session", config.caps.session))
        for cap, limit in limits.items()
        if limit > 0
    )
    return telemetry.bind(config.telemetry, random_signature_key=random_key, caps=caps)
