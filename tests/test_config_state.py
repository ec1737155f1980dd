"""The ``state:`` section: defaults, validation, where the URL comes from, and the password never shown.

The core's config holds a URL only as present; its grammar, the password file and the redis client
are checked by the shared-state edge (``otelguard.state.urls.checked_state``), which every host runs
before it opens a store: the errors here come from one or the other, with the same key and words."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from otelguard import ConfigError, GuardConfig
from otelguard.cli import main
from otelguard.config import StateSettings, mask_url
from otelguard.hosting import Guard, session_host
from otelguard.state.urls import check_state_url, checked_state

KEY = "state-test-key"
URL = "redis://:s3cr3t-canary@127.0.0.1:6379/0"


@pytest.fixture(autouse=True)
def _no_state_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTELGUARD_STATE_URL", raising=False)
    monkeypatch.delenv("OTELGUARD_SIGNATURE_KEY", raising=False)


def test_defaults_keep_session_caps_in_memory() -> None:
    state = GuardConfig().state
    assert state == StateSettings(url=None, key_prefix="otelguard", timeout_ms=50, ttl_seconds=3600)
    assert GuardConfig().effective_state().url is None


@pytest.mark.parametrize(
    "url",
    [
        "redis://localhost",
        "redis://127.0.0.1:6379/0",
        "rediss://user:pw@cache.internal:6380/2",
        "unix:///run/redis/redis.sock",
        "unix:///run/redis.sock?db=3",
        "rediss://cache:6380?ssl_ca_certs=/etc/ca.pem&ssl_cert_reqs=required",
        "redis+cluster://127.0.0.1:7000",
        "rediss+cluster://user:pw@cache.internal:7000/0",
        "redis://:p%2Fa%3Fs%23s%40@[::1]:6379/0",
    ],
)
def test_a_url_of_each_scheme_is_accepted(url: str) -> None:
    config = GuardConfig.from_mapping({"signature_key": KEY, "state": {"url": url}})
    assert config.state.url == url
    assert checked_state(config).url == url


@pytest.mark.parametrize(
    ("state", "key", "allowed"),
    [
        ({"url": "http://cache:6379"}, "state.url", "redis://host:6379/0"),
        ({"url": "redis://"}, "state.url", "no host"),
        ({"url": "redis://cache:notaport"}, "state.url", "port"),
        ({"url": "redis://cache/zero"}, "state.url", "database number"),
        ({"url": "unix://"}, "state.url", "socket's path"),
        ({"url": 6379}, "state.url", "expected null (memory) or a URL"),
        ({"url": "redis://cache?socket_timeout=30"}, "state.url", "query key 'socket_timeout'"),
        ({"url": "redis://u:p@[::1:6379/0"}, "state.url", "IPv6 host in [brackets]"),
        ({"url": "redis://cache?db=x"}, "state.url", "database number"),
        ({"url": "redis://cache?ssl_certfile=/c.pem"}, "state.url", "needs TLS"),
        ({"url": "rediss://cache?ssl_cert_reqs=maybe"}, "state.url", "none, optional, required"),
        ({"url": "redis+cluster://cache:7000/1"}, "state.url", "only database 0"),
        ({"url": "redis://:a/b@cache:6379"}, "state.url", "percent-encode"),
        ({"password_file": "/nonexistent/otelguard-password"}, "state.password_file", "readable file"),
        ({"password_file": 3}, "state.password_file", "readable file"),
        ({"key_prefix": "app:{x}"}, "state.key_prefix", "no braces"),
        ({"key_prefix": ""}, "state.key_prefix", "1 to 64 characters"),
        ({"timeout_ms": 0}, "state.timeout_ms", "integer >= 1"),
        ({"timeout_ms": 60_000}, "state.timeout_ms", "from 1 to 10000"),
        ({"timeout_ms": "50"}, "state.timeout_ms", "integer"),
        ({"ttl_seconds": 0}, "state.ttl_seconds", "integer >= 1"),
        ({"ttl_seconds": True}, "state.ttl_seconds", "integer"),
        ({"tll_seconds": 60}, "state.tll_seconds", "did you mean 'ttl_seconds'"),
    ],
)
def test_bad_state_settings_name_key_value_and_what_is_allowed(
    state: dict[str, Any], key: str, allowed: str
) -> None:
    with pytest.raises(ConfigError) as info:
        checked_state(GuardConfig.from_mapping({"signature_key": KEY, "state": state}))
    assert info.value.key == key
    assert allowed in str(info.value)


def test_a_bad_url_is_reported_with_its_password_masked() -> None:
    with pytest.raises(ConfigError) as info:
        checked_state(
            GuardConfig.from_mapping({"signature_key": KEY, "state": {"url": "redis://:s3cr3t-canary@h/x"}})
        )
    assert "s3cr3t-canary" not in str(info.value)
    assert "redis://:***@h/x" in str(info.value)


def test_a_url_without_a_signature_key_is_a_config_error() -> None:
    """Every process must name a session alike: no key (config or environment), no shared state."""
    with pytest.raises(ConfigError) as info:
        GuardConfig.from_mapping({"state": {"url": URL}})
    assert info.value.key == "state.url"
    assert "signature_key" in str(info.value) and "OTELGUARD_SIGNATURE_KEY" in str(info.value)
    assert "s3cr3t-canary" not in str(info.value)


def test_the_signature_key_may_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTELGUARD_SIGNATURE_KEY", "from-env")
    assert GuardConfig.from_mapping({"state": {"url": URL}}).state.url == URL


def test_a_missing_redis_package_is_a_config_error_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "redis", None)  # what the import system sees without the package
    with pytest.raises(ConfigError) as info:
        checked_state(GuardConfig.from_mapping({"signature_key": KEY, "state": {"url": URL}}))
    assert 'pip install "otelguard[redis]"' in str(info.value)


def test_the_environment_url_wins_over_the_config(monkeypatch: pytest.MonkeyPatch) -> None:
    config = GuardConfig.from_mapping({"signature_key": KEY, "state": {"url": URL, "timeout_ms": 20}})
    monkeypatch.setenv("OTELGUARD_STATE_URL", "unix:///run/other.sock")
    state = config.effective_state()
    assert (state.url, state.timeout_ms) == ("unix:///run/other.sock", 20)
    monkeypatch.setenv("OTELGUARD_STATE_URL", "")
    assert config.effective_state().url == URL


def test_a_bad_environment_url_is_a_config_error_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTELGUARD_STATE_URL", "memcached://cache")
    with pytest.raises(ConfigError) as info:
        checked_state(GuardConfig(signature_key=KEY))
    assert info.value.key == "OTELGUARD_STATE_URL"
    monkeypatch.setenv("OTELGUARD_STATE_URL", URL)
    with pytest.raises(ConfigError) as info:
        GuardConfig().effective_state()  # no key anywhere
    assert info.value.key == "OTELGUARD_STATE_URL" and "signature_key" in str(info.value)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:pw@h:6379/0", "redis://:***@h:6379/0"),
        ("rediss://user:pw@h", "rediss://user:***@h"),
        ("redis://lonely@h", "redis://***@h"),
        ("unix:///s.sock?db=1&password=pw", "unix:///s.sock?db=1&password=***"),
        ("redis://h:6379/0", "redis://h:6379/0"),
        ("unix:///run/redis.sock", "unix:///run/redis.sock"),
    ],
)
def test_mask_url_hides_passwords_only(url: str, shown: str) -> None:
    assert mask_url(url) == shown


def test_the_repr_and_the_mapping_mask_the_password() -> None:
    config = GuardConfig.from_mapping({"signature_key": KEY, "state": {"url": URL}})
    assert "s3cr3t-canary" not in repr(config) and "s3cr3t-canary" not in repr(config.state)
    assert config.to_mapping()["state"] == {
        "url": "redis://:***@127.0.0.1:6379/0",
        "key_prefix": "otelguard",
        "timeout_ms": 50,
        "ttl_seconds": 3600,
        "password_file": None,
    }


def test_check_config_shows_the_effective_state_with_the_password_masked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "otelguard.yaml"
    path.write_text(f"signature_key: {KEY}\nstate:\n  url: redis://cache:6379/0\n  ttl_seconds: 600\n")
    monkeypatch.setenv("OTELGUARD_STATE_URL", "redis://:s3cr3t-canary@other:6379/1")
    assert main(["check-config", str(path), "--json"]) == 0
    out = capsys.readouterr().out
    assert "s3cr3t-canary" not in out
    assert json.loads(out)["state"] == {
        "url": "redis://:***@other:6379/1",
        "key_prefix": "otelguard",
        "timeout_ms": 50,
        "ttl_seconds": 600,
        "password_file": None,
    }
    assert main(["check-config", str(path)]) == 0
    table = capsys.readouterr().out
    assert "redis://:***@other:6379/1" in table and "s3cr3t-canary" not in table


def test_check_config_exits_2_on_a_url_without_a_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "otelguard.yaml"
    path.write_text(f"state:\n  url: {URL}\n")
    assert main(["check-config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "state.url" in err and "signature_key" in err and "s3cr3t-canary" not in err


RESERVED = ":/?#[]@!$&'()*+,;=% "
"""Every character a URL reserves (and the percent sign and a space): base64 and generated secrets
hold some of them."""


@pytest.mark.parametrize("char", list(RESERVED))
@pytest.mark.parametrize("user", ["", "app"])
def test_a_password_with_any_reserved_character_is_never_shown(char: str, user: str) -> None:
    """Raw in the URL, such a password ends the user info early for a URL parser: the mask reads the
    URL's structure (the user info ends at the last '@'), and the error says to percent-encode it."""
    password = f"s3cr{char}t-canary{char}"
    url = f"redis://{user}:{password}@cache.internal:6379/0"
    shown = mask_url(url)
    assert "s3cr" not in shown and "canary" not in shown
    assert shown == f"redis://{user}:***@cache.internal:6379/0"
    try:
        state = StateSettings(url=url)
        check_state_url("state.url", url)
    except ConfigError as exc:
        assert "s3cr" not in str(exc) and "canary" not in str(exc)
    else:  # a '/', '?' or '#' ends the user info for every URL parser: never taken raw
        assert char not in "/?#"
        assert "canary" not in repr(state) and "canary" not in json.dumps(state.to_mapping())


