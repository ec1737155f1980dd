"""Per-turn and per-session caps: keys, groups, globs, batches, refunds, on_hit."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from otelguard import Decision, Guard, GuardConfig
from otelguard.testing import RecordingObserver, codes, run_script

KEY = "test-signature-key"
_unique = itertools.count()


def make_guard(*, on_hit: str = "block", turn: dict[str, int] | None = None, session: dict[str, int] | None = None,
               **config: Any) -> Guard:  # fmt: skip
    caps: dict[str, Any] = {"on_hit": on_hit}
    if turn is not None:
        caps["turn"] = turn
    if session is not None:
        caps["session"] = session
    guard = Guard(GuardConfig.from_mapping({"signature_key": KEY, "caps": caps, **config}))
    guard.start_turn()
    return guard


def call(
    guard: Guard, tool: str, args: Any = None, *, refusal: str | None = None, failed: bool = False
) -> Decision:
    """One call the way a host makes it; fresh args and result unless given. Returns before_call's decision."""
    args = args if args is not None else {"q": f"query {next(_unique)}"}
    decision = guard.before_call(tool, args)
    if decision.allows_execution:
        guard.after_call(tool, args, f"result {next(_unique)}", failed=failed, refusal=refusal)
    return decision


def tasks(n: int) -> list[dict[str, str]]:
    return [{"goal": f"subtask {i} {next(_unique)}"} for i in range(n)]


# -- per turn, per session -----------------------------------------------------------------------


def test_default_turn_cap_is_fifty_web_searches() -> None:
    """caps.turn.web_search defaults to 50: the 51st web search of a turn is refused (cap_turn)."""
    guard = make_guard()
    assert all(call(guard, "web_search").allows_execution for _ in range(50))
    decision = call(guard, "web_search")
    assert (decision.action, decision.code, decision.cap) == ("block", "cap_turn", "web_search")
    assert (decision.count, decision.limit) == (50, 50)


def test_default_turn_cap_is_fifty_subagents() -> None:
    """caps.turn.subagents defaults to 50."""
    guard = make_guard()
    assert all(call(guard, "Task", {"prompt": f"p{i}"}).allows_execution for i in range(50))
    decision = call(guard, "Task", {"prompt": "one more"})
    assert (decision.code, decision.cap, decision.count, decision.limit) == ("cap_turn", "subagents", 50, 50)


def test_default_session_cap_is_two_hundred() -> None:
    """caps.session.web_search defaults to 200, counted across turns."""
    guard = make_guard()
    for _ in range(4):
        guard.start_turn()
        assert all(call(guard, "web_search").allows_execution for _ in range(50))
    guard.start_turn()
    decision = call(guard, "web_search")
    assert (decision.code, decision.count, decision.limit) == ("cap_session", 200, 200)


def test_session_cap_counts_across_turns() -> None:
    """caps.session counters live for the whole session (the guard, and any subagent guards it makes)."""
    guard = make_guard(turn={"web_search": 0}, session={"web_search": 3})
    assert call(guard, "web_search").allows_execution
    assert call(guard, "web_search").allows_execution
    guard.start_turn()
    assert call(guard, "web_search").allows_execution
    decision = call(guard, "web_search")
    assert (decision.code, decision.cap, decision.count, decision.limit) == (
        "cap_session",
        "web_search",
        3,
        3,
    )


def test_turn_caps_reset_per_turn() -> None:
    """caps.turn counters reset at start_turn."""
    guard = make_guard(turn={"web_search": 2})
    assert [call(guard, "web_search").code for _ in range(3)] == ["allow", "allow", "cap_turn"]
    guard.start_turn()
    assert [call(guard, "web_search").code for _ in range(3)] == ["allow", "allow", "cap_turn"]


def test_zero_means_unlimited() -> None:
    """A cap of 0 is unlimited."""
    guard = make_guard(turn={"web_search": 0}, session={"web_search": 0})
    assert all(call(guard, "web_search").allows_execution for _ in range(260))


# -- keys: groups, tool names, globs ------------------------------------------------------------


