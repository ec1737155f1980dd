"""Model turns: ``before_model``/``after_model``, token caps, halted turns and what observers hear
(docs/model-turns.md)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from otelguard import Guard, GuardConfig
from otelguard.core.caps import LocalSessionCaps
from otelguard.core.decisions import MODEL_OUTCOMES, MODEL_TOOL, Decision
from otelguard.core.guard import Guard as CoreGuard
from otelguard.core.observers import GuardObserver, ModelEvent
from otelguard.errors import ConfigError

CANARY = "CANARY-7f3a-reply-text-never-leaves"


class ModelEvents(GuardObserver):
    """Records the model events a guard reports."""

    def __init__(self) -> None:
        self.events: list[ModelEvent] = []
        self.internal_errors: list[str] = []
        self._lock = threading.Lock()

    def on_model_call(self, event: ModelEvent) -> None:
        with self._lock:
            self.events.append(event)

    def on_internal_error(self, stage: str) -> None:
        self.internal_errors.append(stage)


def _tokens_config(**scopes: int) -> GuardConfig:
    return GuardConfig(caps={scope: {"tokens": limit} for scope, limit in scopes.items()})


# -- the API ---------------------------------------------------------------------------------------


def test_the_public_guard_has_the_model_events() -> None:
    guard = Guard()
    assert isinstance(guard, CoreGuard)
    decision = guard.before_model()
    assert (decision.action, decision.code, decision.tool_name) == ("allow", "allow", MODEL_TOOL)
    after = guard.after_model("Let me read the file.", tool_calls=1, input_tokens=10, output_tokens=5)
    assert (after.action, after.code, after.tool_name) == ("allow", "allow", MODEL_TOOL)


def test_a_model_event_without_a_turn_starts_one() -> None:
    guard = Guard()
    assert guard.turn_id is None
    guard.before_model()
    assert guard.end_turn().agent == "default"


# -- token caps -------------------------------------------------------------------------------------


def test_turn_token_cap_blocks_only_once_the_limit_is_reached() -> None:
    guard = Guard(_tokens_config(turn=100))
    assert guard.before_model().action == "allow"
    assert guard.after_model("a", input_tokens=60, output_tokens=39).action == "allow"  # 99: not spent
    assert guard.before_model().action == "allow"
    crossing = guard.after_model("b", input_tokens=1)  # 100: spent by this reply
    assert (crossing.action, crossing.code, crossing.cap) == ("halt", "cap_turn", "tokens")
    assert (crossing.count, crossing.limit, crossing.tool_name) == (100, 100, MODEL_TOOL)
    assert guard.halt_decision == crossing
    later = guard.before_model()
    assert (later.action, later.code) == ("block", "turn_halted")
    tool = guard.before_call("read_file", {"path": "x"})
    assert (tool.action, tool.code) == ("block", "turn_halted")
    summary = guard.end_turn()
    assert summary.halted and summary.cap_usage["tokens"] == 100
    assert summary.cap_usage_ratio["tokens"] == 1.0


def test_turn_token_usage_starts_again_each_turn() -> None:
    guard = Guard(_tokens_config(turn=100))
    guard.after_model("a", input_tokens=90)
    guard.start_turn()
    assert guard.after_model("b", input_tokens=90).action == "allow"
    assert guard.before_model().action == "allow"


def test_unknown_usage_charges_nothing() -> None:
    guard = Guard(_tokens_config(turn=10))
    for _ in range(5):
        assert guard.after_model("x").action == "allow"
        assert guard.after_model("x", input_tokens=None, output_tokens=None).action == "allow"
    assert guard.end_turn().cap_usage.get("tokens", 0) == 0


@pytest.mark.parametrize("bad", [-5, True, False, "100", float("nan"), float("inf"), -1.5, object(), [3]])
def test_bad_token_counts_are_unknown_usage(bad: Any) -> None:
    guard = Guard(_tokens_config(turn=10))
    assert guard.after_model("x", input_tokens=bad, output_tokens=bad).code == "allow"
    assert guard.end_turn().cap_usage.get("tokens", 0) == 0


def test_integers_of_any_kind_are_charged() -> None:
    class Count(int):
        def __int__(self) -> int:
            raise AssertionError("never asked")

    class Index:
        def __index__(self) -> int:
            return 4

    class Hostile:
        def __index__(self) -> int:
            raise RuntimeError("no")

    guard = Guard(_tokens_config(turn=10))
    assert guard.after_model("x", input_tokens=Count(3), output_tokens=Index()).code == "allow"  # type: ignore[arg-type]
    assert guard.after_model("x", input_tokens=Hostile(), tool_calls=Hostile()).code == "allow"  # type: ignore[arg-type]
    assert guard.end_turn().cap_usage["tokens"] == 7


def test_float_token_counts_are_charged_whole() -> None:
    guard = Guard(_tokens_config(turn=10))
    four_and_more: Any = 4.9  # JSON numbers from a sidecar may come as floats
    assert guard.after_model("x", input_tokens=four_and_more, output_tokens=5).code == "allow"  # 4 + 5
    assert guard.after_model("x", input_tokens=1).code == "cap_turn"


def test_session_token_cap_is_shared_by_the_guards_of_a_session() -> None:
    store = LocalSessionCaps()
    config = _tokens_config(session=1000)
    one, two = Guard(config, session_caps=store), Guard(config, session_caps=store)
    assert one.after_model("a", input_tokens=600).action == "allow"
    assert two.before_model().action == "allow"
    crossing = two.after_model("b", input_tokens=300, output_tokens=100)  # 1000: spent
    assert (crossing.action, crossing.code, crossing.cap, crossing.count) == (
        "halt",
        "cap_session",
        "tokens",
        1000,
    )
    blocked = one.before_model()  # another guard of the session: the model is not called
    assert (blocked.action, blocked.code, blocked.cap) == ("block", "cap_session", "tokens")
    assert store.usage()["tokens"] == 1000
    one.start_turn()  # the session cap outlives turns
    assert one.before_model().code == "cap_session"


def test_session_tokens_are_shared_with_subagents() -> None:
    guard = Guard(_tokens_config(session=100))
    sub = guard.subagent_guard("researcher")
    sub.after_model("a", output_tokens=100)
    assert guard.before_model().code == "cap_session"


def test_tree_token_cap_counts_across_the_tree() -> None:
    config = _tokens_config(tree=500)
    root = Guard(config, session_id="tree-tokens-root")
    assert root.delegation_tree is not None
    child = root.subagent_guard("child")
    child.after_model("a", input_tokens=300)
    assert root.before_model().action == "allow"
    crossing = root.after_model("b", input_tokens=200)
    assert (crossing.action, crossing.code, crossing.cap) == ("halt", "cap_tree", "tokens")
    assert child.before_model().code == "cap_tree"


def test_turn_cap_is_reported_before_session_and_tree() -> None:
    config = _tokens_config(turn=10, session=10, tree=10)
    guard = Guard(config, session_id="tree-order")
    assert guard.after_model("a", input_tokens=10).code == "cap_turn"
    # every scope was charged, though only the first spent one decides
    assert guard.session_caps.usage()["tokens"] == 10


def test_caps_on_hit_reject_does_not_apply_to_tokens() -> None:
    """A model call cannot be skipped while the turn goes on: a spent token cap blocks."""
    store = LocalSessionCaps()
    config = GuardConfig(caps={"on_hit": "reject", "session": {"tokens": 10}})
    one, two = Guard(config, session_caps=store), Guard(config, session_caps=store)
    assert one.after_model("a", input_tokens=10).action == "halt"
    assert two.before_model().action == "block"


def test_token_caps_hold_whatever_hard_stop_says() -> None:
    config = GuardConfig(hard_stop=False, caps={"turn": {"tokens": 10}})
    assert Guard(config).after_model("a", input_tokens=10).action == "halt"


# -- "tokens" is no tool's cap ----------------------------------------------------------------------


def test_no_tool_is_charged_to_the_tokens_cap() -> None:
    guard = Guard(_tokens_config(turn=1, session=1))
    for _ in range(5):
        assert guard.before_call("tokens", {}).action == "allow"  # a tool named like the key
        guard.after_call("tokens", {}, "ok", failed=False)
    summary = guard.end_turn()
    assert summary.cap_usage.get("tokens", 0) == 0
    assert summary.session_cap_usage.get("tokens", 0) == 0


def test_the_tokens_cap_key_is_no_typo() -> None:
    assert _tokens_config(turn=1, session=1, tree=1).config_warnings == ()
    with pytest.warns(Warning, match="did you mean 'tokens'"):
        config = GuardConfig(caps={"turn": {"tokns": 5}})
    assert any("caps.turn.tokns" in line for line in config.config_warnings)


def test_a_tool_group_named_tokens_is_refused() -> None:
    with pytest.raises(ConfigError) as raised:
        GuardConfig(tool_groups={"tokens": ["my_tool"]})
    assert raised.value.key == "tool_groups.tokens"


# -- halted turns -------------------------------------------------------------------------------------


def test_a_tool_halt_blocks_the_model() -> None:
    guard = Guard(GuardConfig(caps={"turn": {"web_search": 1}}))
    assert guard.before_call("web_search", {"q": "a"}).action == "allow"
    guard.after_call("web_search", {"q": "a"}, "ok", failed=False)
    assert guard.before_call("web_search", {"q": "b"}).code == "cap_turn"
    assert guard.halt_decision is not None
    blocked = guard.before_model()
    assert (blocked.action, blocked.code, blocked.tool_name) == ("block", "turn_halted", MODEL_TOOL)
    assert blocked.message.startswith("Not called")


# -- observers --------------------------------------------------------------------------------------


def test_observers_get_model_events_without_the_text() -> None:
    seen = ModelEvents()
    guard = Guard(_tokens_config(turn=1000), observers=[seen], agent="writer")
    guard.start_turn("t1")
    guard.before_model()
    guard.after_model(CANARY * 50, tool_calls=2, invalid_tool_calls=1, input_tokens=12, output_tokens=7)
    guard.before_model()
    guard.after_model(CANARY, invalid_tool_calls=3)
    guard.after_model(CANARY)
    before, with_calls, _before_again, invalid, none = seen.events
    assert before.outcome is None and before.decision.code == "allow" and before.turn_id == "t1"
    assert (with_calls.outcome, with_calls.tool_calls, with_calls.invalid_tool_calls) == ("tool_calls", 2, 1)
    assert (with_calls.input_tokens, with_calls.output_tokens, with_calls.agent) == (12, 7, "writer")
    assert invalid.outcome == "invalid_tool_call" and none.outcome == "no_tool_call"
    assert {e.outcome for e in seen.events} - {None} <= set(MODEL_OUTCOMES)
    for event in seen.events:
        assert CANARY not in repr(event)
        assert CANARY not in repr(event.decision.to_metadata())


def test_a_failing_observer_never_reaches_the_loop() -> None:
    class Broken(GuardObserver):
        def on_model_call(self, event: ModelEvent) -> None:
            raise RuntimeError(CANARY)

    guard = Guard(observers=[Broken()])
    assert guard.before_model().code == "allow"
    assert guard.after_model("x").code == "allow"


def test_an_internal_error_allows() -> None:
    seen = ModelEvents()

    class Exploding(LocalSessionCaps):
        def add(self, key: str, amount: int) -> int:
            raise RuntimeError("store down")

    guard = Guard(_tokens_config(session=10), observers=[seen], session_caps=Exploding())
    for decision in (guard.before_model(), guard.after_model("x", input_tokens=5)):
        assert isinstance(decision, Decision)
        assert (decision.action, decision.code, decision.tool_name) == ("allow", "internal_error", MODEL_TOOL)
    assert seen.internal_errors == ["before_model", "after_model"]


def test_model_events_from_many_threads_charge_every_token() -> None:
    store = LocalSessionCaps()
    guards = [Guard(_tokens_config(session=4000), session_caps=store) for _ in range(4)]
    decisions: list[Decision] = []
    lock = threading.Lock()

    def work(guard: Guard) -> None:
        for _ in range(250):
            guard.start_turn()
            seen = [guard.before_model(), guard.after_model("x", input_tokens=3, output_tokens=1)]
            with lock:
                decisions.extend(seen)

    threads = [threading.Thread(target=work, args=(g,)) for g in guards]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert store.usage()["tokens"] == 4 * 250 * 4
    halts = [d for d in decisions if d.code == "cap_session" and d.action == "halt"]
    assert [d.count for d in halts] == [4000]  # exactly one reply spent it: the last one
    assert all(d.code == "allow" for d in decisions if d not in halts)
