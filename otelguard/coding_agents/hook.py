"""`otelguard hook CLI`: the command a coding-agent CLI runs for each hook event (``CLIS``).

It reads one payload on stdin, posts it to the sidecar's endpoint for that CLI (``otelguard serve``,
``/v1/hooks/CLI``) and prints the answer. It always exits 0, whatever goes wrong (a mistyped
argument, a bad environment variable, no or garbled stdin, a sidecar that is down, slow or answers
garbage): Claude Code and Codex read exit 2 from a ``PreToolUse`` hook as "block this call", so one
typo in a settings file must not stop every tool. Fail open: nothing on stdout, one line on stderr
naming the problem, and once per session a notice the user sees (``off_notice``). A payload over 1
MiB (a large result) is sent with its largest values reduced to digests
(``otelguard.coding_agents.large_payloads``), never dropped. This module runs on every tool
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
import _thread
import os
import select
import sys
import time

from otelguard.config.environment import OTELGUARD_SIGNATURE_KEY, OTELGUARD_TOKEN, OTELGUARD_URL

TYPE_CHECKING = False  # not typing's: importing typing would cost a third of this command's startup
if TYPE_CHECKING:
    from typing import Final, TypeAlias

    _Address: TypeAlias = tuple[
        int, int, int, str, "tuple[str, int] | tuple[str, int, int, int] | tuple[int, bytes]"
    ]
    """(family, type, proto, canonname, sockaddr), as ``getaddrinfo`` gives them."""

__all__ = ["CLIS", "DEFAULT_TIMEOUT_SECONDS", "DEFAULT_URL", "endpoint", "main", "mistyped", "post"]

CLIS: Final = {
    "claude-code": "claude_code",
    "codex": "codex",
    "gemini-cli": "gemini_cli",
    "copilot-cli": "copilot_cli",
    "opencode": "opencode",
}
"""Each CLI otelguard guards through its hooks, as the command names it → its module in
``otelguard.coding_agents`` (the mapping the sidecar answers with, and the settings it prints)."""
DEFAULT_TIMEOUT_SECONDS: Final = 2.0
"""How long the hook waits for the sidecar before the call goes ahead (``--timeout``)."""
DEFAULT_URL: Final = "http://127.0.0.1:9464"
MAX_PAYLOAD_BYTES: Final = 1 << 20
"""What the sidecar takes in one request: a larger payload is reduced before it is sent."""
MAX_STDIN_BYTES: Final = 64 << 20
"""What the hook reads at most; a payload beyond it is not sent (the call goes ahead)."""
MAX_ANSWER_BYTES: Final = 1 << 20
USAGE: Final = (
    "usage: otelguard hook CLI [--url URL] [--timeout SECONDS] [--event EVENT] [--print-settings [--http]]\n"
    "                          [--print-plugin] [--print-config]\n"
    f"  CLI: {', '.join(CLIS)}\n"
    "  reads one hook payload of that CLI on stdin, asks the sidecar, prints its answer\n"
    "  exit status: always 0, even on errors (exit 2 would read as 'block this call'); a problem\n"
    "  (arguments, environment, stdin, the sidecar) is one line on stderr and the call goes ahead\n"
    f"  --url URL          the sidecar (default: ${OTELGUARD_URL} or {DEFAULT_URL})\n"
    f"  --timeout SECONDS  give up and let the call go ahead after this long (default: {DEFAULT_TIMEOUT_SECONDS:g})\n"
    "  --print-settings   print the hooks block to paste where the CLI reads it (a command per event):\n"
    "                     claude-code: .claude/settings.json; codex: $CODEX_HOME/hooks.json;\n"
    '                     gemini-cli: the "hooks" of ~/.gemini/settings.json;\n'
    "                     copilot-cli: .github/hooks/otelguard.json\n"
    "  --event EVENT      copilot-cli: the event of the payload (its payloads name none)\n"
    "  --print-plugin     opencode: print the plugin to save as .opencode/plugin/otelguard.js\n"
    "  --http             with --print-settings: Claude Code posts each event to the sidecar itself\n"
    "  --print-config     print a starter config for unattended use: otelguard serve --config it\n"
)


class _Failed(Exception):
    """Why the sidecar gave no usable answer (one line, no payload content)."""


class _Options:
    """What the command line asked for (a plain class: dataclasses would cost startup time)."""

    __slots__ = (
        "cli", "event", "print_config", "print_plugin", "print_settings", "timeout", "url", "url_given",
        "use_http",
    )  # fmt: skip

    def __init__(self, cli: str) -> None:
        self.cli = cli
        self.url = os.environ.get(OTELGUARD_URL) or DEFAULT_URL
        self.url_given = False
        self.timeout = DEFAULT_TIMEOUT_SECONDS
        self.print_settings = False
        self.use_http = False
        self.print_config = False
        self.print_plugin = False
        self.event: str | None = None


class _Read:
    """The payload once it is read: a failure after that can name the session it turned the guard off for."""

    payload: bytes | None = None


def main(argv: list[str]) -> int:
    """Always 0: every problem is one line on stderr, and the call goes ahead."""
    _Read.payload = None
    try:
        return _run(argv)
    except _Failed as exc:
        _problem(str(exc))
        _say_the_guard_is_off(str(exc))
    except KeyboardInterrupt:
        _problem("interrupted")
    except Exception as exc:  # fail open whatever happened
        _problem(type(exc).__name__)
        _say_the_guard_is_off(type(exc).__name__)
    return 0


def _say_the_guard_is_off(reason: str) -> None:
    """Once per session, tell the user (a ``systemMessage``: Claude Code and Gemini CLI show it, ``codex
    exec`` does not) that this session's calls go ahead unguarded, and why: the stderr line alone is
    seen by nobody. Never raises."""
    payload = _Read.payload
    if payload is None:
        return
    try:
        from otelguard.coding_agents.off_notice import notice  # only a failure pays for json and hashlib

        message = notice(payload, reason)
        if message:
            sys.stdout.write(message)
            sys.stdout.flush()
    except Exception:  # the call goes ahead all the same
        pass


def mistyped(command: str) -> int:
    """``otelguard hooks ...`` and the like: a command in ``settings.json`` that meant this one fails
    open too (argparse would exit 2, which blocks every tool call)."""
    _problem(f"unknown command {_shown(command)}; expected: otelguard hook {' | '.join(CLIS)}")
    return 0


def _problem(reason: str) -> None:
    try:
        sys.stderr.write(f"otelguard hook: {reason}; the call goes ahead\n")
        sys.stderr.flush()
    except Exception:  # no stderr either: nothing more can be said
        pass


def _run(argv: list[str]) -> int:
    options = _parse(argv)
    if options is None:
        sys.stdout.write(USAGE)
        return 0
    if options.print_settings or options.print_config or options.print_plugin:
        sys.stdout.write(_printed(options))
        return 0
    deadline = time.monotonic() + options.timeout
    payload = _read_payload(deadline)
    if options.event is not None:
        payload = _with_event(payload, options.event)
    _Read.payload = payload
    answer = post(options.url, payload, deadline, _session_affinity(payload), options.cli)
    if answer:
        try:
            sys.stdout.buffer.write(answer)
            sys.stdout.flush()
        except OSError as exc:
            raise _Failed(f"could not write the answer to stdout ({type(exc).__name__})") from None
    return 0


def _printed(options: _Options) -> str:
    """What ``--print-settings`` or ``--print-config`` prints: what runs once is kept out of what runs
    every call, in the CLI's own module."""
    import importlib

    if options.print_config:
        from otelguard.coding_agents.settings import starter_config

        return starter_config()
    module = importlib.import_module(f"otelguard.coding_agents.{CLIS[options.cli]}")
    if options.print_plugin:
        plugin: str = module.plugin_source(options.url if options.url_given else None, options.timeout)
        return plugin
    if options.use_http:
        scheme, hostport, path = endpoint(options.url, options.cli)
        block: str = module.http_settings_block(f"{scheme}://{hostport}{path}", options.timeout)
    else:
        url = options.url if options.url_given else None
        timeout = options.timeout if options.timeout != DEFAULT_TIMEOUT_SECONDS else None
        block = module.settings_block(url, timeout)
    note = getattr(module, "trust_note", None)
    if note is not None:  # what else it takes, beside the block: on stderr, the block stays pasteable
        sys.stderr.write(note())
    return block + "\n"


