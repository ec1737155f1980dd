"""The ``state:`` section of the config: where session caps live (docs/shared-state.md).

``url: null`` keeps them in each process; a URL of a shared store shares them between processes. The
core holds the URL as a non-empty string and knows which one this process uses (``effective_state``);
its grammar, the password file and the store's client are the shared-state edge's to check
(``otelguard.state.urls``) before a host opens a store. A URL's password never appears in an error, a
repr or the effective config: ``mask_url`` replaces it. The password can also come apart from the URL
(``OTELGUARD_STATE_PASSWORD``, ``state.password_file``), so that it is not in a command line.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, fields, replace
from typing import Any, Final

from otelguard.config.checks import as_mapping, check_keys, integer
from otelguard.config.environment import OTELGUARD_SIGNATURE_KEY, OTELGUARD_STATE_URL
from otelguard.errors import ConfigError

__all__ = ["StateSettings", "check_state_ready", "effective_state", "mask_url"]

MAX_TIMEOUT_MS: Final = 10_000
MAX_TTL_SECONDS: Final = 366 * 24 * 3600
_KEY_PREFIX: Final = re.compile(r"[A-Za-z0-9_.:/-]{1,64}")
_QUERY_PASSWORD: Final = re.compile(r"(?i)(?<=[?&;])password=")
_URL: Final = (
    "expected null (memory) or a URL of the shared store, a non-empty string (docs/shared-state.md "
    "lists the kinds)"
)


def mask_url(url: str) -> str:
    """``url`` with its password (or a lone user info, which some clients read as one) and everything
    from a ``password=`` query value on replaced by ``***``. Read by the URL's structure, not a URL
    parser: the user info ends at the last ``@`` (a password may hold ``/``, ``?``, ``#`` or ``@``),
    and a query password runs to the end (it may hold ``&``), so any text at all is masked and
    nothing raises."""
    scheme, separator, rest = url.partition("://")
    if not separator:
        scheme, rest = "", url
    match = _QUERY_PASSWORD.search(rest)
    if match is not None:
        rest = f"{rest[: match.end()]}***"
    if "@" in rest:
        userinfo, _, host = rest.rpartition("@")
        user, colon, _password = userinfo.partition(":")
        rest = f"{user}:***@{host}" if colon else f"***@{host}"
    return f"{scheme}://{rest}" if separator else rest


def _state_url(path: str, value: Any) -> str | None:
    """A URL is present (a non-empty string) or not (``None``); what it says is the edge's to check."""
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ConfigError(path, "<not a string>" if not isinstance(value, str) else value, _URL)
    return value


def _password_file(value: Any) -> str | None:
    if value is None or (isinstance(value, str) and value):
        return value
    raise ConfigError(
        "state.password_file",
        "<not a string>" if not isinstance(value, str) else value,
        "expected null or the path of a readable file holding the store's password (its first line)",
    )


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
    """A shared store needs the same session key in every process, so that all of them derive one
    key per session."""
    if not (signature_key or os.environ.get(OTELGUARD_SIGNATURE_KEY)):
        raise ConfigError(
            path,
            mask_url(url),
            f"shared state needs a signature_key (config) or {OTELGUARD_SIGNATURE_KEY}, the same in "
            "every process, so that all of them derive one key per session",
        )


def effective_state(state: StateSettings, signature_key: str | None) -> StateSettings:
    """The ``state`` section this process uses: ``OTELGUARD_STATE_URL`` (``otelguard serve --state``
    sets it) over the config's ``url``; a URL from there needs a signature key as the config's does
    (``ConfigError``). Its grammar is checked by the edge (``otelguard.state.urls.checked_state``)."""
    from_env = os.environ.get(OTELGUARD_STATE_URL)
    if not from_env or from_env == state.url:
        return state
    check_state_ready(OTELGUARD_STATE_URL, from_env, signature_key)
    return replace(state, url=from_env)
