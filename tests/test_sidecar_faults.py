"""A real ``otelguard serve``: a call waiting on a real, stopped redis-server holds up no other request,
and one signature budget bounds what all its sessions track."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

from tests.e2e import stop_process
from tests.redis_e2e import RedisServer
from tests.test_cli_serve import Serve
from tests.test_sidecar_state import serve_once, start_replica, stderr_of

SLOW_CONFIG = (
    "signature_key: replica-key\n"
    "caps:\n  session: {web_search: 10}\n"
    "state:\n  timeout_ms: 3000\n"  # the guard call waits this long on a stopped Redis
)


def test_a_call_waiting_on_a_stopped_redis_does_not_hold_up_healthz(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    serve = start_replica(tmp_path, "--state", redis_server.url, config=SLOW_CONFIG)
    try:
        body = {"session_id": "s1", "tool_name": "web_search", "args": {"q": 1}, "call_id": "c1"}
        assert serve.post("/v1/before_call", body)["action"] == "allow"  # Redis answers: the link is up
        finished: list[str] = []

        def waiting_call() -> None:
            serve.post("/v1/before_call", {**body, "call_id": "c2", "args": {"q": 2}})
            finished.append("before_call")

        redis_server.hang()  # SIGSTOP: connected, never answers
        try:
            caller = threading.Thread(target=waiting_call)
            caller.start()
            time.sleep(0.3)  # the call has reached the sidecar and waits on Redis
            status, _ = serve.request("GET", "/healthz")
            finished.append("healthz")
            caller.join(30)
        finally:
            redis_server.resume()
        assert status == 200
        assert finished == ["healthz", "before_call"], "healthz waited for the guard call's Redis command"
    finally:
        stop_process(serve.process)


def test_calls_that_touch_no_session_cap_are_answered_while_a_capped_one_waits_on_redis(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """Only a call that charges or refunds a session cap goes to a worker, with every later call of
    its session until it is answered (they wait for the session's lock); other sessions' uncapped
    calls and Claude Code's PostToolUse stay on the event loop, so they must not reach Redis: with
    Redis hung, each is answered, and /healthz too, while the capped call still waits."""
    serve = start_replica(tmp_path, "--state", redis_server.url, config=SLOW_CONFIG)
    try:
        capped = {"session_id": "s1", "tool_name": "web_search", "args": {"q": 1}, "call_id": "c1"}
        assert serve.post("/v1/before_call", capped)["action"] == "allow"  # Redis answers: the link is up
        finished: list[str] = []

        def send(name: str, path: str, body: dict[str, Any]) -> None:
            serve.post(path, body)
            finished.append(name)

        uncapped = {"session_id": "s3", "tool_name": "read_file", "args": {"path": "a"}, "call_id": "r1"}
        post_tool_use = {
            "session_id": "s2", "transcript_path": "/tmp/t.jsonl", "cwd": "/tmp", "permission_mode": "default",
            "hook_event_name": "PostToolUse", "tool_name": "WebSearch", "tool_input": {"query": "q"},
            "tool_response": "ok", "tool_use_id": "toolu_1",
        }  # fmt: skip
        redis_server.hang()  # SIGSTOP: connected, never answers
        try:
            waiting = [
                threading.Thread(
                    target=send, args=("capped", "/v1/before_call", {**capped, "call_id": "c2"})
                ),
                threading.Thread(
                    target=send, args=("same session", "/v1/after_call", {**capped, "result": "r"})
                ),
            ]
            for thread in waiting:
                thread.start()
                time.sleep(0.3)  # reached the sidecar: the first waits on Redis, the second on the lock
            assert serve.post("/v1/before_call", uncapped)["action"] == "allow"
            assert (
                serve.post("/v1/after_call", {**uncapped, "result": "text", "failed": False})["action"]
                == "allow"
            )
            serve.post("/v1/hooks/claude-code", post_tool_use)
            finished.append("other sessions")
            assert serve.request("GET", "/healthz")[0] == 200
            finished.append("healthz")
            for thread in waiting:
                thread.join(30)
        finally:
            redis_server.resume()
        assert finished[:2] == ["other sessions", "healthz"], "the event loop waited on Redis"
        assert sorted(finished[2:]) == ["capped", "same session"]  # both answered once Redis resumed
    finally:
        stop_process(serve.process)


SIGNATURE_CONFIG = (
    "signature_key: budget-key\n"
    "warn_after: {same_tool_failure: 100, same_error: 100}\n"  # only exact_failure speaks here
    "hard_stop_after: {same_tool_failure: 100, same_error: 100}\n"
)


def _call(serve: Serve, session: str, n: int, path: str, *, failed: bool = True, tool: str = "Read") -> str:
    body = {"session_id": session, "tool_name": tool, "args": {"path": path}, "call_id": f"{session}-{n}"}
    serve.post("/v1/before_call", body)
    answer = serve.post("/v1/after_call", {**body, "result": "Error: no such file", "failed": failed})
    return str(answer["code"])


def _fail(serve: Serve, session: str, n: int, path: str) -> str:
    return _call(serve, session, n, path)


def _other(serve: Serve, session: str, n: int) -> None:
    _call(serve, session, n, f"/other-{n}", failed=False, tool="Grep")


def test_max_signatures_bounds_what_each_session_tracks(tmp_path: Path) -> None:
    """``--max-signatures 160`` over ``--max-sessions 10``: 16 signatures per session. A failing call
    is forgotten once 20 others came after it, so its next failure counts from one again; a session
    that has seen fewer keeps it."""
    serve = start_replica(
        tmp_path, "--max-sessions", "10", "--max-signatures", "160", config=SIGNATURE_CONFIG
    )
    try:
        assert [_fail(serve, "busy", n, "/missing") for n in range(2)] == ["allow", "exact_failure_warn"]
        for n in range(20):
            _other(serve, "busy", 100 + n)
        assert _fail(serve, "busy", 200, "/missing") == "allow", "the 21st signature back was still tracked"
        assert [_fail(serve, "quiet", n, "/missing") for n in range(2)] == ["allow", "exact_failure_warn"]
        for n in range(10):
            _other(serve, "quiet", 100 + n)
        assert _fail(serve, "quiet", 200, "/missing") == "exact_failure_warn"
    finally:
        stop_process(serve.process)


def test_max_signatures_too_small_for_the_sessions_is_a_usage_error(tmp_path: Path) -> None:
    done = serve_once(tmp_path, SIGNATURE_CONFIG, "--max-signatures", "10")
    assert done.returncode == 2
    assert "max_signatures: 10 is not allowed; at least 16 per session" in done.stderr


def _raw(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(data)
        return b"".join(iter(lambda: sock.recv(65536), b""))


def test_a_bad_or_repeated_content_length_is_400_without_a_traceback(tmp_path: Path) -> None:
    serve = start_replica(tmp_path, config=SIGNATURE_CONFIG)
    try:
        body = b'{"session_id": "s", "tool_name": "Read", "args": {}}'
        hidden = (
            b"POST /v1/end_session HTTP/1.1\r\nHost: x\r\nContent-Length: 17\r\n\r\n" + b'{"session_id":"s"}'
        )
        for headers in (b"Content-Length: \xb2", b"Content-Length: 53\r\nContent-Length: 0"):
            head = b"POST /v1/before_call HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n\r\n"
            answer = _raw(serve.port, head + body + hidden)
            assert answer.startswith(b"HTTP/1.1 400 "), answer[:100]
            assert b"Content-Length: " in answer.split(b"\r\n\r\n", 1)[1]  # the body names the field
            assert answer.count(b"HTTP/1.1 ") == 1, "a second request ran from the first one's body"
        assert serve.request("GET", "/healthz")[0] == 200
        assert "Traceback" not in stderr_of(tmp_path, serve)
    finally:
        stop_process(serve.process)