def _read_payload(deadline: float) -> bytes:
    """The payload from stdin, reduced to what the sidecar takes when it is larger."""
    stdin = sys.stdin
    if stdin is None:
        raise _Failed("no stdin to read the payload from")
    try:
        payload = _read_stdin(stdin.fileno(), deadline)
    except TimeoutError:
        raise _Failed("stdin sent no whole payload and stayed open past --timeout") from None
    except (OSError, ValueError, AttributeError) as exc:
        raise _Failed(f"could not read the payload from stdin ({type(exc).__name__})") from None
    if not payload.strip():
        raise _Failed("no payload on stdin (the CLI sends one JSON object)")
    if len(payload) > MAX_STDIN_BYTES:
        raise _Failed(f"payload over {MAX_STDIN_BYTES >> 20} MiB; not sent")
    if len(payload) > MAX_PAYLOAD_BYTES:
        from otelguard.coding_agents.large_payloads import reduced  # only a large payload pays for json

        smaller = reduced(payload, MAX_PAYLOAD_BYTES)
        if smaller is None:
            raise _Failed(f"payload over {MAX_PAYLOAD_BYTES >> 20} MiB that cannot be reduced; not sent")
        payload = smaller
    return payload


STALL_SECONDS: Final = 0.05
"""How long stdin may stay quiet after what looks like a whole JSON object before it is parsed to see."""


