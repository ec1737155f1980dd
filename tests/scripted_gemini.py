"""A scripted Gemini API server on 127.0.0.1 for running Gemini CLI offline.

``POST /v1beta/models/<model>:streamGenerateContent?alt=sse`` (and ``:generateContent``), streamed as
server-sent events. A request that offers the ``run_shell_command`` tool is a step of the agent loop:
it is answered with a call of ``run_shell_command`` running the same command every time (the
``description`` numbered, as a model would vary it), up to ``max_calls`` calls, then with text. Any
other request gets a short text. Every request body is kept, in order, for the test to read what the
client sent the model (the ``functionResponse`` of each call). ``usage``: the tokens every answer of
the loop reports (a model that burns tokens); ``numbered``: each call's command ends with its
number, so no two calls are alike.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.scripted_http import ScriptedHandler, serving

MODEL = "gemini-2.5-flash"
SHELL_TOOL = "run_shell_command"
DEFAULT_USAGE = {"promptTokenCount": 10, "candidatesTokenCount": 10}


class ScriptedGemini:
    """The script and what the client sent: ``requests`` (every body), ``loop_requests`` (the bodies
    of the agent loop's steps)."""

    def __init__(
        self, command: str, max_calls: int, usage: dict[str, int] | None = None, numbered: bool = False
    ) -> None:
        self.command = command
        self.max_calls = max_calls
        self.usage = usage or DEFAULT_USAGE
        self.numbered = numbered
        self.requests: list[dict[str, Any]] = []
        self.loop_requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.url = ""

    def answer(self, body: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, int]]:
        """The parts of the next answer and its usage; records the request."""
        with self.lock:
            self.requests.append(body)
            names = {
                declaration.get("name")
                for tool in body.get("tools") or ()
                if isinstance(tool, dict)
                for declaration in tool.get("functionDeclarations") or ()
                if isinstance(declaration, dict)
            }
            if SHELL_TOOL not in names:
                return [{"text": "Listing a directory"}], DEFAULT_USAGE
            self.loop_requests.append(body)
            number = len(self.loop_requests)
            if number > self.max_calls:
                return [{"text": "I give up: the directory cannot be listed."}], self.usage
            command = f"{self.command} {number}" if self.numbered else self.command
            call = {"command": command, "description": f"Attempt {number}"}
            return [{"functionCall": {"name": SHELL_TOOL, "args": call}}], self.usage


def function_responses(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``functionResponse.response`` objects of a request's last content (what the client
    reports of the calls)."""
    contents = body.get("contents") or []
    if not contents or not isinstance(contents[-1], dict):
        return []
    return [
        part["functionResponse"].get("response") or {}
        for part in contents[-1].get("parts") or ()
        if isinstance(part, dict) and isinstance(part.get("functionResponse"), dict)
    ]


def _chunk(parts: list[dict[str, Any]], usage: dict[str, int]) -> dict[str, Any]:
    prompt, candidates = usage["promptTokenCount"], usage["candidatesTokenCount"]
    return {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {
            "promptTokenCount": prompt,
            "candidatesTokenCount": candidates,
            "totalTokenCount": prompt + candidates,
        },
        "modelVersion": MODEL,
    }


def _handler(model: ScriptedGemini) -> type[BaseHTTPRequestHandler]:
    class Handler(ScriptedHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            path = self.path.split("?", 1)[0]
            if path.endswith(":countTokens"):
                return self.send_json({"totalTokens": 10})
            if not path.endswith((":streamGenerateContent", ":generateContent")):
                return self.send_json({"error": {"code": 404, "message": "not found"}}, 404)
            chunk = _chunk(*model.answer(body))
            if path.endswith(":generateContent"):
                return self.send_json(chunk)
            data = f"data: {json.dumps(chunk)}\r\n\r\n".encode()
            self.send_body(data, "text/event-stream")

    return Handler


@contextmanager
def scripted_gemini(
    command: str, max_calls: int, usage: dict[str, int] | None = None, numbered: bool = False
) -> Iterator[ScriptedGemini]:
    """The server on a free loopback port, ``model.url`` its base URL (``GOOGLE_GEMINI_BASE_URL``);
    ``usage``, ``numbered``: see ``ScriptedGemini``."""
    model = ScriptedGemini(command, max_calls, usage, numbered)
    with serving(_handler(model)) as url:
        model.url = url
        yield model
