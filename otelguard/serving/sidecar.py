"""The sidecar behind ``otelguard serve``: a guard per session over HTTP, and the metrics, on one port.

Routes: ``GET /metrics``, ``GET /healthz``; ``POST /v1/start_turn``, ``/v1/before_call``,
``/v1/after_call``, ``/v1/before_model``, ``/v1/after_model``, ``/v1/end_turn``, ``/v1/end_session``
(bodies as the Python API's arguments, answers the decision); ``POST /v1/hooks/CLI`` for each coding-agent CLI (``claude-code``, ``codex``,
``gemini-cli``: that CLI's hook payload in, the hook output it reads out). With a token, every
``/v1/`` request needs ``Authorization: Bearer <token>``. A bad body gets 400 with one line naming
the field, never a value; bodies are never logged. Guard calls are cheap and answered on the server's event loop, unless they may wait on the
shared state (``state.url``): those, and ``/metrics`` rendering, go to its worker pool.
"""

from __future__ import annotations

import hmac
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any, Final

import orjson
from prometheus_client import CollectorRegistry

from otelguard.coding_agents.claude_code import DEFAULT_AGENT, ClaudeCodeHooks
from otelguard.coding_agents.codex import CodexHooks
from otelguard.coding_agents.copilot_cli import CopilotCliHooks
from otelguard.coding_agents.gemini_cli import GeminiCliHooks
from otelguard.coding_agents.mapping import (
    AgentHooks,
    HookPayloadError,
    optional_bool,
    optional_count,
    optional_reply,
    optional_text,
    required_text,
)
from otelguard.coding_agents.opencode import OpenCodeHooks
from otelguard.config import GuardConfig
from otelguard.config.names import TOKENS
from otelguard.core.classify import catalog_for
from otelguard.core.decisions import Decision
from otelguard.core.guard import Guard
from otelguard.core.sessions import (
    DEFAULT_IDLE_SECONDS,
    DEFAULT_MAX_SESSIONS,
    DEFAULT_MAX_SIGNATURES,
    Session,
)
from otelguard.hosting import TelemetryOption, session_host
from otelguard.propagation import read_tree, use_tree
from otelguard.serving.http_server import Request, Response
from otelguard.serving.metrics_server import metrics_response

__all__ = ["Sidecar"]

_JSON: Final = "application/json"
_EMPTY: Final = b""


