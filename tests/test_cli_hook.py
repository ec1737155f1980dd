"""`otelguard hook claude-code`: stdin -> sidecar -> stdout, fail open, always exit 0, stdlib only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from otelguard.coding_agents.claude_code import HOOK_EVENTS, TOOL_EVENTS, settings_block
from otelguard.coding_agents.settings import hook_program
from otelguard.serving.http_server import HttpServer, Request, Response
from tests.test_cli_serve import Serve, start_serve

TIMEOUT = 60.0
PRE = {
    "session_id": "hook-1",
    "transcript_path": "/tmp/t.jsonl",
    "cwd": "/tmp",
    "permission_mode": "default",
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


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test's hook processes remember the sessions told the guard is off in a cache of their own."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    return cache


def off_notice(stdout: bytes) -> str:
    """The ``systemMessage`` of a hook that failed open, ``""`` for no output; anything else fails."""
    if not stdout:
        return ""
    output = json.loads(stdout)
    assert list(output) == ["systemMessage"], output
    message = output["systemMessage"]
    assert message.startswith("otelguard is not guarding this session: ")
    return str(message)


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
    assert result.returncode == 0
    assert "HTTP 401 (missing or wrong bearer token)" in off_notice(result.stdout)
    assert result.stderr.decode() == (
        "otelguard hook: sidecar answered HTTP 401 (missing or wrong bearer token); the call goes ahead\n"
    )


def test_a_sidecar_that_is_down_lets_the_call_go_ahead() -> None:
    from tests.e2e import free_port

    result = hook(PRE, "--url", f"http://127.0.0.1:{free_port()}")
    assert result.returncode == 0 and "unreachable" in off_notice(result.stdout)
    assert len(result.stderr.decode().splitlines()) == 1
    assert "unreachable" in result.stderr.decode()


def test_an_error_answer_lets_the_call_go_ahead() -> None:
    with HttpServer(lambda request: Response(500, b'{"hookSpecificOutput": {}}')) as server:
        result = hook(PRE, "--url", f"http://127.0.0.1:{server.port}")
    assert result.returncode == 0 and "HTTP 500" in off_notice(result.stdout)
    assert result.stderr.decode() == "otelguard hook: sidecar answered HTTP 500; the call goes ahead\n"


def test_a_sidecar_slower_than_the_timeout_lets_the_call_go_ahead() -> None:
    def slow(request: Request) -> Response:
        time.sleep(5)
        return Response(200, b'{"continue": false}')

    with HttpServer(slow) as server:
        result = hook(PRE, "--url", f"http://127.0.0.1:{server.port}", "--timeout", "0.3")
    assert result.returncode == 0 and "did not answer in time" in off_notice(result.stdout)
    assert "did not answer in time" in result.stderr.decode()


def test_bad_input_still_exits_0_and_prints_nothing() -> None:
    with HttpServer(lambda request: Response(400, b"body: malformed JSON\n")) as server:
        result = hook(b"\xff not json", "--url", f"http://127.0.0.1:{server.port}")
    assert (result.returncode, result.stdout) == (0, b"")  # no session id to tell: nothing


def imported_modules(stderr: bytes) -> set[str]:
    return {
        line.split("|")[-1].strip()
        for line in stderr.decode().splitlines()
        if line.startswith("import time:") and "|" in line and "imported package" not in line
    }


REPO = Path(__file__).resolve().parent.parent


def imports_without_site(*args: str, payload: bytes = b"", signature_key: str = "") -> set[str]:
    """What ``python -S -m otelguard ...`` imports beyond a bare ``python -S -c pass``: without the
    site module (installed packages' ``.pth`` hooks may load typing or re first and hide them)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OTELGUARD_SIGNATURE_KEY": signature_key}
    run = subprocess.run(
        [sys.executable, "-S", "-X", "importtime", "-m", "otelguard", *args],
        input=payload, capture_output=True, timeout=TIMEOUT, env=env,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    bare = subprocess.run(
        [sys.executable, "-S", "-X", "importtime", "-c", "pass"], capture_output=True, check=True
    )
    return imported_modules(run.stderr) - imported_modules(bare.stderr)


@pytest.fixture
def answering() -> Iterator[str]:
    """A sidecar stand-in that answers every hook with an empty 200 (nothing to say): the usual call."""
    with HttpServer(lambda request: Response(200, b"")) as server:
        yield f"http://127.0.0.1:{server.port}"


@pytest.mark.parametrize("cli", ["claude-code", "codex", "gemini-cli"])
def test_the_hook_path_imports_only_the_standard_library(answering: str, cli: str) -> None:
    imported = imports_without_site("hook", cli, "--url", answering, payload=json.dumps(PRE).encode())
    ours = {name for name in imported if name.split(".")[0] == "otelguard"}
    assert ours == {
        "otelguard",
        "otelguard._version",
        "otelguard.cli",
        "otelguard.coding_agents",  # the same
        "otelguard.coding_agents.hook",
        "otelguard.config",  # only its lazy namespace: the config itself is not loaded
        "otelguard.config.environment",
    }
    assert {name.split(".")[0] for name in imported} - {"otelguard"} <= set(sys.stdlib_module_names)
    # what startup time went to: typing (and the re and enum it loads) for annotations, socket (with
    # selectors, enum and array) for one connection, the idna codec for a host name, json, argparse
    for heavy in ("argparse", "json", "ssl", "asyncio", "typing", "re", "enum", "socket", "selectors",
                  "encodings.idna", "orjson", "yaml", "rich", "opentelemetry", "prometheus_client"):  # fmt: skip
        assert heavy not in imported, heavy
    assert imported - ours <= EXPECTED, imported - ours - EXPECTED


EXPECTED = {
    "runpy", "importlib", "importlib._abc", "importlib.machinery", "importlib.util", "contextlib",
    "collections", "functools", "operator", "keyword", "reprlib", "types", "itertools", "_operator",
    "_functools", "_collections", "warnings",
    "os", "stat", "_stat", "posixpath", "genericpath", "_collections_abc",
    "__future__", "_socket", "time", "select",
}  # fmt: skip
"""What ``python -m`` itself loads (runpy), what the site module would have loaded anyway (os), and
what the hook needs: ``__future__`` and three C modules (``select``: stdin read within the deadline)."""


def test_with_a_key_the_hook_adds_only_the_session_digest_to_its_imports(answering: str) -> None:
    """The affinity header costs hashlib, not the json or re modules, for Claude Code's payloads
    (session_id first)."""
    url = answering
    payload = json.dumps(PRE).encode()
    assert payload.startswith(b'{"session_id"')
    without = imports_without_site("hook", "claude-code", "--url", url, payload=payload)
    keyed = imports_without_site("hook", "claude-code", "--url", url, payload=payload, signature_key="k")
    added = keyed - without
    assert "otelguard.core.session_keys" in added and "hashlib" in added
    assert not added & {"json", "re", "typing", "enum", "socket"}, added


def test_printing_the_settings_or_the_config_loads_json_only_then() -> None:
    """Printing, which runs once, loads the CLI's own module (its mapping needs the installed
    dependencies: the site module stays on here) and ``json``; the config, only the shared part."""
    code = (
        "import sys\nfrom otelguard.cli import main\n"
        "main(['hook', 'claude-code', '--print-settings', '--http'])\n"
        "print(' '.join(sorted(sys.modules)), file=sys.stderr)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        timeout=TIMEOUT,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert run.returncode == 0 and run.stdout.startswith(b"{"), run.stderr
    settings = set(run.stderr.decode().split())
    assert "json" in settings and "otelguard.coding_agents.claude_code" in settings
    config = imports_without_site("hook", "claude-code", "--print-config")
    assert (
        "otelguard.coding_agents.settings" in config and "otelguard.coding_agents.claude_code" not in config
    )


def test_print_settings_http_is_claude_codes_http_hooks_block() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "otelguard", "hook", "claude-code", "--print-settings", "--http",
         "--url", "http://10.0.0.5:9464/guard/", "--timeout", "3"],
        capture_output=True, timeout=TIMEOUT, check=True,
    )  # fmt: skip
    block = json.loads(result.stdout)
    assert set(block["hooks"]) == set(HOOK_EVENTS)
    for event, (entry,) in block["hooks"].items():
        (handler,) = entry["hooks"]
        assert handler == {
            "type": "http",
            "url": "http://10.0.0.5:9464/guard/v1/hooks/claude-code",
            "timeout": 3,
            "headers": {"Authorization": "Bearer $OTELGUARD_TOKEN"},
            "allowedEnvVars": ["OTELGUARD_TOKEN"],
        }
        assert ("matcher" in entry) == (event in TOOL_EVENTS)


def test_the_http_block_is_what_the_sidecar_answers(serve: Serve) -> None:
    """Claude Code posts the payload to the block's url with the block's header: the sidecar answers it
    as it answers the hook command."""
    block = json.loads(
        subprocess.run(
            [sys.executable, "-m", "otelguard", "hook", "claude-code", "--print-settings", "--http",
             "--url", f"http://127.0.0.1:{serve.port}"],
            capture_output=True, timeout=TIMEOUT, check=True,
        ).stdout
    )  # fmt: skip
    handler = block["hooks"]["PreToolUse"][0]["hooks"][0]
    path = handler["url"].split(str(serve.port), 1)[1]
    headers = {k: v.replace("$OTELGUARD_TOKEN", "tok") for k, v in handler["headers"].items()}
    prompt = {**PRE, "hook_event_name": "UserPromptSubmit", "prompt": "p"}
    assert serve.request("POST", path, prompt, headers=headers)[0] == 200
    for index in range(3):  # the config caps web_search at 2 per turn
        call = {**PRE, "tool_input": {"query": f"q{index}"}, "tool_use_id": f"t{index}"}
        status, answer = serve.request("POST", path, call, headers=headers)
        assert status == 200
        if index < 2:
            assert answer == b""
            serve.request(
                "POST",
                path,
                {**call, "hook_event_name": "PostToolUse", "tool_response": "r"},
                headers=headers,
            )
    assert json.loads(answer)["hookSpecificOutput"]["permissionDecision"] == "deny"


def test_print_config_is_a_valid_unattended_config_with_a_fresh_key(tmp_path: Path) -> None:
    from otelguard import GuardConfig

    texts = [
        subprocess.run(
            [sys.executable, "-m", "otelguard", "hook", "claude-code", "--print-config"],
            capture_output=True, timeout=TIMEOUT, check=True,
        ).stdout.decode()
        for _ in range(2)
    ]  # fmt: skip
    path = tmp_path / "otelguard.yaml"
    path.write_text(texts[0])
    config = GuardConfig.from_file(path)
    assert config.mode == "unattended" and config.hard_stop_enabled
    assert config.signature_key and len(config.signature_key) == 32
    assert config.config_warnings == ()
    assert texts[0] != texts[1], "each print writes its own key"


def test_https_to_a_sidecar_with_a_certificate(tmp_path: Path) -> None:
    from tests.e2e import free_port, self_signed_certificate, stop_process

    cert, key = self_signed_certificate(tmp_path)
    config = tmp_path / "otelguard.yaml"
    config.write_text("signature_key: k\n")
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "otelguard", "serve", "--port", str(port), "--config", str(config),
         "--certfile", str(cert), "--keyfile", str(key)],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stderr is not None
        assert "listening on https://" in process.stderr.readline()
        url = f"https://localhost:{port}"
        trusted = hook(PRE, "--url", url, env={"SSL_CERT_FILE": str(cert)})
        assert (trusted.returncode, trusted.stdout, trusted.stderr) == (0, b"", b"")
        untrusted = hook(PRE, "--url", url, env={"SSL_CERT_FILE": str(tmp_path / "none.pem")})
        assert untrusted.returncode == 0
        assert untrusted.stderr.decode().startswith(
            f"otelguard hook: sidecar at {url} failed (SSLCertVerificationError)"
        )
    finally:
        stop_process(process)


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
    from otelguard.core.session_keys import key_bytes, session_digest

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
        assert handler["command"] == f"{hook_program()} hook claude-code --url http://10.0.0.5:9464"
        assert handler["timeout"] > 2  # Claude Code's own timeout above the hook's: the hook fails open
        assert ("matcher" in entry) == (
            event in ("PreToolUse", "PostToolUse", "PostToolUseFailure", "PermissionDenied")
        )
    assert (
        json.loads(settings_block(None))["hooks"]["Stop"][0]["hooks"][0]["command"]
        == f"{hook_program()} hook claude-code"
    )


def assert_failed_open(result: subprocess.CompletedProcess[bytes], *named: str) -> None:
    """Claude Code goes ahead with the call: exit 0, nothing on stdout but the once-per-session notice,
    one line on stderr naming it."""
    assert result.returncode == 0, result.stderr
    off_notice(result.stdout)
    lines = result.stderr.decode().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("otelguard hook: ") and lines[0].endswith("; the call goes ahead")
    for text in named:
        assert text in lines[0], (text, lines[0])


def run_hook(
    args: list[str], payload: object = PRE, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return subprocess.run(
        [sys.executable, "-m", "otelguard", "hook", *args],
        input=data, capture_output=True, timeout=TIMEOUT, env={**os.environ, **(env or {})},
    )  # fmt: skip


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["claude-code", "--timeout", "2s"], ["--timeout '2s'", "number of seconds"]),
        (["claude-code", "--timeout=0"], ["--timeout '0'", "above 0"]),
        (["claude_code"], ["'claude_code'", "expected claude-code"]),
        (["kodex"], ["'kodex'", "expected claude-code or codex"]),
        ([], ["no agent named"]),
        (["claude-code", "--bogus"], ["unknown option '--bogus'"]),
        (["claude-code", "--url"], ["--url needs a value"]),
        (["claude-code", "--http"], ["--http goes with --print-settings"]),
        (["codex", "--print-settings", "--http"], ["only Claude Code posts hook events itself"]),
        (["claude-code", "--url", "127.0.0.1:9464"], ["'127.0.0.1:9464' is not an http"]),
        (["claude-code", "--url", "http://127.0.0.1:94x4"], ["bad port '94x4'"]),
        (["claude-code", "--print-settings", "--http", "--url", "ftp://x"], ["'ftp://x' is not an http"]),
    ],
)
def test_a_mistake_in_the_hook_command_fails_open(args: list[str], named: list[str]) -> None:
    """A typo in settings.json must not block every tool call: Claude Code reads exit 2 as a deny."""
    assert_failed_open(run_hook(args), *named)


