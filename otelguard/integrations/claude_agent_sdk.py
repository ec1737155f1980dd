"""Claude Agent SDK: ``guard_hooks()`` returns the ``hooks=`` mapping for ``ClaudeAgentOptions``.

```python
from claude_agent_sdk import ClaudeAgentOptions
from otelguard.integrations.claude_agent_sdk import guard_hooks

options = ClaudeAgentOptions(hooks=guard_hooks(telemetry=True))
```

The mapping is the Claude Code hook mapping (``otelguard.coding_agents.claude_code``) in
process: a refused call is denied with the guard's message, a ``block``/``halt`` also stops the run
(``continue_: False`` and ``stopReason``), warnings reach the model as ``additionalContext``. The
session is the SDK's ``session_id``. This module never imports the SDK (it bundles the whole Claude
Code CLI): each matcher is a plain dict that also answers the attribute reads the SDK makes of its
``HookMatcher`` (``.matcher``, ``.hooks``, ``.timeout``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

from otelguard.coding_agents.claude_code import HOOK_EVENTS, ClaudeCodeHooks, HookPayloadError
from otelguard.config import GuardConfig
from otelguard.core.sessions import DEFAULT_MAX_SESSIONS, SessionHost
from otelguard.hosting import TelemetryOption, session_host

__all__ = ["SDK_EVENTS", "HookMatcherDict", "guard_hooks"]

SDK_EVENTS: Final = tuple(
    event
    for event in HOOK_EVENTS
    if event not in ("SessionEnd", "PermissionDenied", "StopFailure", "PostToolBatch")
)
"""The Claude Code events the guard listens to that the Python SDK offers as hooks. It has no
``SessionEnd`` hook (sessions leave the pool when idle or least recently used) and no
``StopFailure`` hook (a turn an API error ended stays open until the session's next prompt).
``PostToolBatch`` is left out: the stop it carries was measured with the Claude Code CLI only."""

DEFAULT_AGENT: Final = "claude-agent-sdk"

HookCallback = Callable[[Any, "str | None", Any], Awaitable[dict[str, Any]]]


class HookMatcherDict(dict[str, Any]):
    """``{"matcher": None, "hooks": [callback], "timeout": None}`` that the SDK can also read as a
    ``HookMatcher`` (it reads attributes, and would silently skip a plain dict)."""

    @property
    def matcher(self) -> str | None:
        value: str | None = self["matcher"]
        return value

    @property
    def hooks(self) -> list[HookCallback]:
        value: list[HookCallback] = self["hooks"]
        return value

    @property
    def timeout(self) -> float | None:
        value: float | None = self.get("timeout")
        return value


def guard_hooks(
    config: GuardConfig | None = None,
    *,
    telemetry: TelemetryOption = None,
    agent: str | None = None,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    host: SessionHost | None = None,
) -> dict[str, list[HookMatcherDict]]:
    """The ``hooks=`` mapping for ``ClaudeAgentOptions``: one guard per SDK session, bounded.
    ``host``: a ready session host to use instead of one made from the other arguments."""
    hooks = ClaudeCodeHooks(
        host=session_host(
            config,
            telemetry=telemetry,
            agent=agent,
            max_sessions=max_sessions,
            host=host,
            default_agent=DEFAULT_AGENT,
        )
    )

    async def on_hook(input_data: Any, tool_use_id: str | None, context: Any) -> dict[str, Any]:
        payload = dict(input_data) if isinstance(input_data, dict) else {}
        if tool_use_id is not None and not payload.get("tool_use_id"):
            payload["tool_use_id"] = tool_use_id
        try:
            output = hooks.handle(payload)
        except HookPayloadError:
            return {}  # a payload the guard cannot read: the call goes ahead, as without the guard
        return sdk_output(output)

    return {event: [HookMatcherDict(matcher=None, hooks=[on_hook], timeout=None)] for event in SDK_EVENTS}


def sdk_output(output: dict[str, Any] | None) -> dict[str, Any]:
    """Claude Code's hook output in the SDK's Python spelling (``continue`` is a keyword there)."""
    if output is None:
        return {}
    converted = dict(output)
    if "continue" in converted:
        converted["continue_"] = converted.pop("continue")
    return converted