def _read_stdin(fd: int, deadline: float) -> bytes:
    """Stdin until it closes, or until a whole JSON document has come in and nothing more follows (a
    writer that leaves the pipe open), within the deadline: ``TimeoutError`` past it. Claude Code
    closes stdin, so the usual path never loads ``json``."""
    chunks: list[bytes] = []
    size = 0
    parsed = False  # what came so far was parsed, and is not whole: wait for more
    while size <= MAX_STDIN_BYTES:
        wait = _remaining(deadline)
        if not parsed and chunks and chunks[-1].rstrip()[-1:] in (b"}", b"]"):
            if not select.select([fd], [], [], min(wait, STALL_SECONDS))[0]:
                if _whole_json(b"".join(chunks)):
                    break
                parsed = True
                continue
        elif not select.select([fd], [], [], wait)[0]:
            raise TimeoutError
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        parsed = False
    return b"".join(chunks)


def _whole_json(data: bytes) -> bool:
    import json  # only for a writer that left stdin open

    try:
        json.loads(data)
    except ValueError:
        return False
    return True


_FLAGS: Final = {
    "--print-settings": "print_settings",
    "--http": "use_http",
    "--print-config": "print_config",
    "--print-plugin": "print_plugin",
}


def _parse(argv: list[str]) -> _Options | None:
    """The options; ``None`` for ``--help``. By hand: argparse costs more startup time than this
    whole command, and exits 2 on a mistake, which Claude Code reads as "block this call"."""
    if argv and argv[0] in ("-h", "--help"):
        return None
    if not argv:
        raise _Failed(f"no agent named; expected: otelguard hook {' | '.join(CLIS)} (see --help)")
    if argv[0] not in CLIS:
        raise _Failed(f"unknown agent {_shown(argv[0])}; expected {' or '.join(CLIS)} (see --help)")
    options = _Options(argv[0])
    rest = list(argv[1:])
    while rest:
        arg = rest.pop(0)
        name, eq, inline = arg.partition("=")
        if name in ("-h", "--help"):
            return None
        if name in _FLAGS and not eq:
            setattr(options, _FLAGS[name], True)
            continue
        if name not in ("--url", "--timeout", "--event"):
            raise _Failed(f"unknown option {_shown(name)} (see --help)")
        if not eq:
            if not rest:
                raise _Failed(f"{name} needs a value")
            inline = rest.pop(0)
        if name == "--url":
            options.url, options.url_given = inline, True
            continue
        if name == "--event":
            if not (inline.isascii() and inline.isalnum() and len(inline) <= 64):
                raise _Failed(f"--event {_shown(inline)}: expected an event name, e.g. preToolUse")
            options.event = inline
            continue
        try:
            options.timeout = float(inline)
        except ValueError:
            raise _Failed(f"--timeout {_shown(inline)}: expected a number of seconds, e.g. 2") from None
        if not 0 < options.timeout <= 600:
            raise _Failed(f"--timeout {_shown(inline)}: expected above 0 and at most 600 seconds")
    if options.use_http and not options.print_settings:
        raise _Failed("--http goes with --print-settings")
    if options.use_http and options.cli != "claude-code":
        raise _Failed(f"--http: only Claude Code posts hook events itself; {options.cli} runs the command")
    if options.print_config and options.print_settings:
        raise _Failed("--print-config and --print-settings print different files: one at a time")
    if options.event is not None and options.cli != "copilot-cli":
        raise _Failed(f"--event: only Copilot CLI's payloads name no event; {options.cli}'s do")
    if options.print_plugin and (options.cli != "opencode" or options.print_settings or options.print_config):
        raise _Failed("--print-plugin: only for opencode (a plugin, no command hooks), and alone")
    if options.cli == "opencode" and options.print_settings:
        raise _Failed("opencode runs no hook command: --print-plugin prints its plugin")
    return options