@pytest.mark.parametrize("char", list(RESERVED))
def test_a_query_password_with_any_reserved_character_is_never_shown(char: str) -> None:
    url = f"unix:///run/redis.sock?db=1&password=s3cr{char}t-canary&db=2"
    assert "canary" not in mask_url(url) and "s3cr" not in mask_url(url)


def test_check_config_and_serve_exit_2_on_hostile_urls_without_a_traceback_or_the_password(
    tmp_path: Path,
) -> None:
    """An unclosed IPv6 bracket, a password with '/', '#' or '?': a ConfigError, exit 2, from both
    commands (real processes), and the password in neither output."""
    import subprocess

    for url in ("redis://u:p4ss-canary@[::1:6379/0", "redis://:ab/cd+ef==-canary@cache:6379/0",
                "redis://:ab#cd-canary@cache:6379/0", "redis://:ab?cd-canary@cache:6379/0"):  # fmt: skip
        path = tmp_path / "otelguard.yaml"
        path.write_text(json.dumps({"signature_key": KEY, "state": {"url": url}}))
        env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("OTELGUARD_")}
        for command in (["check-config", str(path)], ["serve", "--port", "0", "--state", url]):
            done = subprocess.run(
                [sys.executable, "-m", "otelguard", *command],
                capture_output=True,
                text=True,
                timeout=60,
                env=env,
            )
            output = done.stdout + done.stderr
            assert done.returncode == 2, (command, output)
            assert "Traceback" not in output and "canary" not in output
            assert "state.url" in output or "OTELGUARD_STATE_URL" in output


