"""The places the OpenAI Agents SDK adapter reaches past the SDK's public API, in one shim.

The SDK's package root exports no way to give a copy of a ``FunctionTool`` a failure function, nor
to run a tool's own failure handling, and a ``Handoff`` made by ``handoff(agent)`` names its agent
only in a weak reference of its own. The adapter needs all three (docs/integrations.md); they are
named here only, and ``tests/integrations/test_openai_agents.py`` pins each of them, with the shape
used here, for every version in ``SUPPORTED_SDK_VERSIONS`` (the versions the ``openai-agents``
extra allows and the tests run).
"""

from __future__ import annotations

from typing import Any, Final

from agents import Handoff
from agents.tool import (
    maybe_invoke_function_tool_failure_error_function as invoke_failure_function,
)
from agents.tool import (
    set_function_tool_failure_error_function as set_failure_function,
)

__all__ = ["SUPPORTED_SDK_VERSIONS", "handoff_agent", "invoke_failure_function", "set_failure_function"]

SUPPORTED_SDK_VERSIONS: Final = ("0.24.0",)
"""The ``openai-agents`` versions this shim is pinned for (the extra allows ``>=0.24,<0.25``)."""

_AGENT_REF: Final = "_agent_ref"
"""Where ``handoff(agent)`` keeps its agent: a weak reference, ``None`` for a hand-made ``Handoff``."""


def handoff_agent(handoff: Handoff[Any, Any]) -> object:
    """The agent behind a ``handoff(agent, ...)`` object, ``None`` when it is not known (a
    ``Handoff`` made by hand, or its agent is gone). The SDK names it in no public attribute before
    the handoff happens."""
    ref = getattr(handoff, _AGENT_REF, None)
    return ref() if callable(ref) else None