def _with_event(payload: bytes, event: str) -> bytes:
    """The payload with the event written in as its first field (``hookName``, as Copilot CLI names
    it where it names it at all): by hand, since ``json`` would cost startup on every tool call. A
    field of the same name already there comes later and wins. Anything but an object is left to the
    sidecar to refuse."""
    body = payload.lstrip()
    if not body.startswith(b"{"):
        return payload
    rest = body[1:].lstrip()
    field = b'{"hookName":"' + event.encode("ascii") + b'"'
    return field + (rest if rest.startswith(b"}") else b"," + rest)


def _shown(text: str) -> str:
    """A command-line word as the message shows it: quoted, printable, bounded."""
    shown = repr(text[:60])
    return shown if len(text) <= 60 else shown[:-1] + "..." + shown[-1]


_SESSION_ID_FIELD: Final = b'"session_id"'
MAX_SESSION_ID_BYTES: Final = 1024


def _leading_session_id(payload: bytes) -> bytes | None:
    """The session id when it is the payload's first field, as Claude Code and Codex write it: read by hand,
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
            body = json.loads(payload)
            session_id = body.get("session_id", body.get("sessionId"))  # Copilot CLI's is camelCase
        except (ValueError, AttributeError):  # not a JSON object: the sidecar answers 400 for it
            return None
    if not isinstance(session_id, str) or not session_id:
        return None
    from otelguard.core.session_keys import key_bytes, session_digest  # only with a key: hashlib

    return session_digest(session_id, key_bytes(secret))


def post(
    url: str, payload: bytes, deadline: float, session: str | None = None, cli: str = "claude-code"
) -> bytes:
    """POST the payload to the sidecar's hook endpoint for ``cli``; the answer body of a 200, else
    ``_Failed``. ``session``: the ``X-Otelguard-Session`` header's value (a keyed digest), if any."""
    scheme, hostport, path = endpoint(url, cli)
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
        if not token.isprintable() or not token.isascii():
            raise _Failed(f"${OTELGUARD_TOKEN} holds characters a header cannot carry")
        headers.append(f"Authorization: Bearer {token}")
    if session is not None:
        from otelguard.core.session_keys import SESSION_HEADER

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
            sock = _tls(sock, host, deadline)
        _send_all(sock, request, deadline)
        raw = _read_all(sock, deadline)
    except TimeoutError:
        raise _Failed(f"sidecar at {scheme}://{hostport} did not answer in time") from None
    except OSError as exc:
        raise _Failed(f"sidecar at {scheme}://{hostport} failed ({type(exc).__name__})") from None
    finally:
        sock.close()
    return _body_of_200(raw)


def endpoint(url: str, cli: str = "claude-code") -> tuple[str, str, str]:
    """(scheme, host[:port], path of ``cli``'s hook endpoint under the URL's own path)."""
    scheme, _, rest = url.partition("://")
    if scheme not in ("http", "https") or not rest:
        raise _Failed(f"--url or ${OTELGUARD_URL}: {_shown(url)} is not an http:// or https:// URL")
    if not rest.isprintable():
        raise _Failed(f"--url or ${OTELGUARD_URL}: {_shown(url)} holds control characters")
    hostport, _, base = rest.partition("/")
    hook_path = f"/v1/hooks/{cli}"
    path = "/" + base.rstrip("/") + hook_path if base.strip("/") else hook_path
    return scheme, hostport, path


def _addresses(host: str, port: int, deadline: float) -> list[_Address]:
    """The addresses to try for ``host``, within the deadline. An IP literal or ``localhost`` needs no
    resolver; any other name is resolved on a thread of its own, waited for only until the deadline
    (``getaddrinfo`` itself takes no timeout, and a slow name server would hang the hook)."""
    for family in (_socket.AF_INET, _socket.AF_INET6):
        try:
            _socket.inet_pton(family, host)
        except (OSError, ValueError):
            continue
        address = (host, port) if family == _socket.AF_INET else (host, port, 0, 0)
        return [(family, _socket.SOCK_STREAM, 0, "", address)]
    if host.lower() == "localhost":
        return [
            (_socket.AF_INET, _socket.SOCK_STREAM, 0, "", ("127.0.0.1", port)),
            (_socket.AF_INET6, _socket.SOCK_STREAM, 0, "", ("::1", port, 0, 0)),
        ]
    # the resolver encodes a str host with the idna codec, a module import; ASCII needs no codec
    name = host.encode("ascii") if host.isascii() else host.encode("idna")
    outcome: list[list[_Address] | BaseException] = []
    done = _thread.allocate_lock()
    done.acquire()

    def resolve() -> None:
        try:
            outcome.append(_socket.getaddrinfo(name, port, 0, _socket.SOCK_STREAM))
        except BaseException as exc:  # handed to the waiting thread
            outcome.append(exc)
        finally:
            done.release()

    _thread.start_new_thread(resolve, ())
    # a thread still resolving when the hook is done does not keep the process: it is not joined
    if not done.acquire(True, _remaining(deadline)):
        raise TimeoutError
    result = outcome[0]
    if isinstance(result, BaseException):
        raise result
    return result