@pytest.mark.parametrize(
    "names",
    [
        ["web_search", "WebSearch", "mcp__brave-search__brave_web_search", "mcp_exa_web_search_exa"],
        ["delegate_task", "Task", "Agent", "spawn_agent"],
    ],
    ids=["web_search", "subagents"],
)
def test_default_groups_share_one_counter(names: list[str]) -> None:
    """A group key is one counter shared by every tool it matches (hermes, Claude Code and MCP names)."""
    group = "web_search" if "web_search" in names else "subagents"
    guard = make_guard(turn={group: len(names) - 1})
    decisions = [call(guard, name) for name in names]
    assert [d.code for d in decisions] == ["allow"] * (len(names) - 1) + ["cap_turn"]
    assert decisions[-1].cap == group


@pytest.mark.parametrize("name", ["websearch", "search_files", "web_fetch", "Grep", "TaskOutput"])
def test_other_tools_are_not_charged_to_the_default_groups(name: str) -> None:
    """Tools outside the groups are not charged to them."""
    guard = make_guard(turn={"web_search": 1, "subagents": 1})
    assert all(call(guard, name).allows_execution for _ in range(5))


def test_cap_key_may_be_a_tool_name() -> None:
    """A cap key that is not a group is a tool name."""
    guard = make_guard(turn={"browser_click": 2})
    assert [call(guard, "browser_click").code for _ in range(3)] == ["allow", "allow", "cap_turn"]


def test_cap_key_may_be_a_glob() -> None:
    """A cap key may be an fnmatch glob; it is one counter for every tool it matches."""
    guard = make_guard(on_hit="reject", turn={"mcp__github__*": 2})
    assert call(guard, "mcp__github__get_issue").allows_execution
    assert call(guard, "mcp__slack__post_message").allows_execution
    assert call(guard, "mcp__github__list_pull_requests").allows_execution
    decision = call(guard, "mcp__github__create_issue")
    assert (decision.code, decision.cap, decision.count) == ("cap_turn", "mcp__github__*", 2)
    assert call(guard, "mcp__slack__post_message").allows_execution


def test_custom_tool_group() -> None:
    """tool_groups adds groups usable as cap keys."""
    guard = make_guard(turn={"browser": 2}, tool_groups={"browser": ["browser_*", "computer"]})
    decisions = [call(guard, "browser_click"), call(guard, "computer"), call(guard, "browser_type")]
    assert [d.code for d in decisions] == ["allow", "allow", "cap_turn"]
    assert decisions[-1].cap == "browser"


def test_a_call_counts_against_every_matching_cap() -> None:
    """A call counts against every cap whose key matches it."""
    guard = make_guard(
        on_hit="reject",
        turn={"all_fetch": 3, "fetch_a_only": 5},
        tool_groups={"all_fetch": ["fetch_*"], "fetch_a_only": ["fetch_a"]},
    )
    assert [call(guard, t).code for t in ("fetch_a", "fetch_a", "fetch_b")] == ["allow"] * 3
    assert call(guard, "fetch_a").cap == "all_fetch"
    summary = guard.end_turn()
    assert summary.cap_usage["all_fetch"] == 3
    assert summary.cap_usage["fetch_a_only"] == 2


@pytest.mark.parametrize("order", [["g2", "g1"], ["g1", "g2"]])
def test_first_key_in_config_order_wins(order: list[str]) -> None:
    """When several keys would refuse, the first in config order wins."""
    guard = make_guard(turn={key: 1 for key in order}, tool_groups={"g1": ["foo"], "g2": ["foo"]})
    call(guard, "foo")
    assert call(guard, "foo").cap == order[0]


def test_turn_cap_wins_over_session_cap() -> None:
    """Turn caps come before session caps."""
    guard = make_guard(turn={"web_search": 1}, session={"web_search": 1})
    call(guard, "web_search")
    assert call(guard, "web_search").code == "cap_turn"


def test_hermes_loop_caps_are_turn_caps() -> None:
    """hermes' loop_caps.max_web_searches caps web searches per turn."""
    from otelguard.integrations.hermes import config_from_hermes

    guard = Guard(config_from_hermes({"signature_key": KEY, "loop_caps": {"max_web_searches": 2}}))
    guard.start_turn()
    assert [call(guard, "web_search").code for _ in range(3)] == ["allow", "allow", "cap_turn"]


# -- spawn-aware batch counting, no overshoot ---------------------------------------------------


