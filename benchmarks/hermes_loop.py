"""Runs inside the hermes-agent side venv (never in the project's: hermes installs top-level ``agent``,
``tools`` and ``utils``): real hermes ``AIAgent`` loops, timed with and without the otelguard plugin.

    <side venv>/bin/python benchmarks/hermes_loop.py WORK_DIR --calls 50 --rounds 9

hermes' own plugin manager loads the plugin by its entry point; the runs switch its hooks on and off
in hermes' hook table between conversations. Three arms, alternating (plain, guard, guard with
metrics and spans; reversed every other round): ``plain`` has no otelguard hook at all (hermes then
skips building the hook payloads, as it does without the plugin), ``guard`` is the plugin with
``telemetry=None``, ``guard_metrics_spans`` the plugin as hermes loaded it (metrics in the process's
registry, spans to the global tracer provider: the no-op one here). Each conversation asks the model
``--calls`` times for one ``read_file`` of a distinct small file, then gets an answer. The model is a
scripted OpenAI-compatible server on 127.0.0.1 in a process of its own, so the timed process CPU
(``time.process_time``, hermes' threads included) is hermes' and the plugin's alone.

Prints one JSON document: per arm, the CPU seconds of each conversation, the tool results hermes
handed the model, the final answers, and how many calls and model requests the guard saw.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ANSWER = "done"


def serve_model(calls: int, files: Path) -> None:
    """The scripted model: the n-th reply of a conversation (n counted from its assistant messages)
    reads ``f{n}.txt`` until ``calls`` replies have, then answers. Requests with no user message
    (hermes' own side calls) get a plain answer."""

    def reply(body: dict[str, Any]) -> dict[str, Any]:
        messages = body.get("messages", [])
        if not any(m.get("role") == "user" for m in messages):
            return {"role": "assistant", "content": "ok"}
        n = sum(m.get("role") == "assistant" for m in messages)
        if n >= calls:
            return {"role": "assistant", "content": ANSWER}
        arguments = json.dumps({"path": str(files / f"f{n}.txt")})
        call = {"id": f"c{n}", "type": "function", "function": {"name": "read_file", "arguments": arguments}}
        return {"role": "assistant", "content": None, "tool_calls": [call]}

    class Model(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            message = reply(body)
            finish = "tool_calls" if "tool_calls" in message else "stop"
            usage = {"prompt_tokens": 400, "completion_tokens": 20, "total_tokens": 420}
            head = {"id": "x", "created": 0, "model": "scripted"}
            if body.get("stream"):
                delta = dict(message)
                if "tool_calls" in delta:
                    delta["tool_calls"] = [dict(c, index=i) for i, c in enumerate(delta["tool_calls"])]
                chunks = [
                    {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                    {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}], "usage": usage},
                ]
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for chunk in chunks:
                    chunk.update(head, object="chat.completion.chunk")
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                return
            document = {
                **head,
                "object": "chat.completion",
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": usage,
            }
            data = json.dumps(document).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Model)
    print(server.server_address[1], flush=True)
    server.serve_forever()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("work", type=Path)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    work: Path = options.work
    files = work / "files"
    if options.serve:
        serve_model(options.calls, files)
        return 0
    files.mkdir(parents=True, exist_ok=True)
    for n in range(options.calls):
        (files / f"f{n}.txt").write_text("".join(f"line {i} of file {n}\n" for i in range(1, 9)))
    home = work / "hermes-home"
    home.mkdir(exist_ok=True)
    (home / "config.yaml").write_text("plugins:\n  enabled: [otelguard]\n")
    os.environ["HERMES_HOME"] = str(home)
    model = subprocess.Popen(
        [sys.executable, __file__, str(work), "--calls", str(options.calls), "--serve"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert model.stdout is not None
        port = int(model.stdout.readline())
        print(json.dumps(measure(port, options.calls, options.rounds)))
    finally:
        model.terminate()
        model.wait(timeout=30)
    return 0


class _Hooks:
    """Collects a plugin's hooks as hermes' ``PluginContext.register_hook`` would."""

    def __init__(self) -> None:
        self.hooks: dict[str, list[Any]] = {}

    def register_hook(self, hook_name: str, callback: Any) -> None:
        self.hooks.setdefault(hook_name, []).append(callback)


def measure(port: int, calls: int, rounds: int) -> dict[str, Any]:
    from hermes_cli import plugins  # hermes reads HERMES_HOME at import
    from run_agent import AIAgent

    from otelguard.core.guard import Guard
    from otelguard.integrations.hermes import HermesGuardPlugin

    plugins.discover_plugins()
    manager = plugins.get_plugin_manager()
    loaded = [p for p in manager.list_plugins() if p["name"] == "otelguard"]
    if not loaded or not loaded[0]["enabled"] or loaded[0]["error"] is not None:
        return {"skipped": f"hermes did not load the otelguard plugin by its entry point: {loaded}"}

    def ours(callback: Any) -> bool:
        return isinstance(getattr(callback, "__self__", None), HermesGuardPlugin)

    plain = {name: [c for c in cbs if not ours(c)] for name, cbs in manager._hooks.items()}
    alone = _Hooks()
    HermesGuardPlugin(telemetry=None).register(alone)
    hooks: dict[str, dict[str, list[Any]]] = {
        "plain": plain,
        "guard": {name: plain.get(name, []) + alone.hooks.get(name, []) for name in {*plain, *alone.hooks}},
        "guard_metrics_spans": {name: list(cbs) for name, cbs in manager._hooks.items()},
    }

    # What the guard saw, counted on the guard itself (a counter costs far less than a hermes step).
    seen = {"calls": 0, "model_requests": 0}
    before_call, before_model = Guard.before_call, Guard.before_model

    def counted_call(self: Guard, *args: Any, **kwargs: Any) -> Any:
        seen["calls"] += 1
        return before_call(self, *args, **kwargs)

    def counted_model(self: Guard) -> Any:
        seen["model_requests"] += 1
        return before_model(self)

    Guard.before_call = counted_call  # type: ignore[method-assign]
    Guard.before_model = counted_model  # type: ignore[method-assign]

    arms = list(hooks)
    report: dict[str, dict[str, list[Any]]] = {
        arm: {"seconds": [], "tool_results": [], "finals": [], "guard_calls": [], "guard_model_requests": []}
        for arm in arms
    }
    runs = 0

    def run(arm: str, timed: bool) -> None:
        nonlocal runs
        runs += 1
        manager._hooks = {name: list(cbs) for name, cbs in hooks[arm].items()}
        agent = AIAgent(
            base_url=f"http://127.0.0.1:{port}/v1",
            api_key="scripted",
            model="scripted-model",
            quiet_mode=True,
            enabled_toolsets=["file"],
            skip_context_files=True,
            session_id=f"{arm}-{runs}",
            max_iterations=calls + 5,
            tool_delay=0,
        )
        before = dict(seen)
        start = time.process_time()
        result = agent.run_conversation("read the files")
        seconds = time.process_time() - start
        if not timed:
            return
        messages = result.get("messages", []) if isinstance(result, dict) else []
        entry = report[arm]
        entry["seconds"].append(seconds)
        entry["tool_results"].append(sum(isinstance(m, dict) and m.get("role") == "tool" for m in messages))
        entry["finals"].append(result.get("final_response") if isinstance(result, dict) else str(result))
        entry["guard_calls"].append(seen["calls"] - before["calls"])
        entry["guard_model_requests"].append(seen["model_requests"] - before["model_requests"])

    for arm in arms:  # warm up imports and caches
        run(arm, timed=False)
    for i in range(rounds):
        for arm in arms if i % 2 == 0 else reversed(arms):
            run(arm, timed=True)
    return {"calls": calls, "rounds": rounds, "arms": report}


if __name__ == "__main__":
    raise SystemExit(main())