@pytest.mark.parametrize("command", ["hooks", "Hook", "hook-claude-code"])
def test_a_misspelt_hook_command_fails_open_too(command: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "otelguard", command, "claude-code"],
        input=json.dumps(PRE).encode(), capture_output=True, timeout=TIMEOUT,
    )  # fmt: skip
    assert_failed_open(result, repr(command), "otelguard hook claude-code")


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"OTELGUARD_URL": "localhost:9464"}, ["OTELGUARD_URL", "'localhost:9464' is not an http"]),
        ({"OTELGUARD_URL": "http://127.0.0.1:99999"}, ["bad port '99999'"]),
        ({"OTELGUARD_TOKEN": "tok\r\nX-Injected: 1"}, ["$OTELGUARD_TOKEN holds characters"]),
    ],
)
def test_a_bad_environment_fails_open(env: dict[str, str], named: list[str]) -> None:
    assert_failed_open(run_hook(["claude-code"], env=env), *named)


@pytest.mark.parametrize(
    ("payload", "named"),
    [(b"", ["no payload on stdin"]), (b"  \n", ["no payload on stdin"])],
)
def test_an_empty_stdin_fails_open_without_asking_the_sidecar(payload: bytes, named: list[str]) -> None:
    assert_failed_open(run_hook(["claude-code", "--url", "http://127.0.0.1:9"], payload=payload), *named)


