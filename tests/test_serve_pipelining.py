"""A real ``otelguard serve`` under a pipelining flood: 16 clients each send 20,000 ``GET /healthz``
requests in a row without reading an answer, and a Claude Code hook (the real ``otelguard hook
claude-code`` command, with its own default deadline) still gets its decision instead of failing
open. The flood is bounded (a fixed number of requests, a socket timeout) and stops by itself."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

from tests.e2e import stop_process
from tests.test_cli_serve import TIMEOUT, start_serve

TOKEN = "pipelining-token"
FLOOD_CONNECTIONS = 16
FLOOD_REQUESTS = 20_000  # per connection: about seven seconds of the loop's time, served alone
HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
PRE = {
    "session_id": "flooded",
    "transcript_path": "/t",
    "cwd": "/",
    "hook_event_name": "PreToolUse",
    "tool_name": "WebSearch",
}


def _flood(sock: socket.socket) -> None:
    # the server stops reading a client that never reads its answers: the send then times out
    with contextlib.suppress(OSError):
        sock.sendall(HEALTHZ * FLOOD_REQUESTS)


def test_a_hook_call_is_decided_within_its_deadline_while_16_clients_pipeline_thousands_of_requests(
    tmp_path: Path,
) -> None:
    serve = start_serve(tmp_path, env={"OTELGUARD_TOKEN": TOKEN})
    auth = {"Authorization": f"Bearer {TOKEN}"}
    flood: list[socket.socket] = []
    try:
        for index in range(2):  # the turn cap allows two searches: the third is denied
            call = {**PRE, "tool_input": {"q": index}, "tool_use_id": f"t{index}"}
            assert serve.post("/v1/hooks/claude-code", call, headers=auth) is None
        flood = [
            socket.create_connection(("127.0.0.1", serve.port), timeout=TIMEOUT)
            for _ in range(FLOOD_CONNECTIONS)
        ]
        senders = [threading.Thread(target=_flood, args=(sock,), daemon=True) for sock in flood]
        for sender in senders:
            sender.start()
        for sock in flood:  # every flooding client has answers waiting: the flood is being served
            assert sock.recv(1, socket.MSG_PEEK) == b"H"
        third = {**PRE, "tool_input": {"q": 2}, "tool_use_id": "t2"}
        hook = subprocess.run(
            [
                sys.executable,
                "-m",
                "otelguard",
                "hook",
                "claude-code",
                "--url",
                f"http://127.0.0.1:{serve.port}",
            ],
            input=json.dumps(third).encode(),
            capture_output=True,
            timeout=TIMEOUT,
            env={**os.environ, "OTELGUARD_TOKEN": TOKEN, "XDG_CACHE_HOME": str(tmp_path)},
            check=False,
        )
    finally:
        for sock in flood:
            sock.close()
        stop_process(serve.process)
    # past its deadline the hook fails open: exit 0, the call goes ahead, the reason on stderr
    assert hook.returncode == 0
    answer = json.loads(hook.stdout or b"{}")
    assert "hookSpecificOutput" in answer, f"failed open: {hook.stderr.decode()!r}"
    assert answer["hookSpecificOutput"]["permissionDecision"] == "deny"
