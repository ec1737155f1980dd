"""Headless Debian chromium driven over the DevTools protocol on a pipe (no extra Python packages).

``--remote-debugging-pipe`` makes chromium read commands on fd 3 and write replies and events on fd 4,
each message one JSON document followed by a NUL byte. A missing chromium skips the test with a reason;
with OTELGUARD_REQUIRE_E2E=1 (set by .ci/run) it fails instead.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import shutil
import struct
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest

from otelguard.config.environment import OTELGUARD_REQUIRE_E2E
from tests.e2e import stop_process

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-pipe",
)
# the child moves the two pipe ends onto fds 3 and 4 before it becomes chromium: Popen keeps a passed
# fd at its own number, which may be anything
_TRAMPOLINE = (
    "import os, sys\n"
    "commands, replies = int(sys.argv[1]), int(sys.argv[2])\n"
    "os.dup2(commands, 3); os.dup2(replies, 4); os.close(commands); os.close(replies)\n"
    "os.execv(sys.argv[3], sys.argv[3:])\n"
)


def require_chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        reason = "chromium not found on PATH (apt-get install chromium)"
        if os.environ.get(OTELGUARD_REQUIRE_E2E) == "1":
            pytest.fail(f"{reason}; {OTELGUARD_REQUIRE_E2E}=1 forbids skipping", pytrace=False)
        pytest.skip(reason)
    return path


def _above_stdio(fd: int) -> int:
    """The same pipe end at a number of 10 or more, close-on-exec (so only the trampoline gets it)."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return moved


class Page:
    """One tab, attached with ``flatten``; every event it receives is kept in ``events``."""

    def __init__(self, browser: Browser, session_id: str) -> None:
        self.browser = browser
        self.session_id = session_id

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        return self.browser.send(method, params, session_id=self.session_id)

    def events(self, method: str) -> list[dict[str, Any]]:
        return [e["params"] for e in self.browser.events if e.get("method") == method]

    def navigate(self, url: str, timeout: float = 30) -> None:
        self.send("Page.navigate", url=url)
        self.browser.wait_for_event("Page.loadEventFired", timeout)

    def evaluate(self, expression: str) -> Any:
        reply = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in reply:
            raise AssertionError(f"{expression!r} raised: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def screenshot(self) -> bytes:
        import base64

        return base64.b64decode(self.send("Page.captureScreenshot", format="png")["data"])


class Browser:
    def __init__(self, process: subprocess.Popen[bytes], commands: int, replies: int) -> None:
        self.process = process
        self._commands = commands
        self._replies = replies
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, params: dict[str, Any] | None = None, session_id: str | None = None) -> Any:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session_id is not None:
            message["sessionId"] = session_id
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._receive(30)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise AssertionError(f"{method} failed: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for_event(self, method: str, timeout: float) -> dict[str, Any]:
        seen = len(self.events)
        deadline = time.monotonic() + timeout
        while True:
            for event in self.events[seen:]:
                if event.get("method") == method:
                    return event
            seen = len(self.events)
            self.events.append(self._receive(max(0.1, deadline - time.monotonic())))

    def new_page(self) -> Page:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session_id = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session_id)
        for domain in ("Page", "Runtime", "Network", "Log"):
            page.send(f"{domain}.enable")
        return page

    def _receive(self, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while b"\0" not in self._buffer:
            remaining = deadline - time.monotonic()
            ready, _, _ = select.select([self._replies], [], [], max(0.0, remaining))
            if not ready:
                raise AssertionError(f"chromium sent nothing for {timeout:.0f}s")
            chunk = os.read(self._replies, 1 << 20)
            if not chunk:
                raise AssertionError(f"chromium closed the pipe (exit {self.process.poll()})")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        parsed: dict[str, Any] = json.loads(message)
        return parsed


@contextmanager
def run_chromium(tmp_path: Path, window: tuple[int, int] = (1280, 900)) -> Iterator[Browser]:
    binary = require_chromium()
    commands_read, commands_write = map(_above_stdio, os.pipe())
    replies_read, replies_write = map(_above_stdio, os.pipe())
    profile = tmp_path / "chromium-profile"
    flags = (*FLAGS, f"--user-data-dir={profile}", f"--window-size={window[0]},{window[1]}")
    argv = [sys.executable, "-c", _TRAMPOLINE, str(commands_read), str(replies_write), binary, *flags]
    with (tmp_path / "chromium.log").open("wb") as log:
        process = subprocess.Popen(
            argv, pass_fds=(commands_read, replies_write), stdout=log, stderr=subprocess.STDOUT
        )
    os.close(commands_read)
    os.close(replies_write)
    browser = Browser(process, commands_write, replies_read)
    try:
        yield browser
    finally:
        with suppress(AssertionError, OSError):  # chromium may close the pipe before it answers
            browser.send("Browser.close")
        os.close(commands_write)
        os.close(replies_read)
        stop_process(process)


def png_pixels(png: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and the unfiltered rows of an 8-bit RGB or RGBA PNG (stdlib only)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    offset, idat = 8, b""
    width = height = channels = 0
    while offset < len(png):
        (length,) = struct.unpack(">I", png[offset : offset + 4])
        kind = png[offset + 4 : offset + 8]
        data = png[offset + 8 : offset + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", data[:10])
            assert depth == 8 and colour in (2, 6), f"unexpected PNG depth {depth} colour type {colour}"
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += data
        offset += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    rows: list[bytes] = []
    previous = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        _unfilter(kind, line, previous, channels)
        rows.append(bytes(line))
        previous = line
    return width, height, rows


def _unfilter(kind: int, line: bytearray, above: bytearray, bpp: int) -> None:
    for i in range(len(line)):
        left = line[i - bpp] if i >= bpp else 0
        up = above[i]
        upper_left = above[i - bpp] if i >= bpp else 0
        if kind == 1:
            line[i] = (line[i] + left) & 0xFF
        elif kind == 2:
            line[i] = (line[i] + up) & 0xFF
        elif kind == 3:
            line[i] = (line[i] + (left + up) // 2) & 0xFF
        elif kind == 4:
            estimate = left + up - upper_left
            pa, pb, pc = abs(estimate - left), abs(estimate - up), abs(estimate - upper_left)
            predictor = left if pa <= pb and pa <= pc else up if pb <= pc else upper_left
            line[i] = (line[i] + predictor) & 0xFF
