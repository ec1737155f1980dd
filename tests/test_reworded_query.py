"""reworded_query: a search tool asked the same thing in other words, or answering what it already
answered, warned, refused, then stopped.

The query's words (case, punctuation, stop words, order, endings aside), the result saying nothing
was found in its many wordings, the streak, its reset, the escalation, the titles a search suggested,
the exact repeats left to the exact rules, which tools and which argument, and the bounds."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from otelguard import GuardConfig
from otelguard.core import decisions as codes_
from otelguard.core.decisions import Signature
from otelguard.core.detectors import searches
from otelguard.core.detectors.searches import SearchMemory, nothing_found, query_of, searched, words
from otelguard.testing import codes, run_script
from tests.test_detectors import make_guard

NOTHING = "Could not find [it]. Similar: []"


def _search(query: str, result: str = NOTHING, tool: str = "Search") -> tuple[Any, ...]:
    return (tool, {"query": query}, result, False)


def _page(n: int) -> str:
    return f"Page {n}: " + " ".join(f"word{n}x{i}" for i in range(40))


# -- the query's words ---------------------------------------------------------------------------


def test_the_words_of_a_query_ignore_case_punctuation_stop_words_order_and_endings() -> None:
    assert words("CBS-affiliated station") == words("the stations affiliate of cbs")
    assert words("What is the CBS station?") == words("cbs STATION")
    assert words("Marvel Netflix series order") != words("Marvel Netflix series release order")
    assert words("  ") == () and words("the of and") == ()


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
@example("Ω≈ç√∫˜µ≤≥÷åß∂ƒ©˙∆˚¬…æœ∑´®†¥¨ˆøπ“‘¡™£¢∞§¶•ªº–≠¸˛Ç◊ı˜Â¯˘¿ÅÍÎÏ˝ÓÔ\uf8ffÒÚÆ☃Œ„´‰ˇÁ¨ˆØ∏”’`⁄€‹›ﬁﬂ‡°·‚—±")
@example("glasses releases studies İstanbul ß ẞ")
def test_the_words_are_idempotent_and_case_invariant(query: str) -> None:
    found = words(query)  # never raises
    assert words(" ".join(found)) == found
    assert words(query.upper()) == found == words(query.lower()) == words(query.swapcase())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=20), max_size=12), st.randoms(use_true_random=False))
def test_the_words_do_not_depend_on_their_order(parts: list[str], rng: random.Random) -> None:
    shuffled = parts[:]
    rng.shuffle(shuffled)
    assert words(" ".join(parts)) == words(" ".join(shuffled))


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        st.none(),
        st.text(),
        st.binary(),
        st.recursive(
            st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=30)),
            lambda inner: (
                st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5)
            ),
            max_leaves=30,
        ),
    ),
    st.one_of(st.text(max_size=50), st.dictionaries(st.text(max_size=12), st.text(max_size=20))),
)
def test_reading_a_search_never_raises(result: Any, args: Any) -> None:
    searched(args, result)
    nothing_found(result)
    query_of(args)


# -- which argument is the query -----------------------------------------------------------------


def test_the_query_is_a_known_argument_else_the_one_string_argument() -> None:
    assert query_of({"query": "a", "q": "b"}) == "a"
    assert query_of({"limit": 5, "q": "b"}) == "b"
    assert query_of({"keywords": ["cbs", "station"]}) == "cbs station"
    assert query_of({"entity": "CBS"}) == "CBS"
    assert query_of({"topic_name": "CBS", "limit": 3}) == "CBS"  # its one string argument
    assert query_of({"origin": "JFK", "destination": "SFO"}) is None  # two strings: no query
    assert query_of({"limit": 3}) is None and query_of(None) is None and query_of([1]) is None
    assert query_of(json.dumps({"query": "CBS station"})) == "CBS station"  # JSON-string arguments
    assert query_of("CBS station") == "CBS station"  # a plain string


# -- nothing found -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "result",
    [
        "No Results",
        "No results found for query: cbs station",
        "Could not find [CBS station]. Similar: ['CBS', 'WKRC-TV', 'List of CBS television affiliates']",
        "Could not find that page, please try again.",
        "couldn't find anything matching your query",
        "Nothing found.",
        "Your search - cbs station - did not match any documents.",
        "Search returned 0 results.",
        'Web search results for query: "cbs station"\n\nNo links found.',
        [],
        {"results": []},
        {"web": {"results": []}, "query": "cbs station"},
        '{"results": [], "total": 0}',
        [{"type": "text", "text": "No matches found"}],
        {"content": [{"type": "text", "text": "No results"}]},
    ],
)
def test_nothing_found_in_its_many_wordings(result: Any) -> None:
    assert nothing_found(result, "cbs station")


@pytest.mark.parametrize(
    "result",
    [
        "No Country for Old Men is a 2007 American crime thriller film written and directed by the Coens.",
        "WKRC-TV is a television station in Cincinnati, Ohio, affiliated with CBS. " * 3
        + "The page you asked for was not found on the old site, so it moved here.",
        "Nothing Was the Same is the third studio album by Canadian rapper Drake.",
        {"results": [{"title": "WKRC-TV", "url": "https://example.org/wkrc"}]},
        '{"results": [{"title": "WKRC-TV"}]}',
        'Web search results for query: "not found error"\n\nLinks: [{"title": "HTTP 404"}]',
    ],
)
def test_a_result_with_something_in_it_is_not_nothing_found(result: Any) -> None:
    assert not nothing_found(result, "not found error")


# -- the rule, through the guard -----------------------------------------------------------------


def test_a_rewording_of_searches_that_found_nothing_is_warned_then_refused() -> None:
    guard = make_guard()
    steps = run_script(
        guard,
        [
            _search("CBS station"),
            _search("station of CBS"),  # the same words, nothing again: warned
            _search("CBS Stations"),  # refused before it runs
            _search("CBS-affiliated station"),  # a new word: it runs
            _search("WKRC-TV", "WKRC-TV is a television station in Cincinnati"),
        ],
    )
    assert codes(steps) == ["allow", "reworded_query_warn", "reworded_query_reject", "allow", "allow"]
    warned, refused = steps[1].decision, steps[2].decision
    assert (warned.count, warned.limit, refused.count, refused.limit) == (2, 2, 2, 2)
    assert "CBS" not in refused.message and "station" not in refused.message  # counts, never the query
    assert refused.code in codes_.LOOP_CODES


def test_searches_for_other_things_that_find_nothing_are_not_warned() -> None:
    guard = make_guard()
    got = codes(run_script(guard, [_search("Sandi Patti"), _search("Tim Kaine"), _search("Nick Park")]))
    assert got == ["allow"] * 3


def test_a_query_with_a_new_word_runs_and_what_it_finds_ends_the_streak() -> None:
    guard = make_guard()
    script = [_search("CBS station"), _search("CBS station")]  # a streak of 2
    script += [_search("CBS station Cincinnati", "WKRC-TV is a CBS station in Cincinnati")]  # new: ends it
    script += [_search("CBS station")]  # no streak any more: it runs
    assert codes(run_script(guard, script)) == ["allow", "reworded_query_warn", "allow", "allow"]


def test_a_result_already_returned_extends_the_streak_like_nothing_found() -> None:
    guard = make_guard()
    page = _page(1)
    script = [_search("Wings at the Speed of Sound", page), _search("Wings Speed of Sound cover", page)]
    script += [_search("Wings Speed Sound cover album", page.replace("Page 1", "Page 1."))]  # near enough
    script += [_search("cover of Wings at the Speed of Sound")]  # only words already used: refused
    assert codes(run_script(guard, script)) == ["allow", "allow", "allow", "reworded_query_reject"]


def test_pages_that_differ_by_their_numbers_are_different_results() -> None:
    guard = make_guard()
    script = [_search(f"tool call loops paper {n}", f"paper {n} https://example.org/{n}") for n in range(8)]
    script += [
        _search(f"gpu prices {n}", json.dumps({"results": 10, "first": f"https://example.com/{n}"}))
        for n in range(8)
    ]  # short results: their few shingles compared exactly, not as a sample
    assert codes(run_script(guard, script)) == ["allow"] * 16


def test_a_query_joining_two_earlier_queries_words_runs_below_twice_the_stop() -> None:
    """Each query's words checked against one earlier query's, not against all of them pooled: "Nick
    Park Wallace and Gromit" asks for what neither "Wallace and Gromit creator" nor "Nick Park" asked
    (a more specific search), while "Gromit Wallace" only trims the first."""
    guard = make_guard()
    script = [_search("Wallace and Gromit creator"), _search("Nick Park")]
    script += [_search("Nick Park Wallace and Gromit"), _search("Gromit Wallace")]
    assert codes(run_script(guard, script)) == ["allow", "allow", "allow", "reworded_query_reject"]


def test_at_twice_the_stop_the_streaks_words_joined_are_refused_and_a_new_word_runs() -> None:
    guard = make_guard()
    script = [
        _search(f"Marvel Netflix series {words}") for words in ("order", "timeline", "leading Defenders")
    ]
    script += [_search("Marvel Netflix series timeline order")]  # streak 3: two queries joined, it runs
    script += [_search("Marvel Netflix series order leading Defenders")]  # streak 4: joined, refused
    script += [_search("Marvel Netflix series release order")]  # a new word: it runs
    got = codes(run_script(guard, script))
    assert got == ["allow", "allow", "allow", "allow", "reworded_query_reject", "allow"]


def test_past_twice_the_stop_a_query_sharing_a_word_is_refused() -> None:
    guard = make_guard()
    words = ("2004", "name change", "acronym", "new", "rename")
    script = [_search(f"VIVA Media AG {word}") for word in words]
    script += [_search("VIVA Media AG meaning"), _search("Viacom history")]
    got = codes(run_script(guard, script))
    assert got == ["allow"] * 5 + ["reworded_query_reject", "allow"]


def test_rejects_then_a_stop_like_an_exact_loop() -> None:
    guard = make_guard(rejects_before_stop=2)
    script = [_search("CBS station"), _search("CBS station")] + [_search("station CBS")] * 3
    assert codes(run_script(guard, script)) == [
        "allow",
        "reworded_query_warn",
        "reworded_query_reject",
        "reworded_query_reject",
        "reworded_query_block",
    ]
    assert guard.halt_decision is not None and guard.halt_decision.code == "reworded_query_block"


def test_rejects_before_stop_zero_stops_at_once() -> None:
    guard = make_guard(rejects_before_stop=0)
    script = [_search("CBS station"), _search("CBS station"), _search("station CBS")]
    assert codes(run_script(guard, script))[-1] == "reworded_query_block"


def test_a_title_the_search_suggested_runs_once() -> None:
    guard = make_guard()
    suggested = "Could not find [The Prince and Me]. Similar: ['The Prince & Me', 'The Prince & Me 2']"
    script = [_search("The Prince and Me", suggested), _search("The Prince and Me (film)")]
    script += [_search("The Prince & Me"), _search("The Prince & Me")]  # taken up; then not again
    assert codes(run_script(guard, script)) == ["allow", "allow", "allow", "reworded_query_reject"]


def test_the_very_call_again_that_found_something_is_left_to_the_exact_rules() -> None:
    guard = make_guard()
    page = _page(2)
    script = [_search("CBS station", page)] * 4
    got = codes(run_script(guard, script))
    assert not any(code.startswith("reworded_query_reject") for code in got), got


def test_the_very_call_again_that_found_nothing_is_refused() -> None:
    guard = make_guard()
    assert codes(run_script(guard, [_search("Frankie LaRocka band")] * 3))[-1] == "reworded_query_reject"


def test_an_unrecorded_result_is_not_judged() -> None:
    guard = make_guard()
    assert (
        codes(run_script(guard, [_search(f"tool call loops paper {n}", "") for n in range(6)]))
        == ["allow"] * 6
    )


def test_a_failed_search_counts_for_the_failure_rules_not_here() -> None:
    guard = make_guard()
    failed = ("Search", {"query": "CBS station"}, "Error: rate limited", True)
    got = codes(
        run_script(guard, [failed, ("Search", {"query": "station CBS"}, "Error: rate limited", True)])
    )
    assert not any(code.startswith("reworded_query") for code in got)


def test_a_new_turn_starts_afresh() -> None:
    guard = make_guard()
    run_script(guard, [_search("CBS station"), _search("CBS station")])
    guard.start_turn()
    assert codes(run_script(guard, [_search("station CBS")])) == ["allow"]


def test_without_hard_stop_it_only_warns() -> None:
    guard = make_guard(hard_stop=False)
    rewordings = ["station CBS", "CBS, station", "cbs stations", "The CBS station"]
    got = codes(run_script(guard, [_search("CBS station")] + [_search(query) for query in rewordings]))
    assert got == ["allow"] + ["reworded_query_warn"] * 4


def test_the_thresholds_are_the_config_keys() -> None:
    guard = make_guard(warn_after={"reworded_query": 3}, hard_stop_after={"reworded_query": 3})
    got = codes(run_script(guard, [_search("CBS station")] * 2 + [_search("station CBS")] * 2))
    assert got == ["allow", "allow", "reworded_query_warn", "reworded_query_reject"]
    assert GuardConfig().warn_after["reworded_query"] == 2 == GuardConfig().hard_stop_after["reworded_query"]


@pytest.mark.parametrize("tool", ["web_search", "WebSearch", "mcp_exa_web_search", "Lookup", "search"])
def test_the_search_tools_by_default(tool: str) -> None:
    guard = make_guard()
    script = [_search("CBS station", tool=tool)] * 2 + [_search("station CBS", tool=tool)]
    assert codes(run_script(guard, script))[-1] == "reworded_query_reject"


@pytest.mark.parametrize("tool", ["read_file", "get_order_details", "bash", "search_direct_flight"])
def test_other_tools_are_never_judged(tool: str) -> None:
    guard = make_guard()
    script = [_search("CBS station", tool=tool)] * 2 + [_search("station CBS", tool=tool)] * 2
    assert not any(code.startswith("reworded_query") for code in codes(run_script(guard, script)))


def test_a_search_tool_of_ones_own_joins_the_web_search_group() -> None:
    guard = make_guard(tool_groups={"web_search": ["my_search"]})
    script = [_search("CBS station", tool="my_search")] * 2 + [_search("station CBS", tool="my_search")]
    assert codes(run_script(guard, script))[-1] == "reworded_query_reject"


def test_each_search_tool_has_its_own_streak() -> None:
    guard = make_guard()
    script = [_search("CBS station", tool="Lookup"), _search("CBS station", tool="Lookup")]
    script += [_search("station CBS", tool="Search")]
    assert codes(run_script(guard, script)) == ["allow", "reworded_query_warn", "allow"]


def test_a_refused_rewording_is_charged_to_no_cap() -> None:
    guard = make_guard(caps={"session": {"web_search": 10}})
    run_script(guard, [_search("CBS station", tool="web_search")] * 2)
    assert guard.before_call("web_search", {"query": "station CBS"}).code == "reworded_query_reject"
    assert guard.end_turn().cap_usage.get("web_search", 0) <= 2
    assert guard.session_caps.usage() == {"web_search": 2}


# -- bounds and privacy --------------------------------------------------------------------------


def _memory_after(calls: int, query: Any = None, tools: int = 1) -> SearchMemory:
    memory = SearchMemory()
    for n in range(calls):
        sig = Signature(f"Search{n % tools}", f"{n:016x}")
        found = searched({"query": query(n) if query else f"q{n} w{n}x w{n}y"}, f"No results for {n}")
        assert found is not None
        memory.record(sig, found)
    return memory


def test_the_tools_of_a_turn_are_bounded() -> None:
    memory = _memory_after(3 * searches._TOOLS, tools=3 * searches._TOOLS)
    assert len(memory.tools) == searches._TOOLS


def test_the_words_queries_and_titles_of_a_streak_are_bounded() -> None:
    memory = _memory_after(500, lambda n: f"w{n}a w{n}b w{n}c 'title {n}'")
    tool = memory.tools["Search0"]
    assert tool.streak == 500
    assert len(tool.words) == searches._WORDS
    assert len(tool.asked) == searches._QUERIES
    assert len(tool.sent) == len(tool.empty) == searches._TITLES


def test_the_results_kept_are_bounded_and_only_digests_are_kept() -> None:
    memory = SearchMemory()
    for n in range(100):
        found = searched({"query": f"query {n}"}, _page(n) + " 'a suggested title'")
        assert found is not None
        memory.record(Signature("Search", f"{n:016x}"), found)
    tool = memory.tools["Search"]
    assert len(tool.results) == searches._RESULTS
    kept = [*tool.words, *tool.sent, *tool.titles, *tool.empty]
    kept += [h for digest, small in tool.results for h in (digest, *small)]
    assert all(type(value) is int for value in kept)  # no text of a query or a result


def test_a_result_is_judged_by_its_first_kibibyte_only() -> None:
    """A result's sketch and its "nothing found" are read from its first 1,024 characters (what a
    search's result is about stands at its start; reading all of a long page made every search call
    several times dearer than any other call): two pages alike there are one result, and a page that
    says it found nothing only further down found something."""
    head = " ".join(f"word{n}" for n in range(300))[: searches._SKETCHED]
    first = searches.sketch(head + " tail one " * 200)
    second = searches.sketch(head + " quite another ending " * 200)
    assert first == second
    assert searches.sketch("x" + head[1:]) != first
    assert not nothing_found(head + " No results found.")
    assert nothing_found("No results found. " + head)


def _sketch_sorting_every_shingle(text: str) -> tuple[int, tuple[int, ...]]:
    """``searches.sketch`` as first written: every shingle's digest sorted."""
    found = text[: searches._SKETCHED].casefold().encode().split()
    digest = searches._hash64(b" ".join(found))
    if len(found) <= 3:
        return digest, (digest,)
    shingles = {searches._hash64(b" ".join(found[i : i + 3])) for i in range(len(found) - 2)}
    return digest, tuple(sorted(shingles)[: searches._SKETCH])


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 400), st.integers(0, 500), st.randoms(use_true_random=False))
@example(1, 300, random.Random(0))  # one word: a single distinct shingle, fewer than a sketch holds
@example(12, 300, random.Random(0))  # few distinct shingles under the bound: all of them sorted
def test_a_sketch_keeps_the_smallest_shingle_digests_of_all(
    vocabulary: int, size: int, rng: random.Random
) -> None:
    """Only the digests under a bound are sorted; the sketch is the same as sorting them all, in
    texts of many distinct shingles and in texts repeating a few."""
    text = " ".join(f"w{rng.randrange(vocabulary)}" for _ in range(size))
    assert searches.sketch(text) == _sketch_sorting_every_shingle(text)


