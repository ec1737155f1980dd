"""The README and docs/ explain the project on their own: no references to documents that are not in
the repository, every relative link lands, every doc is indexed, and shown output is real output."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from otelguard.cli import main
from tests.markdown_docs import DOCS_DIR, DOCUMENTS, README, REPO, anchors, links, prose

# References to documents outside the repository; assembled so this file does not match itself.
FORBIDDEN = re.compile("|".join((r"\bSP" + r"EC\b", "\u00a7", r"(?i:\bissue\s*#?\d)")))
IDS = [str(p.relative_to(REPO)) for p in DOCUMENTS]


@pytest.mark.parametrize("path", DOCUMENTS, ids=IDS)
def test_docs_cite_no_document_outside_the_repository(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    hits = [
        f"{path.name}:{text.count(chr(10), 0, m.start()) + 1}: {m.group()}" for m in FORBIDDEN.finditer(text)
    ]
    assert hits == []


def test_forbidden_pattern_catches_what_it_should() -> None:
    for text in ("see SP" + "EC 4", "\u00a75", "Iss" + "ue 6", "issue #12"):
        assert FORBIDDEN.search(text), text
    for text in ("a specific issue", "spectrum", "issues"):
        assert not FORBIDDEN.search(text), text


@pytest.mark.parametrize("path", DOCUMENTS, ids=IDS)
def test_relative_links_point_at_files_and_headings_that_exist(path: Path) -> None:
    broken = []
    for target in links(path):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(
                f"{target}: no file {linked.relative_to(REPO) if linked.is_relative_to(REPO) else linked}"
            )
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.name}")
    assert broken == [], f"{path.name}: {broken}"


def test_index_lists_every_doc() -> None:
    index = DOCS_DIR / "index.md"
    listed = {Path(target.partition("#")[0]).name for target in links(index)}
    on_disk = {p.name for p in DOCS_DIR.glob("*.md")} - {"index.md"}
    assert on_disk <= listed
    assert "docs/index.md" in links(README)


def test_readme_is_a_landing_page() -> None:
    assert len(README.read_text(encoding="utf-8").splitlines()) < 250


def _replay_example(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> dict:  # type: ignore[type-arg]
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("OTELGUARD_SIGNATURE_KEY", "docs")
    assert main(["replay", "otelguard/data/examples/claude-code-runaway-search.jsonl", "--json"]) == 0
    document: dict = json.loads(capsys.readouterr().out)  # type: ignore[type-arg]
    return document


def test_replay_json_shown_in_the_docs_is_the_real_output(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    text = (DOCS_DIR / "replay.md").read_text(encoding="utf-8")
    command = "--json | jq '.sessions[0]'\n"
    shown = json.loads(text.split(command, 1)[1].split("\n```", 1)[0])
    assert shown == _replay_example(capsys, monkeypatch)["sessions"][0]


def test_replay_json_document_shape_in_the_docs_matches_the_command(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    text = (DOCS_DIR / "replay.md").read_text(encoding="utf-8")
    section = text.split("## The JSON document", 1)[1]
    shown = json.loads(section.split("```json\n", 1)[1].split("```", 1)[0])
    real = _replay_example(capsys, monkeypatch)
    assert set(shown) == set(real)
    assert set(shown["sessions"][0]) == set(real["sessions"][0])
    assert set(shown["totals"]) == set(real["totals"])
    assert set(shown["inputs"][0]) == set(real["inputs"][0])


def test_alert_runbooks_have_a_section_each() -> None:
    dashboards = anchors(DOCS_DIR / "dashboards.md")
    for alert in re.findall(r"^\| `(Otelguard\w+)`", (DOCS_DIR / "dashboards.md").read_text(), flags=re.M):
        assert alert.lower() in dashboards, alert


def test_dashboard_links_to_the_runbooks() -> None:
    dashboard = json.loads((REPO / "dashboards" / "otelguard-overview.json").read_text(encoding="utf-8"))
    urls = [link["url"] for link in dashboard["links"]]
    prefix = "https://github.com/otelguard/otelguard/blob/main/"
    for url in urls:
        path, _, anchor = url.removeprefix(prefix).partition("#")
        assert (REPO / path).exists(), url
        assert anchor in anchors(REPO / path), url


def _section(path: Path, heading: str) -> str:
    """The prose under a `## heading`, up to the next heading of the same or a higher level."""
    text = prose(path)
    body = text.split(f"\n## {heading}\n", 1)[1]
    return re.split(r"\n#{1,2} ", body, maxsplit=1)[0]


def test_decision_codes_table_lists_every_code() -> None:
    from otelguard.core.decisions import CODES

    table = _section(DOCS_DIR / "detectors.md", "Decision codes")
    shown = set(re.findall(r"^\| ((?:`\w+`(?:, )?)+) \|", table, flags=re.M))
    codes = {code for cell in shown for code in re.findall(r"`(\w+)`", cell)}
    assert codes == set(CODES)


def _first_column_names(table: str, header: str) -> list[str]:
    """The backticked names in the first column of the table whose header row starts with `header`."""
    rows = table.split(f"| {header} |", 1)[1].split("\n\n", 1)[0].splitlines()[2:]
    return [name for row in rows for name in re.findall(r"`([^`]+)`", row.split("|")[1])]


def test_shells_and_editors_tables_are_the_default_lists() -> None:
    from otelguard.config import DEFAULT_SHELL_TOOLS, DEFAULT_WRITE_TOOLS

    section = _section(DOCS_DIR / "detectors-same-error.md", "Shells and file editors")
    assert _first_column_names(section, "shell") == list(DEFAULT_SHELL_TOOLS)
    editors = _first_column_names(section, "editor")
    assert len(editors) == len(set(editors)) == 10
    assert set(editors) <= set(DEFAULT_WRITE_TOOLS)


def test_tool_class_values_in_the_docs_are_the_code_s() -> None:
    from typing import get_args

    from otelguard.core.decisions import ToolClass

    classes = ", ".join(f"`{name}`" for name in get_args(ToolClass))
    assert classes in prose(DOCS_DIR / "detectors.md")
    row = re.search(r"^\| `otelguard\.tool\.class` \| (.*) \|$", prose(DOCS_DIR / "telemetry.md"), flags=re.M)
    assert row is not None
    assert re.findall(r"`(\w+)`", row.group(1)) == list(get_args(ToolClass))


def test_metrics_table_lists_every_metric_family() -> None:
    from prometheus_client import CollectorRegistry

    from otelguard.state.reports import StateReport
    from otelguard.telemetry import Telemetry

    registry = CollectorRegistry()
    telemetry = Telemetry(registry=registry)
    telemetry.prime("docs", tools=("web_search",), caps=("web_search",))
    telemetry.state_reported(StateReport(sent=True, error=None, fell_back=False))  # with a state URL
    families = {metric.name for metric in registry.collect()}
    table = _section(DOCS_DIR / "telemetry.md", "Metrics")
    shown = {
        name.removesuffix("_total") for name in re.findall(r"^\| `(otelguard_\w+)` \|", table, flags=re.M)
    }
    assert shown == families


def test_outcome_values_in_the_metrics_table_are_the_code_s() -> None:
    """The ``outcome`` values the table lists for tool calls and for turns are the vocabulary's, in order."""
    from typing import get_args

    from otelguard.core.decisions import TURN_OUTCOMES, Outcome

    table = _section(DOCS_DIR / "telemetry.md", "Metrics")
    for family, values in (
        ("otelguard_tool_calls_total", get_args(Outcome)),
        ("otelguard_turns_total", TURN_OUTCOMES),
    ):
        row = re.search(rf"^\| `{family}` \|[^|]*\| [^(]*`outcome` \(([^)]*)\)", table, flags=re.M)
        assert row is not None, family
        assert tuple(re.findall(r"`(\w+)`", row.group(1))) == tuple(values), family


