"""A scripted OpenAI Responses server on 127.0.0.1 for running Codex offline.

``POST /v1/responses``, streamed as server-sent events (Codex asks ``stream: true``). A request that
offers the ``exec_command`` tool is a step of the agent loop: it is answered with a call of
``exec_command`` running the same command every time, up to ``max_calls`` calls, then with text.
Any other request gets a short text. Every request body is kept, in order, for the test to read what
the client sent the model (the ``function_call_output`` of each call).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.scripted_http import ScriptedHandler, serving

MODEL = "gpt-5"
SHELL_TOOL = "exec_command"


class ScriptedResponses:
    """The script and what the client sent: ``requests`` (every body), ``loop_requests`` (the bodies
    of the agent loop's steps)."""

    def __init__(self, command: str, max_calls: int) -> None:
        self.command = command
        self.max_calls = max_calls
        self.requests: list[dict[str, Any]] = []
        self.loop_requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.url = ""

    def answer(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        """The output items of the next answer; records the request."""
        with self.lock:
            self.requests.append(body)
            names = {tool.get("name") for tool in body.get("tools") or () if isinstance(tool, dict)}
            if SHELL_TOOL not in names:
                return [_text("Listing a directory", len(self.requests))]
            self.loop_requests.append(body)
            number = len(self.loop_requests)
            if number > self.max_calls:
                return [_text("I give up: the directory cannot be listed.", number)]
            arguments = json.dumps({"cmd": self.command})
            return [
                {
                    "type": "function_call",
                    "id": f"fc_{number:024d}",
                    "call_id": f"call_{number:024d}",
                    "name": SHELL_TOOL,
                    "arguments": arguments,
                    "status": "completed",
                }
            ]


def call_outputs(body: dict[str, Any]) -> list[str]:
    """The ``function_call_output`` texts of a request's input (what the client reports of the calls)."""
    outputs = []
    for item in body.get("input") or ():
        if isinstance(item, dict) and item.get("type") == "function_call_output":
            output = item.get("output")
            if isinstance(output, list):
                output = "".join(part.get("text", "") for part in output if isinstance(part, dict))
            outputs.append(output if isinstance(output, str) else json.dumps(output))
    return outputs


def _text(text: str, number: int) -> dict[str, Any]:
    return {
        "type": "message",
        "id": f"msg_{number:024d}",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def _events(items: list[dict[str, Any]], number: int) -> Iterator[dict[str, Any]]:
    response = {"id": f"resp_{number:024d}", "object": "response", "model": MODEL, "status": "in_progress"}
    yield {"type": "response.created", "response": {**response, "output": []}}
    for index, item in enumerate(items):
        yield {"type": "response.output_item.added", "output_index": index, "item": item}
        yield {"type": "response.output_item.done", "output_index": index, "item": item}
    usage = {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 10,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 20,
    }
    done = {**response, "status": "completed", "output": items, "usage": usage}
    yield {"type": "response.completed", "response": done}


def _handler(model: ScriptedResponses) -> type[BaseHTTPRequestHandler]:
    class Handler(ScriptedHandler):
        def do_GET(self) -> None:
            self.send_json({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            if self.path.split("?", 1)[0] != "/v1/responses":
                return self.send_json({"error": {"message": "not found"}}, 404)
            items = model.answer(body)
            data = b"".join(
                f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()
                for event in _events(items, len(model.requests))
            )
            self.send_body(data, "text/event-stream")

    return Handler


@contextmanager
def scripted_responses(command: str, max_calls: int) -> Iterator[ScriptedResponses]:
    """The server on a free loopback port, ``model.url`` its base URL (the provider's ``base_url``
    is ``model.url + "/v1"``)."""
    model = ScriptedResponses(command, max_calls)
    with serving(_handler(model)) as url:
        model.url = url
        yield model