_QUERIES = ["CBS station", "station of CBS", "CBS", "WKRC TV", "CBS affiliate Cincinnati"]
_RESULTS = [NOTHING, NOTHING, _page(1), _page(2), "Similar: ['WKRC TV']"]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 4), st.integers(0, 4), st.sampled_from(["Search", "Lookup"])), max_size=40
    )
)
def test_the_answer_asked_without_commit_is_the_refusal_given(steps: list[tuple[int, int, str]]) -> None:
    """``would_refuse`` (asked before a cap is charged, changing nothing) says exactly whether the
    walk refuses the call; the rejects are counted once, by the walk."""
    guard = make_guard(rejects_before_stop=2, caps={"session": {"web_search": 1000}})
    mismatches: list[tuple[bool, bool]] = []
    detectors = guard._current_turn().detectors
    refuse = detectors.refuse_before

    def checked(sig: Any, tool_class: Any) -> Any:
        predicted = detectors.would_refuse(sig, tool_class)
        refused = refuse(sig, tool_class)
        if predicted != (refused is not None):
            mismatches.append((predicted, refused is not None))
        return refused

    detectors.refuse_before = checked  # type: ignore[method-assign]
    for query, result, tool in steps:
        decision = guard.before_call(tool, {"query": _QUERIES[query]})
        if decision.should_halt:
            break
        if decision.allows_execution:
            guard.after_call(tool, {"query": _QUERIES[query]}, _RESULTS[result])
    assert mismatches == []


