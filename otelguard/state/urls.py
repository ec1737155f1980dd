"""The shared state's URL grammar, its password apart from the URL, and the redis client's presence:
the edge's checks of a ``state:`` section the core has only seen to be present (docs/shared-state.md).

The core's ``StateSettings`` holds a URL as a non-empty string and knows which one this process uses
(``OTELGUARD_STATE_URL`` over ``state.url``); whether that string is a Redis URL otelguard can use,
whether ``state.password_file`` can be read and whether redis-py is installed is decided here, by
``checked_state``, before a host opens a store: ``otelguard.hosting`` (a guard, a session host),
``otelguard serve`` and ``otelguard check-config``. Every error is a ``ConfigError`` naming the key
(``state.url``, ``OTELGUARD_STATE_URL``, ``state.password_file``), the value with its password masked,
and what is allowed. Imports no redis: a process with no URL never reads this module.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any, Final
from urllib.parse import parse_qsl, urlsplit

from otelguard.config import GuardConfig, StateSettings
from otelguard.config.environment import OTELGUARD_STATE_PASSWORD, OTELGUARD_STATE_URL
from otelguard.config.state import mask_url
from otelguard.errors import ConfigError

__all__ = [
    "CLUSTER_SCHEMES",
    "STATE_SCHEMES",
    "STATE_URL_QUERY_KEYS",
    "check_password_file",
    "check_redis_installed",
    "check_state_url",
    "checked_state",
    "read_password_file",
    "state_password",
]

STATE_SCHEMES: Final = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster")
CLUSTER_SCHEMES: Final = ("redis+cluster", "rediss+cluster")
"""A Redis Cluster: the client follows the cluster's slot map (``MOVED``) from the node the URL names."""
STATE_URL_QUERY_KEYS: Final = ("db", "ssl_ca_certs", "ssl_cert_reqs", "ssl_certfile", "ssl_keyfile")
"""What a state URL's query may set; anything else (a client timeout or retry) would override the
bounds otelguard sets."""
_CERT_REQS: Final = ("none", "optional", "required")
MAX_PASSWORD_BYTES: Final = 4096
_REDIS_EXTRA: Final = 'pip install "otelguard[redis]"'
_ALLOWED: Final = (
    "expected null (memory) or a URL: redis://host:6379/0, rediss://host:6379/0, unix:///path, "
    "or redis+cluster://host:6379 (rediss+cluster://) for a Redis Cluster"
)
_RESERVED_IN_PASSWORD: Final = (
    "a '/', '?' or '#' before the '@' ends the URL's user info early: percent-encode them in the "
    f"password (%2F, %3F, %23), or give the password by {OTELGUARD_STATE_PASSWORD} or state.password_file"
)
_PASSWORD_FILE: Final = (
    "expected null or the path of a readable file holding the Redis password (its first line)"
)


def checked_state(config: GuardConfig) -> StateSettings:
    """The ``state`` this process uses for ``config`` (``OTELGUARD_STATE_URL`` over ``state.url``),
    checked: a URL of the grammar above, a readable password file, redis-py installed when a URL is
    set. ``ConfigError`` naming the key the bad value came from."""
    state = config.effective_state()
    if state.password_file is not None:
        check_password_file(state.password_file)
    if state.url is not None:
        path = "state.url" if state.url == config.state.url else OTELGUARD_STATE_URL
        check_state_url(path, state.url)
        check_redis_installed(path, state.url)
    return state


