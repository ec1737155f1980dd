"""The HTML replay report: self-contained, escaped, nothing raw, bounded at 10,000 sessions, and a
``--html FILE`` option that works with or without ``--json`` and refuses ``--follow``."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from otelguard import GuardConfig
from otelguard.cli import main
from otelguard.replay import ReplayRunner, replay_inputs
from otelguard.replay.html.report import MAX_HALT_ROWS, MAX_SESSION_ROWS, render_html, write_html
from otelguard.replay.report import HaltRecord, InputReport, ReplayReport, SessionReport
from otelguard.replay.timeline import (
    ALLOWED,
    DEFAULT_KEEP,
    MAX_COLUMNS,
    PREVENTED,
    STOPPED,
    WARNED,
    SessionMarks,
    Timelines,
    session_rank,
)
from tests.test_replay_cli import ARG_CANARY, ERROR_CANARY, RESULT_CANARY, canary_transcripts

EXAMPLES = sorted((Path(__file__).parents[1] / "otelguard" / "data" / "examples").glob("*.jsonl"))
UNATTENDED = Path(__file__).parent / "fixtures" / "replay" / "unattended.yaml"
PAGE_LIMIT_BYTES = 20 * 1024 * 1024
ALLOWED_TAGS = {
    "html", "head", "meta", "title", "style", "body", "h1", "h2", "p", "dl", "div", "dt", "dd", "svg",
    "g", "text", "rect", "path", "ul", "li", "span", "figure", "figcaption", "b", "br", "table",
    "thead", "tbody", "tr", "th", "td", "colgroup", "col", "a",
}  # fmt: skip


class Page(HTMLParser):
    """Tags with their attributes, and the text, as a browser's parser would see them."""

    def __init__(self, document: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.feed(document)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def all(self, tag: str, **attrs: str) -> list[dict[str, str | None]]:
        return [a for t, a in self.tags if t == tag and all(a.get(k) == v for k, v in attrs.items())]


def test_html_and_json_together(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "report.html"
    assert main(["replay", *map(str, EXAMPLES), "--json", "--html", str(target)]) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)  # stdout is still exactly one JSON document
    assert f"wrote the HTML report to {target}" in captured.err
    page = Page(target.read_text())
    figures = page.all("figure")
    assert [f["data-session"] for f in figures] == [
        "7d3e9f10-5a2b-4c8d-9e1f-0a1b2c3d4e5f",
        "openai-delegation-storm",
    ]
    assert [int(str(f["data-calls"])) for f in figures] == [61, 7]
    assert len(page.all("tr", **{"class": "halt"})) == doc["totals"]["halts"] == 2
    bars = {str(g["data-code"]): int(str(g["data-count"])) for g in page.all("g", **{"class": "bar"})}
    assert bars == doc["totals"]["decisions"]
    totals = {str(d["data-total"]) for d in page.all("div") if "data-total" in d}
    assert totals == {"sessions", "turns", "tool_calls", "halts", "prevented_calls", "errors"} | (
        {"model_replies", "prevented_replies"} if "model" in doc["totals"] else set()
    )


def test_html_without_json_prints_the_tables(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "report.html"
    assert main(["replay", *map(str, EXAMPLES), "--html", str(target)]) == 0
    assert "decisions by code" in capsys.readouterr().out
    assert target.read_text().startswith("<!DOCTYPE html>")


def test_page_is_self_contained() -> None:
    timelines = Timelines()
    runner = ReplayRunner(GuardConfig(), timelines=timelines)
    replay_inputs([str(p) for p in EXAMPLES], "auto", runner)
    document = render_html(runner.finish(), timelines)
    page = Page(document)
    assert {tag for tag, _ in page.tags} <= ALLOWED_TAGS  # no script, link, img, iframe, object
    # the only links are to places on the page itself
    assert {str(a["href"])[:9] for a in page.all("a")} == {"#session-"}
    assert not re.search(r"src\s*=|href\s*=\s*\"[^#]|url\(|@import|https?:", document, re.IGNORECASE)
    [policy] = [a for a in page.all("meta") if a.get("http-equiv") == "Content-Security-Policy"]
    assert "default-src 'none'" in str(policy["content"])
    assert "prefers-color-scheme:dark" in document


@pytest.mark.parametrize("follow_args", [["--follow"], ["--follow", "--idle-timeout", "1"]])
def test_html_with_follow_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], follow_args: list[str]
) -> None:
    target = tmp_path / "report.html"
    assert main(["replay", str(EXAMPLES[0]), "--html", str(target), *follow_args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--html cannot be used with --follow" in err
    assert not target.exists()


def test_html_into_a_missing_directory_or_onto_a_directory_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["replay", str(EXAMPLES[0]), "--html", str(tmp_path / "nope" / "r.html")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["replay", str(EXAMPLES[0]), "--html", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_no_argument_values_results_or_error_texts_in_the_page(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "report.html"
    root = canary_transcripts(tmp_path)
    assert main(["replay", str(root), "--config", str(UNATTENDED), "--html", str(target)]) == 1
    document = target.read_text()
    assert "exact_failure_block" in document
    for canary in (ARG_CANARY, RESULT_CANARY, ERROR_CANARY):
        assert canary not in document


HOSTILE = ("<script>alert(1)</script>", '"><img src=x onerror=alert(1)>', "'onmouseover='x", "&amp;<b>")


def one_session_report(session_id: str, path: str, tool: str, call_id: str) -> tuple[ReplayReport, Timelines]:
    report = ReplayReport()
    report.inputs[path] = InputReport(path=path, format="openai", sessions=1)
    session = SessionReport(session_id=session_id, path=path, seq=1, turns=1, tool_calls=3)
    session.decisions["cap_turn"] = 1
    session.add_halt(
        HaltRecord(turn=1, call=2, call_id=call_id, tool_name=tool, action="block", code="cap_turn")
    )
    report.actions["cap_turn"] = {"block"}
    report.add_session(session)
    other = SessionReport(session_id=session_id + "-2", path=path, seq=2, turns=1, tool_calls=1)
    report.add_session(other)
    timelines = Timelines(keep=1)
    marks = SessionMarks()
    marks.start_turn()
    for mark in (ALLOWED, STOPPED, PREVENTED):
        marks.add(mark)
        if mark == STOPPED:
            marks.halt_here()
    timelines.offer(session_rank(1, session.decisions, 1), 1, marks)
    timelines.offer(session_rank(0, {}, 2), 2, SessionMarks())
    return report, timelines


@pytest.mark.parametrize("hostile", HOSTILE)
def test_every_transcript_string_is_escaped_in_text_and_attributes(hostile: str) -> None:
    report, timelines = one_session_report(hostile, f"/tmp/{hostile}.jsonl", hostile, hostile)
    page = Page(render_html(report, timelines))
    assert {tag for tag, _ in page.tags} <= ALLOWED_TAGS
    text = "".join(page.text)
    assert text.count(hostile) >= 5  # session id (timeline, halts table), tool, call id, path
    assert page.all("figure")[0]["data-session"] == hostile
    assert page.all("tr", **{"class": "session"})[0]["data-session"] == hostile + "-2"
    for _, attrs in page.tags:
        assert not any(name.startswith("on") for name in attrs)


@given(
    st.text(max_size=40),
    st.text(max_size=40),
    st.text(max_size=40),
    st.one_of(st.none(), st.text(max_size=20)),
)
def test_render_never_raises_and_never_makes_markup_from_names(
    session_id: str, path: str, tool: str, call_id: str | None
) -> None:
    report, timelines = one_session_report(session_id, path, tool, call_id or "")
    document = render_html(report, timelines)
    document.encode("utf-8", "replace")
    page = Page(document)
    assert {tag for tag, _ in page.tags} <= ALLOWED_TAGS
    assert len(page.all("figure")) == 1


def big_replay(sessions: int, calls_per_session: int) -> tuple[ReplayReport, Timelines]:
    """A report shaped like a 10,000-session replay, built directly (the guard is not what is tested):
    every 7th session halts in each turn, every 3rd warns, and one session is huge."""
    report = ReplayReport()
    report.inputs["big.jsonl"] = InputReport(path="big.jsonl", format="claude-code", sessions=sessions)
    report.actions.update({"cycle_block": {"block"}, "cycle_warn": {"warn"}})
    timelines = Timelines()
    for seq in range(1, sessions + 1):
        calls = 200_000 if seq == 5 else calls_per_session
        session = SessionReport(session_id=f"session-{seq:05d}", path="big.jsonl", seq=seq, tool_calls=calls)
        marks = SessionMarks()
        for call in range(calls):
            if call % 20 == 0:
                marks.start_turn()
                session.turns += 1
            halts = seq % 7 == 0 or seq == 5
            if halts and call % 20 == 10:
                marks.add(STOPPED)
                session.decisions["cycle_block"] += 1
                session.add_halt(HaltRecord(session.turns, 11, f"id{call}", "Bash", "block", "cycle_block"))
                marks.halt_here()
            elif seq % 3 == 0 and call % 20 == 5:
                marks.add(WARNED)
                session.decisions["cycle_warn"] += 1
            else:
                marks.add(PREVENTED if halts and call % 20 > 10 else ALLOWED)
        report.add_session(session)
        timelines.offer(session_rank(session.halts_total, session.decisions, seq), seq, marks)
    return report, timelines


def test_ten_thousand_sessions_and_a_million_calls_stay_under_the_page_bound() -> None:
    report, timelines = big_replay(10_000, 81)
    assert report.totals()["tool_calls"] > 1_000_000
    document = render_html(report, timelines)
    assert len(document.encode()) < PAGE_LIMIT_BYTES
    page = Page(document)
    figures = page.all("figure")
    assert len(figures) == DEFAULT_KEEP
    assert all(int(str(f["data-marks"])) <= MAX_COLUMNS for f in figures)
    # the huge session halts 10,000 times: it ranks first, downsampled, with every listed halt ticked
    assert figures[0]["data-session"] == "session-00005" and figures[0]["data-halts"] == "10000"
    big = document.split("<figure", 2)[1]
    assert big.count("l3 4l3 -4") == len(report.sessions[4].halts) == 1000
    assert "each mark is" in big
    assert all(int(str(f["data-halts"])) > 0 for f in figures)  # the halting sessions come first
    assert len(page.all("tr", **{"class": "session"})) == MAX_SESSION_ROWS
    assert f"first {MAX_SESSION_ROWS} of {10_000 - DEFAULT_KEEP} sessions" in document
    assert len(page.all("tr", **{"class": "halt"})) == MAX_HALT_ROWS


def test_a_lone_surrogate_in_a_name_is_written_not_raised(tmp_path: Path) -> None:
    report, timelines = one_session_report("s\ud800", "p\udfff.jsonl", "tool\ud83d", "id")
    target = tmp_path / "r.html"
    assert write_html(target, report, timelines) == target.stat().st_size
    assert "s?" in target.read_text(encoding="utf-8")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (a device every write to fails)")
def test_a_write_that_fails_after_the_replay_exits_1_with_the_reason(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["replay", *map(str, EXAMPLES), "--json", "--html", "/dev/full"]) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["totals"]["sessions"] == 2  # the report is still printed
    assert "cannot write --html /dev/full: No space left on device" in captured.err
