"""A whole session, subagents included, stays within its budget: however many ``agent_id``s and
distinct failing calls reach it through the Claude Code hook path, a session of a sidecar's host
(serve's defaults: 10,000 sessions, 1,000,000 signatures) retains a bounded number of bytes."""

from __future__ import annotations

import gc
import json
import tracemalloc

import pytest

from otelguard import GuardConfig
from otelguard.coding_agents.claude_code import ClaudeCodeHooks
from otelguard.core.sessions import (
    MAX_SUBAGENTS_PER_SESSION,
    MIN_SIGNATURES_PER_SUBAGENT,
    Session,
    SessionHost,
    subagent_budget,
)

KEY = "session-memory-bound-key"
SESSION_BOUND = 256 * 1024
"""The bytes one session may retain with serve's defaults (docs/limits.md: about 210 KiB measured)."""


def sidecar_hooks() -> ClaudeCodeHooks:
    host = SessionHost(GuardConfig(signature_key=KEY), max_sessions=10_000, max_signatures=1_000_000)
    return ClaudeCodeHooks(host=host)


def flood(hooks: ClaudeCodeHooks, session_id: str, agents: int, calls: int, json_bytes: int) -> None:
    """Two turns in which the main agent and ``agents`` subagents each make ``calls`` distinct Bash
    calls: failing with distinct errors, or (every other call, with ``json_bytes``) succeeding with a
    distinct JSON text result (held until fingerprinted)."""
    for turn in range(2):
        hooks.handle({"hook_event_name": "UserPromptSubmit", "session_id": session_id})
        for agent in [None, *(f"agent-{n}" for n in range(agents))]:
            for n in range(calls):
                call = {
                    "session_id": session_id,
                    "tool_name": "Bash",
                    "tool_input": {"command": f"make t{n}"},
                }
                call["tool_use_id"] = f"{agent}-{turn}-{n}"
                if agent is not None:
                    call["agent_id"] = agent
                hooks.handle({**call, "hook_event_name": "PreToolUse"})
                if json_bytes and n % 2:
                    result = json.dumps({"out": f"{n}{'x' * json_bytes}"})
                    hooks.handle({**call, "hook_event_name": "PostToolUse", "tool_response": result})
                else:
                    error = f"Exit code 2\nerror {n} in t{n}"
                    hooks.handle({**call, "hook_event_name": "PostToolUseFailure", "error": error})


def retained_per_session(agents: int, calls: int, json_bytes: int = 0, sessions: int = 2) -> float:
    hooks = sidecar_hooks()
    flood(hooks, "warm", agents, calls, json_bytes)  # the code paths' own caches, once
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(sessions):
            flood(hooks, f"s{n}", agents, calls, json_bytes)
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return (after - before) / sessions


@pytest.mark.parametrize(
    ("agents", "calls", "json_bytes"),
    [(70, 105, 0), (8, 300, 0), (8, 120, 4000)],
    ids=["many-agent-ids", "many-failing-calls", "held-json-results"],
)
def test_a_session_retains_a_bounded_number_of_bytes(agents: int, calls: int, json_bytes: int) -> None:
    """More agent ids than a session holds, more distinct calls than it tracks, large JSON results:
    a session stays under its bound (it was about 5 MiB with 64 subagents of failing calls, 16 MiB
    with JSON results, each subagent tracking as much as the main agent)."""
    retained = retained_per_session(agents, calls, json_bytes)
    assert retained < SESSION_BOUND, f"{retained / 1024:.0f} KiB per session"


def test_the_subagents_of_a_session_track_no_more_than_its_main_agent() -> None:
    """``subagent_budget``: the subagents held times each one's signatures is at most the main
    agent's, from the sidecar's share to the library's default; a host's sessions use it."""
    for share in (16, 17, 100, 1000, 1024, 4096, 100_000):
        config = GuardConfig(signature_key=KEY, max_tracked_signatures=share)
        held, sub = subagent_budget(config)
        assert 1 <= held <= MAX_SUBAGENTS_PER_SESSION
        assert sub.max_tracked_signatures >= min(share, MIN_SIGNATURES_PER_SUBAGENT)
        assert held * sub.max_tracked_signatures <= max(share, MIN_SIGNATURES_PER_SUBAGENT)
    hooks = sidecar_hooks()
    session = hooks.sessions.session("s")
    for n in range(100):
        session.guard(f"agent-{n}")
    kept = [session.guard(f"agent-{n}") for n in range(94, 100)]  # the 6 held
    assert all(session.guard(f"agent-{n}") is guard for n, guard in zip(range(94, 100), kept, strict=True))
    assert {guard.config.max_tracked_signatures for guard in kept} == {16}
    assert session.main.config.max_tracked_signatures == 100
    assert len({id(guard.config) for guard in kept}) == 1  # one config (and tool catalog) for all


def test_a_session_made_directly_holds_as_many_subagents_as_asked() -> None:
    """``Session(main, max_subagents=N)`` keeps N; the subagents' config comes from the budget."""
    hooks = sidecar_hooks()
    main = hooks.sessions.session("s").main
    session = Session(main, max_subagents=2)
    first = session.guard("a")
    session.guard("b")
    session.guard("c")
    assert session.guard("a") is not first  # the least recently active was ended and forgotten
    assert first.config.max_tracked_signatures == MIN_SIGNATURES_PER_SUBAGENT