class Sidecar:
    """The request handler of ``otelguard serve``; ``handle(request)`` answers one request."""

    def __init__(
        self,
        config: GuardConfig | None = None,
        *,
        telemetry: TelemetryOption = None,
        registry: CollectorRegistry,
        token: str | None = None,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        idle_seconds: float = DEFAULT_IDLE_SECONDS,
        state_up: Callable[[], bool] | None = None,
        max_signatures: int = DEFAULT_MAX_SIGNATURES,
    ) -> None:
        # One host for every API: a session is the same whether its events come as hook payloads
        # or as /v1/ calls (the guards are labelled as Claude Code's unless a turn names its agent;
        # each CLI's hook endpoint labels its sessions with the CLI's name).
        self.host = session_host(
            config,
            telemetry=telemetry,
            agent=DEFAULT_AGENT,
            max_sessions=max_sessions,
            idle_seconds=idle_seconds,
            max_signatures=max_signatures,  # one memory bound across sessions
        )
        self.hooks: dict[str, AgentHooks] = {
            f"/v1/hooks/{mapping.cli}": mapping
            for mapping in (
                ClaudeCodeHooks(host=self.host),
                CodexHooks(host=self.host),
                GeminiCliHooks(host=self.host),
                CopilotCliHooks(host=self.host),
                OpenCodeHooks(host=self.host),
            )
        }
        self._state_io = self.host.config.effective_state().url is not None
        self._reading_paths = frozenset(
            path for path, mapping in self.hooks.items() if mapping.transcript_events
        )
        caps = self.host.config.caps
        # a model event charges or reads the session's (or tree's) token count, which then lives
        # in the shared state
        self._tokens_shared = bool(caps.session.get(TOKENS) or caps.tree.get(TOKENS))
        self._catalog = catalog_for(self.host.config)
        self._waiting_lock = threading.Lock()
        self._waiting: Counter[str] = Counter()  # sessions with a call on a worker, by session_id
        self._offloaded: dict[int, str] = {}  # id of a request on a worker -> its session_id
        # id of a request -> its body, as ``inline`` read it: the handler parses it no second time
        self._read_bodies: dict[int, dict[str, Any]] = {}
        self._registry = registry
        self._state_up = state_up
        self._token = f"Bearer {token}".encode() if token else None
        self._routes: dict[str, Callable[[Mapping[str, Any]], Response]] = {
            "/v1/start_turn": self._start_turn,
            "/v1/before_call": self._before_call,
            "/v1/after_call": self._after_call,
            "/v1/before_model": self._before_model,
            "/v1/after_model": self._after_model,
            "/v1/end_turn": self._end_turn,
            "/v1/end_session": self._end_session,
            **{path: _hook_route(mapping) for path, mapping in self.hooks.items()},
        }

    def inline(self, request: Request) -> bool:
        """Whether a request is answered on the event loop: ``/healthz`` always (it reads the shared
        state's last known health and never waits on it), and every guard call that cannot wait on
        the shared state. With ``state.url``, a call that charges a session cap or may refund one
        can wait on Redis for up to ``timeout_ms``, so it runs on the worker pool and never holds up
        another request, and so does every later call of that session until it is answered (it would
        wait for the session's lock); the rest stay on the loop, where a call costs less than a
        thread hop. ``/metrics`` rendering always runs on a worker, and so does a hook event whose
        answer reads a transcript file (a slow disk must not hold up the loop), with state or not."""
        path = request.path
        if path == "/metrics":
            return False
        if not path.startswith("/v1/") or not (self._state_io or path in self._reading_paths):
            return True
        body = _json_object(request.body)
        if body is None:
            return True  # answered 400 without touching the state
        self._read_bodies[id(request)] = body  # the handler runs next, here or on a worker
        session = body.get("session_id", body.get("sessionId"))  # Copilot CLI's is camelCase
        if not isinstance(session, str):
            return True
        with self._waiting_lock:
            if session not in self._waiting and not self._may_wait(path, body):
                return True
            self._waiting[session] += 1
            self._offloaded[id(request)] = session
        return False

    def _may_wait(self, path: str, body: Mapping[str, Any]) -> bool:
        mapping = self.hooks.get(path)
        if mapping is not None and body.get(mapping.event_field) in mapping.transcript_events:
            return True
        return self._state_io and self._may_wait_on_state(path, body)

    def _may_wait_on_state(self, path: str, body: Mapping[str, Any]) -> bool:
        """Read from the body alone, on the safe side: what is not known to stay away from the
        shared state goes to a worker."""
        if path in ("/v1/start_turn", "/v1/end_turn"):
            return False
        if path in ("/v1/before_model", "/v1/after_model"):
            return self._tokens_shared
        if path == "/v1/before_call":
            return self._charges_a_session_cap(body.get("tool_name"))
        if path == "/v1/after_call":  # a refused or cancelled call is refunded
            return body.get("refusal") is not None or body.get("cancelled") is True
        mapping = self.hooks.get(path)
        if mapping is not None:
            if self._tokens_shared and body.get(mapping.event_field) in mapping.model_events:
                return True
            return mapping.may_wait_on_state(body, self._charges_a_session_cap)
        return True

    def _charges_a_session_cap(self, tool_name: Any) -> bool:
        if not isinstance(tool_name, str):
            return False  # a 400 naming the field
        facts = self._catalog.facts(tool_name)
        return bool(facts.caps_session or facts.caps_tree)

    def _answered_on_a_worker(self, request: Request) -> None:
        with self._waiting_lock:
            session = self._offloaded.pop(id(request), None)
            if session is None:
                return
            self._waiting[session] -= 1
            if self._waiting[session] <= 0:
                del self._waiting[session]

    def handle(self, request: Request) -> Response:
        read = self._read_bodies.pop(id(request), None) if self._read_bodies else None
        try:
            return self._handle(request, read)
        finally:
            if self._offloaded:
                self._answered_on_a_worker(request)

    def _handle(self, request: Request, body: dict[str, Any] | None) -> Response:
        path = request.path
        if path == "/metrics" or path == "/healthz":
            if request.method not in ("GET", "HEAD"):
                return _text(405, "only GET is served here", (("Allow", "GET, HEAD"),))
            if path == "/metrics":
                # sessions gone idle since the last request end their open turns before a scrape
                self.host.expire()
                return metrics_response(self._registry, request)
            return Response(200, orjson.dumps(self._health()), _JSON)
        route = self._routes.get(path)
        if route is None:
            return _text(404, "not found; see /metrics, /healthz and /v1/")
        if request.method != "POST":
            return _text(405, "only POST is served here", (("Allow", "POST"),))
        if self._token is not None and not _authorized(request, self._token):
            return _text(401, "missing or wrong bearer token", (("WWW-Authenticate", "Bearer"),))
        if body is None:
            try:
                body = orjson.loads(request.body)
            except orjson.JSONDecodeError:
                return _text(400, "body: malformed JSON")
            if not isinstance(body, dict):
                return _text(400, "body: expected a JSON object")
        try:
            if "baggage" not in request.headers:
                return route(body)
            # a session first seen with a delegation tree in its baggage joins it one level down
            with use_tree(read_tree(request.headers)):
                return route(body)
        except HookPayloadError as exc:
            return _text(400, str(exc))

    def _health(self) -> dict[str, Any]:
        """Still 200 when the shared state is down: the sidecar serves on, deciding session caps from
        its own counts, and ``state`` says so."""
        health: dict[str, Any] = {"status": "ok", "sessions": len(self.host)}
        if self._state_up is not None:
            health["state"] = "up" if self._state_up() else "down"
        return health

    # routes -----------------------------------------------------------------------------------

    def _session(self, body: Mapping[str, Any]) -> Session:
        return self.host.session(required_text(body, "session_id"))

    def _guard(self, body: Mapping[str, Any]) -> Guard:
        return self._session(body).main

    def _start_turn(self, body: Mapping[str, Any]) -> Response:
        turn_id, agent = optional_text(body, "turn_id"), optional_text(body, "agent")
        self._session(body).start_turn(turn_id=turn_id, agent=agent)
        return Response(200, b'{"ok":true}', _JSON)

    def _before_call(self, body: Mapping[str, Any]) -> Response:
        tool_name = required_text(body, "tool_name", limit=None)
        call_id, delegate_to = optional_text(body, "call_id"), optional_text(body, "delegate_to")
        guard = self._guard(body)
        return _decision(
            guard.before_call(tool_name, body.get("args"), call_id=call_id, delegate_to=delegate_to)
        )

    def _after_call(self, body: Mapping[str, Any]) -> Response:
        tool_name = required_text(body, "tool_name", limit=None)
        call_id = optional_text(body, "call_id")
        failed = optional_bool(body, "failed")
        refusal = optional_text(body, "refusal")
        cancelled = optional_bool(body, "cancelled") is True
        guard = self._guard(body)
        args, result = body.get("args"), body.get("result")
        if cancelled:
            return _decision(guard.after_call(tool_name, args, result, call_id=call_id, cancelled=True))
        return _decision(guard.after_call(tool_name, args, result, failed, refusal, call_id))

    def _model_guard(self, body: Mapping[str, Any]) -> Guard:
        """The session's main guard; a session made now is labelled ``agent`` when the body names one."""
        session_id, agent = required_text(body, "session_id"), optional_text(body, "agent")
        return self.host.session(session_id, agent or None).main

    def _before_model(self, body: Mapping[str, Any]) -> Response:
        return _decision(self._model_guard(body).before_model())

    def _after_model(self, body: Mapping[str, Any]) -> Response:
        # every field checked before the guard is touched: a 400 leaves no half-counted reply
        text = optional_reply(body, "text")
        tool_calls = optional_count(body, "tool_calls") or 0
        invalid_tool_calls = optional_count(body, "invalid_tool_calls") or 0
        input_tokens = optional_count(body, "input_tokens")
        output_tokens = optional_count(body, "output_tokens")
        guard = self._model_guard(body)
        decision = guard.after_model(
            text,
            tool_calls=tool_calls,
            invalid_tool_calls=invalid_tool_calls,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
        )
        return _decision(decision)

    def _end_turn(self, body: Mapping[str, Any]) -> Response:
        errored = optional_bool(body, "errored") is True  # the run ended in an exception
        summary = self._session(body).end_turn(errored=errored)
        halt = summary.halt_decision
        answer = {
            "tool_calls": summary.tool_calls,
            "halted": summary.halted,
            "halt_code": halt.code if halt is not None else None,
            "outcome": summary.outcome,
            "decisions": dict(summary.decisions),
        }
        return Response(200, orjson.dumps(answer), _JSON)

    def _end_session(self, body: Mapping[str, Any]) -> Response:
        session = self.host.end_session(required_text(body, "session_id"))
        return Response(200, orjson.dumps({"ended": session is not None}), _JSON)


