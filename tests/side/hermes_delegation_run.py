"""Runs inside the hermes-agent side venv: hermes' real plugin manager fires the hooks of a
delegation tree the way ``delegate_task`` fires them (``pre_tool_call`` of the parent's
``delegate_task``, ``subagent_start`` per child, the child's own tool calls through hermes' real
tool dispatch under the child's session id, ``subagent_stop``), with our plugin in a tree.

Prints one JSON document; tests/integrations/test_hermes_delegation.py asserts on it.
Argument: a work directory (HERMES_HOME and the otelguard config live there).
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

spans = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(spans))
trace.set_tracer_provider(provider)  # the plugin's Telemetry.default() uses the global provider

work = Path(sys.argv[1])
home = work / "hermes-home"
home.mkdir(parents=True, exist_ok=True)
(home / "config.yaml").write_text("plugins:\n  enabled: [otelguard]\n")
os.environ["HERMES_HOME"] = str(home)

import model_tools  # noqa: E402  (hermes reads HERMES_HOME at import)
from hermes_cli import plugins  # noqa: E402

plugins.discover_plugins()


def first(results: list[Any]) -> Any:
    """The first non-None answer of the plugins to a hook (ours is the only one)."""
    return next((r for r in results or [] if r is not None), None)


def delegate(session: str, call_id: str, args: dict[str, Any]) -> Any:
    """The parent's ``delegate_task`` call as hermes' dispatch announces it to plugins: the guard's
    block directive, or ``None`` (it runs)."""
    directive = first(
        plugins.invoke_hook(
            "pre_tool_call",
            tool_name="delegate_task",
            args=args,
            task_id=session,
            session_id=session,
            tool_call_id=call_id,
            turn_id="t1",
        )
    )
    plugins.invoke_hook(
        "post_tool_call",
        tool_name="delegate_task",
        args=args,
        result="{}" if directive is None else json.dumps({"error": directive["message"]}),
        task_id=session,
        session_id=session,
        tool_call_id=call_id,
        turn_id="t1",
        duration_ms=0,
        status="ok" if directive is None else "blocked",
        error_type=None if directive is None else "plugin_block",
        error_message=None,
        middleware_trace=[],
    )
    return directive


def start(parent: str, child: str, role: str) -> None:
    plugins.invoke_hook(
        "subagent_start",
        parent_session_id=parent,
        parent_turn_id="t1",
        parent_subagent_id=None,
        child_session_id=child,
        child_subagent_id=f"sa-{child}",
        child_role=role,
        child_goal="dig",
    )


def stop(parent: str, child: str, role: str) -> None:
    plugins.invoke_hook(
        "subagent_stop",
        parent_session_id=parent,
        parent_turn_id="t1",
        child_session_id=child,
        child_role=role,
        child_summary="done",
        child_status="completed",
        duration_ms=1,
    )


def read(session: str, call_id: str) -> str:
    """A child's own tool call, through hermes' real dispatch."""
    result: str = model_tools.handle_function_call(
        "read_file",
        {"path": str(work / "notes.txt")},
        task_id=session,
        session_id=session,
        tool_call_id=call_id,
        turn_id="t1",
    )
    return result


def llm_call(session: str) -> None:
    plugins.invoke_hook(
        "pre_llm_call",
        session_id=session,
        task_id=session,
        turn_id="t1",
        user_message="",
        conversation_history=[],
        is_first_turn=True,
        model="scripted",
        platform="cli",
        sender_id="",
    )


(work / "notes.txt").write_text("notes\n")
llm_call("root")
out: dict[str, Any] = {}
# root(0) -> orchestrator c1(1) -> orchestrator c2(2): back to a role on the path (warned)
out["root_to_c1"] = delegate("root", "d1", {"goal": "plan", "role": "orchestrator"})
start("root", "c1", "orchestrator")
llm_call("c1")  # a child's own model calls and run end: its turn is its start to its stop
out["c1_read"] = read("c1", "r1")
out["c1_to_c2"] = delegate("c1", "d2", {"goal": "plan more", "role": "orchestrator"})
start("c1", "c2", "orchestrator")
# c2 hands to an orchestrator once more: a second return (refused), then again (its turn stops)
out["c2_to_orchestrator"] = delegate("c2", "d3", {"goal": "plan again", "role": "orchestrator"})
out["c2_again"] = delegate("c2", "d4", {"goal": "plan again", "role": "orchestrator"})
stop("c1", "c2", "orchestrator")
# c1 -> leaf c3(2) -> leaf c4(3): at max_depth 3, c4's batch spawn is refused, and c4 goes on
out["c1_to_c3"] = delegate("c1", "d5", {"goal": "dig", "role": "leaf"})
start("c1", "c3", "leaf")
out["c3_to_c4"] = delegate("c3", "d6", {"goal": "dig deeper"})
start("c3", "c4", "leaf")
out["c4_batch"] = delegate("c4", "d7", {"tasks": [{"goal": "a"}, {"goal": "b"}]})
out["c4_read"] = read("c4", "r2")
llm_call("c4")
plugins.invoke_hook(
    "on_session_end", session_id="c4", task_id="c4", turn_id="t1", completed=True, interrupted=False
)
stop("c3", "c4", "leaf")
stop("c1", "c3", "leaf")
stop("root", "c1", "orchestrator")
# four spawns charged to the tree so far; a batch of two would take it past caps.tree.subagents: 5
out["root_batch"] = delegate("root", "d8", {"tasks": [{"goal": "x"}, {"goal": "y"}]})
plugins.invoke_hook(
    "on_session_end", session_id="root", task_id="root", turn_id="t1", completed=True, interrupted=False
)

port = os.environ["OTELGUARD_METRICS_PORT"]
out["metrics"] = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
out["spans"] = [
    {
        "name": s.name,
        "trace_id": s.context.trace_id,
        "span_id": s.context.span_id,
        "parent": s.parent.span_id if s.parent is not None else None,
        "depth": (s.attributes or {}).get("otelguard.delegation.depth"),
        "tool": (s.attributes or {}).get("gen_ai.tool.name"),
    }
    for s in spans.get_finished_spans()
]
print(json.dumps(out))
