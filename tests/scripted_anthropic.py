"""A scripted Anthropic Messages server on 127.0.0.1 for running a real client offline.

``POST /v1/messages`` (Claude Code adds ``?beta=true``), streamed as server-sent events when the
request asks (``stream: true``, as Claude Code does), else one JSON message. A request that offers a
``Bash`` tool is a step of the agent loop: it is answered with a call of ``Bash`` running the same
command every time (the ``description`` numbered, as a model would vary it), up to ``max_calls``
calls, then with text. Any other request (a title, a summary) gets a short text. Every request body is
kept, in order, for the test to read what the client sent the model. ``usage``: the tokens every
answer of the loop reports (a model that burns tokens); ``numbered``: each call's command ends with
its number, so no two calls are alike.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.scripted_http import ScriptedHandler, serving

MODEL = "claude-sonnet-4-5"
DEFAULT_USAGE = {"input_tokens": 10, "output_tokens": 10}


class ScriptedModel:
    """The script and what the client sent: ``requests`` (every body), ``loop_requests`` (the bodies
    of the agent loop's steps)."""

    def __init__(
        self,
        command: str,
        max_calls: int,
        tool: str = "Bash",
        usage: dict[str, int] | None = None,
        numbered: bool = False,
    ) -> None:
        self.command = command
        self.tool = tool
        self.max_calls = max_calls
        self.usage = usage or DEFAULT_USAGE
        self.numbered = numbered
        self.requests: list[dict[str, Any]] = []
        self.loop_requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.url = ""

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        """The next answer, a message; records the request."""
        with self.lock:
            self.requests.append(body)
            content = self._content(body)
            usage = self.usage if self.loop_requests and body is self.loop_requests[-1] else DEFAULT_USAGE
            return _message(content, len(self.requests), usage)

    def _content(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        """The content blocks of the answer to ``body`` (called with the lock held)."""
        tools = {tool.get("name") for tool in body.get("tools") or () if isinstance(tool, dict)}
        if self.tool not in tools:
            return [{"type": "text", "text": "Listing a directory"}]
        self.loop_requests.append(body)
        number = len(self.loop_requests)
        if number > self.max_calls:
            return [{"type": "text", "text": "I give up: the directory cannot be listed."}]
        command = f"{self.command} {number}" if self.numbered else self.command
        call = {"command": command, "description": f"Attempt {number}"}
        return [{"type": "tool_use", "id": f"toolu_{number:024d}", "name": self.tool, "input": call}]


def tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``tool_result`` blocks of a request's last message (what the client reports of the calls)."""
    messages = body.get("messages") or []
    if not messages or not isinstance(messages[-1].get("content"), list):
        return []
    return [block for block in messages[-1]["content"] if block.get("type") == "tool_result"]


def result_text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or () if isinstance(part, dict))


def _message(content: list[dict[str, Any]], number: int, usage: dict[str, int]) -> dict[str, Any]:
    return {
        "id": f"msg_{number:024d}",  # one id per message: Claude Code joins the blocks of one id
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": content,
        "stop_reason": "tool_use" if content[-1]["type"] == "tool_use" else "end_turn",
        "stop_sequence": None,
        "usage": dict(usage),
    }


def _events(message: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    content = message["content"]
    yield (
        "message_start",
        {"type": "message_start", "message": {**message, "content": [], "stop_reason": None}},
    )
    for index, block in enumerate(content):
        if block["type"] == "tool_use":
            start = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        else:
            start = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": start}
        yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    stop = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    usage = {"output_tokens": message["usage"]["output_tokens"]}
    yield "message_delta", {"type": "message_delta", "delta": stop, "usage": usage}
    yield "message_stop", {"type": "message_stop"}


def _handler(model: ScriptedModel) -> type[BaseHTTPRequestHandler]:
    class Handler(ScriptedHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            path = self.path.split("?", 1)[0]
            if path == "/v1/messages/count_tokens":
                return self.send_json({"input_tokens": 10})
            if path != "/v1/messages":
                return self.send_json({"type": "error", "error": {"type": "not_found_error"}}, 404)
            message = model.answer(body)
            if not body.get("stream"):
                return self.send_json(message)
            data = b"".join(
                f"event: {name}\ndata: {json.dumps(event)}\n\n".encode() for name, event in _events(message)
            )
            self.send_body(data, "text/event-stream")

    return Handler


@contextmanager
def scripted_model(
    command: str,
    max_calls: int,
    tool: str = "Bash",
    usage: dict[str, int] | None = None,
    numbered: bool = False,
) -> Iterator[ScriptedModel]:
    """The server on a free loopback port, ``model.url`` its base URL (``ANTHROPIC_BASE_URL``);
    ``tool``: the client's shell tool, the one the script calls (Copilot CLI and OpenCode: ``bash``);
    ``usage``, ``numbered``: see ``ScriptedModel``."""
    model = ScriptedModel(command, max_calls, tool, usage, numbered)
    with serving(_handler(model)) as url:
        model.url = url
        yield model