def test_batch_spawn_is_charged_its_length() -> None:
    """delegate_task is charged the length of its tasks list; a batch never overshoots the cap."""
    guard = make_guard(on_hit="reject", turn={"subagents": 5})
    assert call(guard, "delegate_task", {"tasks": tasks(3)}).allows_execution
    refused = call(guard, "delegate_task", {"tasks": tasks(3)})
    assert (refused.action, refused.code, refused.count, refused.limit) == ("reject", "cap_turn", 3, 5)
    assert call(guard, "delegate_task", {"tasks": tasks(2)}).allows_execution
    single = call(guard, "delegate_task", {"goal": "one more"})
    assert (single.code, single.count) == ("cap_turn", 5)


def test_batch_as_json_string_list_is_charged_its_length() -> None:
    """A batch list that arrives as a JSON string is counted the same."""
    guard = make_guard(on_hit="reject", turn={"subagents": 4})
    assert call(guard, "delegate_task", {"tasks": json.dumps(tasks(3))}).allows_execution
    assert call(guard, "delegate_task", {"tasks": json.dumps(tasks(2))}).code == "cap_turn"
    assert guard.end_turn().cap_usage["subagents"] == 3


def test_batch_inside_json_string_args_is_charged_its_length() -> None:
    """Arguments sent as a JSON string (OpenAI style) are parsed for the batch list."""
    guard = make_guard(on_hit="reject", turn={"subagents": 4})
    assert call(guard, "delegate_task", json.dumps({"tasks": tasks(3)})).allows_execution
    assert call(guard, "delegate_task", json.dumps({"tasks": tasks(2)})).code == "cap_turn"


def test_spawn_tools_with_null_are_always_one() -> None:
    """spawn_tools null (Task, Agent, spawn_agent) means one subagent per call, whatever the args."""
    guard = make_guard(on_hit="reject", turn={"subagents": 2})
    assert call(guard, "Task", {"tasks": tasks(5)}).allows_execution
    assert call(guard, "Agent", {"tasks": tasks(5)}).allows_execution
    assert call(guard, "spawn_agent").code == "cap_turn"


def test_delegate_task_without_a_batch_is_one() -> None:
    """A spawn tool without its batch argument is charged 1."""
    guard = make_guard(on_hit="reject", turn={"subagents": 2})
    assert call(guard, "delegate_task", {"goal": "a"}).allows_execution
    assert call(guard, "delegate_task", {"goal": "b"}).allows_execution
    assert call(guard, "delegate_task", {"goal": "c"}).code == "cap_turn"


def test_other_tools_are_charged_one_whatever_their_args() -> None:
    """Tools that are not spawn tools are charged 1, even with a list argument."""
    guard = make_guard(on_hit="reject", turn={"web_search": 2})
    assert call(guard, "web_search", {"tasks": tasks(5)}).allows_execution
    assert call(guard, "web_search", {"tasks": tasks(5)}).allows_execution
    assert call(guard, "web_search").code == "cap_turn"


def test_configured_spawn_tool() -> None:
    """spawn_tools names the batch argument of other spawning tools."""
    guard = make_guard(on_hit="reject", turn={"fan_out": 4}, spawn_tools={"fan_out": "jobs"})
    assert call(guard, "fan_out", {"jobs": [1, 2, 3]}).allows_execution
    assert call(guard, "fan_out", {"jobs": [1, 2]}).code == "cap_turn"
    assert call(guard, "fan_out", {"jobs": [1]}).allows_execution


def test_refused_batch_is_not_charged() -> None:
    """A call refused by a cap is not charged: a too-big batch leaves room for a smaller one."""
    guard = make_guard(on_hit="reject", turn={"subagents": 5})
    refused = call(guard, "delegate_task", {"tasks": tasks(6)})
    assert (refused.code, refused.count) == ("cap_turn", 0)
    assert call(guard, "delegate_task", {"tasks": tasks(5)}).allows_execution
    assert call(guard, "delegate_task", {"tasks": tasks(1)}).count == 5


def test_rejected_calls_are_not_charged() -> None:
    """Rejected calls do not use up the cap."""
    guard = make_guard(on_hit="reject", turn={"web_search": 2})
    results = [call(guard, "web_search").code for _ in range(6)]
    assert results == ["allow", "allow"] + ["cap_turn"] * 4
    assert guard.end_turn().cap_usage["web_search"] == 2