def test_a_closed_stdin_fails_open() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "otelguard", "hook", "claude-code", "--url", "http://127.0.0.1:9"],
        stdin=subprocess.DEVNULL, capture_output=True, timeout=TIMEOUT,
    )  # fmt: skip
    assert_failed_open(result, "no payload on stdin")
    closed = subprocess.run(
        ["sh", "-c", f"exec {sys.executable} -m otelguard hook claude-code <&-"],
        capture_output=True, timeout=TIMEOUT,
    )  # fmt: skip
    assert_failed_open(closed, "stdin")


def test_garbage_on_stdin_fails_open_with_the_sidecars_reason(serve: Serve) -> None:
    url = f"http://127.0.0.1:{serve.port}"
    env = {"OTELGUARD_TOKEN": "tok"}
    assert_failed_open(run_hook(["claude-code", "--url", url], b"\xff not json", env), "HTTP 400", "JSON")
    missing = {k: v for k, v in PRE.items() if k != "tool_name"}
    assert_failed_open(run_hook(["claude-code", "--url", url], missing, env), "HTTP 400", "tool_name")


@pytest.mark.parametrize(
    ("answer", "named"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n<html>hi<", ["not a JSON object"]),
        (b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n{}", ["bad Content-Length"]),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 90\r\n\r\n{}", ["incomplete answer"]),
        (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", ["not an HTTP answer"]),
        (b"HTTP/1.1 503 Busy\r\nContent-Length: 4\r\n\r\nbusy", ["HTTP 503"]),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", ["bad chunked answer"]),
        (b"", ["incomplete answer"]),
    ],
)
def test_a_sidecar_answering_garbage_fails_open(answer: bytes, named: list[str]) -> None:
    """Whatever answers on the port, only a 200 holding a JSON object reaches Claude Code."""
    with answering_once(answer) as port:
        assert_failed_open(run_hook(["claude-code", "--url", f"http://127.0.0.1:{port}"]), *named)


def test_a_chunked_answer_is_read_whole() -> None:
    deny = b'{"hookSpecificOutput": {"hookEventName": "PreToolUse"}}'
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (deny[:10], deny[10:]))
    answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n"
    with answering_once(answer) as port:
        result = run_hook(["claude-code", "--url", f"http://127.0.0.1:{port}"])
    assert (result.returncode, result.stdout, result.stderr) == (0, deny, b"")


