"""The HTML replay report in a real browser (headless chromium): it loads clean, fetches nothing, shows
what it promises, runs nothing a transcript smuggles in, and draws a picture."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from otelguard.cli import main
from tests.browser import Page, png_pixels, run_chromium

EXAMPLES = sorted((Path(__file__).parents[1] / "otelguard" / "data" / "examples").glob("*.jsonl"))
HOSTILE_TOOLS = ("<script>alert(1)</script>", '"><img src=x onerror=alert(2)>')


UNATTENDED = Path(__file__).parent / "fixtures" / "replay" / "unattended.yaml"


def replay_to_html(
    tmp_path: Path, paths: list[Path], capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[Path, Any]:
    page = tmp_path / "report.html"
    code = main(["replay", *map(str, paths), "--json", "--html", str(page), *extra])
    assert code == 0
    return page, json.loads(capsys.readouterr().out)


def hostile_transcript(tmp_path: Path) -> Path:
    """An OpenAI transcript whose looping tools are named like markup, so they end up in timelines,
    the halts table and the decisions chart."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for n in range(12):
        tool = HOSTILE_TOOLS[n % 2] if n < 2 else HOSTILE_TOOLS[0]
        arguments = json.dumps({"q": "same"})
        call = {
            "id": f'c{n}"><b>x</b>',
            "type": "function",
            "function": {"name": tool, "arguments": arguments},
        }
        messages.append({"role": "assistant", "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": "Error: failed"})
    path = tmp_path / "<img src=x onerror=alert(3)>.jsonl"
    path.write_text("".join(json.dumps(m) + "\n" for m in messages))
    return path


def open_report(page: Page, file: Path) -> None:
    page.navigate(file.as_uri())


def console_problems(page: Page) -> list[Any]:
    problems: list[Any] = list(page.events("Runtime.exceptionThrown"))
    problems += page.events("Runtime.consoleAPICalled")
    problems += [e for e in page.events("Log.entryAdded") if e["entry"]["level"] in ("error", "warning")]
    return problems


