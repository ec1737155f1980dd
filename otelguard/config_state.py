"""The ``state:`` section of the config: where session caps live (docs/shared-state.md).

``url: null`` keeps them in each process; a Redis URL shares them between processes. A URL's password
never appears in an error, a repr or the effective config: ``mask_url`` replaces it.
"""

from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass, field, fields, replace
from typing import Any, Final
from urllib.parse import parse_qsl, urlsplit

from otelguard.config_checks import as_mapping, check_keys, integer
from otelguard.environment_variables import OTELGUARD_SIGNATURE_KEY, OTELGUARD_STATE_URL
from otelguard.errors import ConfigError

__all__ = ["StateSettings", "check_state_ready", "effective_state", "mask_url"]

STATE_SCHEMES: Final = ("redis", "rediss", "unix")
STATE_URL_QUERY_KEYS: Final = ("db", "ssl_ca_certs", "ssl_cert_reqs", "ssl_certfile", "ssl_keyfile")
"""What a state URL's query may set; anything else (a client timeout or retry) would override the
bounds otelguard sets."""
MAX_TIMEOUT_MS: Final = 10_000
MAX_TTL_SECONDS: Final = 366 * 24 * 3600
_KEY_PREFIX: Final = re.compile(r"[A-Za-z0-9_.:/-]{1,64}")
_REDIS_EXTRA: Final = 'pip install "otelguard[redis]"'


def mask_url(url: str) -> str:
    """``url`` with its password (or a lone user info, which some clients read as one) and any
    ``password=`` query value replaced by ``***``."""
    parts = urlsplit(url)
    netloc, query = parts.netloc, parts.query
    if "@" in netloc:
        userinfo, _, host = netloc.rpartition("@")
        user, colon, _password = userinfo.partition(":")
        netloc = f"{user}:***@{host}" if colon else f"***@{host}"
    pairs = parse_qsl(query, keep_blank_values=True)
    if any(key == "password" for key, _ in pairs):
        query = "&".join(f"{key}=***" if key == "password" else f"{key}={value}" for key, value in pairs)
    if (netloc, query) == (parts.netloc, parts.query):
        return url
    return f"{parts.scheme}://{netloc}{parts.path}" + (f"?{query}" if query else "")


def _state_url(path: str, value: Any) -> str | None:
    if value is None:
        return None
    allowed = "expected null (memory) or a URL: redis://host:6379/0, rediss://host:6379/0 or unix:///path"
    if not isinstance(value, str) or not value:
        raise ConfigError(path, "<not a string>" if not isinstance(value, str) else value, allowed)
    shown = mask_url(value)
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 -- parsing the port is the check
    except ValueError:
        raise ConfigError(path, shown, f"{allowed} (the port is not a number from 0 to 65535)") from None
    if parts.scheme not in STATE_SCHEMES:
        raise ConfigError(path, shown, allowed)
    if parts.scheme == "unix":
        if not parts.path or parts.path == "/":
            raise ConfigError(path, shown, f"{allowed} (a unix:// URL names the socket's path)")
    elif not parts.hostname:
        raise ConfigError(path, shown, f"{allowed} (no host)")
    elif parts.path.strip("/") and not parts.path.strip("/").isdigit():
        raise ConfigError(path, shown, f"{allowed} (the path is the database number)")
    for key, _ in parse_qsl(parts.query, keep_blank_values=True):
        if key not in STATE_URL_QUERY_KEYS and key != "password":
            raise ConfigError(
                path, shown, f"query key {key!r} is not allowed; allowed: {', '.join(STATE_URL_QUERY_KEYS)}"
            )
    return value


@dataclass(frozen=True, kw_only=True)
class StateSettings:
    """The ``state:`` section: where session caps live. ``url=None`` keeps them in each process."""

    url: str | None = field(default=None, repr=False)
    key_prefix: str = "otelguard"
    timeout_ms: int = 50
    ttl_seconds: int = 3600

    def __post_init__(self) -> None:
        _state_url("state.url", self.url)
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
            f"timeout_ms={self.timeout_ms!r}, ttl_seconds={self.ttl_seconds!r})"
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
        return {
            "url": mask_url(self.url) if self.url is not None else None,
            "key_prefix": self.key_prefix,
            "timeout_ms": self.timeout_ms,
            "ttl_seconds": self.ttl_seconds,
        }


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