def test_spawn_count_reported_to_observers() -> None:
    """Observers see how many subagents a call spawns."""
    recorder = RecordingObserver()
    guard = Guard(GuardConfig(signature_key=KEY), observers=(recorder,))
    guard.start_turn()
    run_script(guard, [("delegate_task", {"tasks": tasks(3)}, "ok", False), ("Task", {"p": 1}, "ok", False),
                       ("web_search", {"q": 1}, "ok", False)])  # fmt: skip
    assert [e.spawn_count for e in recorder.calls] == [3, 1, 0]


# -- refunds -------------------------------------------------------------------------------------


def test_host_refused_call_is_refunded() -> None:
    """A call the host reports as refused is refunded."""
    guard = make_guard(turn={"web_search": 2})
    assert call(guard, "web_search", refusal="permission_denied").allows_execution
    assert call(guard, "web_search").allows_execution
    assert call(guard, "web_search").allows_execution
    assert call(guard, "web_search").code == "cap_turn"


def test_refund_when_after_call_gets_an_equal_args_object() -> None:
    """The refund does not depend on after_call receiving the very same args object as before_call."""
    guard = make_guard(turn={"web_search": 1})
    assert guard.before_call("web_search", {"q": "x"}).allows_execution
    guard.after_call("web_search", {"q": "x"}, "blocked by policy", refusal="sandbox_denied")
    assert guard.before_call("web_search", {"q": "y"}).allows_execution


def test_refund_with_call_id() -> None:
    """With call_id the refund finds its call whatever args object after_call gets."""
    guard = make_guard(turn={"web_search": 1})
    assert guard.before_call("web_search", '{"q": "x"}', call_id="call_1").allows_execution
    guard.after_call("web_search", {"q": "x"}, "no", refusal="permission_denied", call_id="call_1")
    assert guard.before_call("web_search", {"q": "y"}, call_id="call_2").allows_execution


def test_refused_batch_is_refunded_in_full() -> None:
    """A refused batch is refunded all its subagents, in the turn and in the session."""
    guard = make_guard(turn={"subagents": 5}, session={"subagents": 5})
    assert call(guard, "delegate_task", {"tasks": tasks(4)}, refusal="tool_not_enabled").allows_execution
    summary = guard.end_turn()
    assert summary.cap_usage.get("subagents", 0) == 0
    assert summary.session_cap_usage.get("subagents", 0) == 0
    guard.start_turn()
    assert call(guard, "delegate_task", {"tasks": tasks(5)}).allows_execution


def test_failed_calls_stay_charged() -> None:
    """Only refused calls are refunded: a failed call used its share of the cap."""
    guard = make_guard(turn={"web_search": 2})
    call(guard, "web_search", failed=True)
    call(guard, "web_search", failed=True)
    assert call(guard, "web_search").code == "cap_turn"


# -- on_hit: block vs reject ---------------------------------------------------------------------


def test_on_hit_block_refuses_and_stops_the_turn() -> None:
    """on_hit: block (default) refuses the call and stops the turn (should_halt)."""
    guard = make_guard(turn={"web_search": 1})
    call(guard, "web_search")
    decision = call(guard, "web_search")
    assert decision.action == "block"
    assert decision.should_halt and not decision.allows_execution
    assert guard.halt_decision == decision
    assert call(guard, "read_file").code == "turn_halted"


def test_on_hit_reject_refuses_only_this_call() -> None:
    """on_hit: reject refuses only this call; the turn goes on."""
    guard = make_guard(on_hit="reject", turn={"web_search": 1})
    call(guard, "web_search")
    decision = call(guard, "web_search")
    assert (decision.action, decision.code) == ("reject", "cap_turn")
    assert not decision.allows_execution and not decision.should_halt
    assert guard.halt_decision is None
    assert call(guard, "read_file").allows_execution
    assert call(guard, "web_search").code == "cap_turn"
    assert guard.end_turn().halted is False


@pytest.mark.parametrize(
    "config", [{"hard_stop": False}, {"hard_stop": True}, {"mode": "interactive"}, {"warnings": False}]
)
def test_caps_are_enforced_whatever_hard_stop_says(config: dict[str, Any]) -> None:
    """Caps are enforced whatever hard_stop (or warnings) says."""
    guard = make_guard(turn={"web_search": 1}, **config)
    call(guard, "web_search")
    assert call(guard, "web_search").code == "cap_turn"