def test_hostile_urls_are_a_config_error_or_a_client_redis_py_can_make() -> None:
    """Any text as state.url: StateSettings raises nothing but ConfigError; what it accepts, redis-py
    turns into a client without raising (made, never connected); the mask never raises and never
    shows what follows the user's colon."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from otelguard.state.redis_client import make_client

    pieces = st.sampled_from(
        ["redis://", "rediss://", "unix://", "redis+cluster://", "u", ":", "@", "[", "]", "::1", "/",
         "?", "#", "%", "%2", "db=", "&", "password=", "ssl_cert_reqs=", "none", "host", "6379", "0",
         "-1", "99999", " ", "\x00", "é", "\ud800"]
    )  # fmt: skip

    @settings(max_examples=400, deadline=None)
    @given(st.lists(pieces, max_size=12).map("".join) | st.text(max_size=40))
    def check(url: str) -> None:
        shown = mask_url(url)
        if "@" in url.partition("://")[2] and ":" in url.partition("://")[2].rpartition("@")[0]:
            assert shown.partition("://")[2].rpartition("@")[0].endswith(":***")
        try:
            state = StateSettings(url=url, timeout_ms=10)
            check_state_url("state.url", url)
        except ConfigError as exc:
            assert exc.key == "state.url"
            return
        if not state.url or "+cluster" in state.url:
            return  # a cluster client asks a node for the slot map as it is made
        make_client(state, 0.01, 4).close()

    check()


BAD = {"signature_key": KEY, "state": {"url": "http://cache:6379"}}


def test_every_host_checks_the_url_before_it_opens_a_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """The core takes any non-empty URL; a guard, a session host and an environment URL are checked by
    the edge when the host is built, with the key the value came from."""
    config = GuardConfig.from_mapping(BAD)  # the core: present, a string
    for build in (lambda: Guard(config), lambda: Guard(config, session_id="s"), lambda: session_host(config)):
        with pytest.raises(ConfigError) as info:
            build()
        assert info.value.key == "state.url" and "redis://host:6379/0" in str(info.value)
    monkeypatch.setenv("OTELGUARD_STATE_URL", "memcached://cache")
    with pytest.raises(ConfigError) as info:
        Guard(GuardConfig(signature_key=KEY))
    assert info.value.key == "OTELGUARD_STATE_URL"


def test_the_core_checks_only_that_a_url_is_present() -> None:
    """What the core rejects: a URL that is not a string, or empty; what it says names the key."""
    assert StateSettings(url="http://not-a-store-url").url == "http://not-a-store-url"
    for value in (6379, "", ["redis://cache"]):
        with pytest.raises(ConfigError) as info:
            StateSettings(url=value)  # type: ignore[arg-type]
        assert info.value.key == "state.url" and "expected null (memory) or a URL" in str(info.value)
    with pytest.raises(ConfigError) as info:
        StateSettings(password_file="")
    assert info.value.key == "state.password_file" and "readable file" in str(info.value)
