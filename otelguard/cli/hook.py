"""`otelguard hook claude-code`: the command Claude Code runs for each hook event.

It reads one payload on stdin, posts it to the sidecar (``otelguard serve``) and prints the answer.
It always exits 0: Claude Code reads hook output only on exit 0, and a guard that is down must not
stop the user's work (fail open: no output, one line on stderr). This module runs on every tool
call, so it imports only the standard library, and only what it needs: the C ``_socket`` module
rather than ``socket`` (which brings ``selectors``, ``enum`` and ``array``), no ``typing``, and a host
name given to the resolver as bytes (a ``str`` loads the ``idna`` codec). ``--print-settings`` and
``--print-config`` import more, as they run once.

With ``OTELGUARD_SIGNATURE_KEY`` set, the request carries ``X-Otelguard-Session``: the session id's
keyed digest, for a load balancer in front of several sidecars to keep a session on one of them
(docs/shared-state.md). Without a key there is no header: a raw session id never leaves.
"""

from __future__ import annotations

import _socket
import os
import sys
import time

from otelguard.claude_code_events import DEFAULT_TIMEOUT_SECONDS, HOOK_EVENTS
from otelguard.environment_variables import OTELGUARD_SIGNATURE_KEY, OTELGUARD_TOKEN, OTELGUARD_URL

TYPE_CHECKING = False  # not typing's: importing typing would cost a third of this command's startup
if TYPE_CHECKING:
    from typing import Final

__all__ = ["DEFAULT_TIMEOUT_SECONDS", "DEFAULT_URL", "HOOK_EVENTS", "endpoint", "main", "post"]

DEFAULT_URL: Final = "http://127.0.0.1:9464"
HOOK_PATH: Final = "/v1/hooks/claude-code"
MAX_PAYLOAD_BYTES: Final = 1 << 20
MAX_ANSWER_BYTES: Final = 1 << 20
USAGE: Final = (
    "usage: otelguard hook claude-code [--url URL] [--timeout SECONDS] [--print-settings [--http]] [--print-config]\n"
    "  reads one Claude Code hook payload on stdin, asks the sidecar, prints its answer; always exits 0\n"
    f"  --url URL          the sidecar (default: ${OTELGUARD_URL} or {DEFAULT_URL})\n"
    f"  --timeout SECONDS  give up and let the call go ahead after this long (default: {DEFAULT_TIMEOUT_SECONDS:g})\n"
    "  --print-settings   print the hooks block for .claude/settings.json (a command per event)\n"
    "  --http             with --print-settings: Claude Code posts each event to the sidecar itself\n"
    "  --print-config     print a starter config for unattended use: otelguard serve --config it\n"
)


class _Failed(Exception):
    """Why the sidecar gave no usable answer (one line, no payload content)."""


class _Options:
    """What the command line asked for (a plain class: dataclasses would cost startup time)."""

    __slots__ = ("print_config", "print_settings", "timeout", "url", "url_given", "use_http")

    def __init__(self) -> None:
        self.url = os.environ.get(OTELGUARD_URL) or DEFAULT_URL
        self.url_given = False
        self.timeout = DEFAULT_TIMEOUT_SECONDS
        self.print_settings = False
        self.use_http = False
        self.print_config = False


def main(argv: list[str]) -> int:
    try:
        options = _parse(argv)
    except _Failed as exc:
        sys.stderr.write(f"otelguard hook: {exc}\n{USAGE}")
        return 2
    if options is None:
        sys.stdout.write(USAGE)
        return 0
    if options.print_settings or options.print_config:
        from otelguard.cli import hook_settings  # what runs once is kept out of what runs every call

        if options.print_config:
            sys.stdout.write(hook_settings.starter_config())
        elif options.use_http:
            try:
                scheme, hostport, path = endpoint(options.url)
            except _Failed as exc:
                sys.stderr.write(f"otelguard hook: {exc}\n")
                return 2
            block = hook_settings.http_settings_block(f"{scheme}://{hostport}{path}", options.timeout)
            sys.stdout.write(block + "\n")
        else:
            url = options.url if options.url_given else None
            timeout = options.timeout if options.timeout != DEFAULT_TIMEOUT_SECONDS else None
            sys.stdout.write(hook_settings.settings_block(url, timeout) + "\n")
        return 0
    deadline = time.monotonic() + options.timeout
    try:
        payload = sys.stdin.buffer.read(MAX_PAYLOAD_BYTES + 1)
        if len(payload) > MAX_PAYLOAD_BYTES:
            raise _Failed(f"payload over {MAX_PAYLOAD_BYTES} bytes; not sent")
        answer = post(options.url, payload, deadline, _session_affinity(payload))
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


_FLAGS: Final = {"--print-settings": "print_settings", "--http": "use_http", "--print-config": "print_config"}


def _parse(argv: list[str]) -> _Options | None:
    """The options; ``None`` for ``--help``. By hand: argparse costs more startup time than this
    whole command."""
    if not argv or argv[0] in ("-h", "--help"):
        return None
    if argv[0] != "claude-code":
        raise _Failed(f"unknown agent {argv[0]!r}; expected claude-code")
    options = _Options()
    rest = list(argv[1:])
    while rest:
        arg = rest.pop(0)
        name, eq, inline = arg.partition("=")
        if name in ("-h", "--help"):
            return None
        if name in _FLAGS and not eq:
            setattr(options, _FLAGS[name], True)
            continue
        if name not in ("--url", "--timeout"):
            raise _Failed(f"unknown option {name}")
        if not eq:
            if not rest:
                raise _Failed(f"{name} needs a value")
            inline = rest.pop(0)
        if name == "--url":
            options.url, options.url_given = inline, True
            continue
        try:
            options.timeout = float(inline)
        except ValueError:
            raise _Failed("--timeout must be a number of seconds") from None
        if not 0 < options.timeout <= 600:
            raise _Failed("--timeout must be above 0 and at most 600 seconds")
    if options.use_http and not options.print_settings:
        raise _Failed("--http goes with --print-settings")
    if options.print_config and options.print_settings:
        raise _Failed("--print-config and --print-settings print different files: one at a time")
    return options