# -- what a call pays for it ---------------------------------------------------------------------


def test_a_query_is_read_only_when_the_streak_could_refuse_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading a query costs as much as the rest of a call: before a call runs, only a search of a
    tool whose streak is at the stop (with hard_stop) has it read; other calls never do, and the
    decisions are the ones the rules give."""
    from otelguard.core import guard as guard_module

    read: list[str] = []
    reader = guard_module.query

    def counted(sig: Signature, args: Any) -> Any:
        read.append(sig.tool_name)
        return reader(sig, args)

    monkeypatch.setattr(guard_module, "query", counted)
    guard = make_guard()
    script = [
        ("read_file", {"path": "a.py"}, "x = 1", False),
        _search("CBS station", _page(1)),  # found something: no streak
        _search("CBS affiliate"),
        _search("CBS affiliated station"),  # the streak reaches the stop as this one ends
        ("read_file", {"path": "b.py"}, "y = 2", False),
        _search("cbs stations"),  # a rewording at the stop: read, and refused
    ]
    got = codes(run_script(guard, script))
    assert got == ["allow", "allow", "allow", "allow", "allow", "reworded_query_reject"]
    assert read == ["Search"]


def test_a_successful_search_that_joins_no_streak_reads_neither_words_nor_titles() -> None:
    """A search whose result is new and whose tool has no streak ends none and joins none: the
    digests of its query's words and of the titles its result quoted are never made."""
    memory = SearchMemory()
    sig = Signature("Search", "h1")
    found = searched({"query": "CBS station"}, _page(1) + " 'a suggested title'")
    assert found is not None and memory.record(sig, found) == 0
    assert found._words is None and found._titles is None
    again = searched({"query": "CBS stations"}, _page(1))  # the same page: the streak begins
    assert again is not None
    memory.record(Signature("Search", "h2"), again)
    assert again._words is not None and again._titles is not None
