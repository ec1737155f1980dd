"""Claude Code's model turns: the replies read from the end of the transcript a hook payload names.

A prompt opens a model request (``before_model``); each ``PostToolBatch`` reports the reply that asked
for the batch (``after_model``) and opens the next request; ``Stop`` reports the final reply and is
never blocked. The transcript path comes from the request: a FIFO, a link, a directory, a huge or a
missing file never hangs the hook or the sidecar, and reads as no reply.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from otelguard.coding_agents.claude_code import Reply, transcript_replies
from otelguard.coding_agents.transcript_tail import MAX_TAIL_BYTES, tail_lines, tail_objects
from tests.e2e import free_port, stop_process, wait_until
from tests.test_cli_serve import Serve

REAL = Path(__file__).parent / "data" / "real" / "claude-code" / "cc_test_fix_loop.jsonl"
TIMEOUT = 60.0
SESSION = "5f1c0d2e-model-turns"


def assistant(
    message_id: str,
    blocks: list[dict[str, Any]],
    *,
    input_tokens: int = 1000,
    output_tokens: int = 500,
    sidechain: bool = False,
) -> dict[str, Any]:
    usage = {"input_tokens": input_tokens, "cache_read_input_tokens": 0, "output_tokens": output_tokens}
    message = {"id": message_id, "role": "assistant", "model": "claude-sonnet-4-5", "content": blocks}
    return {
        "type": "assistant",
        "sessionId": SESSION,
        "isSidechain": sidechain,
        "message": message | {"usage": usage},
    }


def tool_use(number: int) -> dict[str, Any]:
    return {
        "type": "tool_use",
        "id": f"toolu_{number:024d}",
        "name": "Bash",
        "input": {"command": f"echo {number}"},
    }


def write_transcript(path: Path, entries: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(entry) + "\n" for entry in entries), encoding="utf-8")
    return path


# the transcript's replies -------------------------------------------------------------------------


def test_a_real_transcript_gives_one_reply_per_message_with_its_final_usage() -> None:
    """Claude Code writes a message's blocks on lines of their own, the usage growing as it streams:
    one reply per message id, its tool calls counted, its input the uncached and the cached part."""
    replies = transcript_replies(tail_objects(str(REAL), limit=1 << 30), sidechain=False)
    assert len(replies) == len({reply.message_id for reply in replies}) == 19
    first = replies[0]
    assert first.message_id == "msg_01XjdvbFpGSXC4CEVew8UHc3"
    assert (first.tool_calls, first.input_tokens, first.output_tokens) == (1, 1 + 126 + 144016, 1203)
    assert first.text  # the text block before the call
    # the file is longer than the bounded read: its end holds the last replies, whole
    tail = transcript_replies(tail_objects(str(REAL)), sidechain=False)
    assert REAL.stat().st_size > MAX_TAIL_BYTES and 0 < len(tail) < len(replies)
    assert tail == replies[-len(tail) :]
    several = next(reply for reply in replies if reply.message_id == "msg_01AAPe96mGHDUwS2dV4XxARV")
    assert (several.tool_calls, several.output_tokens) == (2, 203)


def test_a_subagents_lines_and_claude_codes_own_stand_ins_are_not_the_main_agents_replies(
    tmp_path: Path,
) -> None:
    synthetic = assistant("msg_s", [{"type": "text", "text": "API Error"}])
    synthetic["message"]["model"] = "<synthetic>"
    path = write_transcript(
        tmp_path / "t.jsonl",
        [
            assistant("msg_1", [tool_use(1)]),
            assistant("msg_side", [tool_use(2)], sidechain=True),
            synthetic,
            {"type": "user", "message": {"role": "user", "content": "next"}},
            assistant("msg_2", [{"type": "text", "text": "Done."}], input_tokens=7, output_tokens=3),
        ],
    )
    main = transcript_replies(tail_objects(str(path)), sidechain=False)
    assert main == [
        Reply("msg_1", None, 1, 1000, 500),
        Reply("msg_2", "Done.", 0, 7, 3),
    ]
    assert [reply.message_id for reply in transcript_replies(tail_objects(str(path)), sidechain=True)] == [
        "msg_side"
    ]


def test_only_the_end_of_a_long_transcript_is_read(tmp_path: Path) -> None:
    """Megabytes of earlier entries, then the last reply: the read stops at ``MAX_TAIL_BYTES``, a line
    cut by it is dropped, and the last reply is found."""
    path = tmp_path / "long.jsonl"
    filler = json.dumps({"type": "user", "message": {"role": "user", "content": "x" * 10_000}}) + "\n"
    with path.open("w", encoding="utf-8") as file:
        for _ in range(400):  # about 4 MB
            file.write(filler)
        file.write(json.dumps(assistant("msg_last", [tool_use(9)])) + "\n")
    lines = tail_lines(str(path))
    assert sum(len(line) + 1 for line in lines) <= MAX_TAIL_BYTES
    assert all(line.startswith(b"{") for line in lines)
    (reply,) = transcript_replies(tail_objects(str(path)), sidechain=False)
    assert reply.message_id == "msg_last"


def test_hostile_paths_read_as_nothing_at_once(tmp_path: Path) -> None:
    real = write_transcript(tmp_path / "real.jsonl", [assistant("msg_1", [tool_use(1)])])
    assert tail_lines(str(real))
    for path in hostile_paths(tmp_path, real):
        started = time.monotonic()
        assert tail_lines(path) == [], path
        assert time.monotonic() - started < 30  # a FIFO or a device would block a plain open or read


def hostile_paths(tmp_path: Path, real: Path) -> list[Any]:
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    device = tmp_path / "zero.jsonl"
    device.symlink_to("/dev/zero")
    directory = tmp_path / "folder.jsonl"
    directory.mkdir()
    huge = tmp_path / "huge.jsonl"
    with huge.open("wb") as file:  # sparse: 8 GiB of zero bytes, no line, nothing to parse
        file.truncate(8 << 30)
    return [
        str(fifo),
        str(link),
        str(device),
        str(directory),
        str(tmp_path / "missing.jsonl"),
        str(real.with_suffix(".txt")),
        "/etc/passwd",
        "relative/../../x.jsonl",
        "nul\0byte.jsonl",
        12345,
        None,
        ["/a.jsonl"],
        "",
    ]


def test_a_huge_sparse_transcript_reads_as_no_reply(tmp_path: Path) -> None:
    huge = tmp_path / "huge.jsonl"
    with huge.open("wb") as file:
        file.truncate(8 << 30)
    assert transcript_replies(tail_objects(str(huge)), sidechain=False) == []


# through the real hook command and sidecar -----------------------------------------------------------


def start_serve(tmp_path: Path, config: str) -> Serve:
    path = tmp_path / "otelguard.yaml"
    path.write_text(config)
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "otelguard", "serve", "--port", str(port), "--config", str(path)],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "serve.err").open("wb"),
    )
    serve = Serve(process, port)
    wait_until(lambda: serve.request("GET", "/healthz")[0] == 200, 30, 0.05, "otelguard serve to listen")
    return serve


CONFIG = "mode: unattended\nsignature_key: model-turns-key\n"


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    running = start_serve(tmp_path, CONFIG)
    yield running
    stop_process(running.process)


def hook(serve: Serve, body: dict[str, Any], tmp_path: Path) -> dict[str, Any] | None:
    """One event through a real ``otelguard hook claude-code`` process; its output, ``None`` for none."""
    ran = subprocess.run(
        [sys.executable, "-m", "otelguard", "hook", "claude-code", "--url", f"http://127.0.0.1:{serve.port}",
         "--timeout", "30"],
        input=json.dumps(body).encode(), capture_output=True, timeout=TIMEOUT,
        env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")},
    )  # fmt: skip
    assert (ran.returncode, ran.stderr) == (0, b""), ran.stderr
    return json.loads(ran.stdout) if ran.stdout else None


def event(name: str, transcript: object, **fields: Any) -> dict[str, Any]:
    base = {"session_id": SESSION, "transcript_path": transcript, "cwd": "/home/me/project"}
    return base | {"hook_event_name": name, "permission_mode": "default"} | fields


def test_a_hostile_transcript_path_never_hangs_or_fails_the_hook(serve: Serve, tmp_path: Path) -> None:
    """Each hostile path on ``Stop``, ``SubagentStop`` and ``PostToolBatch``: answered at once with
    nothing, the sidecar still healthy, nothing of the path in its log."""
    real = write_transcript(tmp_path / "real.jsonl", [assistant("msg_1", [tool_use(1)])])
    for path in hostile_paths(tmp_path, real):
        if isinstance(path, str) and "\0" in path:
            continue  # JSON carries it, but it is no path: the same as any other string here
        assert hook(serve, event("Stop", path, stop_hook_active=False), tmp_path) is None
        subagent = event(
            "SubagentStop", str(real), agent_id="a1", agent_type="Explore", agent_transcript_path=path
        )
        assert hook(serve, subagent, tmp_path) is None
        assert hook(serve, event("PostToolBatch", path, tool_calls=[]), tmp_path) is None
    assert serve.request("GET", "/healthz")[0] == 200
    stop_process(serve.process)
    assert b"fifo" not in (tmp_path / "serve.err").read_bytes()


CAPPED = CONFIG + "caps:\n  session: {tokens: 10000}\n"


@pytest.fixture
def capped(tmp_path: Path) -> Iterator[Serve]:
    running = start_serve(tmp_path, CAPPED)
    yield running
    stop_process(running.process)


def test_a_final_reply_that_spends_the_cap_ends_the_stop_never_blocks_it_and_refuses_the_next_prompt(
    capped: Serve, tmp_path: Path
) -> None:
    """Six replies with calls (9,000 tokens), then a final answer of 1,500: ``Stop`` answers
    ``continue: false`` with the reason, never ``decision: "block"`` (which would make Claude Code go
    on); the session's next prompt is refused with ``decision: "block"``, which drops it."""
    path = tmp_path / "session.jsonl"
    entries: list[dict[str, Any]] = []
    assert hook(capped, event("UserPromptSubmit", str(path), prompt="go"), tmp_path) is None
    for number in range(1, 7):
        entries.append(assistant(f"msg_{number}", [tool_use(number)]))
        write_transcript(path, entries)
        assert hook(capped, event("PostToolBatch", str(path), tool_calls=[]), tmp_path) is None
    entries.append(assistant("msg_final", [{"type": "text", "text": "All done."}]))
    write_transcript(path, entries)
    stop = hook(capped, event("Stop", str(path), stop_hook_active=False), tmp_path)
    assert stop is not None and set(stop) == {"continue", "stopReason"} and stop["continue"] is False
    assert stop["stopReason"].startswith("otelguard stopped this turn (cap_session): ")
    refused = hook(capped, event("UserPromptSubmit", str(path), prompt="more"), tmp_path)
    assert refused is not None and refused["decision"] == "block"
    assert refused["reason"].startswith("otelguard stopped this turn (cap_session): ")
    # a Stop with nothing new to report answers nothing
    assert hook(capped, event("Stop", str(path), stop_hook_active=False), tmp_path) is None


