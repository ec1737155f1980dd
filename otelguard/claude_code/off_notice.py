"""The notice that the guard is off, shown in Claude Code once per session.

When the hook command fails open (the sidecar down, slow, refusing the token or the payload), the line
on stderr is seen by nobody: Claude Code shows a hook's stderr only in its debug output. So the first
failure of a session also prints ``{"systemMessage": ...}``, which Claude Code shows the user; the
later failures of that session print nothing, not to repeat it on every tool call.

Which sessions were told is remembered in one small file in the user's cache directory
(``$XDG_CACHE_HOME/otelguard/hook-notified``, else ``~/.cache/otelguard/``, the directory private to
the user): at most ``MAX_REMEMBERED`` lines, each a digest of a session id, never the id itself, the
oldest forgotten first. Imported only on a failure: it loads ``json`` and ``hashlib``.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Final

__all__ = ["MAX_REMEMBERED", "NOTICE_FILE", "notice", "notice_path"]

MAX_REMEMBERED: Final = 256
"""Sessions remembered as told; a session pushed out of the file would be told once more."""
NOTICE_FILE: Final = "hook-notified"
SILENT_EVENTS: Final = frozenset({"SessionEnd", "StopFailure"})
"""Events whose output Claude Code ignores: a notice there would be lost, so it waits for the next."""
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
    if not isinstance(session_id, str) or not session_id or event in SILENT_EVENTS:
        return ""
    if not _first_time(hashlib.blake2b(session_id.encode("utf-8", "surrogatepass"),
                                       digest_size=16, person=_DIGEST_PERSON).hexdigest()):  # fmt: skip
        return ""
    message = (
        f"otelguard is not guarding this session: {reason}. Tool calls go ahead unchecked until the "
        "sidecar (otelguard serve) answers again; this is shown once per session."
    )
    return json.dumps({"systemMessage": message}) + "\n"


def notice_path() -> str:
    """The file of sessions told: in ``$XDG_CACHE_HOME/otelguard``, else ``~/.cache/otelguard``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "otelguard", NOTICE_FILE)


def _first_time(digest: str) -> bool:
    """Whether ``digest`` is new, remembering it. A file that cannot be read or written: ``True``
    (better told on every call than never)."""
    path = notice_path()
    try:
        with open(path, encoding="ascii") as file:
            known = file.read(MAX_REMEMBERED * 40).split()
    except (OSError, ValueError):
        known = []
    if digest in known:
        return False
    kept = [*known[-(MAX_REMEMBERED - 1) :], digest]
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        temporary = f"{path}.{os.getpid()}"
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with open(descriptor, "w", encoding="ascii") as file:
            file.write("\n".join(kept) + "\n")
        os.replace(temporary, path)  # whole or not at all: parallel hooks never read half a file
    except OSError:
        pass
    return True