@contextmanager
def answering_once(answer: bytes) -> Iterator[int]:
    """A port on 127.0.0.1 where one connection gets ``answer`` (raw bytes) once its request head is in."""
    import socket

    listener = socket.create_server(("127.0.0.1", 0))

    def answer_once() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.settimeout(10)
            received = b""
            while b"\r\n\r\n" not in received:
                received += connection.recv(65536)
            connection.sendall(answer)

    server = threading.Thread(target=answer_once, daemon=True)
    server.start()
    try:
        yield listener.getsockname()[1]
    finally:
        server.join(10)
        listener.close()


def test_help_and_print_settings_still_work() -> None:
    for args in (["--help"], ["claude-code", "--help"]):
        shown = run_hook(args, payload=b"")
        assert shown.returncode == 0 and shown.stdout.startswith(b"usage: otelguard hook CLI")
        assert b"CLI: claude-code" in shown.stdout
        assert b"always 0" in shown.stdout
    printed = run_hook(["claude-code", "--print-settings"], payload=b"")
    assert printed.returncode == 0 and set(json.loads(printed.stdout)["hooks"]) == set(HOOK_EVENTS)


def test_the_settings_block_shown_in_the_docs_is_the_real_one() -> None:
    text = (Path(__file__).parent.parent / "docs" / "claude-code.md").read_text(encoding="utf-8")
    shown = text.split("prints the block to paste", 1)[1].split("```json", 1)[1].split("```", 1)[0]
    assert json.loads(shown) == json.loads(settings_block(None, program=DOCS_PROGRAM))