def _connect(host: str, port: int, deadline: float) -> _socket.socket:
    """A connected TCP socket, trying each address of ``host`` in turn (what ``socket.create_connection``
    does, on the C module)."""
    failure: OSError = OSError("no address")
    for family, kind, proto, _, address in _addresses(host, port, deadline):
        sock = _socket.socket(family, kind, proto)
        try:
            sock.settimeout(_remaining(deadline))
            sock.connect(address)
            return sock
        except OSError as exc:
            sock.close()
            failure = exc
    raise failure


def _tls(raw: _socket.socket, host: str, deadline: float) -> _socket.socket:
    """The connection wrapped in TLS, the handshake inside the deadline (only HTTPS pays for ``ssl``
    and ``socket``). A socket rebuilt from a descriptor blocks: its timeout is set again here."""
    import socket
    import ssl

    plain = socket.socket(raw.family, raw.type, raw.proto, fileno=raw.detach())
    wrapped: socket.socket = plain
    try:
        plain.settimeout(_remaining(deadline))
        wrapped = ssl.create_default_context().wrap_socket(
            plain, server_hostname=host, do_handshake_on_connect=False
        )
        wrapped.settimeout(_remaining(deadline))
        wrapped.do_handshake()  # one deadline for the whole handshake, however the peer drips it
    except BaseException:
        wrapped.close()  # the caller closes the descriptor it no longer holds: close it here
        raise
    return wrapped


def _send_all(sock: _socket.socket, data: bytes, deadline: float) -> None:
    """``sendall`` with the deadline checked before each send (a peer that reads slowly cannot stretch it)."""
    view = memoryview(data)
    while view:
        sock.settimeout(_remaining(deadline))
        sent = sock.send(view)
        view = view[sent:]


def _host_port(hostport: str, default: int) -> tuple[str, int]:
    if hostport.startswith("["):
        host, _, port_text = hostport[1:].partition("]")
        port_text = port_text.lstrip(":")
    else:
        host, _, port_text = hostport.partition(":")
    if not port_text:
        return host, default
    if not port_text.isascii() or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise _Failed(f"--url or ${OTELGUARD_URL}: bad port {_shown(port_text)}")
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
    """The body of a 200 answer holding a JSON object (or nothing); else ``_Failed``: whatever else
    came back must not reach the CLI, which might read it as a decision."""
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        raise _Failed("sidecar sent an incomplete answer")
    lines = head.split(b"\r\n")
    status = lines[0].split(b" ", 2)
    if len(status) < 2 or not status[0].startswith(b"HTTP/"):
        raise _Failed("sidecar sent something that is not an HTTP answer")
    if status[1] != b"200":
        code = _printable(status[1], 3)
        reason = _printable(body.split(b"\n", 1)[0], 120) if status[1][:1] == b"4" else ""
        raise _Failed(f"sidecar answered HTTP {code}" + (f" ({reason})" if reason else ""))
    chunked = False
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"transfer-encoding" and value.strip().lower() == b"chunked":
            chunked = True
        elif name == b"content-length":
            text = value.strip()
            if not text.isdigit():
                raise _Failed("sidecar sent a bad Content-Length")
            if len(body) < int(text):
                raise _Failed("sidecar sent an incomplete answer")
            body = body[: int(text)]
    if chunked:
        body = _unchunked(body)
    if body.strip() and not (body.lstrip().startswith(b"{") and body.rstrip().endswith(b"}")):
        raise _Failed("sidecar answered something that is not a JSON object")
    return body


def _unchunked(body: bytes) -> bytes:
    parts: list[bytes] = []
    while True:
        size_line, sep, body = body.partition(b"\r\n")
        size_text = size_line.split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise _Failed("sidecar sent a bad chunked answer") from None
        if not sep or size < 0 or len(body) < size:
            raise _Failed("sidecar sent an incomplete answer")
        if size == 0:
            return b"".join(parts)
        parts.append(body[:size])
        body = body[size + 2 :]


def _printable(raw: bytes, limit: int) -> str:
    text = raw[:limit].decode("ascii", "replace")
    return "".join(c if c.isprintable() and c != "\ufffd" else "?" for c in text).strip()
