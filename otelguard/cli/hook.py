"""`otelguard hook claude-code`: the command Claude Code runs for each hook event.

It reads one payload on stdin, posts it to the sidecar (``otelguard serve``) and prints the answer.
It always exits 0: Claude Code reads hook output only on exit 0, and a guard that is down must not
stop the user's work (fail open: no output, one line on stderr). This module runs on every tool
call, so it imports only the standard library, and only what it needs.

With ``OTELGUARD_SIGNATURE_KEY`` set, the request carries ``X-Otelguard-Session``: the session id's
keyed digest, for a load balancer in front of several sidecars to keep a session on one of them
(docs/shared-state.md). Without a key there is no header: a raw session id never leaves.
"""

from __future__ import annotations

import os
import re
import socket
import sys
import time
from typing import Final

from otelguard.claude_code_events import HOOK_EVENTS, TOOL_EVENTS
from otelguard.environment_variables import OTELGUARD_SIGNATURE_KEY, OTELGUARD_TOKEN, OTELGUARD_URL
from otelguard.session_keys import SESSION_HEADER, key_bytes, session_digest

__all__ = ["DEFAULT_URL", "HOOK_EVENTS", "main", "settings_block"]

DEFAULT_URL: Final = "http://127.0.0.1:9464"
DEFAULT_TIMEOUT_SECONDS: Final = 2.0
HOOK_PATH: Final = "/v1/hooks/claude-code"
MAX_PAYLOAD_BYTES: Final = 1 << 20
MAX_ANSWER_BYTES: Final = 1 << 20
USAGE: Final = (
    "usage: otelguard hook claude-code [--url URL] [--timeout SECONDS] [--print-settings]\n"
    "  reads one Claude Code hook payload on stdin, asks the sidecar, prints its answer; always exits 0\n"
    f"  --url URL          the sidecar (default: ${OTELGUARD_URL} or {DEFAULT_URL})\n"
    f"  --timeout SECONDS  give up and let the call go ahead after this long (default: {DEFAULT_TIMEOUT_SECONDS:g})\n"
    "  --print-settings   print the hooks block for .claude/settings.json\n"
)


class _Failed(Exception):
    """Why the sidecar gave no usable answer (one line, no payload content)."""


def main(argv: list[str]) -> int:
    try:
        options = _parse(argv)
    except _Failed as exc:
        sys.stderr.write(f"otelguard hook: {exc}\n{USAGE}")
        return 2
    if options is None:
        sys.stdout.write(USAGE)
        return 0
    url, timeout, print_settings, explicit_url = options
    if print_settings:
        sys.stdout.write(settings_block(url if explicit_url else None, timeout) + "\n")
        return 0
    deadline = time.monotonic() + timeout
    try:
        payload = sys.stdin.buffer.read(MAX_PAYLOAD_BYTES + 1)
        if len(payload) > MAX_PAYLOAD_BYTES:
            raise _Failed(f"payload over {MAX_PAYLOAD_BYTES} bytes; not sent")
        answer = post(url, payload, deadline, _session_affinity(payload))
    except _Failed as exc:
        sys.stderr.write(f"otelguard hook: {exc}; the call goes ahead\n")
        return 0
    except Exception as exc:  # fail open whatever happened
        sys.stderr.write(f"otelguard hook: {type(exc).__name__}; the call goes ahead\n")
        return 0
    if answer:
        sys.stdout.buffer.write(answer)
        sys.stdout.flush()
    return 0


def _parse(argv: list[str]) -> tuple[str, float, bool, bool] | None:
    """(url, timeout, print_settings, url_given); ``None`` for ``--help``. By hand: argparse costs
    more startup time than this whole command."""
    if not argv or argv[0] in ("-h", "--help"):
        return None
    if argv[0] != "claude-code":
        raise _Failed(f"unknown agent {argv[0]!r}; expected claude-code")
    url, url_given, timeout, print_settings = (
        os.environ.get(OTELGUARD_URL) or DEFAULT_URL,
        False,
        DEFAULT_TIMEOUT_SECONDS,
        False,
    )
    rest = list(argv[1:])
    while rest:
        arg = rest.pop(0)
        name, eq, inline = arg.partition("=")
        if name in ("-h", "--help"):
            return None
        if name == "--print-settings":
            print_settings = True
            continue
        if name not in ("--url", "--timeout"):
            raise _Failed(f"unknown option {name}")
        if not eq:
            if not rest:
                raise _Failed(f"{name} needs a value")
            inline = rest.pop(0)
        if name == "--url":
            url, url_given = inline, True
            continue
        try:
            timeout = float(inline)
        except ValueError:
            raise _Failed("--timeout must be a number of seconds") from None
        if not 0 < timeout <= 600:
            raise _Failed("--timeout must be above 0 and at most 600 seconds")
    return url, timeout, print_settings, url_given


