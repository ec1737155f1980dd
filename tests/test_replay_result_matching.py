"""Results matched to their calls by id wherever they sit, within a bounded wait."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path
from typing import Any

from otelguard.readers.feed import MAX_PENDING_CALLS, MAX_WAIT_MESSAGES, SessionFeed
from otelguard.replay import SessionKey, ToolCall, replay_inputs


class Sink:
    def __init__(self) -> None:
        self.calls: list[ToolCall] = []
        self.errors: list[tuple[int | None, str]] = []
        self.turns = 0

    def describe_input(self, path: str, fmt: str) -> None: ...

    def begin_session(self, key: SessionKey) -> None: ...

    def start_turn(self, key: SessionKey, time: float | None = None) -> None:
        self.turns += 1

    def end_session(self, key: SessionKey) -> None: ...

    def tool_call(self, key: SessionKey, call: ToolCall) -> None:
        self.calls.append(call)

    def error(self, path: str, line: int | None, reason: str) -> None:
        self.errors.append((line, reason))


def replay_records(tmp_path: Path, records: list[Any], name: str = "t.jsonl") -> Sink:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    sink = Sink()
    replay_inputs([str(path)], "auto", sink)
    return sink


def tool_use(call_id: str, name: str = "web_search") -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "tool_use", "id": call_id, "name": name, "input": {}}]}


def tool_result(call_id: str, text: str = "ok") -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": text}]}


def test_anthropic_result_one_message_late_is_matched(tmp_path: Path) -> None:
    """A request body where the assistant spoke twice before the results came back."""
    sink = replay_records(
        tmp_path,
        [
            {"role": "user", "content": "find it"},
            tool_use("toolu_1"),
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "still thinking"}, *tool_use("toolu_2")["content"]],
            },
            tool_result("toolu_2", "two"),
            tool_result("toolu_1", "one"),
        ],
    )
    assert sink.errors == []
    assert [(c.call_id, c.result, c.has_result) for c in sink.calls] == [
        ("toolu_1", "one", True),
        ("toolu_2", "two", True),
    ]


def test_claude_code_result_after_another_assistant_message_is_matched(tmp_path: Path) -> None:
    def line(kind: str, message: dict[str, Any], uuid: str) -> dict[str, Any]:
        return {"type": kind, "sessionId": "s", "uuid": uuid, "message": message}

    sink = replay_records(
        tmp_path,
        [
            line("user", {"role": "user", "content": "go"}, "u0"),
            line("assistant", {"id": "m1", **tool_use("toolu_1", "Bash")}, "a1"),
            line(
                "assistant",
                {"id": "m2", "role": "assistant", "content": [{"type": "text", "text": "…"}]},
                "a2",
            ),
            line("user", tool_result("toolu_1", "done"), "u1"),
        ],
    )
    assert sink.errors == []
    assert [(c.call_id, c.result) for c in sink.calls] == [("toolu_1", "done")]


def test_a_call_unanswered_for_too_long_is_reported_and_the_calls_behind_it_flow(tmp_path: Path) -> None:
    records: list[Any] = [{"role": "user", "content": "go"}, tool_use("lost")]
    for n in range(MAX_WAIT_MESSAGES + 5):
        records += [tool_use(f"c{n}"), tool_result(f"c{n}")]
    sink = Sink()
    path = tmp_path / "late.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    replay_inputs([str(path)], "auto", sink)
    assert sink.errors == [(2, "tool call lost (web_search) has no result; not replayed")]
    assert [c.call_id for c in sink.calls][:2] == ["lost", "c0"]
    assert len(sink.calls) == MAX_WAIT_MESSAGES + 6
    assert sink.calls[0].has_result is False
    assert all(c.has_result for c in sink.calls[1:])


def test_a_result_arriving_after_its_call_was_given_up_is_an_error(tmp_path: Path) -> None:
    records: list[Any] = [{"role": "user", "content": "go"}, tool_use("late")]
    records += [{"role": "assistant", "content": "…"}] * (MAX_WAIT_MESSAGES + 1)
    records.append(tool_result("late"))
    sink = replay_records(tmp_path, records)
    assert [reason for _, reason in sink.errors] == [
        "tool call late (web_search) has no result; not replayed",
        "tool result without its call (id late)",
    ]


def test_a_result_without_its_call_is_still_an_error(tmp_path: Path) -> None:
    sink = replay_records(tmp_path, [{"role": "user", "content": "go"}, tool_result("ghost")])
    assert sink.errors == [(2, "tool result without its call (id ghost)")]
    assert sink.calls == []


def test_a_new_user_request_ends_the_wait(tmp_path: Path) -> None:
    sink = replay_records(
        tmp_path, [{"role": "user", "content": "go"}, tool_use("a"), {"role": "user", "content": "next"}]
    )
    assert sink.errors == [(2, "tool call a (web_search) has no result; not replayed")]
    assert sink.turns == 2


def _unanswered_stream(feed: SessionFeed, calls: int) -> int:
    high = 0
    for n in range(calls):
        feed.tick()
        feed.add_call(ToolCall(f"id{n}", "web_search", {"q": n}, n))
        high = max(high, len(feed))
    return high


def test_waiting_calls_stay_bounded_on_a_long_stream() -> None:
    sink = Sink()
    feed = SessionFeed(sink, SessionKey("p", "s"))
    high = _unanswered_stream(feed, 20_000)
    assert high <= MAX_WAIT_MESSAGES + 1
    assert len(sink.errors) >= 20_000 - MAX_WAIT_MESSAGES - 1


def test_waiting_calls_are_bounded_even_without_messages() -> None:
    """A reader that never ticks (one huge message) still cannot grow the queue past its bound."""
    sink = Sink()
    feed = SessionFeed(sink, SessionKey("p", "s"))
    for n in range(MAX_PENDING_CALLS + 100):
        feed.add_call(ToolCall(f"id{n}", "t", {}, n))
    assert len(feed) == MAX_PENDING_CALLS
    assert len(sink.errors) == 100


def test_memory_stays_flat_however_long_the_unanswered_stream() -> None:
    def peak(calls: int) -> int:
        feed = SessionFeed(Sink(), SessionKey("p", "s"))
        feed.sink = _Discard()  # keep the reports out of the measurement
        tracemalloc.start()
        _unanswered_stream(feed, calls)
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return top

    small, large = peak(5_000), peak(40_000)
    assert large < small * 2


class _Discard(Sink):
    def tool_call(self, key: SessionKey, call: ToolCall) -> None: ...

    def error(self, path: str, line: int | None, reason: str) -> None: ...


def test_a_huge_parallel_batch_is_answered_whatever_its_size(tmp_path: Path) -> None:
    """Results do not advance the wait: a batch of 200 calls answered one line each is all matched."""
    ids = [f"toolu_{n:03d}" for n in range(200)]
    batch = {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": i, "name": "Read", "input": {"n": i}} for i in ids],
    }
    records: list[Any] = [{"role": "user", "content": "go"}, batch, *(tool_result(i) for i in reversed(ids))]
    sink = replay_records(tmp_path, records)
    assert sink.errors == []
    assert [c.call_id for c in sink.calls] == ids
