"""A coding-agent CLI's hook mapping whose every guard also reports to a test's observer."""

from __future__ import annotations

from typing import TypeVar

from otelguard import Guard, GuardConfig
from otelguard.coding_agents.mapping import AgentHooks
from otelguard.core.edges import Edges
from otelguard.core.sessions import SessionHost
from otelguard.testing import RecordingObserver

Hooks = TypeVar("Hooks", bound=AgentHooks)


def observed(hooks: type[Hooks], config: GuardConfig, observer: RecordingObserver) -> Hooks:
    """``hooks`` over a host of its own whose guards report to ``observer`` (the host's edges: an
    observer is not a telemetry), its sessions labelled with the CLI's name."""
    edges = Edges(observer=lambda _config: observer)
    host = SessionHost(config, edges=edges, guard_class=Guard, agent=hooks.default_agent)
    return hooks(host=host)
