"""The ``state:`` section of the config: where session caps live (docs/shared-state.md).

``url: null`` keeps them in each process; a Redis URL shares them between processes. A URL's password
never appears in an error, a repr or the effective config: ``mask_url`` replaces it. The password can
also come apart from the URL (``OTELGUARD_STATE_PASSWORD``, ``state.password_file``), so that it is
not in a command line.
"""

from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass, field, fields, replace
from typing import Any, Final
from urllib.parse import parse_qsl, urlsplit

from otelguard.config.checks import as_mapping, check_keys, integer
from otelguard.config.environment import (
    OTELGUARD_SIGNATURE_KEY,
    OTELGUARD_STATE_PASSWORD,
    OTELGUARD_STATE_URL,
)
from otelguard.errors import ConfigError

__all__ = [
    "StateSettings",
    "check_state_ready",
    "effective_state",
    "mask_url",
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
MAX_TIMEOUT_MS: Final = 10_000
MAX_TTL_SECONDS: Final = 366 * 24 * 3600
MAX_PASSWORD_BYTES: Final = 4096
_KEY_PREFIX: Final = re.compile(r"[A-Za-z0-9_.:/-]{1,64}")
_REDIS_EXTRA: Final = 'pip install "otelguard[redis]"'
_QUERY_PASSWORD: Final = re.compile(r"(?i)(?<=[?&;])password=")
_ALLOWED: Final = (
    "expected null (memory) or a URL: redis://host:6379/0, rediss://host:6379/0, unix:///path, "
    "or redis+cluster://host:6379 (rediss+cluster://) for a Redis Cluster"
)
_RESERVED_IN_PASSWORD: Final = (
    "a '/', '?' or '#' before the '@' ends the URL's user info early: percent-encode them in the "
    f"password (%2F, %3F, %23), or give the password by {OTELGUARD_STATE_PASSWORD} or state.password_file"
)


def mask_url(url: str) -> str:
    """``url`` with its password (or a lone user info, which some clients read as one) and any
    ``password=`` query value replaced by ``***``. Read by the URL's structure, not a URL parser:
    the user info ends at the last ``@`` (a password may hold ``/``, ``?``, ``#`` or ``@``), so any
    text at all is masked and nothing raises."""
    scheme, separator, rest = url.partition("://")
    if not separator:
        scheme, rest = "", url
    match = _QUERY_PASSWORD.search(rest)
    if match is not None:
        # the value runs to the next allowed query key: a '&', '#' or '@' inside it stays masked
        tail = rest[match.end() :]
        ends = [tail.find(f"&{key}=") for key in STATE_URL_QUERY_KEYS]
        end = min((at for at in ends if at >= 0), default=len(tail))
        rest = f"{rest[: match.end()]}***{tail[end:]}"
    if "@" in rest:
        userinfo, _, host = rest.rpartition("@")
        user, colon, _password = userinfo.partition(":")
        rest = f"{user}:***@{host}" if colon else f"***@{host}"
    return f"{scheme}://{rest}" if separator else rest


def _state_url(path: str, value: Any) -> str | None:
    if value is None:
        return None
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
        if key not in STATE_URL_QUERY_KEYS and key != "password":
            raise ConfigError(
                path, shown, f"query key {key!r} is not allowed; allowed: {', '.join(STATE_URL_QUERY_KEYS)}"
            )
        if key == "db" and not (query_value.isascii() and query_value.isdigit()):
            raise ConfigError(path, shown, "query key 'db' is the database number")
        if key == "db" and parts.scheme in CLUSTER_SCHEMES and int(query_value) != 0:
            raise ConfigError(path, shown, "a Redis Cluster has only database 0")
        if key == "ssl_cert_reqs" and query_value.lower() not in _CERT_REQS:
            raise ConfigError(path, shown, f"query key 'ssl_cert_reqs' is one of {', '.join(_CERT_REQS)}")
        if key.startswith("ssl_") and not parts.scheme.startswith("rediss"):
            raise ConfigError(path, shown, f"query key {key!r} needs TLS: rediss:// or rediss+cluster://")
    return value


def _password_file(value: Any) -> str | None:
    if value is None:
        return None
    allowed = "expected null or the path of a readable file holding the Redis password (its first line)"
    if not isinstance(value, str) or not value:
        raise ConfigError(
            "state.password_file", "<not a string>" if not isinstance(value, str) else value, allowed
        )
    try:
        read_password_file(value)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError("state.password_file", value, f"{allowed} ({type(exc).__name__})") from None
    return value


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


@dataclass(frozen=True, kw_only=True)
class StateSettings:
    """The ``state:`` section: where session caps live. ``url=None`` keeps them in each process."""

    url: str | None = field(default=None, repr=False)
    key_prefix: str = "otelguard"
    timeout_ms: int = 50
    ttl_seconds: int = 3600
    password_file: str | None = None

    def __post_init__(self) -> None:
        _state_url("state.url", self.url)
        _password_file(self.password_file)
        if not isinstance(self.key_prefix, str) or not _KEY_PREFIX.fullmatch(self.key_prefix):
            raise ConfigError(
                "state.key_prefix",
                self.key_prefix,
                "expected 1 to 64 characters from A-Z a-z 0-9 _ . : / - (no braces: they mark the hash tag)",
            )
        if integer("state.timeout_ms", self.timeout_ms, 1) > MAX_TIMEOUT_MS:
            raise ConfigError(
                "state.timeout_ms", self.timeout_ms, f"expected an integer from 1 to {MAX_TIMEOUT_MS}"
            )
        if integer("state.ttl_seconds", self.ttl_seconds, 1) > MAX_TTL_SECONDS:
            raise ConfigError(
                "state.ttl_seconds", self.ttl_seconds, f"expected an integer from 1 to {MAX_TTL_SECONDS}"
            )

    def __repr__(self) -> str:
        url = mask_url(self.url) if self.url is not None else None
        return (
            f"StateSettings(url={url!r}, key_prefix={self.key_prefix!r}, "
            f"timeout_ms={self.timeout_ms!r}, ttl_seconds={self.ttl_seconds!r}, "
            f"password_file={self.password_file!r})"
        )

    @classmethod
    def parse(cls, value: Any, path: str = "state") -> StateSettings:
        if isinstance(value, StateSettings):
            return value
        if value is None:
            return cls()
        section = as_mapping(path, value)
        check_keys(path, section, [f.name for f in fields(cls)])
        return cls(**section)

    def to_mapping(self) -> dict[str, Any]:
        """Plain data with the password masked."""
        mapping = {each.name: getattr(self, each.name) for each in fields(self)}
        return {**mapping, "url": mask_url(self.url) if self.url is not None else None}


def check_state_ready(path: str, url: str, signature_key: str | None) -> None:
    """A shared store needs the same session key in every process, and the redis client."""
    if not (signature_key or os.environ.get(OTELGUARD_SIGNATURE_KEY)):
        raise ConfigError(
            path,
            mask_url(url),
            f"shared state needs a signature_key (config) or {OTELGUARD_SIGNATURE_KEY}, the same in "
            "every process, so that all of them derive one key per session",
        )
    if importlib.util.find_spec("redis") is None:
        raise ConfigError(path, mask_url(url), f"the redis package is not installed; {_REDIS_EXTRA}")


def effective_state(state: StateSettings, signature_key: str | None) -> StateSettings:
    """The ``state`` section this process uses: ``OTELGUARD_STATE_URL`` (``otelguard serve --state``
    sets it) over the config's ``url``; a URL is checked as the config's is (``ConfigError``)."""
    from_env = os.environ.get(OTELGUARD_STATE_URL)
    if not from_env or from_env == state.url:
        return state
    _state_url(OTELGUARD_STATE_URL, from_env)
    check_state_ready(OTELGUARD_STATE_URL, from_env, signature_key)
    return replace(state, url=from_env)


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