# -- messages and usage --------------------------------------------------------------------------


def test_turn_cap_message_says_what_happened() -> None:
    """The cap message says what happened ("this turn already made 50 web searches, the limit is 50")."""
    guard = make_guard()
    for _ in range(50):
        call(guard, "web_search")
    message = call(guard, "web_search").message
    assert "this turn already made 50 web searches, the limit is 50" in message
    for word in ("repeat", "loop", "same", "cycle"):
        assert word not in message.lower()


def test_session_cap_message_says_what_happened() -> None:
    """The session cap message names the session, the usage and the limit."""
    guard = make_guard(turn={"web_search": 0}, session={"web_search": 3})
    for _ in range(3):
        call(guard, "web_search")
    message = call(guard, "web_search").message
    assert "this session already made 3 web searches, the limit is 3" in message


def test_subagent_cap_message_names_subagents_and_counts() -> None:
    """A subagent cap message names subagents, the usage before the call and the limit."""
    guard = make_guard(turn={"subagents": 4})
    call(guard, "delegate_task", {"tasks": tasks(3)})
    decision = call(guard, "delegate_task", {"tasks": tasks(2)})
    assert "subagent" in decision.message
    assert "3" in decision.message and "4" in decision.message
    assert "repeat" not in decision.message.lower()


def test_cap_message_has_no_argument_values() -> None:
    """Cap messages never contain argument values."""
    guard = make_guard(turn={"web_search": 1})
    call(guard, "web_search", {"q": "CANARY-Q-1"})
    decision = call(guard, "web_search", {"q": "CANARY-Q-2"})
    assert "CANARY" not in decision.message
    assert "CANARY" not in decision.synthetic_result()


def test_cap_decision_metadata_names_the_cap() -> None:
    """A cap decision's metadata carries the cap key."""
    guard = make_guard(turn={"web_search": 1})
    call(guard, "web_search")
    meta = call(guard, "web_search").to_metadata()
    assert meta["code"] == "cap_turn"
    assert meta["cap"] == "web_search"
    assert (meta["count"], meta["limit"]) == (1, 1)


def test_turn_summary_reports_usage_and_peak_ratio() -> None:
    """TurnSummary reports cap usage and, per turn-limited key, the highest used/limit reached."""
    guard = make_guard(turn={"web_search": 10, "subagents": 4})
    for _ in range(3):
        call(guard, "web_search")
    call(guard, "web_search", refusal="permission_denied")  # charged, then refunded: the peak stays
    summary = guard.end_turn()
    assert summary.cap_usage["web_search"] == 3
    assert summary.cap_usage_ratio["web_search"] == pytest.approx(0.4)
    assert summary.cap_usage_ratio["subagents"] == 0.0


def test_a_call_a_later_gate_refuses_gives_its_turn_charge_back_and_leaves_no_peak() -> None:
    """The turn cap charges in its place in the walk, before the session cap: when the session cap
    then refuses, the turn's charge is given back and the refused call never counts towards the turn's
    peak. Charges the host refuses later are given back by the same gates."""
    guard = make_guard(on_hit="reject", turn={"web_search": 4}, session={"web_search": 2})
    call(guard, "web_search")
    call(guard, "web_search", refusal="permission_denied")  # charged in both scopes, given back in both
    call(guard, "web_search")
    refused = call(guard, "web_search")  # the turn cap has room: charged, then given back
    assert (refused.code, refused.cap) == ("cap_session", "web_search")
    summary = guard.end_turn()
    assert summary.cap_usage["web_search"] == 2
    assert summary.cap_usage_ratio["web_search"] == pytest.approx(0.5)
    assert summary.session_cap_usage["web_search"] == 2


def test_cap_hits_are_counted_in_the_turn_summary() -> None:
    """Refused calls count as tool calls of the turn; the summary counts decisions by code."""
    guard = make_guard(on_hit="reject", turn={"web_search": 1})
    steps = run_script(guard, [("web_search", {"q": i}, "r", False) for i in range(3)])
    assert codes(steps) == ["allow", "cap_turn", "cap_turn"]
    summary = guard.end_turn()
    assert summary.tool_calls == 3
    assert summary.decisions["cap_turn"] == 2