def test_example_report_loads_clean_fetches_nothing_and_shows_every_part(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report, doc = replay_to_html(tmp_path, EXAMPLES, capsys)
    with run_chromium(tmp_path) as browser:
        page = browser.new_page()
        open_report(page, report)
        assert console_problems(page) == []
        requested = [e["request"]["url"] for e in page.events("Network.requestWillBeSent")]
        assert requested == [report.as_uri()]
        timelines = page.evaluate(
            "[...document.querySelectorAll('figure.timeline')].map(f => f.dataset.session)"
        )
        assert sorted(timelines) == sorted(s["session_id"] for s in doc["sessions"])
        halt_rows = page.evaluate("document.querySelectorAll('#halts tr.halt').length")
        assert halt_rows == doc["totals"]["halts"]
        bars = page.evaluate("[...document.querySelectorAll('#decisions g.bar')].map(g => g.dataset.code)")
        assert sorted(bars) == sorted(doc["totals"]["decisions"])
        labels = page.evaluate("[...document.querySelectorAll('text.halt')].map(t => t.textContent)")
        assert sorted(labels) == sorted(h["code"] for s in doc["sessions"] for h in s["halts"])
        legend = page.evaluate("[...document.querySelectorAll('#legend li')].map(li => li.dataset.class)")
        assert {"allowed", "warned", "stopped", "prevented", "cancelled"} <= set(legend)
        caps = page.evaluate(
            "[...document.querySelectorAll('#cap-usage tr[data-cap]')].map(r => r.dataset.cap)"
        )
        assert caps == ["subagents", "web_search"]
        # every drawn timeline is laid out with a real size (nothing collapsed to zero)
        sizes = page.evaluate(
            "[...document.querySelectorAll('figure.timeline svg')].map(s => s.getBoundingClientRect().width)"
        )
        assert sizes and min(sizes) > 100


def test_hostile_names_render_as_text_and_never_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report, doc = replay_to_html(
        tmp_path, [hostile_transcript(tmp_path)], capsys, "--config", str(UNATTENDED)
    )
    assert doc["totals"]["halts"] >= 1
    with run_chromium(tmp_path) as browser:
        page = browser.new_page()
        open_report(page, report)
        assert page.events("Page.javascriptDialogOpening") == []
        assert console_problems(page) == []
        assert page.evaluate("document.scripts.length") == 0
        assert page.evaluate("document.images.length") == 0
        assert page.evaluate("document.querySelectorAll('b:not(figcaption > b)').length") == 0
        text = page.evaluate("document.body.textContent")
        tools = page.evaluate(
            "[...document.querySelectorAll('#halts tr.halt td:nth-child(6)')].map(t => t.textContent)"
        )
        assert tools and set(tools) <= set(HOSTILE_TOOLS)
        assert HOSTILE_TOOLS[0] in text
        assert "<img src=x onerror=alert(3)>.jsonl" in text
        requested = [e["request"]["url"] for e in page.events("Network.requestWillBeSent")]
        assert requested == [report.as_uri()]


def test_example_report_screenshot_is_not_blank(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report, _ = replay_to_html(tmp_path, EXAMPLES, capsys)
    with run_chromium(tmp_path, window=(1280, 900)) as browser:
        page = browser.new_page()
        open_report(page, report)
        reply = page.send(
            "Page.captureScreenshot",
            format="png",
            clip={"x": 0, "y": 0, "width": 1280, "height": 900, "scale": 0.25},
        )
    import base64

    width, height, rows = png_pixels(base64.b64decode(reply["data"]))
    assert (width, height) == (320, 225)
    channels = len(rows[0]) // width
    colours = {row[x : x + 3] for row in rows for x in range(0, len(row), channels)}
    # a blank or error page has a handful of colours; text, bars and marks give hundreds
    assert len(colours) > 50
    darkish = sum(1 for row in rows for x in range(0, len(row), channels) if sum(row[x : x + 3]) < 384)
    assert darkish > width * height // 100


def colours(page: Page) -> tuple[str, str, str]:
    return tuple(  # type: ignore[return-value]
        page.evaluate(
            "(() => { const b = getComputedStyle(document.body);"
            " const m = getComputedStyle(document.querySelector('figure.timeline path.m0'));"
            " return [b.backgroundColor, b.color, m.stroke]; })()"
        )
    )


def test_light_and_dark_schemes_both_have_their_own_colours(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report, _ = replay_to_html(tmp_path, EXAMPLES, capsys)
    with run_chromium(tmp_path) as browser:
        page = browser.new_page()
        schemes = {}
        for scheme in ("light", "dark"):
            page.send(
                "Emulation.setEmulatedMedia", features=[{"name": "prefers-color-scheme", "value": scheme}]
            )
            open_report(page, report)
            schemes[scheme] = colours(page)
    assert schemes["light"][0] == "rgb(255, 255, 255)"
    assert schemes["dark"][0] != schemes["light"][0] and schemes["dark"][1] != schemes["light"][1]
    assert schemes["dark"][2] != schemes["light"][2]


def test_a_page_of_thousands_of_sessions_loads_clean_with_every_row(tmp_path: Path) -> None:
    from otelguard.replay.html.report import write_html
    from otelguard.replay.timeline import DEFAULT_KEEP
    from tests.test_replay_html import big_replay

    report, timelines = big_replay(4000, 20)
    page_file = tmp_path / "big.html"
    write_html(page_file, report, timelines)
    with run_chromium(tmp_path) as browser:
        page = browser.new_page()
        open_report(page, page_file)
        assert console_problems(page) == []
        assert page.evaluate("document.querySelectorAll('figure.timeline').length") == DEFAULT_KEEP
        rows = page.evaluate("document.querySelectorAll('#other-sessions tr.session').length")
        assert rows == 4000 - DEFAULT_KEEP
        # rows far below the fold are laid out once scrolled to (content-visibility only defers them)
        last = "[...document.querySelectorAll('#other-sessions tr.session')].at(-1)"
        page.evaluate(f"{last}.scrollIntoView()")
        assert page.evaluate(f"{last}.getBoundingClientRect().height") > 0


LONG_ID = "agent-run-" + "0123456789abcdef" * 4 + ":sidechain-7"


def short_sessions_transcript(tmp_path: Path) -> Path:
    """Conversations of one call per turn (the turn labels sit closest there), warnings from a call
    that keeps failing, a call that never got a result, and an 80-character session id."""

    def call(n: int, tool: str) -> dict[str, Any]:
        function = {"name": tool, "arguments": json.dumps({"q": "same"})}
        return {
            "role": "assistant",
            "tool_calls": [{"id": f"call_{n}", "type": "function", "function": function}],
        }

    def result(n: int, text: str) -> dict[str, Any]:
        return {"role": "tool", "tool_call_id": f"call_{n}", "content": text}

    short: list[dict[str, Any]] = []
    for n in range(12):
        short += [{"role": "user", "content": f"question {n}"}, call(n, "web_fetch"), result(n, "Error: 503")]
    failing: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for n in range(100, 106):
        failing += [call(n, "terminal"), result(n, "Error: exit 1")]
    failing += [call(200, "read_file"), call(201, "read_file"), result(201, "text")]  # call_200: no result
    path = tmp_path / "short.jsonl"
    path.write_text(
        json.dumps({"id": "short-turns", "messages": short})
        + "\n"
        + json.dumps({"id": LONG_ID, "messages": failing})
        + "\n"
    )
    return path


def boxes(page: Page, selector: str) -> list[list[dict[str, float]]]:
    """Per figure, the boxes of the elements ``selector`` picks inside its SVG."""
    return page.evaluate(
        "[...document.querySelectorAll('figure.timeline')].map(f => [...f.querySelectorAll("
        f"{json.dumps(selector)})].map(e => {{ const r = e.getBoundingClientRect();"
        " return {left: r.left, right: r.right, top: r.top, bottom: r.bottom}; }))"
    )


def test_turn_labels_never_overlap_and_every_mark_names_its_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page_file = tmp_path / "report.html"
    assert main(["replay", str(short_sessions_transcript(tmp_path)), "--json", "--html", str(page_file)]) == 1
    doc = json.loads(capsys.readouterr().out)
    with run_chromium(tmp_path) as browser:
        page = browser.new_page()
        open_report(page, page_file)
        assert console_problems(page) == []
        labels = boxes(page, "svg text:not(.halt)")
        assert any(len(figure) > 1 for figure in labels)
        for figure in labels:
            ordered = sorted(figure, key=lambda box: box["left"])
            for before, after in itertools.pairwise(ordered):
                assert before["right"] <= after["left"], "turn labels overlap"
        marks = page.evaluate(
            "[...document.querySelectorAll('figure.timeline svg path[class^=m]')]"
            ".map(p => p.querySelector('title')?.textContent ?? null)"
        )
        assert len(marks) == sum(s["tool_calls"] for s in doc["sessions"])
        assert None not in marks
        assert "session call 1 · turn 1, call 1 · web_fetch · allow" in marks
        assert "session call 3 · turn 1, call 3 · terminal · exact_failure_warn" in marks
        assert "session call 7 · turn 1, call 7 · read_file · no result" in marks


def test_the_tables_link_to_each_timeline_and_long_ids_are_shortened(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page_file = tmp_path / "report.html"
    main(["replay", str(short_sessions_transcript(tmp_path)), "--json", "--html", str(page_file)])
    doc = json.loads(capsys.readouterr().out)
    with run_chromium(tmp_path) as browser:
        page = browser.new_page()
        open_report(page, page_file)
        links = page.evaluate(
            "[...document.querySelectorAll('a[href^=\"#\"]')].map(a => a.getAttribute('href'))"
        )
        index = page.evaluate(
            "[...document.querySelectorAll('#session-index a')].map(a => a.getAttribute('href'))"
        )
        assert sorted(index) == ["#session-1", "#session-2"]
        for href in set(links):
            assert page.evaluate(f"document.getElementById({json.dumps(href[1:])}) !== null"), href
        page.evaluate("document.querySelector('#session-index a[href=\"#session-2\"]').click()")
        assert page.evaluate("location.hash") == "#session-2"
        assert abs(page.evaluate("document.getElementById('session-2').getBoundingClientRect().top")) < 2
        # the 80-character id is shown shortened, whole in its hover text
        shown = page.evaluate(
            f"[...document.querySelectorAll('[title={json.dumps(LONG_ID)}]')].map(e => e.textContent)"
        )
        assert shown and all(len(text) < 40 and "…" in text for text in shown)
        warned = page.evaluate(
            "[...document.querySelectorAll('#warned-calls tr.warned')].map(r => r.dataset.code)"
        )
        expected = [c["code"] for s in doc["sessions"] for c in s["warned_calls"]]
        # terminal failing again and again (5), and web_fetch failing the same way in turns 4 to 12
        assert sorted(warned) == sorted(expected) and len(warned) == 5 + 9
        assert warned.count("cross_turn_failure_warn") == 9


def relative_luminance(css_colour: str) -> float:
    channels = [int(part) / 255 for part in css_colour[css_colour.index("(") + 1 : -1].split(",")[:3]]
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def test_the_no_result_mark_stands_out_from_its_card_in_both_schemes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """At least 3:1 contrast against the card (WCAG's bar for graphics), light and dark."""
    page_file = tmp_path / "report.html"
    main(["replay", str(short_sessions_transcript(tmp_path)), "--html", str(page_file)])
    capsys.readouterr()
    with run_chromium(tmp_path) as browser:
        page = browser.new_page()
        for scheme in ("light", "dark"):
            page.send(
                "Emulation.setEmulatedMedia", features=[{"name": "prefers-color-scheme", "value": scheme}]
            )
            open_report(page, page_file)
            mark, card = page.evaluate(
                "[getComputedStyle(document.querySelector('figure.timeline path.m5')).stroke,"
                " getComputedStyle(document.querySelector('figure.timeline')).backgroundColor]"
            )
            lighter, darker = sorted((relative_luminance(mark), relative_luminance(card)), reverse=True)
            assert (lighter + 0.05) / (darker + 0.05) >= 3, (scheme, mark, card)


def test_a_halt_has_one_numbering_everywhere_and_says_what_the_guard_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The runaway example halts on the 57th call of its session, the 51st of its second turn: the
    hover text, the halts table and the JSON all say so, labelled, with the cap's limit and message."""
    [runaway] = [p for p in EXAMPLES if p.name == "claude-code-runaway-search.jsonl"]
    report, doc = replay_to_html(tmp_path, [runaway], capsys)
    [halt] = doc["sessions"][0]["halts"]
    assert (halt["session_call"], halt["turn"], halt["call"]) == (57, 2, 51)
    assert (halt["code"], halt["count"], halt["limit"]) == ("cap_turn", 50, 50)
    assert halt["message"].startswith("Not run: this turn already made 50 web searches, the limit is 50.")
    with run_chromium(tmp_path) as browser:
        page = browser.new_page()
        open_report(page, report)
        assert console_problems(page) == []
        hover = page.evaluate(
            "[...document.querySelectorAll('figure.timeline path.m2 title')].map(t => t.textContent)"
        )
        assert "session call 57 · turn 2, call 51 · WebSearch · cap_turn" in hover
        header = page.evaluate("[...document.querySelectorAll('#halts thead th')].map(th => th.textContent)")
        row = page.evaluate("[...document.querySelector('#halts tr.halt').cells].map(td => td.textContent)")
        cells = dict(zip(header, row, strict=True))
        assert (cells["session call"], cells["turn"], cells["call in turn"]) == ("57", "2", "51")
        assert (cells["code"], cells["count"], cells["limit"]) == ("cap_turn", "50", "50")
        assert cells["what the guard said"] == halt["message"]