def _rules() -> list[dict]:  # type: ignore[type-arg]
    import yaml

    document = yaml.safe_load((REPO / "dashboards" / "prometheus" / "otelguard-rules.yaml").read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def test_recording_rules_and_alerts_tables_match_the_rules_file() -> None:
    doc = DOCS_DIR / "dashboards.md"
    recorded = {rule["record"] for rule in _rules() if "record" in rule}
    alerting = {rule["alert"] for rule in _rules() if "alert" in rule}
    shown_records = set(re.findall(r"`(otelguard:[a-z0-9_:]+)`", _section(doc, "Load the rules")))
    shown_alerts = set(re.findall(r"^\| `(Otelguard\w+)`", _section(doc, "Alerts"), flags=re.M))
    assert shown_records == recorded
    assert shown_alerts == alerting
    assert {alert.lower() for alert in alerting} <= anchors(doc)


def test_panels_table_explains_every_panel() -> None:
    dashboard = json.loads((REPO / "dashboards" / "otelguard-overview.json").read_text(encoding="utf-8"))

    def walk(panels: list[dict]) -> list[dict]:  # type: ignore[type-arg]
        return [p for panel in panels for p in (panel, *walk(panel.get("panels", [])))]

    titles = {panel["title"] for panel in walk(dashboard["panels"]) if panel["type"] != "row"}
    table = _section(DOCS_DIR / "dashboards.md", "What the panels show")
    shown = {cell.strip().strip("*") for cell in re.findall(r"^\| ([^|]+) \|", table, flags=re.M)}
    assert titles <= shown, titles - shown


def test_overhead_doc_shows_every_figure_with_the_bench_target() -> None:
    from otelguard.bench import FIGURE_NAMES, TARGETS

    rows = re.findall(
        r"^\| `(\w+)` \|[^\n]*\|\s*(?:≤ ([\d.]+) \((?:met|missed)\))?\s*\|$",
        prose(DOCS_DIR / "overhead.md"),
        flags=re.M,
    )
    shown = dict(rows)
    assert set(shown) == set(FIGURE_NAMES)
    for name, target in shown.items():
        assert (float(target) if target else None) == TARGETS.get(name), name


def test_code_points_only_into_docs_that_exist() -> None:
    """Docstrings and comments that point into the docs folder name a page that exists."""
    missing = []
    for folder in ("otelguard", "tests", "dashboards", "benchmarks"):
        for source in sorted((REPO / folder).rglob("*.py")):
            for page in re.findall(r"\bdocs/([\w.-]+\.md)", source.read_text(encoding="utf-8")):
                if not (DOCS_DIR / page).exists():
                    missing.append(f"{source.relative_to(REPO)}: docs/{page}")
    assert missing == []


def test_configuration_doc_lists_every_environment_variable() -> None:
    from otelguard import environment_variables

    names = {value for name, value in vars(environment_variables).items() if name.isupper()}
    table = _section(DOCS_DIR / "configuration.md", "Environment variables")
    shown = set(re.findall(r"^\| `([A-Z0-9_]+)` \|", table, flags=re.M))
    assert names <= shown, names - shown


def test_every_page_that_installs_from_pypi_also_says_how_before_a_release() -> None:
    """`pip install otelguard` finds nothing before a release: a page that shows it also shows an
    install from a checkout, or links to the section that shows a checkout and a wheel."""
    section = "installing-from-a-checkout-or-a-wheel"
    assert section in anchors(DOCS_DIR / "integrations.md")
    how = (
        (DOCS_DIR / "integrations.md")
        .read_text(encoding="utf-8")
        .split("## Installing from a checkout", 1)[1]
    )
    assert 'pip install -e ".[langchain]"' in how and "pip wheel . -w dist" in how
    for path in DOCUMENTS:
        text = path.read_text(encoding="utf-8")
        if re.search(r"pip install \"?otelguard\b", text):
            assert "pip install -e" in text or f"#{section}" in text, path.name