@pytest.mark.parametrize("batches_name_it", [True, False])
def test_a_subagents_replies_count_toward_the_session_and_stop_the_main_agent(
    capped: Serve, tmp_path: Path, batches_name_it: bool
) -> None:
    """A subagent's replies, read from its own transcript (at its batch ends when they name it, at
    ``SubagentStop`` in any case: all of that file is the subagent's run), are charged to the
    session: the main agent's next batch end is answered with the stop."""
    main, side = tmp_path / "main.jsonl", tmp_path / "agent-a1.jsonl"
    assert hook(capped, event("UserPromptSubmit", str(main), prompt="go"), tmp_path) is None
    write_transcript(main, [assistant("msg_main", [tool_use(1)], input_tokens=100, output_tokens=50)])
    assert hook(capped, event("PostToolBatch", str(main), tool_calls=[]), tmp_path) is None
    sub = {"agent_id": "a1", "agent_type": "Explore", "agent_transcript_path": str(side)}
    lines = [assistant(f"msg_side_{n}", [tool_use(n)], sidechain=True) for n in range(1, 8)]
    for count in range(1, 8):  # the subagent's own batches: 1,500 tokens each
        write_transcript(side, lines[:count])
        batch = sub if batches_name_it else {"agent_id": "a1", "agent_type": "Explore"}
        answer = hook(capped, event("PostToolBatch", str(main), tool_calls=[], **batch), tmp_path)
        assert (answer is None) is (count < 7 or not batches_name_it), (count, answer)
    assert hook(capped, event("SubagentStop", str(main), stop_hook_active=False, **sub), tmp_path) is None
    stop = hook(capped, event("PostToolBatch", str(main), tool_calls=[]), tmp_path)
    assert stop is not None and stop["continue"] is False
    assert stop["stopReason"].startswith("otelguard stopped this turn (cap_session): ")


