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
    from otelguard.core.observers import GuardObserver, TelemetryBinder

    # a guard's ``telemetry`` argument (the hosts' ``otelguard.hosting.TelemetryOption``)
    TelemetryArgument = TelemetryBinder | GuardObserver | bool | None
    SessionCapsResolver = Callable[[GuardConfig, str | None, TelemetryArgument], SessionCapStore]
    ObserverResolver = Callable[[TelemetryArgument, GuardConfig], GuardObserver]
    from otelguard.core.tree import DelegationTree

    TreeCapsResolver = Callable[[GuardConfig, str, TelemetryArgument], SessionCapStore]
    CurrentTreeResolver = Callable[[], DelegationTree | None]

del TYPE_CHECKING

__all__ = ["current_tree", "observer", "register", "register_trees", "session_caps", "tree_caps"]

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


tree_caps: "TreeCapsResolver | None" = None
"""``tree_caps(config, root, telemetry)``: the store of the counters of the delegation tree ``root``
(``None``: the process-wide in-process store of that tree)."""
current_tree: "CurrentTreeResolver | None" = None
"""``current_tree()``: the delegation tree current where a guard is made (the delegating agent's
place in it), or ``None``: the host reads it from the OpenTelemetry context."""


def register_trees(*, tree_caps_for: "TreeCapsResolver", current_tree_for: "CurrentTreeResolver") -> None:
    global tree_caps, current_tree
    tree_caps = tree_caps_for
    current_tree = current_tree_for
