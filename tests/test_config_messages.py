"""What a user reads about a config: every error at once, "did you mean" for keys and values, YAML
errors that name the file, line and column, the file named by every command, and warnings for tool
names that are probably typos (a valid config, so exit 0)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from otelguard import ConfigError, GuardConfig
from otelguard.cli import main
from otelguard.config.names import near_misses
from otelguard.errors import ConfigWarning

TIMEOUT = 60.0


def config_error(mapping: dict[str, Any]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        GuardConfig.from_mapping(mapping)
    return info.value


# -- every error, one line each ------------------------------------------------------------------


def test_every_error_is_reported_in_one_config_error() -> None:
    error = config_error({"mode": "unatended", "caps": {"trun": {"web_search": 5}}})
    assert [problem.key for problem in error.errors] == ["mode", "caps.trun"]
    lines = str(error).splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("mode: 'unatended' is not allowed")
    assert lines[1].startswith("caps.trun: 'trun' is not allowed")


def test_the_first_error_keeps_key_value_and_allowed() -> None:
    """Programs reading ``key``/``value``/``allowed`` of a one-error config see what they always saw."""
    error = config_error({"mode": "unatended", "warn_after": {"cycle": 0}})
    assert (error.key, error.value) == ("mode", "unatended")
    assert "unattended" in error.allowed
    single = config_error({"mode": "unatended"})
    assert single.errors == (single,) and "\n" not in str(single)


@pytest.mark.parametrize(
    ("mapping", "keys"),
    [
        ({"mdoe": "unattended", "warnings": "yes"}, ["mdoe", "warnings"]),
        ({"warn_after": {"cycle": "2", "exact_falure": 2}}, ["warn_after.exact_falure", "warn_after.cycle"]),
        ({"caps": {"turn": {"a": -1, "b": "x"}, "on_hit": "stop"}}, ["caps.on_hit", "caps.turn.a", "caps.turn.b"]),
        ({"telemetry": {"span_mode": "all", "max_tool_values": 0}}, ["telemetry.span_mode", "telemetry.max_tool_values"]),
        ({"tools": {"raed": [], "poll": "x"}, "max_tracked_signatures": 0}, ["tools.raed", "tools.poll", "max_tracked_signatures"]),
    ],
)  # fmt: skip
def test_errors_in_one_section_and_across_sections_are_all_named(
    mapping: dict[str, Any], keys: list[str]
) -> None:
    assert [problem.key for problem in config_error(mapping).errors] == keys


def test_the_cli_prints_every_error_on_its_own_line_naming_the_file_then_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "x.yaml"
    path.write_text("mode: unatended\ncaps:\n  trun: {web_search: 5}\n")
    assert main(["check-config", str(path)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        f"otelguard: invalid config {path}: mode: 'unatended' is not allowed; did you mean 'unattended'? "
        "expected one of interactive, unattended",
        f"otelguard: invalid config {path}: caps.trun: 'trun' is not allowed; unknown key; did you mean "
        "'turn'? allowed keys: on_hit, session, tree, turn",
    ]


# -- did you mean, for values too ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("mapping", "meant"),
    [
        ({"mode": "unatended"}, "unattended"),
        ({"caps": {"on_hit": "rejct"}}, "reject"),
        ({"telemetry": {"span_mode": "decision"}}, "decisions"),
    ],
)
def test_a_misspelt_value_gets_did_you_mean(mapping: dict[str, Any], meant: str) -> None:
    assert f"did you mean {meant!r}?" in str(config_error(mapping))


def test_a_value_close_to_nothing_gets_no_guess() -> None:
    message = str(config_error({"mode": "batch"}))
    assert "did you mean" not in message and "expected one of interactive, unattended" in message


# -- the file: YAML errors and every command naming it --------------------------------------------


def test_a_yaml_syntax_error_names_file_line_column_and_what_yaml_said(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text("mode: unattended\ncaps:\n  turn: {web_search: 5\n")
    with pytest.raises(ConfigError) as info:
        GuardConfig.from_file(path)
    message = str(info.value)
    assert message.startswith(f"{path}: line 4, column 1: not valid YAML: ")
    assert "expected ',' or '}'" in message
    assert "is not allowed" not in message


def test_a_missing_file_reads_naturally(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        GuardConfig.from_file(tmp_path / "none.yaml")
    assert str(info.value) == f"{tmp_path / 'none.yaml'}: cannot be read (No such file or directory)"


def test_errors_of_a_file_name_it_on_every_line(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text("mode: unatended\nwarnings: maybe\n")
    with pytest.raises(ConfigError) as info:
        GuardConfig.from_file(path)
    assert all(line.startswith(f"{path}: ") for line in str(info.value).splitlines())
    assert {problem.source for problem in info.value.errors} == {str(path)}


@pytest.mark.parametrize("command", [["serve", "--port", "0"], ["replay", "-"], ["check-config"]])
def test_every_command_names_the_file_of_a_bad_config(tmp_path: Path, command: list[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("mode: unatended\n")
    argv = [*command, str(path)] if command == ["check-config"] else [*command, "--config", str(path)]
    done = subprocess.run(
        [sys.executable, "-m", "otelguard", *argv], capture_output=True, text=True, timeout=TIMEOUT, input=""
    )
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert f"invalid config {path}: mode: 'unatended'" in line


# -- probable typos: a warning, exit 0 --------------------------------------------------------------


@pytest.mark.parametrize(
    ("mapping", "path", "meant"),
    [
        ({"caps": {"turn": {"web_serch": 20}}}, "caps.turn.web_serch", "web_search"),
        ({"caps": {"session": {"subagnets": 20}}}, "caps.session.subagnets", "subagents"),
        ({"tools": {"poll": ["BashOuput"]}}, "tools.poll", "BashOutput"),
        ({"tools": {"read": ["raed_file"]}}, "tools.read", "read_file"),
        ({"ignore_args": {"Agnet": ["description"]}}, "ignore_args.Agnet", "Agent"),
        ({"caps": {"turn": {"reserch": 3}}, "tool_groups": {"research": ["web_fetch"]}}, "caps.turn.reserch", "research"),
    ],
)  # fmt: skip
def test_a_name_one_edit_from_a_known_one_is_a_warning_naming_both(
    mapping: dict[str, Any], path: str, meant: str
) -> None:
    with pytest.warns(ConfigWarning) as caught:
        (warning,) = GuardConfig.from_mapping(mapping).config_warnings
    assert [str(each.message) for each in caught] == [warning]  # the same line, also from Python
    assert warning.startswith(f"{path}: ")
    assert f"did you mean {meant!r}?" in warning


@pytest.mark.parametrize(
    "mapping",
    [
        {"caps": {"turn": {"web_search": 20, "subagents": 4, "WebFetch": 9}}},
        {"caps": {"turn": {"mcp_github_search_code": 5}}},  # matches a default glob
        {"caps": {"turn": {"mcp_*": 5}}},  # a glob of the user's own
        {"caps": {"turn": {"bash": 5}}},  # only the case differs: another host's tool
        {"caps": {"turn": {"deploy_service": 5}}},  # far from every known name
        {"tools": {"read": ["docs_lookup"]}, "ignore_args": {"docs_lookup": ["trace_id"]}},
        {"caps": {"turn": {"research": 3}}, "tool_groups": {"research": ["web_fetch"]}},
    ],
)
def test_known_far_and_glob_names_get_no_warning(mapping: dict[str, Any]) -> None:
    assert GuardConfig.from_mapping(mapping).config_warnings == ()


def test_check_config_prints_the_warning_and_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "typo.yaml"
    path.write_text("caps:\n  turn: {web_serch: 20}\n")
    assert main(["check-config", str(path), "--json"]) == 0
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert line.startswith(f"otelguard: warning: {path}: caps.turn.web_serch: ")
    assert "'web_search'" in line
    assert '"web_serch": 20' in captured.out  # still a valid config, shown as it is


def test_the_library_never_prints_the_warnings(capsys: pytest.CaptureFixture[str]) -> None:
    """It warns through the warnings module only (a ``ConfigWarning``), which the host can filter."""
    with pytest.warns(ConfigWarning):
        config = GuardConfig.from_mapping({"caps": {"turn": {"web_serch": 20}}})
    assert config.config_warnings
    assert capsys.readouterr() == ("", "")
    with pytest.warns(ConfigWarning):
        assert config == GuardConfig.from_mapping({"caps": {"turn": {"web_serch": 20}}})
    assert "web_serch'" not in repr(config).split("caps=")[0]  # not in the repr's own fields


@given(st.text(max_size=30), st.lists(st.text(max_size=12), max_size=6))
def test_near_misses_never_raises_and_never_flags_a_known_name(name: str, known: list[str]) -> None:
    warnings = near_misses([("caps.turn.x", name)], [*known, name], [])
    assert warnings == ()
    near_misses([("caps.turn.x", name)], known, ["*x*"])


def test_a_misspelt_cap_from_python_is_a_warning_with_the_did_you_mean() -> None:
    """Made in Python, a config with a cap on a near-miss name warns at the caller's line, as the
    command line does: the cap would never apply."""
    with pytest.warns(ConfigWarning, match=r"caps\.turn\.websearch: .*did you mean 'web_search'\?") as caught:
        GuardConfig.from_mapping({"caps": {"turn": {"websearch": 3}}})
    assert [Path(warning.filename).name for warning in caught] == [Path(__file__).name]
    with pytest.warns(ConfigWarning, match="web_serch"):
        GuardConfig(caps={"turn": {"web_serch": 1}})


def test_a_config_without_a_near_miss_does_not_warn() -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        GuardConfig.from_mapping({"caps": {"turn": {"web_search": 3, "deploy_service": 1}}})
        GuardConfig()


def test_the_command_line_prints_a_config_warning_once(tmp_path: Path) -> None:
    path = tmp_path / "typo.yaml"
    path.write_text("caps:\n  turn: {websearch: 3}\n")
    result = subprocess.run(
        [sys.executable, "-m", "otelguard", "check-config", str(path), "--json"],
        capture_output=True, text=True, timeout=TIMEOUT,
    )  # fmt: skip
    assert result.returncode == 0
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"otelguard: warning: {path}: caps.turn.websearch: ")


@pytest.mark.parametrize(("typed", "read"), [("yes", "true"), ("off", "false"), ("true", "true")])
def test_a_word_yaml_reads_as_a_boolean_is_explained(tmp_path: Path, typed: str, read: str) -> None:
    path = tmp_path / "mode.yaml"
    path.write_text(f"mode: {typed}\n")
    with pytest.raises(ConfigError) as info:
        GuardConfig.from_file(path)
    assert str(info.value) == (
        f"{path}: mode: {read.capitalize()} is not allowed; YAML read an unquoted yes, no, on, off, true "
        f"or false as the boolean {read}; expected one of interactive, unattended"
    )
