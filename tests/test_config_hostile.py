"""Hostile config files: each is one clear one-line ``ConfigError`` (exit 2 from the CLI), in bounded
memory, never a hang, a traceback, or a secret echoed from the source text."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otelguard import ConfigError, GuardConfig
from otelguard.cli import main
from otelguard.config.file import MAX_CONFIG_BYTES, MAX_CONFIG_DEPTH, MAX_CONFIG_NODES, MAX_INT_DIGITS

BILLION_LAUGHS = """\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""

SECRET = "sk-live-7c0ffee5ecret"


def _error(path: Path) -> str:
    with pytest.raises(ConfigError) as info:
        GuardConfig.from_file(path)
    message = str(info.value)
    assert "\n" not in message
    assert len(message) < 600
    return message


def _cli(path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["check-config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


@contextlib.contextmanager
def _no_hang(seconds: float = 10.0) -> Iterator[None]:
    """Turns a hang into a test failure instead of a stuck suite (the bound is generous, not a timing assert)."""

    def _expired(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError("hung")

    previous = signal.signal(signal.SIGALRM, _expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_billion_laughs_is_refused_before_expansion(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "laughs.yaml"
    path.write_text(BILLION_LAUGHS)
    with _no_hang():
        message = _error(path)
        assert "alias" in message and f"{MAX_CONFIG_NODES:,}" in message
        assert "line" in _cli(path, capsys)


def test_an_alias_in_a_small_config_still_works(tmp_path: Path) -> None:
    path = tmp_path / "alias.yaml"
    path.write_text("tools:\n  read: &reads [grep, glob]\n  poll: *reads\n")
    assert {"grep", "glob"} <= set(GuardConfig.from_file(path).tools.poll)


def test_recursive_alias_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "loop.yaml"
    path.write_text("tools: &t\n  read: [*t]\n")
    assert "refers to itself" in _error(path)


def test_binary_and_utf16_files_are_refused_as_not_utf8(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    utf16 = tmp_path / "utf16.yaml"
    utf16.write_bytes("mode: unattended\n".encode("utf-16"))
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(bytes(range(256)))
    for path in (utf16, binary):
        assert "UTF-8" in _error(path)
        assert "UTF-8" in _cli(path, capsys)


def test_nul_and_control_characters_are_refused_with_their_position(tmp_path: Path) -> None:
    path = tmp_path / "nul.yaml"
    path.write_bytes(b"mode: unattended\nwarnings: \x00\n")
    assert "line 2" in _error(path)


def test_huge_integer_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "int.yaml"
    path.write_text("max_tracked_signatures: " + "9" * 5001 + "\n")
    message = _error(path)
    assert f"{MAX_INT_DIGITS} digits" in message and "line 1" in message
    assert "9999999999" not in message
    _cli(path, capsys)


def test_deep_nesting_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text("[" * 5000 + "]" * 5000)
    assert f"{MAX_CONFIG_DEPTH} levels" in _error(path)
    _cli(path, capsys)


def test_nesting_through_aliases_is_bounded_too(tmp_path: Path) -> None:
    levels = MAX_CONFIG_DEPTH - 4
    lines = [f"a0: &a0 {'[' * levels}x{']' * levels}"]
    lines += [f"a{i}: &a{i} {'[' * levels}*a{i - 1}{']' * levels}" for i in range(1, 4)]
    path = tmp_path / "deep_alias.yaml"
    path.write_text("\n".join(lines) + "\n")
    assert f"{MAX_CONFIG_DEPTH} levels" in _error(path)


def test_oversized_file_is_refused_without_reading_it_all(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("# " + "x" * (MAX_CONFIG_BYTES + 10) + "\n")
    assert f"{MAX_CONFIG_BYTES:,} bytes" in _error(path)
    _cli(path, capsys)


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_devices_are_refused(device: str, capsys: pytest.CaptureFixture[str]) -> None:
    if not os.path.exists(device):
        pytest.skip(f"{device} does not exist here")
    with _no_hang():
        assert "regular file" in _error(Path(device))
        assert "regular file" in _cli(Path(device), capsys)


def test_fifo_without_writer_is_refused_without_blocking(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = tmp_path / "config.fifo"
    os.mkfifo(fifo)
    with _no_hang():
        assert "regular file" in _error(fifo)
        assert "regular file" in _cli(fifo, capsys)


def test_directory_is_refused(tmp_path: Path) -> None:
    assert "regular file" in _error(tmp_path)


def test_replay_config_gets_the_same_refusal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "laughs.yaml"
    path.write_text(BILLION_LAUGHS)
    transcript = tmp_path / "t.jsonl"
    transcript.write_text("")
    with _no_hang():
        assert main(["replay", str(transcript), "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "alias" in err


@pytest.mark.parametrize(
    "text",
    [
        f'mode: unattended\nsignature_key: "{SECRET}\tx\n  b: [\n',  # unterminated quote
        f'signature_key: "{SECRET}"\n\tfoo: 1\n',  # a tab
        f"signature_key: *{SECRET}\n",  # undefined alias named like the secret
        f"signature_key: !!python/object:{SECRET} x\n",  # unknown tag
        f'signature_key: "\\q{SECRET}"\n',  # bad escape
        f"signature_key: {SECRET}: b\n",  # mapping in a plain scalar
        f"signature_key: [{SECRET}]\n",  # wrong type: masked
        f"signature_key: {{a: {SECRET}}}\n",
    ],
)
def test_yaml_errors_give_line_and_column_never_the_source_text(
    text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "secret.yaml"
    path.write_text(text)
    message = _error(path)
    assert SECRET not in message and "sk-live" not in message
    err = _cli(path, capsys)
    assert SECRET not in err and "sk-live" not in err


def test_yaml_syntax_error_names_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "tab.yaml"
    path.write_text('mode: unattended\nsignature_key: "k"\n\tfoo: 1\n')
    message = _error(path)
    assert "line 3, column 1" in message


def test_error_messages_bound_the_value_they_quote() -> None:
    huge = ["x" * 1000] * 1000
    with pytest.raises(ConfigError) as info:
        GuardConfig.from_mapping({"tools": {"read": [huge]}})
    assert len(str(info.value)) < 600


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=512))
def test_any_bytes_give_a_config_or_a_config_error(
    tmp_path_factory: pytest.TempPathFactory, data: bytes
) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "c.yaml"
    path.write_bytes(data)
    with contextlib.suppress(ConfigError):
        GuardConfig.from_file(path)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="[]{}:,-&*!|>'\"#\t\n ab1", max_size=300))
def test_any_yaml_ish_text_gives_a_config_or_a_one_line_config_error(
    tmp_path_factory: pytest.TempPathFactory, text: str
) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "c.yaml"
    path.write_text(text)
    try:
        GuardConfig.from_file(path)
    except ConfigError as exc:
        assert "\n" not in str(exc)


def test_error_messages_bound_an_unknown_key_they_quote(tmp_path: Path) -> None:
    path = tmp_path / "key.yaml"
    path.write_text("k" * 50_000 + ": 1\n")
    assert len(_error(path)) < 600
    with pytest.raises(ConfigError) as info:
        GuardConfig.from_mapping({"k" * 50_000: 1})
    assert len(str(info.value)) < 600
