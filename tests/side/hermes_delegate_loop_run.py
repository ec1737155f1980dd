"""Runs inside the hermes-agent side venv: a real hermes ``AIAgent`` loop whose model (a scripted
OpenAI-compatible server on 127.0.0.1) delegates with ``delegate_task`` again and again: each
orchestrator child hands the task on to another orchestrator. hermes' own ``delegate_task`` runs
the children (in its thread pool, each under a session id of its own) and fires the plugin hooks;
the otelguard plugin guards them in a delegation tree.

Prints one JSON document; tests/integrations/test_hermes_delegation.py asserts on it.
Argument: a work directory (HERMES_HOME and the otelguard config live there).
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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
(home / "config.yaml").write_text(
    "plugins:\n  enabled: [otelguard]\ndelegation:\n  max_spawn_depth: 3\n  orchestrator_enabled: true\n"
)
os.environ["HERMES_HOME"] = str(home)

shown: list[str] = []  # every tool result a model was shown before it answered
lock = threading.Lock()


def reply(body: dict[str, Any]) -> dict[str, Any]:
    """The scripted model: an agent whose task is ``hop N`` (the root's is ``go``: hop 0) delegates
    ``hop N+1`` to an orchestrator; told its delegation was refused as a cycle it tries once more;
    any other result it answers with. Requests with no user message (hermes' own side calls)
    get a plain answer."""
    messages = body.get("messages", [])
    users = [str(m.get("content")) for m in messages if m.get("role") == "user"]
    results = [str(m.get("content")) for m in messages if m.get("role") == "tool"]
    if not users:
        return {"role": "assistant", "content": "ok"}
    found = re.search(r"hop (\d+)", users[-1])
    hop = int(found.group(1)) if found else 0
    if results:
        with lock:
            shown.append(results[-1])
    if not results or "delegation_cycle_reject" in results[-1]:
        arguments = json.dumps(
            {
                "goal": f"hop {hop + 1}",
                "role": "orchestrator",
            }
        )
        call = {
            "id": f"h{hop}-{len(results)}",
            "type": "function",
            "function": {"name": "delegate_task", "arguments": arguments},
        }
        return {"role": "assistant", "content": None, "tool_calls": [call]}
    return {"role": "assistant", "content": f"done {hop}"}


class Model(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        message = reply(body)
        finish = "tool_calls" if "tool_calls" in message else "stop"
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        if body.get("stream"):
            delta = dict(message)
            if "tool_calls" in delta:
                delta["tool_calls"] = [dict(call, index=i) for i, call in enumerate(delta["tool_calls"])]
            chunks = [
                {
                    "id": "x",
                    "object": "chat.completion.chunk",
                    "created": 0,
                    "model": "scripted",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
                },
                {
                    "id": "x",
                    "object": "chat.completion.chunk",
                    "created": 0,
                    "model": "scripted",
                    "choices": [{"index": 0, "delta": {}, "finish_reason": finish}],
                    "usage": usage,
                },
            ]
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for chunk in chunks:
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")
            return
        data = json.dumps(
            {
                "id": "x",
                "object": "chat.completion",
                "created": 0,
                "model": "scripted",
                "usage": usage,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


server = ThreadingHTTPServer(("127.0.0.1", 0), Model)
threading.Thread(target=server.serve_forever, daemon=True).start()

from hermes_cli import plugins  # noqa: E402  (hermes reads HERMES_HOME at import)
from run_agent import AIAgent  # noqa: E402

plugins.discover_plugins()
agent = AIAgent(
    base_url=f"http://127.0.0.1:{server.server_address[1]}/v1",
    api_key="scripted",
    model="scripted-model",
    quiet_mode=True,
    enabled_toolsets=["delegation"],
    skip_context_files=True,
    session_id="root",
)
result = agent.run_conversation("go")
# hermes runs a top-level delegation in the background: wait for its children (bounded)
from tools import delegate_tool  # noqa: E402

deadline = time.monotonic() + 120
while delegate_tool.list_active_subagents() and time.monotonic() < deadline:
    time.sleep(0.05)
time.sleep(0.2)  # the last child's subagent_stop fires as it is unregistered
server.shutdown()

port = os.environ["OTELGUARD_METRICS_PORT"]
metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
final = result.get("final_response") if isinstance(result, dict) else str(result)
finished = [
    {
        "name": span.name,
        "trace_id": span.context.trace_id,
        "span_id": span.context.span_id,
        "parent": span.parent.span_id if span.parent is not None else None,
        "depth": (span.attributes or {}).get("otelguard.delegation.depth"),
        "tool": (span.attributes or {}).get("gen_ai.tool.name"),
    }
    for span in spans.get_finished_spans()
]
print(json.dumps({"final": final, "shown": shown, "metrics": metrics, "spans": finished}))