DOCS_PROGRAM = "/home/me/otelguard/.venv/bin/python -c 'from otelguard.cli import main; main()'"
"""The installation the docs' example block was printed from."""


def read_calls(url: str, results: list[object]) -> list[list[str]]:
    """A turn of identical ``Read`` calls through the hook process, one result each: the codes of
    the answers (``PreToolUse`` then ``PostToolUse``; ``deny`` for a refused call)."""
    env = {"OTELGUARD_TOKEN": "tok"}
    hook({**PRE, "hook_event_name": "UserPromptSubmit", "prompt": "p"}, "--url", url, env=env)
    answers: list[list[str]] = []
    for index, result in enumerate(results):
        call = {
            **PRE,
            "tool_name": "Read",
            "tool_input": {"file_path": "/srv/big.log"},
            "tool_use_id": f"r{index}",
        }
        before = hook(call, "--url", url, env=env)
        assert (before.returncode, before.stderr) == (0, b"")
        if before.stdout:
            answers.append([json.loads(before.stdout)["hookSpecificOutput"]["permissionDecision"]])
            break
        after = hook(
            {**call, "hook_event_name": "PostToolUse", "tool_response": result}, "--url", url, env=env
        )
        assert (after.returncode, after.stderr) == (0, b""), after.stderr
        context = json.loads(after.stdout)["hookSpecificOutput"]["additionalContext"] if after.stdout else ""
        answers.append(["allow", context])
    hook({**PRE, "hook_event_name": "Stop"}, "--url", url, env=env)
    return answers


def claude_code_read(content: str) -> dict[str, object]:
    """What Claude Code's ``Read`` answers in ``tool_response``."""
    lines = content.count("\n") + 1
    return {"type": "text", "file": {"filePath": "/srv/big.log", "content": content, "numLines": lines,
                                     "startLine": 1, "totalLines": lines}}  # fmt: skip