def check_state_url(path: str, value: Any) -> str:
    """``value`` when it is a state URL otelguard can use; else a ``ConfigError`` at ``path`` saying
    what is allowed, the URL's password masked."""
    if not isinstance(value, str) or not value:
        raise ConfigError(path, "<not a string>" if not isinstance(value, str) else value, _ALLOWED)
    shown = mask_url(value)
    not_a_url = f"{_ALLOWED} (not a URL: an IPv6 host in [brackets], a port from 0 to 65535)"
    try:
        parts = urlsplit(value)
    except ValueError:  # an unclosed '[' of an IPv6 host
        raise ConfigError(path, shown, not_a_url) from None
    if parts.netloc.rpartition("@")[0] != value.partition("://")[2].rpartition("@")[0]:
        raise ConfigError(path, shown, _RESERVED_IN_PASSWORD)
    try:
        parts.port  # noqa: B018 -- parsing the port is the check
        hostname = parts.hostname
        pairs = parse_qsl(parts.query, keep_blank_values=True)
    except ValueError:
        raise ConfigError(path, shown, not_a_url) from None
    if parts.scheme not in STATE_SCHEMES or not value.startswith(f"{parts.scheme}://"):
        raise ConfigError(path, shown, _ALLOWED)
    if parts.fragment or "#" in value:
        raise ConfigError(path, shown, f"{_ALLOWED} (a '#' has no meaning here: percent-encode it, %23)")
    database = parts.path.strip("/")
    if parts.scheme == "unix":
        if not parts.path or parts.path == "/":
            raise ConfigError(path, shown, f"{_ALLOWED} (a unix:// URL names the socket's path)")
    elif not hostname:
        raise ConfigError(path, shown, f"{_ALLOWED} (no host)")
    elif database and not (database.isascii() and database.isdigit()):
        raise ConfigError(path, shown, f"{_ALLOWED} (the path is the database number)")
    elif parts.scheme in CLUSTER_SCHEMES and database not in ("", "0"):
        raise ConfigError(path, shown, f"{_ALLOWED} (a Redis Cluster has only database 0)")
    for key, query_value in pairs:
        _check_query(path, shown, parts.scheme, key, query_value)
    return value


def _check_query(path: str, shown: str, scheme: str, key: str, value: str) -> None:
    if key not in STATE_URL_QUERY_KEYS and key != "password":
        raise ConfigError(
            path, shown, f"query key {key!r} is not allowed; allowed: {', '.join(STATE_URL_QUERY_KEYS)}"
        )
    if key == "db" and not (value.isascii() and value.isdigit()):
        raise ConfigError(path, shown, "query key 'db' is the database number")
    if key == "db" and scheme in CLUSTER_SCHEMES and int(value) != 0:
        raise ConfigError(path, shown, "a Redis Cluster has only database 0")
    if key == "ssl_cert_reqs" and value.lower() not in _CERT_REQS:
        raise ConfigError(path, shown, f"query key 'ssl_cert_reqs' is one of {', '.join(_CERT_REQS)}")
    if key.startswith("ssl_") and not scheme.startswith("rediss"):
        raise ConfigError(path, shown, f"query key {key!r} needs TLS: rediss:// or rediss+cluster://")


def check_password_file(value: Any) -> str:
    """``value`` when it names a file whose first line is a password; else a ``ConfigError``."""
    if not isinstance(value, str) or not value:
        shown = "<not a string>" if not isinstance(value, str) else value
        raise ConfigError("state.password_file", shown, _PASSWORD_FILE)
    try:
        read_password_file(value)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError("state.password_file", value, f"{_PASSWORD_FILE} ({type(exc).__name__})") from None
    return value


def check_redis_installed(path: str, url: str) -> None:
    """A shared store needs the redis client: a ``ConfigError`` naming the extra when it is missing."""
    if importlib.util.find_spec("redis") is None:
        raise ConfigError(path, mask_url(url), f"the redis package is not installed; {_REDIS_EXTRA}")


def read_password_file(path: str) -> str:
    """The password in ``path``: its first line, without the line end (a file written with
    ``echo`` ends with one)."""
    with open(path, "rb") as file:
        data = file.read(MAX_PASSWORD_BYTES + 1)
    if len(data) > MAX_PASSWORD_BYTES:
        raise ValueError("longer than the largest password taken")
    line = data.decode("utf-8").splitlines()
    if not line or not line[0]:
        raise ValueError("empty")
    return line[0]


def state_password(state: StateSettings) -> str | None:
    """The password given apart from the URL, read now: ``OTELGUARD_STATE_PASSWORD``, else the first
    line of ``state.password_file``; ``None`` when neither (the URL's own password, if any, is used).
    A file that cannot be read any more is ``None`` too: the server will refuse, which is an outage."""
    from_env = os.environ.get(OTELGUARD_STATE_PASSWORD)
    if from_env:
        return from_env
    if state.password_file is None:
        return None
    try:
        return read_password_file(state.password_file)
    except (OSError, UnicodeDecodeError, ValueError):
        return None
