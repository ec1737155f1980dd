"""Runs inside the hermes-agent side venv: hermes' real plugin manager and tool dispatch, our plugin.

Prints one JSON document with what happened; tests/integrations/test_hermes.py asserts on it.
Argument: a work directory (HERMES_HOME and the otelguard config live there).
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from pathlib import Path

work = Path(sys.argv[1])
home = work / "hermes-home"
home.mkdir(parents=True, exist_ok=True)
(home / "config.yaml").write_text("plugins:\n  enabled: [otelguard]\n")
os.environ["HERMES_HOME"] = str(home)

import model_tools  # noqa: E402  (hermes reads HERMES_HOME at import)
from hermes_cli import plugins  # noqa: E402

plugins.discover_plugins()
manager = plugins.get_plugin_manager()
ours = [p for p in manager.list_plugins() if p["name"] == "otelguard"]

missing = str(work / "no-such-file.txt")


def read_missing(session_id: str, turn_id: str, call_id: str) -> str:
    result: str = model_tools.handle_function_call(
        "read_file",
        {"path": missing},
        task_id=session_id,
        session_id=session_id,
        tool_call_id=call_id,
        turn_id=turn_id,
    )
    return result


def start_turn(session_id: str, turn_id: str) -> None:
    plugins.invoke_hook(
        "pre_llm_call",
        session_id=session_id,
        task_id=session_id,
        turn_id=turn_id,
        user_message="",
        conversation_history=[],
        is_first_turn=False,
        model="scripted",
        platform="cli",
        sender_id="",
    )


def end_turn(session_id: str, turn_id: str, completed: bool = True, interrupted: bool = False) -> None:
    """What hermes' finalize_turn sends after every conversation run (completed=False: the run
    failed, e.g. on an API error or a spent iteration budget)."""
    plugins.invoke_hook(
        "on_session_end",
        session_id=session_id,
        task_id=session_id,
        turn_id=turn_id,
        completed=completed,
        interrupted=interrupted,
        model="scripted",
        platform="cli",
    )


start_turn("s1", "t1")
looping = [read_missing("s1", "t1", f"call_{i}") for i in range(1, 14)]
start_turn("s2", "t1")
other_session = read_missing("s2", "t1", "call_other")
plugins.invoke_hook(
    "post_tool_call",
    tool_name="send_message",
    args={"to": "x"},
    result="{}",
    task_id="s2",
    session_id="s2",
    tool_call_id="call_foreign_block",
    turn_id="t1",
    duration_ms=0,
    status="blocked",
    error_type="plugin_block",
    error_message="no",
    middleware_trace=[],
)
end_turn("s1", "t1")
start_turn("s1", "t2")
next_turn = read_missing("s1", "t2", "call_next")
end_turn("s1", "t2")
plugins.invoke_hook("on_session_finalize", session_id="s1", platform="cli", reason="exit")
start_turn("s3", "t1")
end_turn("s3", "t1", completed=False)
start_turn("s4", "t1")
end_turn("s4", "t1", completed=False, interrupted=True)

port = os.environ["OTELGUARD_METRICS_PORT"]
metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
print(
    json.dumps(
        {
            "plugin": ours,
            "looping": looping,
            "other_session": other_session,
            "next_turn": next_turn,
            "metrics": metrics,
        }
    )
)
