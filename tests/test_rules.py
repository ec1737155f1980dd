"""The Prometheus rules: promtool accepts them, every alert and recording rule has a promtool
unit test (firing on the runaway pattern, silent on a healthy agent and on a single non-sustained
event), and the unit tests really pin the rules (they fail when a `for:` is dropped)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml

from tests.e2e import require_binary
from tests.markdown_docs import anchors

REPO = Path(__file__).resolve().parent.parent
PROMETHEUS_DIR = REPO / "dashboards" / "prometheus"
RULES_YAML = PROMETHEUS_DIR / "otelguard-rules.yaml"
PACKAGE_RULES_YAML = REPO / "otelguard" / "data" / "prometheus" / "otelguard-rules.yaml"
TESTS_DIR = PROMETHEUS_DIR / "tests"
DASHBOARDS_DOC = REPO / "docs" / "dashboards.md"

ALERTS = {
    "OtelguardRunawaySearchLoop": "runaway_search_loop.yaml",
    "OtelguardRunawayDelegationLoop": "runaway_delegation_loop.yaml",
    "OtelguardHaltRateHigh": "halt_rate_high.yaml",
    "OtelguardLoopRateHigh": "loop_rate_high.yaml",
    "OtelguardInternalErrors": "internal_errors.yaml",
    "OtelguardSharedStateDown": "shared_state_down.yaml",
    "OtelguardRunawayDelegationTree": "runaway_delegation_tree.yaml",
    "OtelguardRunawayTokens": "runaway_tokens.yaml",
    "OtelguardModelStalled": "model_stalled.yaml",
}
SEVERITIES = {"critical", "warning", "info"}


def load_rules(path: Path = RULES_YAML) -> list[dict[str, Any]]:
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    return [rule for group in document["groups"] for rule in group["rules"]]


def alerts() -> dict[str, dict[str, Any]]:
    return {rule["alert"]: rule for rule in load_rules() if "alert" in rule}


def records() -> dict[str, dict[str, Any]]:
    return {rule["record"]: rule for rule in load_rules() if "record" in rule}


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    binary = require_binary("promtool")
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=60, cwd=cwd)


@pytest.mark.e2e
@pytest.mark.parametrize("path", [RULES_YAML, PACKAGE_RULES_YAML], ids=["repository", "package-data"])
def test_promtool_check_rules(path: Path) -> None:
    result = promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(load_rules())} rules found" in result.stdout


@pytest.mark.e2e
@pytest.mark.parametrize("test_file", sorted(p.name for p in TESTS_DIR.glob("*.yaml")))
def test_promtool_unit_tests_pass(test_file: str) -> None:
    result = promtool("test", "rules", test_file, cwd=TESTS_DIR)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_spec_alerts_exist_with_severity_summary_description_runbook() -> None:
    found = alerts()
    assert set(found) == set(ALERTS)
    for name, rule in found.items():
        assert re.fullmatch(r"Otelguard[A-Z][A-Za-z]+", name)
        assert rule["labels"]["severity"] in SEVERITIES
        annotations = rule["annotations"]
        assert set(annotations) == {"summary", "description", "runbook_url"}
        assert "{{" not in annotations["summary"], "summary is plain text"
        assert "{{ $labels." in annotations["description"] and "{{ $value" in annotations["description"]
        assert annotations["runbook_url"].startswith(
            "https://github.com/otelguard/otelguard/blob/main/docs/dashboards.md#"
        )
        assert re.fullmatch(r"\d+m", rule["for"]), "every alert waits before firing"


def test_runaway_alerts_page_and_key_on_their_cap() -> None:
    found = alerts()
    for name, cap in (
        ("OtelguardRunawaySearchLoop", "web_search"),
        ("OtelguardRunawayDelegationLoop", "subagents"),
        ("OtelguardRunawayTokens", "tokens"),
    ):
        assert found[name]["labels"]["severity"] == "critical"
        assert f'cap="{cap}"' in found[name]["expr"]


def test_runbook_urls_point_at_runbook_sections_that_exist() -> None:
    sections = anchors(DASHBOARDS_DOC)
    for name, rule in alerts().items():
        anchor = rule["annotations"]["runbook_url"].rsplit("#", 1)[1]
        assert anchor == name.lower()
        assert anchor in sections, f"{name}: no heading for #{anchor} in docs/dashboards.md"


def test_recording_rules_are_named_level_metric_operation() -> None:
    found = records()
    assert len(found) >= 6
    for name in found:
        assert re.fullmatch(r"otelguard:[a-z_]+:[a-z0-9_]+", name), name
    shared = {
        "otelguard:loop_decisions_per_tool_call:ratio_rate5m",  # loop rate
        "otelguard:halted_turns_per_turn:ratio_rate5m",  # halted-turn ratio
        "otelguard:cap_hits:rate5m",  # cap-hit rates per agent
    }
    assert shared <= set(found)


def test_every_alert_reads_a_recording_rule_defined_before_it() -> None:
    found = records()
    for name, rule in alerts().items():
        used = set(re.findall(r"otelguard:[\w:]+", rule["expr"]))
        assert used and used <= set(found), name


def test_every_rule_expression_parses() -> None:
    for rule in load_rules():
        promql_parser.parse(rule["expr"])


def test_every_alert_and_recording_rule_has_a_promtool_test() -> None:
    texts = {p.name: p.read_text(encoding="utf-8") for p in TESTS_DIR.glob("*.yaml")}
    for name, test_file in ALERTS.items():
        text = texts[test_file]
        assert f"alertname: {name}" in text
        assert "exp_alerts: []" in text, f"{test_file} needs a silent case"
        assert re.search(r"exp_alerts:\n\s+- exp_labels:", text), f"{test_file} needs a firing case"
    for record in records():
        assert f"expr: {record}\n" in texts["recording_rules.yaml"], record


def test_series_interval_is_shorter_than_the_rate_window() -> None:
    """promtool needs at least two samples in a window for rate() to see anything."""
    for path in TESTS_DIR.glob("*.yaml"):
        for test in yaml.safe_load(path.read_text())["tests"]:
            assert test["interval"] == "1m", path.name
    for rule in load_rules():
        for window in re.findall(r"\[(\d+)m\]", rule["expr"]):
            assert int(window) >= 5


@pytest.mark.e2e
def test_unit_tests_fail_when_the_for_durations_are_dropped(tmp_path: Path) -> None:
    """Mutation check: with `for: 0s` every alert test file must fail (single-hit and short-burst cases)."""
    text = RULES_YAML.read_text(encoding="utf-8")
    mutated, count = re.subn(r"(?m)^(\s+for:) \S+$", r"\1 0s", text)
    assert count == len(ALERTS)
    (tmp_path / "otelguard-rules.yaml").write_text(mutated)
    (tmp_path / "tests").mkdir()
    for test_file in ALERTS.values():
        shutil.copy(TESTS_DIR / test_file, tmp_path / "tests" / test_file)
        result = promtool("test", "rules", test_file, cwd=tmp_path / "tests")
        assert result.returncode != 0, f"{test_file} still passes with for: 0s"


@pytest.mark.e2e
def test_unit_tests_fail_when_a_recording_rule_changes(tmp_path: Path) -> None:
    """Mutation check: counting cap decisions as loops changes the recorded loop rate."""
    text = RULES_YAML.read_text(encoding="utf-8")
    mutated = text.replace("cap_turn|cap_session|", "", 1)
    assert mutated != text
    (tmp_path / "otelguard-rules.yaml").write_text(mutated)
    (tmp_path / "tests").mkdir()
    shutil.copy(TESTS_DIR / "recording_rules.yaml", tmp_path / "tests")
    result = promtool("test", "rules", "recording_rules.yaml", cwd=tmp_path / "tests")
    assert result.returncode != 0
