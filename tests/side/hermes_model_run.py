"""Runs inside the hermes-agent side venv: real hermes ``AIAgent`` loops whose model (a scripted
OpenAI-compatible server on 127.0.0.1) stalls on malformed calls, burns tokens, or answers normally;
the otelguard plugin sees each request at hermes' ``pre_api_request``/``post_api_request`` hooks.

Prints one JSON document; tests/integrations/test_hermes_model.py asserts on it.
Arguments: a work directory (HERMES_HOME and the otelguard config live there) and the scenario.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

work = Path(sys.argv[1])
scenario = sys.argv[2]
home = work / "hermes-home"
home.mkdir(parents=True, exist_ok=True)
(home / "config.yaml").write_text("plugins:\n  enabled: [otelguard]\n")
os.environ["HERMES_HOME"] = str(home)
files = work / "files"
files.mkdir(exist_ok=True)
for n in range(40):
    (files / f"f{n}.txt").write_text(f"file {n}\n")

requests = 0  # the model requests of the conversation
lock = threading.Lock()


def reply(body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, int] | None]:
    """The scripted model, by scenario: ``stall`` calls a tool
    with arguments that do not parse (hermes retries, then answers with an error, and goes on);
    ``burn`` reads a new file on every request, reporting 500 tokens each; ``normal`` reads one
    file and answers. Requests with no user message (hermes' own side calls) get a plain answer."""
    messages = body.get("messages", [])
    users = [str(m.get("content")) for m in messages if m.get("role") == "user"]
    if not users:
        return {"role": "assistant", "content": "ok"}, None
    global requests
    with lock:
        requests += 1
        n = requests
    usage = {"prompt_tokens": 400, "completion_tokens": 100, "total_tokens": 500}
    if scenario == "stall":
        arguments = '{"path": nowhere}'
    elif scenario == "burn" or (scenario == "normal" and n == 1):
        arguments = json.dumps({"path": str(files / f"f{n}.txt")})
    else:
        return {"role": "assistant", "content": "It says hello."}, usage
    call = {
        "id": f"{scenario}{n}",
        "type": "function",
        "function": {"name": "read_file", "arguments": arguments},
    }
    return {"role": "assistant", "content": None, "tool_calls": [call]}, (
        None if scenario == "stall" else usage
    )


class Model(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        message, usage = reply(body)
        finish = "tool_calls" if "tool_calls" in message else "stop"
        if body.get("stream"):
            delta = dict(message)
            if "tool_calls" in delta:
                delta["tool_calls"] = [dict(call, index=i) for i, call in enumerate(delta["tool_calls"])]
            last: dict[str, Any] = {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}
            if usage is not None:
                last["usage"] = usage
            chunks = [{"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}, last]
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for chunk in chunks:
                chunk.update(
                    {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "scripted"}
                )
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")
            return
        document: dict[str, Any] = {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": "scripted",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        }
        if usage is not None:
            document["usage"] = usage
        data = json.dumps(document).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


server = ThreadingHTTPServer(("127.0.0.1", 0), Model)
threading.Thread(target=server.serve_forever, daemon=True).start()

from hermes_cli import plugins  # noqa: E402  (hermes reads HERMES_HOME at import)
from run_agent import AIAgent  # noqa: E402

from otelguard.core.guard import Guard  # noqa: E402

# What the guard answered each model hook of the plugin: the real methods, their answers noted
# (the metrics the plugin serves are the telemetry's; this is the guard's own word).
answers: list[dict[str, str]] = []
_before_model, _after_model = Guard.before_model, Guard.after_model


def noted(event: str, decision: Any) -> Any:
    answers.append({"event": event, "action": decision.action, "code": decision.code})
    return decision


Guard.before_model = lambda self: noted("before", _before_model(self))  # type: ignore[method-assign]
Guard.after_model = lambda self, *a, **k: noted("after", _after_model(self, *a, **k))  # type: ignore[method-assign]

plugins.discover_plugins()
agent = AIAgent(
    base_url=f"http://127.0.0.1:{server.server_address[1]}/v1",
    api_key="scripted",
    model="scripted-model",
    quiet_mode=True,
    enabled_toolsets=["file"],
    skip_context_files=True,
    session_id=scenario,
    max_iterations=12,
)
result = agent.run_conversation("go through the files")
final = result.get("final_response") if isinstance(result, dict) else str(result)
shown = [
    str(m.get("content"))
    for m in (result.get("messages", []) if isinstance(result, dict) else [])
    if isinstance(m, dict) and m.get("role") == "tool"
]
server.shutdown()

port = os.environ["OTELGUARD_METRICS_PORT"]
metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
print(
    json.dumps({"final": final, "shown": shown, "requests": requests, "answers": answers, "metrics": metrics})
)
