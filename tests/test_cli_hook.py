"""`otelguard hook claude-code`: stdin -> sidecar -> stdout, fail open, always exit 0, stdlib only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from otelguard.cli.hook import HOOK_EVENTS, settings_block
from otelguard.http_server import HttpServer, Request, Response
from tests.test_cli_serve import Serve, start_serve

TIMEOUT = 60.0
PRE = {
    "session_id": "hook-1",
    "transcript_path": "/tmp/t.jsonl",
    "cwd": "/tmp",
    "hook_event_name": "PreToolUse",
    "tool_name": "WebSearch",
    "tool_input": {"query": "q"},
    "tool_use_id": "t1",
}


def hook(
    payload: object, *args: str, env: dict[str, str] | None = None, python_flags: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[bytes]:
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return subprocess.run(
        [sys.executable, *python_flags, "-m", "otelguard", "hook", "claude-code", *args],
        input=data,
        capture_output=True,
        timeout=TIMEOUT,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    from tests.e2e import stop_process

    running = start_serve(tmp_path, env={"OTELGUARD_TOKEN": "tok"})
    yield running
    stop_process(running.process)


def test_a_refused_call_prints_the_deny_and_exits_0(serve: Serve) -> None:
    url = f"http://127.0.0.1:{serve.port}"
    env = {"OTELGUARD_TOKEN": "tok"}
    prompt = {**PRE, "hook_event_name": "UserPromptSubmit", "prompt": "p"}
    answered = hook(prompt, "--url", url, env=env)
    assert (answered.returncode, answered.stdout) == (0, b"")  # nothing for UserPromptSubmit
    outputs = []
    for index in range(3):  # the config caps web_search at 2 per turn
        call = {**PRE, "tool_input": {"query": f"q{index}"}, "tool_use_id": f"t{index}"}
        result = hook(call, "--url", url, env=env)
        assert result.returncode == 0
        outputs.append(result.stdout)
        if not result.stdout:
            hook({**call, "hook_event_name": "PostToolUse", "tool_response": "r"}, "--url", url, env=env)
    assert outputs[:2] == [b"", b""]
    denied = json.loads(outputs[2])
    assert denied["hookSpecificOutput"]["hookEventName"] == "PreToolUse"
    assert denied["hookSpecificOutput"]["permissionDecision"] == "deny"


def test_a_wrong_token_fails_open(serve: Serve) -> None:
    result = hook(PRE, "--url", f"http://127.0.0.1:{serve.port}", env={"OTELGUARD_TOKEN": "wrong"})
    assert (result.returncode, result.stdout) == (0, b"")
    assert result.stderr.decode() == "otelguard hook: sidecar answered HTTP 401; the call goes ahead\n"


def test_a_sidecar_that_is_down_lets_the_call_go_ahead() -> None:
    from tests.e2e import free_port

    result = hook(PRE, "--url", f"http://127.0.0.1:{free_port()}")
    assert (result.returncode, result.stdout) == (0, b"")
    assert len(result.stderr.decode().splitlines()) == 1
    assert "unreachable" in result.stderr.decode()


def test_an_error_answer_lets_the_call_go_ahead() -> None:
    with HttpServer(lambda request: Response(500, b'{"hookSpecificOutput": {}}')) as server:
        result = hook(PRE, "--url", f"http://127.0.0.1:{server.port}")
    assert (result.returncode, result.stdout) == (0, b"")
    assert result.stderr.decode() == "otelguard hook: sidecar answered HTTP 500; the call goes ahead\n"


def test_a_sidecar_slower_than_the_timeout_lets_the_call_go_ahead() -> None:
    def slow(request: Request) -> Response:
        time.sleep(5)
        return Response(200, b'{"continue": false}')

    with HttpServer(slow) as server:
        result = hook(PRE, "--url", f"http://127.0.0.1:{server.port}", "--timeout", "0.3")
    assert (result.returncode, result.stdout) == (0, b"")
    assert "did not answer in time" in result.stderr.decode()


def test_bad_input_still_exits_0_and_prints_nothing() -> None:
    with HttpServer(lambda request: Response(400, b"body: malformed JSON\n")) as server:
        result = hook(b"\xff not json", "--url", f"http://127.0.0.1:{server.port}")
    assert (result.returncode, result.stdout) == (0, b"")


def imported_modules(stderr: bytes) -> set[str]:
    return {
        line.split("|")[-1].strip()
        for line in stderr.decode().splitlines()
        if line.startswith("import time:") and "|" in line and "imported package" not in line
    }


def test_the_hook_path_imports_only_the_standard_library() -> None:
    from tests.e2e import free_port

    no_key = {"OTELGUARD_SIGNATURE_KEY": ""}  # a key costs one json import: see the next test
    result = hook(
        PRE, "--url", f"http://127.0.0.1:{free_port()}", env=no_key, python_flags=("-X", "importtime")
    )
    assert result.returncode == 0
    # what the interpreter loads before any of our code (site, .pth hooks of installed packages)
    bare = subprocess.run([sys.executable, "-X", "importtime", "-c", "pass"], capture_output=True, check=True)
    imported = imported_modules(result.stderr) - imported_modules(bare.stderr)
    ours = {name for name in imported if name.split(".")[0] == "otelguard"}
    assert ours == {
        "otelguard",
        "otelguard._version",
        "otelguard.cli",
        "otelguard.cli.hook",
        "otelguard.environment_variables",
        "otelguard.claude_code_events",
        "otelguard.session_keys",
    }
    assert {name.split(".")[0] for name in imported} - {"otelguard"} <= set(sys.stdlib_module_names)
    for heavy in (
        "argparse",
        "json",
        "ssl",
        "asyncio",
        "orjson",
        "yaml",
        "rich",
        "opentelemetry",
        "prometheus_client",
    ):
        assert heavy not in {name.split(".")[0] for name in imported}


def _headers_sent(payload: object, env: dict[str, str]) -> dict[str, str]:
    seen: list[dict[str, str]] = []

    def record(request: Request) -> Response:
        seen.append(dict(request.headers))
        return Response(200, b"")

    with HttpServer(record) as server:
        result = hook(payload, "--url", f"http://127.0.0.1:{server.port}", env=env)
    assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")
    (headers,) = seen
    return headers


def test_with_a_key_the_hook_sends_the_keyed_session_digest_for_affinity() -> None:
    """X-Otelguard-Session is the session id's digest under OTELGUARD_SIGNATURE_KEY: the same for every
    event of a session, different under another key, never the raw id."""
    from otelguard.session_keys import key_bytes, session_digest

    headers = _headers_sent(PRE, {"OTELGUARD_SIGNATURE_KEY": "fleet-key"})
    assert headers["x-otelguard-session"] == session_digest("hook-1", key_bytes("fleet-key"))
    stop = {**PRE, "hook_event_name": "Stop"}
    same_session = _headers_sent(stop, {"OTELGUARD_SIGNATURE_KEY": "fleet-key"})
    assert same_session["x-otelguard-session"] == headers["x-otelguard-session"]
    other = _headers_sent(PRE, {"OTELGUARD_SIGNATURE_KEY": "another-key"})["x-otelguard-session"]
    assert other != headers["x-otelguard-session"]
    assert all("hook-1" not in value for value in headers.values())
    # a payload whose session_id is not its first key (read with the json module): the same digest
    reordered = {**{k: v for k, v in PRE.items() if k != "session_id"}, "session_id": "hook-1"}
    again = _headers_sent(reordered, {"OTELGUARD_SIGNATURE_KEY": "fleet-key"})["x-otelguard-session"]
    assert again == headers["x-otelguard-session"]


@pytest.mark.parametrize(
    ("payload", "env"),
    [
        (PRE, {"OTELGUARD_SIGNATURE_KEY": ""}),  # no key: no header (a raw id never leaves)
        ({**PRE, "session_id": 7}, {"OTELGUARD_SIGNATURE_KEY": "k"}),  # no usable id
        ([1, 2], {"OTELGUARD_SIGNATURE_KEY": "k"}),  # not an object: the sidecar answers it
    ],
)
def test_without_a_key_or_a_session_id_there_is_no_session_header(
    payload: object, env: dict[str, str]
) -> None:
    assert "x-otelguard-session" not in _headers_sent(payload, env)


def test_print_settings_is_the_hooks_block_for_claude_settings() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "otelguard",
            "hook",
            "claude-code",
            "--print-settings",
            "--url",
            "http://10.0.0.5:9464",
        ],
        capture_output=True,
        timeout=TIMEOUT,
        check=True,
    )
    block = json.loads(result.stdout)
    assert set(block["hooks"]) == set(HOOK_EVENTS)
    for event, (entry,) in block["hooks"].items():
        (handler,) = entry["hooks"]
        assert handler["type"] == "command"
        assert handler["command"] == "otelguard hook claude-code --url http://10.0.0.5:9464"
        assert handler["timeout"] > 2  # Claude Code's own timeout above the hook's: the hook fails open
        assert ("matcher" in entry) == (
            event in ("PreToolUse", "PostToolUse", "PostToolUseFailure", "PermissionDenied")
        )
    assert (
        json.loads(settings_block(None))["hooks"]["Stop"][0]["hooks"][0]["command"]
        == "otelguard hook claude-code"
    )


@pytest.mark.parametrize(
    "args",
    [["codex"], ["claude-code", "--timeout", "soon"], ["claude-code", "--bogus"], ["claude-code", "--url"]],
)
def test_usage_errors_exit_2_with_usage(args: list[str]) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "otelguard", "hook", *args], capture_output=True, timeout=TIMEOUT
    )
    assert result.returncode == 2 and b"usage: otelguard hook claude-code" in result.stderr


def test_the_settings_block_shown_in_the_docs_is_the_real_one() -> None:
    text = (Path(__file__).parent.parent / "docs" / "claude-code.md").read_text(encoding="utf-8")
    shown = text.split("prints the block to paste:", 1)[1].split("```json", 1)[1].split("```", 1)[0]
    assert json.loads(shown) == json.loads(settings_block(None))
