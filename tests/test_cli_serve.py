"""`otelguard serve` as a real process: endpoints and answers, auth, bad input, bounded sessions, signals."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import free_port, stop_process, wait_until

TIMEOUT = 30.0
CONFIG = "mode: unattended\nsignature_key: test-key\ncaps:\n  turn: {web_search: 2}\n"


@dataclass
class Serve:
    process: subprocess.Popen[bytes]
    port: int

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        raw: bytes | None = None,
    ) -> tuple[int, bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=TIMEOUT)
        try:
            data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
            connection.request(method, path, body=data, headers=headers or {})
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def post(self, path: str, body: Any, **kwargs: Any) -> Any:
        status, answer = self.request("POST", path, body, **kwargs)
        assert status == 200, answer
        return json.loads(answer) if answer else None

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")


def start_serve(tmp_path: Path, *extra: str, env: dict[str, str] | None = None) -> Serve:
    config = tmp_path / "otelguard.yaml"
    config.write_text(CONFIG)
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "otelguard", "serve", "--port", str(port), "--config", str(config), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    serve = Serve(process, port)
    wait_until(lambda: serve.request("GET", "/healthz")[0] == 200, 30, 0.05, "otelguard serve to listen")
    return serve


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    running = start_serve(tmp_path, "--max-sessions", "100")
    yield running
    stop_process(running.process)


def test_before_and_after_call_answer_the_decision(serve: Serve) -> None:
    serve.post("/v1/start_turn", {"session_id": "a", "turn_id": "t1", "agent": "go-agent"})
    allowed = serve.post(
        "/v1/before_call", {"session_id": "a", "tool_name": "terminal", "args": {"c": "make"}}
    )
    assert allowed == {
        "action": "allow",
        "code": "allow",
        "message": "",
        "count": 0,
        "limit": 0,
        "args_hash": allowed["args_hash"],
        "synthetic_result": None,
    }
    answers = []
    for index in range(20):
        call = {"session_id": "a", "tool_name": "terminal", "args": {"c": "make"}, "call_id": f"c{index}"}
        answers.append(serve.post("/v1/before_call", call))
        if answers[-1]["action"] in ("block", "halt"):
            break
        if answers[-1]["action"] == "reject":  # refused, the turn goes on: the model sends it again
            continue
        answers.append(serve.post("/v1/after_call", {**call, "result": "Error 2", "failed": True}))
    # five failures (warned from the 2nd), seven rejects of the same call (the default), the stop
    actions = [a["action"] for a in answers]
    assert actions == ["allow", "allow", *(["allow", "warn"] * 4), *(["reject"] * 7), "block"]
    final = answers[-1]
    assert final["action"] in ("block", "halt")
    assert final["code"] != "turn_halted"
    assert json.loads(final["synthetic_result"])["otelguard"]["code"] == final["code"]
    summary = serve.post("/v1/end_turn", {"session_id": "a"})
    assert summary["halted"] is True and summary["halt_code"] == final["code"]
    assert serve.post("/v1/end_session", {"session_id": "a"}) == {"ended": True}
    assert serve.post("/v1/end_session", {"session_id": "a"}) == {"ended": False}
    status, metrics = serve.request("GET", "/metrics")
    assert status == 200 and b'otelguard_turns_total{agent="go-agent",outcome="halted"} 1.0' in metrics


def test_a_cancelled_call_is_accepted(serve: Serve) -> None:
    call = {"session_id": "c", "tool_name": "terminal", "args": {"c": "sleep"}, "call_id": "x1"}
    serve.post("/v1/before_call", call)
    answer = serve.post("/v1/after_call", {**call, "cancelled": True})
    assert answer["action"] == "allow"


def test_the_claude_code_hook_endpoint_answers_claude_code_shapes(serve: Serve) -> None:
    base = {"session_id": "cc", "transcript_path": "/t", "cwd": "/", "hook_event_name": "UserPromptSubmit"}
    status, body = serve.request("POST", "/v1/hooks/claude-code", {**base, "prompt": "p"})
    assert (status, body) == (200, b"")  # nothing for UserPromptSubmit
    pre = {**base, "hook_event_name": "PreToolUse", "tool_name": "WebSearch", "tool_use_id": "t"}
    outputs = [
        serve.post("/v1/hooks/claude-code", {**pre, "tool_input": {"q": i}, "tool_use_id": f"t{i}"})
        for i in range(3)
    ]
    assert outputs[:2] == [None, None]
    assert outputs[2]["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert outputs[2]["continue"] is False  # unattended: a cap hit blocks the turn


def test_healthz_and_metrics_are_open_and_v1_needs_the_token(tmp_path: Path) -> None:
    running = start_serve(tmp_path, env={"OTELGUARD_TOKEN": "s3cret"})
    try:
        assert running.request("GET", "/metrics")[0] == 200
        status, body = running.request("POST", "/v1/start_turn", {"session_id": "a"})
        assert status == 401 and b"s3cret" not in body
        wrong = {"Authorization": "Bearer nope"}
        assert running.request("POST", "/v1/start_turn", {"session_id": "a"}, headers=wrong)[0] == 401
        right = {"Authorization": "Bearer s3cret"}
        assert running.request("POST", "/v1/start_turn", {"session_id": "a"}, headers=right)[0] == 200
    finally:
        stop_process(running.process)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", b"body: malformed JSON\n"),
        (b"[1, 2]", b"body: expected a JSON object\n"),
        (b'{"tool_name": "x"}', b"session_id: expected a string (missing)\n"),
        (b'{"session_id": "a", "tool_name": 12345}', b"tool_name: expected a non-empty string\n"),
        (
            b'{"session_id": "a", "tool_name": "x", "call_id": 98765}',
            b"call_id: expected a string of at most 256 characters, or null\n",
        ),
    ],
)
def test_bad_bodies_get_400_naming_the_field_never_the_value(
    serve: Serve, body: bytes, reason: bytes
) -> None:
    status, answer = serve.request("POST", "/v1/before_call", raw=body)
    assert (status, answer) == (400, reason)


def test_bad_failed_flag_is_named(serve: Serve) -> None:
    status, answer = serve.request(
        "POST", "/v1/after_call", {"session_id": "a", "tool_name": "x", "failed": "yes"}
    )
    assert (status, answer) == (400, b"failed: expected true, false or null\n")


def test_end_turn_with_errored_counts_an_errored_turn(serve: Serve) -> None:
    """A run that ended in an exception: ``"errored": true`` ends its turn as ``errored``; a halted
    turn stays ``halted`` whatever the agent says, and a flag that is not a boolean is a 400 naming
    the field, which leaves the turn open."""
    serve.post("/v1/start_turn", {"session_id": "e", "agent": "go-agent"})
    serve.post("/v1/before_call", {"session_id": "e", "tool_name": "read_file", "args": {"p": 1}})
    status, answer = serve.request("POST", "/v1/end_turn", {"session_id": "e", "errored": "yes"})
    assert (status, answer) == (400, b"errored: expected true, false or null\n")
    summary = serve.post("/v1/end_turn", {"session_id": "e", "errored": True})
    assert summary["outcome"] == "errored" and summary["tool_calls"] == 1 and summary["halted"] is False
    serve.post("/v1/start_turn", {"session_id": "e", "agent": "go-agent"})
    assert serve.post("/v1/end_turn", {"session_id": "e", "errored": False})["outcome"] == "completed"
    serve.post("/v1/start_turn", {"session_id": "e", "agent": "go-agent"})
    for index in range(3):  # the turn cap is 2: the third search blocks the turn
        call = {"session_id": "e", "tool_name": "web_search", "args": {"q": index}, "call_id": f"w{index}"}
        if serve.post("/v1/before_call", call)["action"] == "allow":
            serve.post("/v1/after_call", {**call, "result": "r"})
    assert serve.post("/v1/end_turn", {"session_id": "e", "errored": True})["outcome"] == "halted"
    assert turns_total(serve, "go-agent", "errored") == 1
    assert turns_total(serve, "go-agent", "completed") == 1
    assert turns_total(serve, "go-agent", "halted") == 1


def test_a_body_over_one_mebibyte_is_413_and_unknown_paths_404(serve: Serve) -> None:
    status, _ = serve.request("POST", "/v1/before_call", raw=b"x" * ((1 << 20) + 1))
    assert status == 413
    assert serve.request("GET", "/v2/nothing")[0] == 404
    assert serve.request("GET", "/v1/before_call")[0] == 405


def test_bodies_are_never_logged(serve: Serve) -> None:
    serve.post("/v1/before_call", {"session_id": "a", "tool_name": "t", "args": {"canary": "CANARY-9f1"}})
    serve.request("POST", "/v1/before_call", raw=b'{"canary": "CANARY-9f1"')
    stop_process(serve.process)
    assert serve.process.stderr is not None and serve.process.stdout is not None
    assert b"CANARY" not in serve.process.stderr.read() + serve.process.stdout.read()


def test_a_flood_of_session_ids_keeps_the_pool_bounded(serve: Serve) -> None:
    def one(index: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", serve.port, timeout=TIMEOUT)
        for offset in range(index * 500, index * 500 + 500):  # keep-alive, like a busy client
            body = json.dumps({"session_id": f"flood-{offset}", "tool_name": "t", "args": {"i": offset}})
            connection.request("POST", "/v1/before_call", body=body)
            response = connection.getresponse()
            assert response.status == 200
            response.read()
        connection.close()

    with ThreadPoolExecutor(8) as clients:
        list(clients.map(one, range(40)))  # 20,000 distinct session ids from 8 keep-alive clients
    status, health = serve.request("GET", "/healthz")
    assert status == 200 and json.loads(health)["sessions"] <= 100


def turns_total(serve: Serve, agent: str, outcome: str = "completed") -> float:
    status, metrics = serve.request("GET", "/metrics")
    assert status == 200
    prefix = f'otelguard_turns_total{{agent="{agent}",outcome="{outcome}"}} '.encode()
    line = next((line for line in metrics.splitlines() if line.startswith(prefix)), None)
    return float(line[len(prefix) :]) if line is not None else 0.0


def test_an_evicted_session_ends_its_open_turns_and_the_metrics_count_them(tmp_path: Path) -> None:
    """With --max-sessions 1, a second session evicts the first: its open turns (the main agent's,
    begun over /v1/, and a subagent's, begun by a Claude Code payload) are ended and counted."""
    serve = start_serve(tmp_path, "--max-sessions", "1")
    try:
        serve.post("/v1/start_turn", {"session_id": "a", "agent": "go-agent"})
        serve.post("/v1/before_call", {"session_id": "a", "tool_name": "read_file", "args": {"p": 1}})
        hook = {"session_id": "a", "hook_event_name": "PreToolUse", "tool_name": "Read", "tool_input": {}}
        serve.post("/v1/hooks/claude-code", {**hook, "agent_id": "sub-1", "agent_type": "Explore"})
        assert turns_total(serve, "go-agent") == turns_total(serve, "Explore") == 0
        serve.post("/v1/before_call", {"session_id": "b", "tool_name": "read_file", "args": {"p": 1}})
        assert turns_total(serve, "go-agent") == 1 and turns_total(serve, "Explore") == 1
    finally:
        stop_process(serve.process)


def test_an_idle_session_expires_and_its_turn_is_counted_by_the_next_scrape(tmp_path: Path) -> None:
    """No other traffic needed: a scrape of /metrics ends the turns of sessions gone idle."""
    serve = start_serve(tmp_path, "--session-idle", "0.5")
    try:
        serve.post("/v1/start_turn", {"session_id": "idle", "agent": "go-agent"})
        wait_until(lambda: turns_total(serve, "go-agent") == 1, TIMEOUT, 0.2, "the idle session's turn")
        assert json.loads(serve.request("GET", "/healthz")[1])["sessions"] == 0
    finally:
        stop_process(serve.process)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_stops_cleanly_on_sigint_and_sigterm(tmp_path: Path, signum: int) -> None:
    running = start_serve(tmp_path)
    running.process.send_signal(signum)
    assert running.process.wait(TIMEOUT) == 0


def test_a_bad_config_or_a_busy_port_is_exit_2_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("mode: sometimes\n")
    result = subprocess.run(
        [sys.executable, "-m", "otelguard", "serve", "--port", "0", "--config", str(bad)],
        capture_output=True,
        timeout=TIMEOUT,
    )
    assert result.returncode == 2 and len(result.stderr.decode().strip().splitlines()) == 1
    running = start_serve(tmp_path)
    try:
        busy = subprocess.run(
            [sys.executable, "-m", "otelguard", "serve", "--port", str(running.port)],
            capture_output=True,
            timeout=TIMEOUT,
        )
        assert busy.returncode == 2
        busy_line = f"otelguard serve: --port {running.port}: 127.0.0.1:{running.port} is already in use"
        assert busy_line in busy.stderr.decode()
    finally:
        stop_process(running.process)


def test_spans_go_to_otlp_when_an_endpoint_is_set(tmp_path: Path) -> None:
    from tests.test_telemetry_otlp import Receiver

    receiver = Receiver()
    import threading

    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    try:
        endpoint = f"http://127.0.0.1:{receiver.server_address[1]}"
        running = start_serve(tmp_path, env={"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint})
        call = {"session_id": "o", "tool_name": "terminal", "args": {"c": "CANARY-otlp"}, "call_id": "c1"}
        running.post("/v1/before_call", call)
        running.post("/v1/after_call", {**call, "result": "ok", "failed": False})
        running.process.send_signal(signal.SIGTERM)
        assert running.process.wait(TIMEOUT) == 0  # shutdown flushes the queued spans
        spans = receiver.spans()
        assert [span.name for _, span in spans] == ["execute_tool terminal"]
        assert spans[0][0]["service.name"] == "otelguard-serve"
        assert b"CANARY" not in b"".join(r.SerializeToString() for r in receiver.requests)
    finally:
        receiver.shutdown()
        receiver.server_close()