_SESSION_ID_FIELD: Final = b'"session_id"'
MAX_SESSION_ID_BYTES: Final = 1024


def _leading_session_id(payload: bytes) -> bytes | None:
    """The session id when it is the payload's first field, as Claude Code writes it: read by hand,
    since ``re`` and ``json`` would cost milliseconds of startup on every tool call."""
    rest = payload.lstrip()
    if not rest.startswith(b"{"):
        return None
    rest = rest[1:].lstrip()
    if not rest.startswith(_SESSION_ID_FIELD):
        return None
    rest = rest[len(_SESSION_ID_FIELD) :].lstrip()
    if not rest.startswith(b":"):
        return None
    rest = rest[1:].lstrip()
    if not rest.startswith(b'"'):
        return None
    end = rest.find(b'"', 1)
    value = rest[1:end]
    if end < 2 or len(value) > MAX_SESSION_ID_BYTES or b"\\" in value:
        return None  # empty, too long or escaped: the full parse below decides
    return value


def _session_affinity(payload: bytes) -> str | None:
    """The ``X-Otelguard-Session`` value for this payload, or ``None`` (no key, or no session id)."""
    secret = os.environ.get(OTELGUARD_SIGNATURE_KEY)
    if not secret:
        return None
    leading = _leading_session_id(payload)
    if leading is not None:
        session_id: object = leading.decode("utf-8", "surrogateescape")
    else:
        import json

        try:
            session_id = json.loads(payload).get("session_id")
        except (ValueError, AttributeError):  # not a JSON object: the sidecar answers 400 for it
            return None
    if not isinstance(session_id, str) or not session_id:
        return None
    from otelguard.session_keys import key_bytes, session_digest  # only with a key: hashlib

    return session_digest(session_id, key_bytes(secret))


def post(url: str, payload: bytes, deadline: float, session: str | None = None) -> bytes:
    """POST the payload to the sidecar's hook endpoint; the answer body of a 200, else ``_Failed``.
    ``session``: the ``X-Otelguard-Session`` header's value (a keyed digest), if any."""
    scheme, hostport, path = endpoint(url)
    host, port = _host_port(hostport, 443 if scheme == "https" else 80)
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
        from otelguard.session_keys import SESSION_HEADER

        headers.append(f"{SESSION_HEADER}: {session}")
    request = ("\r\n".join(headers) + "\r\n\r\n").encode("latin-1") + payload
    try:
        sock = _connect(host, port, deadline)
    except TimeoutError:
        raise _Failed(f"sidecar at {scheme}://{hostport} did not answer in time") from None
    except OSError as exc:
        raise _Failed(f"sidecar at {scheme}://{hostport} unreachable ({type(exc).__name__})") from None
    try:
        if scheme == "https":
            sock = _tls(sock, host)
        sock.settimeout(_remaining(deadline))
        sock.sendall(request)
        raw = _read_all(sock, deadline)
    except TimeoutError:
        raise _Failed(f"sidecar at {scheme}://{hostport} did not answer in time") from None
    except OSError as exc:
        raise _Failed(f"sidecar at {scheme}://{hostport} failed ({type(exc).__name__})") from None
    finally:
        sock.close()
    return _body_of_200(raw)


def endpoint(url: str) -> tuple[str, str, str]:
    """(scheme, host[:port], path of the hook endpoint under the URL's own path)."""
    scheme, _, rest = url.partition("://")
    if scheme not in ("http", "https") or not rest:
        raise _Failed("--url must be an http:// or https:// URL")
    hostport, _, base = rest.partition("/")
    path = "/" + base.rstrip("/") + HOOK_PATH if base.strip("/") else HOOK_PATH
    return scheme, hostport, path


def _connect(host: str, port: int, deadline: float) -> _socket.socket:
    """A connected TCP socket, trying each address of ``host`` in turn (what ``socket.create_connection``
    does, on the C module)."""
    # the resolver encodes a str host with the idna codec, a module import; ASCII needs no codec
    name = host.encode("ascii") if host.isascii() else host.encode("idna")
    failure: OSError = OSError("no address")
    for family, kind, proto, _, address in _socket.getaddrinfo(name, port, 0, _socket.SOCK_STREAM):
        sock = _socket.socket(family, kind, proto)
        try:
            sock.settimeout(_remaining(deadline))
            sock.connect(address)
            return sock
        except OSError as exc:
            sock.close()
            failure = exc
    raise failure


def _tls(raw: _socket.socket, host: str) -> _socket.socket:
    """The connection wrapped in TLS (only HTTPS pays for ``ssl`` and ``socket``)."""
    import socket
    import ssl

    plain = socket.socket(raw.family, raw.type, raw.proto, fileno=raw.detach())
    return ssl.create_default_context().wrap_socket(plain, server_hostname=host)


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


def _read_all(sock: _socket.socket, deadline: float) -> bytes:
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
