"""The notice that the guard is off, shown to the user once per session.

When the hook command fails open (the sidecar down, slow, refusing the token or the payload), the line
on stderr is seen by nobody: Claude Code shows a hook's stderr only in its debug output. So the first
failure of a session also prints ``{"systemMessage": ...}``, which Claude Code and Gemini CLI show the
user (``codex exec`` shows it nowhere, and takes it without harm: the call goes ahead); the later
failures of that session print nothing, not to repeat it on every tool call.

Which sessions were told is remembered in one small file in the user's cache directory
(``$XDG_CACHE_HOME/otelguard/hook-notified``, else ``~/.cache/otelguard/``): at most
``MAX_REMEMBERED`` lines, each a digest of a session id, never the id itself, the oldest forgotten
first. The directory is used only when it is the user's own and nobody else can write into it
(otherwise nothing is remembered, and the notice is shown on every failing call); the file is read without following a link or waiting on a FIFO,
and replaced through a temporary file of a random name created exclusively, never left behind.
Imported only on a failure: it loads ``json`` and ``hashlib``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
from typing import Final

__all__ = ["MAX_REMEMBERED", "NOTICE_FILE", "notice", "notice_path"]

MAX_REMEMBERED: Final = 256
"""Sessions remembered as told; a session pushed out of the file would be told once more."""
NOTICE_FILE: Final = "hook-notified"
SILENT_EVENTS: Final = frozenset({"SessionEnd", "StopFailure"})
"""Events whose output Claude Code ignores: a notice there would be lost, so it waits for the next."""
COPILOT_SHOWN_EVENT: Final = "postToolUse"
"""Copilot CLI shows no ``systemMessage``: the one hook output its user sees is ``postToolUse``'s
``additionalContext``, printed under the call (the model reads it too)."""
_DIGEST_PERSON: Final = b"otelguard-off"


def notice(payload: bytes, reason: str) -> str:
    """The hook output telling the user the guard is off for this session, and why; ``""`` when this
    session was told already, or the payload names no session, or its event shows no output.
    ``reason``: the failure's one line (names the sidecar and the error, never payload content)."""
    try:
        body = json.loads(payload)
    except ValueError:
        return ""
    if not isinstance(body, dict):
        return ""
    session_id, event = body.get("session_id"), body.get("hook_event_name")
    copilot = "sessionId" in body and session_id is None  # camelCase, the event as the hook wrote it in
    if copilot:
        session_id, event = body.get("sessionId"), body.get("hookName")
    if not isinstance(session_id, str) or not session_id or event in SILENT_EVENTS:
        return ""
    if copilot and event != COPILOT_SHOWN_EVENT:
        return ""
    if not _first_time(hashlib.blake2b(session_id.encode("utf-8", "surrogatepass"),
                                       digest_size=16, person=_DIGEST_PERSON).hexdigest()):  # fmt: skip
        return ""
    message = (
        f"otelguard is not guarding this session: {reason}. Tool calls go ahead unchecked until the "
        "sidecar (otelguard serve) answers again; this is shown once per session."
    )
    if copilot:
        return json.dumps({"additionalContext": message}) + "\n"
    return json.dumps({"systemMessage": message}) + "\n"


def notice_path() -> str:
    """The file of sessions told: in ``$XDG_CACHE_HOME/otelguard``, else ``~/.cache/otelguard``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "otelguard", NOTICE_FILE)


def _first_time(digest: str) -> bool:
    """Whether ``digest`` is new, remembering it. ``True`` without reading or writing anything when
    the directory is not the user's own (see ``_private_directory``), and when the file cannot be
    read or written: better told on every call than never."""
    directory = _private_directory(os.path.dirname(notice_path()))
    if directory is None:
        return True
    try:
        known = _read_known(directory)
        if digest in known:
            return False
        _write_known(directory, [*known[-(MAX_REMEMBERED - 1) :], digest])
    except OSError:
        pass
    finally:
        os.close(directory)
    return True


def _private_directory(path: str) -> int | None:
    """A descriptor of ``path`` (made if missing, mode 0700) when it is a directory of this user's
    that nobody else can write into, else ``None``: in a directory others can write into, a name
    planted beside the file (a FIFO, a link) could make the hook hang or write through the link onto
    a file of the user's. ``path`` is not followed when it is a link itself; every later step works
    from this descriptor, never from the path again."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        directory = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        status = os.fstat(directory)
    except OSError:
        status = None
    if status is None or status.st_uid != os.geteuid() or status.st_mode & 0o022:
        os.close(directory)
        return None
    return directory


def _read_known(directory: int) -> list[str]:
    """The digests remembered, or none when the file is missing, unreadable or not a regular file
    (never waits: a FIFO in its place is opened without blocking, then left unread)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        descriptor = os.open(NOTICE_FILE, flags, dir_fd=directory)
    except OSError:
        return []
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            return []
        return os.read(descriptor, MAX_REMEMBERED * 40).decode("ascii").split()
    except (OSError, ValueError):
        return []
    finally:
        os.close(descriptor)


def _write_known(directory: int, kept: list[str]) -> None:
    """Replace the file whole (parallel hooks never read half of it) through a temporary file of a
    fresh random name, created exclusively (a name planted in advance is never opened, nor followed)
    and removed whatever happens."""
    temporary = f".{NOTICE_FILE}.{os.urandom(8).hex()}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    descriptor = os.open(temporary, flags, 0o600, dir_fd=directory)
    try:
        with open(descriptor, "w", encoding="ascii") as file:
            file.write("\n".join(kept) + "\n")
        os.replace(temporary, NOTICE_FILE, src_dir_fd=directory, dst_dir_fd=directory)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=directory)
        raise
