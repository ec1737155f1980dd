"""Parity: a Claude Code transcript fed live through `otelguard hook claude-code` processes against a real
`otelguard serve` halts at the same (turn, call, code) as `otelguard replay` of the same transcript and
config.

The transcript's events become the hook payloads Claude Code would have sent (a user prompt is
``UserPromptSubmit``, a call is ``PreToolUse`` then, unless denied, ``PostToolUse`` or
``PostToolUseFailure`` (``is_interrupt`` for a call that never ran; ``PermissionDenied`` for a
refusal); a subagent's sidechain is the same session with an ``agent_id``), each piped
through its own hook process. After a halt (``continue: false``) Claude Code stops the turn, so the
turn's later calls are not sent, exactly as replay stops feeding a halted turn.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from otelguard.readers.claude_code import ClaudeCodeReader
from otelguard.readers.events import SessionKey, ToolCall
from tests.e2e import free_port, stop_process, wait_until

ROOT = Path(__file__).parent
CONFIG = ROOT / "fixtures" / "replay" / "unattended.yaml"
REAL = ROOT / "data" / "real" / "claude-code"
# Public transcripts: one whose subagent halts (the agent_id path), one of permission rejections.
REAL_TRANSCRIPTS = [REAL / "cc_subagent_sibling_reads.jsonl", REAL / "cc_short_rejections.jsonl"]
TRANSCRIPTS = sorted((ROOT / "fixtures" / "replay" / "claude-code").glob("*.jsonl")) + [
    path for path in REAL_TRANSCRIPTS if path.exists()
]
TIMEOUT = 60.0
Halt = tuple[str, int, int, str]  # session, turn, call, code


@pytest.fixture(scope="module")
def sidecar_url() -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "otelguard", "serve", "--port", str(port), "--config", str(CONFIG)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    import urllib.request

    wait_until(lambda: urllib.request.urlopen(f"{url}/healthz", timeout=5).status == 200, 30, 0.05, "serve")
    yield url
    stop_process(process)


@dataclass
class _Stream:
    turns: int = 0
    call: int = 0
    open: bool = False
    halted: bool = False


class HookFeed:
    """An event sink for the replay readers that sends what Claude Code would have sent."""

    def __init__(self, url: str, tag: str) -> None:
        self.url = url
        self.tag = tag
        self.streams: dict[str, _Stream] = {}
        self.halts: set[Halt] = set()

    def describe_input(self, path: str, fmt: str) -> None:
        pass

    def error(self, path: str, line: int | None, reason: str) -> None:
        pass

    def begin_session(self, key: SessionKey) -> None:
        self.streams[key.session_id] = _Stream()

    def start_turn(self, key: SessionKey, time: float | None = None) -> None:
        stream = self.streams[key.session_id]
        if stream.open:
            self._end_turn(key)
        if self._agent_id(key) is None:
            self.send(key, "UserPromptSubmit", prompt="(from the transcript)")
        stream.turns += 1
        stream.call, stream.open, stream.halted = 0, True, False

    def tool_call(self, key: SessionKey, call: ToolCall) -> None:
        stream = self.streams[key.session_id]
        if not stream.open:
            self.start_turn(key)
        stream.call += 1
        if stream.halted or not call.has_result:
            return
        tool = call.tool_name
        fields = {"tool_name": tool, "tool_input": call.args, "tool_use_id": call.call_id}
        answer = self.send(key, "PreToolUse", **fields)
        if (
            self._halted(key, answer)
            or answer.get("hookSpecificOutput", {}).get("permissionDecision") == "deny"
        ):
            return
        if call.cancelled:  # never ran (a sibling of a failed parallel call): not a failure
            answer = self.send(key, "PostToolUseFailure", error=str(call.result), is_interrupt=True, **fields)
        elif call.refusal is not None:
            answer = self.send(key, "PermissionDenied", reason=str(call.result), **fields)
        elif call.failed:
            answer = self.send(key, "PostToolUseFailure", error=str(call.result), **fields)
        else:
            answer = self.send(key, "PostToolUse", tool_response=call.result, **fields)
        self._halted(key, answer)

    def end_session(self, key: SessionKey) -> None:
        if self.streams[key.session_id].open:
            self._end_turn(key)
        if self._agent_id(key) is None:
            self.send(key, "SessionEnd", reason="other")

    def _end_turn(self, key: SessionKey) -> None:
        agent_id = self._agent_id(key)
        self.send(key, "Stop" if agent_id is None else "SubagentStop", stop_hook_active=False)

    def _halted(self, key: SessionKey, answer: dict[str, Any]) -> bool:
        if answer.get("continue") is not False:
            return False
        stream = self.streams[key.session_id]
        stream.halted = True
        code = re.match(r"otelguard stopped this turn \((\w+)\)", answer["stopReason"])
        assert code is not None, answer["stopReason"]
        self.halts.add((key.session_id, stream.turns, stream.call, code.group(1)))
        return True

    @staticmethod
    def _agent_id(key: SessionKey) -> str | None:
        _, sep, root = key.session_id.partition(":")
        return root if sep else None

    def send(self, key: SessionKey, event: str, **fields: Any) -> dict[str, Any]:
        session = key.session_id.partition(":")[0]
        payload = {
            "session_id": f"{self.tag}/{session}",
            "transcript_path": key.path,
            "cwd": "/tmp",
            "hook_event_name": event,
            **fields,
        }
        agent_id = self._agent_id(key)
        if agent_id is not None:
            payload["agent_id"] = agent_id
        result = subprocess.run(
            [sys.executable, "-m", "otelguard", "hook", "claude-code", "--url", self.url, "--timeout", "30"],
            input=json.dumps(payload).encode(),
            capture_output=True,
            timeout=TIMEOUT,
        )
        assert result.returncode == 0 and result.stderr == b"", result.stderr
        if event == "UserPromptSubmit":
            assert result.stdout == b""
        answer: dict[str, Any] = json.loads(result.stdout) if result.stdout else {}
        return answer


def hook_halts(url: str, path: Path) -> set[Halt]:
    feed = HookFeed(url, path.stem)
    reader = ClaudeCodeReader(feed, str(path), path.stem)
    with path.open("rb") as lines:
        for number, line in enumerate(lines, 1):
            if line.strip():
                reader.feed(number, json.loads(line))
    reader.close()
    return feed.halts


def replay_halts(path: Path) -> set[Halt]:
    result = subprocess.run(
        [sys.executable, "-m", "otelguard", "replay", str(path), "--config", str(CONFIG), "--json"],
        capture_output=True,
        timeout=TIMEOUT,
    )
    report = json.loads(result.stdout)
    return {
        (session["session_id"], halt["turn"], halt["call"], halt["code"])
        for session in report["sessions"]
        for halt in session["halts"]
    }


def test_the_fixtures_include_halts_of_several_kinds() -> None:
    codes = {halt[3] for path in TRANSCRIPTS[:6] for halt in replay_halts(path)}
    assert len(codes) >= 3


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=[p.name for p in TRANSCRIPTS])
def test_hooks_halt_where_replay_halts(sidecar_url: str, path: Path) -> None:
    with ThreadPoolExecutor(2) as both:
        live = both.submit(hook_halts, sidecar_url, path)
        replayed = both.submit(replay_halts, path)
        assert live.result() == replayed.result()
