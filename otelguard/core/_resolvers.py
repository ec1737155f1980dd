"""What the core is handed when its caller hands it nothing: the defaults the package registers.

``Guard(config, telemetry=True, session_id=...)`` is the convenience the README shows; turning
``telemetry=True`` into OpenTelemetry and prometheus_client, or a state URL into a Redis backend, is
the edges' work (``otelguard.hosting``). The package's ``__init__`` registers them here when it is
imported (as functions that import the edge on first use), so the core calls them without naming
them. Imports nothing: every module of the package may import it.
"""

# Not ``typing.TYPE_CHECKING``: the package's ``__init__`` loads this module, and the Claude Code hook
# command must not pay for typing (see ``otelguard/__init__.py``). Type checkers treat any constant
# of this name as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from otelguard.config import GuardConfig
    from otelguard.core.caps import SessionCapStore
    from otelguard.core.observers import GuardObserver

    SessionCapsResolver = Callable[[GuardConfig, str | None, object], SessionCapStore]
    ObserverResolver = Callable[[object, GuardConfig], GuardObserver]

del TYPE_CHECKING

__all__ = ["observer", "register", "session_caps"]

session_caps: "SessionCapsResolver | None" = None
"""``session_caps(config, session_id, telemetry)``: the store of a guard's session caps, for a guard
not handed one (``None``: an in-process store)."""
observer: "ObserverResolver | None" = None
"""``observer(telemetry, config)``: the observer a guard's ``telemetry`` argument stands for
(``None``: the argument is used as an observer)."""


def register(*, session_caps_for: "SessionCapsResolver", observer_for: "ObserverResolver") -> None:
    global session_caps, observer
    session_caps = session_caps_for
    observer = observer_for