# Claude Code writes session_id first: read it there without the json module (a few ms of
# startup on every tool call); anything else is parsed in full.
_LEADING_SESSION_ID: Final = re.compile(rb'\A\s*\{\s*"session_id"\s*:\s*"([^"\\]{1,1024})"')


def _session_affinity(payload: bytes) -> str | None:
    """The ``X-Otelguard-Session`` value for this payload, or ``None`` (no key, or no session id)."""
    secret = os.environ.get(OTELGUARD_SIGNATURE_KEY)
    if not secret:
        return None
    leading = _LEADING_SESSION_ID.match(payload)
    if leading is not None:
        session_id: object = leading.group(1).decode("utf-8", "surrogateescape")
    else:
        import json

        try:
            session_id = json.loads(payload).get("session_id")
        except (ValueError, AttributeError):  # not a JSON object: the sidecar answers 400 for it
            return None
    if not isinstance(session_id, str) or not session_id:
        return None
    return session_digest(session_id, key_bytes(secret))


def post(url: str, payload: bytes, deadline: float, session: str | None = None) -> bytes:
    """POST the payload to the sidecar's hook endpoint; the answer body of a 200, else ``_Failed``.
    ``session``: the ``X-Otelguard-Session`` header's value (a keyed digest), if any."""
    scheme, _, rest = url.partition("://")
    if scheme not in ("http", "https") or not rest:
        raise _Failed("--url must be an http:// or https:// URL")
    hostport, _, base = rest.partition("/")
    host, port = _host_port(hostport, 443 if scheme == "https" else 80)
    path = "/" + base.rstrip("/") + HOOK_PATH if base.strip("/") else HOOK_PATH
    headers = [
        f"POST {path} HTTP/1.1",
        f"Host: {hostport}",
        "Content-Type: application/json",
        f"Content-Length: {len(payload)}",
        "Connection: close",
    ]
    token = os.environ.get(OTELGUARD_TOKEN)
    if token:
        headers.append(f"Authorization: Bearer {token}")
    if session is not None:
        headers.append(f"{SESSION_HEADER}: {session}")
    request = ("\r\n".join(headers) + "\r\n\r\n").encode("latin-1") + payload
    try:
        sock = socket.create_connection((host, port), timeout=_remaining(deadline))
    except TimeoutError:
        raise _Failed(f"sidecar at {scheme}://{hostport} did not answer in time") from None
    except OSError as exc:
        raise _Failed(f"sidecar at {scheme}://{hostport} unreachable ({type(exc).__name__})") from None
    try:
        if scheme == "https":
            import ssl  # only HTTPS pays for it

            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
        sock.sendall(request)
        raw = _read_all(sock, deadline)
    except TimeoutError:
        raise _Failed(f"sidecar at {scheme}://{hostport} did not answer in time") from None
    except OSError as exc:
        raise _Failed(f"sidecar at {scheme}://{hostport} failed ({type(exc).__name__})") from None
    finally:
        sock.close()
    return _body_of_200(raw)


def _host_port(hostport: str, default: int) -> tuple[str, int]:
    if hostport.startswith("["):
        host, _, port_text = hostport[1:].partition("]")
        port_text = port_text.lstrip(":")
    else:
        host, _, port_text = hostport.partition(":")
    if not port_text:
        return host, default
    if not port_text.isdigit():
        raise _Failed("--url has a bad port")
    return host, int(port_text)


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    return left


def _read_all(sock: socket.socket, deadline: float) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        sock.settimeout(_remaining(deadline))
        chunk = sock.recv(65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_ANSWER_BYTES:
            raise _Failed(f"answer over {MAX_ANSWER_BYTES} bytes")


def _body_of_200(raw: bytes) -> bytes:
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        raise _Failed("sidecar sent an incomplete answer")
    lines = head.split(b"\r\n")
    status = lines[0].split(b" ", 2)
    if len(status) < 2 or status[1] != b"200":
        code = status[1].decode("ascii", "replace") if len(status) > 1 else "?"
        raise _Failed(f"sidecar answered HTTP {code}")
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
            if len(body) < length:
                raise _Failed("sidecar sent an incomplete answer")
            return body[:length]
    return body


def settings_block(url: str | None, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> str:
    """The ``hooks`` block for ``.claude/settings.json``: every event the guard needs, one command."""
    command = "otelguard hook claude-code"
    if url is not None:
        command += f" --url {url}"
    if timeout != DEFAULT_TIMEOUT_SECONDS:
        command += f" --timeout {timeout:g}"
    import json  # only --print-settings pays for it

    # Claude Code's own per-hook timeout (seconds) sits above ours, so ours decides: fail open.
    handler = {"type": "command", "command": command, "timeout": int(timeout) + 3}
    hooks: dict[str, list[dict[str, object]]] = {}
    for event in HOOK_EVENTS:
        entry: dict[str, object] = {"matcher": "*"} if event in TOOL_EVENTS else {}
        entry["hooks"] = [handler]
        hooks[event] = [entry]
    return json.dumps({"hooks": hooks}, indent=2)