def test_a_result_over_1_mib_is_sent_reduced_and_repeats_are_seen(serve: Serve) -> None:
    """A 2 MiB result reaches the sidecar (its long text as a digest): the call is counted, and the same
    large result again trips the same detector as a small one does, at the same call."""
    url = f"http://127.0.0.1:{serve.port}"
    big = "".join(f"line {n}: build step ok\n" for n in range(90_000))
    assert len(big.encode()) > 2 << 20
    small = read_calls(url, [claude_code_read("short")] * 7)
    large = read_calls(url, [claude_code_read(big)] * 7)
    assert large == small
    assert large[1][1].startswith("Read returned the same result 2 times") and large[-1] == ["deny"]
    changing = read_calls(url, [claude_code_read(big + str(n)) for n in range(7)])
    assert changing == [["allow", ""]] * 7  # a different large result each time: progress
    metrics = serve.request("GET", "/metrics")[1].decode()
    ok_reads = [line for line in metrics.splitlines() if line.startswith("otelguard_tool_calls_total{")
                and 'tool="Read"' in line and 'outcome="ok"' in line]  # fmt: skip
    assert sum(float(line.rsplit(" ", 1)[1]) for line in ok_reads) == 5 + 5 + 7


def test_a_large_string_result_and_a_large_error_are_reduced_too() -> None:
    from otelguard.coding_agents.large_payloads import DIGEST_PREFIX, reduced

    seen: list[dict[str, object]] = []

    def record(request: Request) -> Response:
        seen.append(json.loads(request.body))
        return Response(200, b"")

    text = "x" * (3 << 20)
    with HttpServer(record) as server:
        for payload in (
            {**PRE, "hook_event_name": "PostToolUse", "tool_response": text},
            {**PRE, "hook_event_name": "PostToolUseFailure", "error": text, "is_interrupt": False},
        ):
            result = hook(payload, "--url", f"http://127.0.0.1:{server.port}")
            assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")
    assert str(seen[0]["tool_response"]).startswith(DIGEST_PREFIX)
    assert seen[1]["error"] == seen[0]["tool_response"] and seen[1]["is_interrupt"] is False
    many_small = json.dumps({**PRE, "tool_response": ["ab"] * 400_000}).encode()
    whole = json.loads(reduced(many_small, 1 << 20) or b"null")
    assert str(whole["tool_response"]).startswith(DIGEST_PREFIX)
    assert reduced(json.dumps({**PRE, "tool_response": ["ab"] * 400_000}).encode(), 1 << 20) == (
        reduced(many_small, 1 << 20)
    )
    assert reduced(b"[1, 2]", 10) is None and reduced(b"\xff", 10) is None


@given(st.binary(max_size=600))
def test_any_answer_is_read_or_named_never_raised(raw: bytes) -> None:
    from otelguard.coding_agents.hook import _body_of_200, _Failed

    try:
        body = _body_of_200(b"HTTP/1.1 200 OK\r\n" + raw)
    except _Failed:
        return
    assert not body.strip() or body.lstrip().startswith(b"{")


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=30,
)


@given(JSON, st.integers(min_value=0, max_value=400))
def test_a_reduced_payload_fits_or_is_not_sent(value: object, limit: int) -> None:
    from otelguard.coding_agents.large_payloads import reduced

    payload = json.dumps({**PRE, "tool_response": value}).encode()
    smaller = reduced(payload, limit)
    assert smaller is None or len(smaller) <= limit
    assert reduced(payload, limit) == smaller  # the same payload always reduces the same way


# Every step of the hook is inside --timeout: it returns, failing open, long before a hang. The bound
# below is the process timeout (subprocess raises past it): far above --timeout, far below "forever".
HOOK_TIMEOUT = "1"
BOUND = 1 + 5.0