def test_the_events_that_read_a_transcript_are_answered_off_the_event_loop(tmp_path: Path) -> None:
    """The sidecar answers a guard call on its event loop, but never one that reads a file: a slow
    disk would hold up every other session's calls. Without shared state too."""
    from prometheus_client import CollectorRegistry

    from otelguard import GuardConfig
    from otelguard.serving.http_server import Request
    from otelguard.serving.sidecar import Sidecar

    sidecar = Sidecar(GuardConfig(signature_key="k"), registry=CollectorRegistry())

    def inline(path: str, body: dict[str, Any]) -> bool:
        request = Request("POST", path, "", {}, json.dumps(body).encode())
        answered_inline = sidecar.inline(request)
        sidecar.handle(request)
        return answered_inline

    transcript = str(write_transcript(tmp_path / "t.jsonl", [assistant("msg_1", [tool_use(1)])]))
    claude, gemini = "/v1/hooks/claude-code", "/v1/hooks/gemini-cli"
    pre = event("PreToolUse", transcript, tool_name="Bash", tool_input={"command": "ls"}, tool_use_id="t1")
    assert inline(claude, pre) is True
    assert inline(claude, event("UserPromptSubmit", transcript, prompt="p")) is True
    for name in ("PostToolBatch", "Stop", "SubagentStop"):
        assert inline(claude, event(name, transcript, tool_calls=[], agent_id="a1")) is False, name
    for name in ("BeforeAgent", "BeforeModel", "AfterAgent"):
        body = {"session_id": "g", "transcript_path": transcript, "hook_event_name": name}
        assert inline(gemini, body) is False, name
    assert inline("/v1/before_model", {"session_id": "m"}) is True