def _hook_route(mapping: AgentHooks) -> Callable[[Mapping[str, Any]], Response]:
    def answer(body: Mapping[str, Any]) -> Response:
        output = mapping.handle(body)
        # No output is an empty 200: the hook command then prints nothing, and Claude Code's own
        # http hooks read an empty body as "go ahead".
        return Response(200, _EMPTY if output is None else orjson.dumps(output), _JSON)

    return answer


def _authorized(request: Request, expected: bytes) -> bool:
    given = request.headers.get("authorization", "").encode("latin-1", "replace")
    return hmac.compare_digest(given, expected)


def _decision(decision: Decision) -> Response:
    """The decision's metadata (codes, counts, the hash; not the tool name, which the caller sent),
    with what the agent needs: the message, and the synthetic result of a refused call."""
    meta = decision.to_metadata()
    del meta["tool_name"]
    cap = meta.pop("cap", None)
    answer: dict[str, Any] = {
        "action": meta.pop("action"),
        "code": meta.pop("code"),
        "message": decision.message,
        **meta,
        "synthetic_result": None if decision.allows_execution else decision.synthetic_result(),
    }
    if cap is not None:
        answer["cap"] = cap
    return Response(200, orjson.dumps(answer, option=orjson.OPT_NON_STR_KEYS), _JSON)


def _text(status: int, line: str, headers: tuple[tuple[str, str], ...] = ()) -> Response:
    return Response(status, f"{line}\n".encode(), "text/plain; charset=utf-8", headers)


def _json_object(raw: bytes) -> dict[str, Any] | None:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return body if isinstance(body, dict) else None
