"""GuardConfig's shape: the constructor converts what it is given, the fields hold what their
annotations say, ``to_mapping`` reads the fields back, and a warning points at the caller's line."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import Any, get_type_hints

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otelguard.config import CapsConfig, GuardConfig, StateSettings, TelemetrySettings, ToolClasses
from otelguard.errors import ConfigError, ConfigWarning

INIT_FIELDS = [each.name for each in dataclasses.fields(GuardConfig) if each.init]


def test_the_constructor_takes_what_a_user_writes_and_the_fields_hold_the_parsed_sections() -> None:
    """``caps`` accepts a mapping (the README's style) and holds a ``CapsConfig``: the constructor's
    annotation is the union it accepts, the field's annotation what it holds."""
    accepts = get_type_hints(GuardConfig.__init__)
    holds = get_type_hints(GuardConfig)
    for name, section in (
        ("caps", CapsConfig),
        ("tools", ToolClasses),
        ("telemetry", TelemetrySettings),
        ("state", StateSettings),
    ):
        assert holds[name] is section
        assert accepts[name] != section and section in accepts[name].__args__
    config = GuardConfig(
        caps={"turn": {"web_search": 3}},
        tools={"read": ["docs_lookup"]},
        tool_groups={"docs": ["docs_lookup", "docs_*"]},
        volatile_result_keys=["run_id"],
        telemetry={"span_mode": "own"},
        state={"key_prefix": "team"},
    )
    for name, hint in get_type_hints(GuardConfig).items():
        value = getattr(config, name)
        kind = getattr(hint, "__origin__", hint)
        if isinstance(kind, type):
            assert isinstance(value, kind), (name, value)
    assert config.tool_groups["docs"] == ("docs_lookup", "docs_*")
    assert config.volatile_result_keys == ("run_id",)


def test_the_keyword_arguments_are_the_fields() -> None:
    """``GuardConfig(...)``, ``from_mapping`` and ``to_mapping`` know the same keys: the fields."""
    assert sorted(GuardConfig.__init__.__kwdefaults__ or {}) == sorted(INIT_FIELDS)
    with pytest.raises(ConfigError) as caught:
        GuardConfig.from_mapping({"not_a_key": 1})
    allowed = str(caught.value).rpartition("allowed keys: ")[2]
    assert allowed.split(", ") == sorted(INIT_FIELDS)
    assert list(GuardConfig().to_mapping()) == [
        *INIT_FIELDS[: INIT_FIELDS.index("hard_stop") + 1],
        "hard_stop_enabled",
        *INIT_FIELDS[INIT_FIELDS.index("hard_stop") + 1 :],
    ]


def test_a_field_added_to_the_dataclass_shows_up_in_to_mapping_with_no_code_of_its_own() -> None:
    @dataclasses.dataclass(frozen=True, init=False)
    class WithExtra(GuardConfig):
        extra_limit: int = 7
        extra_names: tuple[str, ...] = ("a", "b")

    shown = WithExtra().to_mapping()
    assert list(shown)[-2:] == ["extra_limit", "extra_names"]
    assert (shown["extra_limit"], shown["extra_names"]) == (7, ["a", "b"])


def test_to_mapping_never_shows_the_signature_key_nor_a_state_password() -> None:
    config = GuardConfig(signature_key="sekrit-key-value-123", state={"key_prefix": "p"})
    assert config.to_mapping()["signature_key"] == "<set>"
    assert "sekrit" not in repr(config.to_mapping())
    assert GuardConfig().to_mapping()["signature_key"] is None


_NAMES = st.sampled_from(["read_file", "deploy_service", "docs_lookup", "mcp_*_fetch", "run_tests"])
_THRESHOLDS = st.dictionaries(
    st.sampled_from(["exact_failure", "same_tool_failure", "refusal", "cycle"]), st.integers(5, 9), max_size=3
)
SECTIONS = st.fixed_dictionaries(
    {},
    optional={
        "mode": st.sampled_from(["interactive", "unattended"]),
        "hard_stop": st.sampled_from([None, True, False]),
        "warnings": st.booleans(),
        "warn_after": st.dictionaries(
            st.sampled_from(["exact_failure", "same_tool_failure", "refusal", "cycle"]), st.integers(1, 3)
        ),
        "hard_stop_after": _THRESHOLDS,
        "caps": st.fixed_dictionaries(
            {},
            optional={
                "on_hit": st.sampled_from(["block", "reject"]),
                "turn": st.dictionaries(_NAMES, st.integers(0, 99), max_size=3),
                "session": st.dictionaries(_NAMES, st.integers(0, 999), max_size=3),
            },
        ),
        "tool_groups": st.dictionaries(st.sampled_from(["docs", "deploys"]), st.lists(_NAMES, min_size=1)),
        "tools": st.fixed_dictionaries(
            {},
            optional={
                "read": st.lists(_NAMES, max_size=3, unique=True),
                "shell": st.lists(_NAMES, max_size=2, unique=True),
                "replace": st.booleans(),
            },
        ),
        "spawn_tools": st.dictionaries(_NAMES, st.sampled_from([None, "tasks", "jobs"]), max_size=2),
        "ignore_args": st.dictionaries(_NAMES, st.lists(st.sampled_from(["nonce", "trace_id"]), min_size=1)),
        "volatile_result_keys": st.lists(st.sampled_from(["run_id", "elapsed", "took_ms"]), unique=True),
        "max_tracked_signatures": st.integers(1, 10_000),
        "rejects_before_stop": st.integers(0, 5),
        "telemetry": st.fixed_dictionaries(
            {},
            optional={
                "span_mode": st.sampled_from(["auto", "own", "event", "decisions", "off"]),
                "turn_spans": st.booleans(),
                "max_tool_values": st.integers(1, 500),
                "otel_metrics": st.booleans(),
            },
        ),
        "state": st.fixed_dictionaries(
            {},
            optional={
                "key_prefix": st.sampled_from(["otelguard", "team:a"]),
                "ttl_seconds": st.integers(1, 99),
            },
        ),
    },
)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(SECTIONS)
def test_the_effective_config_reads_back_as_the_same_config(section: dict[str, Any]) -> None:
    """``from_mapping(config.to_mapping())`` is the config again, whatever its sections (the
    effective ``hard_stop_enabled`` aside, which follows ``mode`` and ``hard_stop``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)
        config = GuardConfig.from_mapping(section)
        shown = config.to_mapping()
        assert shown.pop("hard_stop_enabled") is config.hard_stop_enabled
        again = GuardConfig.from_mapping(shown)
        assert again == config
        assert again.to_mapping() == config.to_mapping()
        assert config.with_changes() == config


def test_with_changes_warns_at_the_caller_and_only_about_a_new_typo() -> None:
    with pytest.warns(ConfigWarning, match="web_serch") as caught:
        config = GuardConfig().with_changes(caps={"turn": {"web_serch": 1}})
    assert [Path(warning.filename).name for warning in caught] == [Path(__file__).name]
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        unattended = config.with_changes(mode="unattended")  # the same typo again: said already
    assert unattended.config_warnings == config.config_warnings
    with pytest.raises(TypeError, match="no_such_field"):
        config.with_changes(no_such_field=1)


@pytest.mark.parametrize("how", ["init", "from_mapping", "from_file"])
def test_each_public_constructor_warns_at_the_callers_line(how: str, tmp_path: Path) -> None:
    path = tmp_path / "typo.yaml"
    path.write_text("caps:\n  turn: {web_serch: 20}\n")
    with pytest.warns(ConfigWarning, match="web_serch") as caught:
        if how == "init":
            GuardConfig(caps={"turn": {"web_serch": 20}})
        elif how == "from_mapping":
            GuardConfig.from_mapping({"caps": {"turn": {"web_serch": 20}}})
        else:
            GuardConfig.from_file(path)
    assert [(Path(w.filename).name, type(w.message)) for w in caught] == [
        (Path(__file__).name, ConfigWarning)
    ]


def test_the_config_package_reads_no_frames() -> None:
    """The warnings' line comes from ``stacklevel``, not from walking the interpreter's frames."""
    import otelguard.config

    package = Path(otelguard.config.__file__).parent
    sources = "".join(path.read_text(encoding="utf-8") for path in sorted(package.glob("*.py")))
    assert "_getframe" not in sources and "currentframe" not in sources