@contextmanager
def listening(behaviour: str) -> Iterator[int]:
    """A real TCP listener on 127.0.0.1 whose every connection gets ``behaviour``: ``silent`` (accepted,
    never a byte: a TLS handshake stalls on it too) or ``half`` (half an answer, then silence)."""
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            held.append(connection)
            if behaviour == "half":
                connection.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: 200\r\n\r\n{"hookSpecific')

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        listener.close()
        for connection in held:
            connection.close()


def bounded_hook(args: list[str], payload: object = PRE) -> subprocess.CompletedProcess[bytes]:
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return subprocess.run(
        [sys.executable, "-m", "otelguard", "hook", "claude-code", "--timeout", HOOK_TIMEOUT, *args],
        input=data, capture_output=True, timeout=BOUND,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("behaviour", "scheme"), [("silent", "http"), ("half", "http"), ("silent", "https"), ("half", "https")]
)
def test_a_sidecar_that_stalls_anywhere_lets_the_call_go_ahead_within_the_timeout(
    behaviour: str, scheme: str
) -> None:
    """Accepted and never answered, half an answer, a TLS handshake that never completes (the listener
    speaks no TLS: a ClientHello gets silence, or the half answer, which is no ServerHello)."""
    with listening(behaviour) as port:
        result = bounded_hook(["--url", f"{scheme}://127.0.0.1:{port}"])
    assert_failed_open(result)
    line = result.stderr.decode()
    assert "did not answer in time" in line or (scheme == "https" and behaviour == "half"), line


SLOW_RESOLVER = """
import _socket, sys, time
real = _socket.getaddrinfo

def resolver(host, *args):
    if host == b"slow.sidecar.test":
        time.sleep(60)  # a name server that never answers
    if host == b"fast.sidecar.test":
        host = b"127.0.0.1"
    return real(host, *args)

_socket.getaddrinfo = resolver
from otelguard.cli import main
sys.exit(main(sys.argv[1:]))
"""
"""The real hook with a resolver that hangs for one name (getaddrinfo takes no timeout) and answers
another with loopback: no name server, no network."""


def test_a_name_that_resolves_slowly_lets_the_call_go_ahead_within_the_timeout() -> None:
    result = subprocess.run(
        [sys.executable, "-c", SLOW_RESOLVER, "hook", "claude-code", "--timeout", HOOK_TIMEOUT,
         "--url", "http://slow.sidecar.test:9464"],
        input=json.dumps(PRE).encode(), capture_output=True, timeout=BOUND,
    )  # fmt: skip
    assert_failed_open(result, "did not answer in time")


def test_a_resolved_name_is_asked_as_before() -> None:
    deny = b'{"hookSpecificOutput": {"hookEventName": "PreToolUse"}}'
    with HttpServer(lambda request: Response(200, deny)) as server:
        result = subprocess.run(
            [sys.executable, "-c", SLOW_RESOLVER, "hook", "claude-code", "--timeout", HOOK_TIMEOUT,
             "--url", f"http://fast.sidecar.test:{server.port}"],
            input=json.dumps(PRE).encode(), capture_output=True, timeout=BOUND,
        )  # fmt: skip
    assert (result.returncode, result.stdout, result.stderr) == (0, deny, b"")


def hook_with_stdin_left_open(data: bytes, url: str) -> tuple[int, bytes, bytes]:
    """The hook with ``data`` written to its stdin and the pipe never closed."""
    process = subprocess.Popen(
        [sys.executable, "-m", "otelguard", "hook", "claude-code", "--timeout", HOOK_TIMEOUT, "--url", url],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    try:
        process.stdin.write(data)
        process.stdin.flush()
        code = process.wait(timeout=BOUND)
        return code, process.stdout.read(), process.stderr.read()
    finally:
        process.kill()
        process.wait()
        process.stdin.close()
        process.stdout.close()
        process.stderr.close()


def test_a_whole_payload_on_a_stdin_left_open_is_answered() -> None:
    deny = b'{"hookSpecificOutput": {"hookEventName": "PreToolUse"}}'
    with HttpServer(lambda request: Response(200, deny)) as server:
        answered = hook_with_stdin_left_open(json.dumps(PRE).encode(), f"http://127.0.0.1:{server.port}")
    assert answered == (0, deny, b"")


def test_half_a_payload_on_a_stdin_left_open_lets_the_call_go_ahead_within_the_timeout() -> None:
    half = json.dumps(PRE).encode()[:40]
    code, stdout, stderr = hook_with_stdin_left_open(half, "http://127.0.0.1:9")
    assert (code, stdout) == (0, b"")
    assert stderr.decode() == (
        "otelguard hook: stdin sent no whole payload and stayed open past --timeout; the call goes ahead\n"
    )
    # a brace that closes no object: parsed once, found not whole, waited on to the deadline
    code, stdout, stderr = hook_with_stdin_left_open(b'{"session_id": "}', "http://127.0.0.1:9")
    assert (code, stdout) == (0, b"") and b"stayed open past --timeout" in stderr


def test_the_printed_command_runs_as_printed_without_path(tmp_path: Path) -> None:
    """The settings name this installation's interpreter, quoted for the shell Claude Code runs them
    with: a PATH without the virtualenv (nor anything else) runs it all the same."""
    spaced = tmp_path / "my tools"
    spaced.mkdir()
    python = spaced / "python3"
    python.symlink_to(sys.executable)
    deny = b'{"hookSpecificOutput": {"hookEventName": "PreToolUse"}}'
    with HttpServer(lambda request: Response(200, deny)) as server:
        # printing loads the mapping, which needs the installed dependencies: a linked interpreter
        # outside its virtualenv is handed them (an installation's own interpreter has them)
        packages = os.pathsep.join([str(REPO), *(p for p in sys.path if p.endswith("site-packages"))])
        printed = subprocess.run(
            [str(python), "-m", "otelguard", "hook", "claude-code", "--print-settings",
             "--url", f"http://127.0.0.1:{server.port}"],
            capture_output=True, timeout=TIMEOUT, check=True, env={**os.environ, "PYTHONPATH": packages},
        )  # fmt: skip
        command = json.loads(printed.stdout)["hooks"]["PreToolUse"][0]["hooks"][0]["command"]
        assert command.startswith(f"'{python}' -c 'from otelguard.cli import main; main()' hook claude-code")
        env = {"PATH": "/nonexistent", "PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(tmp_path)}
        ran = subprocess.run(
            ["/bin/sh", "-c", command], input=json.dumps(PRE).encode(), capture_output=True,
            timeout=TIMEOUT, env=env,
        )  # fmt: skip
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, deny, b"")


def test_a_guard_that_is_off_says_so_once_per_session(own_cache: Path) -> None:
    """The sidecar down: the first call of a session tells the user (a systemMessage naming why, no
    payload content); its next calls do not; another session is told on its own."""
    from tests.e2e import free_port

    url = f"http://127.0.0.1:{free_port()}"
    secret = {**PRE, "session_id": "sess-raw-id-1", "tool_input": {"query": "private-words-xyz"}}
    first = hook(secret, "--url", url)
    message = off_notice(first.stdout)
    assert f"sidecar at {url} unreachable (ConnectionRefusedError)" in message
    assert "private-words-xyz" not in message and "sess-raw-id-1" not in message
    for event in ("PostToolUse", "PreToolUse", "Stop"):
        again = hook({**secret, "hook_event_name": event}, "--url", url)
        assert (again.returncode, again.stdout) == (0, b"")
        assert "unreachable" in again.stderr.decode()  # stderr still says it every time
    # an event whose output Claude Code ignores does not use up the notice
    other = {**secret, "session_id": "sess-raw-id-2"}
    assert hook({**other, "hook_event_name": "SessionEnd"}, "--url", url).stdout == b""
    assert "unreachable" in off_notice(hook(other, "--url", url).stdout)
    remembered = own_cache / "otelguard" / "hook-notified"
    text = remembered.read_text()
    assert len(text.split()) == 2 and "sess-raw-id" not in text
    assert remembered.stat().st_mode & 0o077 == 0 and remembered.parent.stat().st_mode & 0o077 == 0


def test_the_sessions_told_are_bounded(own_cache: Path) -> None:
    from otelguard.coding_agents.off_notice import MAX_REMEMBERED, notice, notice_path

    def told(session: str) -> bool:
        return bool(notice(json.dumps({**PRE, "session_id": session}).encode(), "down"))

    assert all(told(f"s{n}") for n in range(MAX_REMEMBERED + 10))
    assert len(Path(notice_path()).read_text().split()) == MAX_REMEMBERED
    assert not told(f"s{MAX_REMEMBERED + 9}")  # the newest are remembered
    assert told("s0")  # the oldest were forgotten: told again
    assert notice(b"[1]", "down") == "" and notice(b"\xff", "down") == ""


@given(st.one_of(st.binary(max_size=200), JSON.map(lambda value: json.dumps(value).encode())))
def test_the_notice_never_raises(payload: bytes) -> None:
    from otelguard.coding_agents.off_notice import notice

    told = notice(payload, "sidecar down")
    assert told == "" or list(json.loads(told)) == ["systemMessage"]


@pytest.mark.parametrize("cli", ["claude-code", "codex", "gemini-cli"])
def test_each_cli_posts_to_its_own_endpoint_under_the_url_path(cli: str) -> None:
    """``otelguard hook CLI`` posts the payload as it came to ``/v1/hooks/CLI`` under ``--url``'s
    path, and prints the answer as the sidecar gave it, on the standard library alone."""
    seen: list[tuple[str, bytes]] = []
    answer = b'{"decision": "deny", "reason": "r"}'

    def record(request: Request) -> Response:
        seen.append((request.path, request.body))
        return Response(200, answer)

    with HttpServer(record) as server:
        ran = subprocess.run(
            [sys.executable, "-m", "otelguard", "hook", cli, "--url", f"http://127.0.0.1:{server.port}/guard"],
            input=json.dumps(PRE).encode(), capture_output=True, timeout=TIMEOUT,
        )  # fmt: skip
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, answer, b"")
    assert seen == [(f"/guard/v1/hooks/{cli}", json.dumps(PRE).encode())]
