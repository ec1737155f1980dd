"""`otelguard serve` under a low open-file limit: a flood of idle connections never locks it out."""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.e2e import free_port, stop_process, wait_until
from tests.test_cli_serve import CONFIG, Serve

LIMIT = 256


def _low_limit() -> None:
    """In the child: soft and hard limit both 256, so the server cannot raise its own."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))


def test_a_flood_of_idle_connections_past_the_open_file_limit_keeps_healthz_answering(tmp_path: Path) -> None:
    config = tmp_path / "otelguard.yaml"
    config.write_text(CONFIG)
    port = free_port()
    errors = tmp_path / "stderr"
    with errors.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "otelguard", "serve", "--port", str(port), "--config", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            preexec_fn=_low_limit,
        )
    serve = Serve(process, port)
    flood: list[socket.socket] = []
    try:
        wait_until(lambda: serve.request("GET", "/healthz")[0] == 200, 30, 0.05, "otelguard serve to listen")
        for _ in range(LIMIT + 300):  # more idle connections than the server may have files open
            sock = socket.socket()
            sock.setblocking(False)  # a full backlog must not stall the flood itself
            sock.connect_ex(("127.0.0.1", port))
            flood.append(sock)
        time.sleep(2.0)  # the server accepts what it can and meets its limit
        for _ in range(3):
            assert serve.request("GET", "/healthz")[0] == 200
        assert process.poll() is None
    finally:
        for sock in flood:
            sock.close()
        stop_process(process)
    lines = errors.read_text(errors="replace").splitlines()
    assert len(lines) <= 6, lines[:20]


def test_the_soft_open_file_limit_is_raised_toward_the_hard_one(tmp_path: Path) -> None:
    """Soft 256 under a higher hard limit: the server raises its soft limit to hold its connection bound."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    code = (
        "import resource\n"
        "from otelguard.serving.http_server import HttpServer, Response\n"
        "with HttpServer(lambda request: Response(200)) as server:\n"
        "    print(resource.getrlimit(resource.RLIMIT_NOFILE)[0], server.max_connections)\n"
    )
    low = min(LIMIT, hard)
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard)),
        env={**os.environ},
        check=True,
    )
    raised, bound = (int(word) for word in result.stdout.split())
    assert raised > low
    assert raised <= hard
    if hard >= 2048:
        assert bound == 1024  # the whole default bound fits under the raised limit
    else:
        assert bound < raised


_OUT_OF_FILES_SCRIPT = """
import os, socket, sys, time
from otelguard.serving.http_server import HttpServer, Response

with HttpServer(lambda request: Response(200, b"ok")) as server:
    idle = [socket.create_connection((server.addr, server.port)) for _ in range(40)]
    while server.open_connections < 40:
        time.sleep(0.01)
    spare = []
    try:
        while True:  # every descriptor left taken: the next accept fails for want of one
            spare.append(os.dup(0))
    except OSError:
        pass
    os.close(spare.pop())  # one, for the client below
    client = socket.socket()
    client.settimeout(10)
    client.connect((server.addr, server.port))
    client.sendall(b"GET / HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
    print(client.recv(100).split(b"\\r\\n")[0].decode(), server.max_connections, server.open_connections)
"""


def test_running_out_of_descriptors_closes_idle_connections_and_says_so_once() -> None:
    """Descriptors taken by something else (files, other sockets): the accept that fails for want of
    one closes the longest-idle connections, and the next accept succeeds; one log line, no traceback."""
    result = subprocess.run(
        [sys.executable, "-c", _OUT_OF_FILES_SCRIPT],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT)),
        check=True,
    )
    *status, bound, still_open = result.stdout.split()
    assert status[:2] == ["HTTP/1.1", "200"], result.stdout
    assert int(still_open) < 40  # idle connections were closed to make room
    assert int(bound) < 40  # and the bound now holds under what fits
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "out of open files" in lines[0], lines[:10]
