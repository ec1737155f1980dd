"""Gemini CLI's model turns: ``BeforeModel`` reports the reply before it, read from the chat file the
payload names, and asks ``before_model``; a spent token cap ends the run before the request is made.
Payloads as Gemini CLI 0.61.0 sent them (``tests/data/gemini_cli_payloads``); chat lines as it writes
them (``tests/data/gemini_cli_chats``)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from otelguard import GuardConfig
from otelguard.coding_agents.gemini_cli import GeminiCliHooks, chat_replies
from otelguard.coding_agents.transcript_tail import Reply, tail_objects

PAYLOADS = Path(__file__).parent / "data" / "gemini_cli_payloads"
CHATS = Path(__file__).parent / "data" / "gemini_cli_chats"
CAPPED = GuardConfig(mode="unattended", signature_key="k", caps={"session": {"tokens": 10_000}})


def real(event: str, **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((PAYLOADS / f"{event}.json").read_text())
    return {**body, **changes}


def reply_lines(number: int, *, calls: int = 1, text: str = "") -> list[dict[str, Any]]:
    """A ``gemini`` message as Gemini CLI writes it: once when the reply is in, again with its calls."""
    message = {
        "id": f"reply-{number}",
        "timestamp": "2026-12-07T03:25:59.552Z",
        "type": "gemini",
        "content": text,
        "thoughts": [],
        "tokens": {"input": 1200, "output": 200, "cached": 900, "thoughts": 100, "tool": 0, "total": 1500},
        "model": "gemini-2.5-flash",
    }
    calls_made = [{"id": f"call-{number}-{n}", "name": "run_shell_command"} for n in range(calls)]
    return [message, {"$set": {"lastUpdated": message["timestamp"]}}, {**message, "toolCalls": calls_made}]


def test_a_real_chat_gives_one_reply_per_message() -> None:
    replies = chat_replies(tail_objects(str(CHATS / "session-guarded-stop.jsonl")))
    assert len(replies) == len({reply.message_id for reply in replies}) == 13
    assert replies[0] == Reply(replies[0].message_id, None, 1, 10, 10)


def test_before_model_reports_each_reply_and_a_spent_cap_ends_the_run(tmp_path: Path) -> None:
    """1,500 tokens a reply (output with thoughts), ``caps.session.tokens: 10000``: six replies and
    seven requests go ahead; the request after the seventh reply is answered with the stop."""
    chat = tmp_path / "session-1.jsonl"
    lines: list[dict[str, Any]] = [{"sessionId": "s", "kind": "main"}]
    hooks = GeminiCliHooks(CAPPED)
    base = {"transcript_path": str(chat)}
    answers = []
    chat.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert hooks.handle(real("BeforeAgent", **base)) is None
    for number in range(1, 11):
        answers.append(hooks.handle(real("BeforeModel", **base)))
        if answers[-1] is not None:
            break
        lines += reply_lines(number)
        chat.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert answers[:7] == [None] * 7
    (stop,) = answers[7:]
    assert stop is not None and stop["continue"] is False
    assert stop["stopReason"].startswith("otelguard stopped this turn (cap_session): ")


def test_a_turn_begins_with_the_history_reported_and_ends_with_the_final_reply(tmp_path: Path) -> None:
    """A resumed chat: the replies before the prompt are history, never charged to the new turn; the
    final reply (no call) is reported at ``AfterAgent``."""
    chat = tmp_path / "session-2.jsonl"
    history = [line for number in range(1, 7) for line in reply_lines(number)]  # 9,000 tokens
    chat.write_text("".join(json.dumps(line) + "\n" for line in history))
    hooks = GeminiCliHooks(CAPPED)
    base = {"transcript_path": str(chat)}
    assert hooks.handle(real("BeforeAgent", **base)) is None
    assert hooks.handle(real("BeforeModel", **base)) is None
    final = reply_lines(7, calls=0, text="All done.")
    chat.write_text("".join(json.dumps(line) + "\n" for line in [*history, *final]))
    assert hooks.handle(real("AfterAgent", **base)) is None
    # 1,500 charged by this turn: the next request is still allowed
    assert hooks.handle(real("BeforeAgent", **base)) is None
    assert hooks.handle(real("BeforeModel", **base)) is None


def test_a_hostile_chat_path_reports_nothing(tmp_path: Path) -> None:
    hooks = GeminiCliHooks(CAPPED)
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    for path in (str(fifo), str(tmp_path), "/dev/zero", 42, None):
        assert hooks.handle(real("BeforeAgent", transcript_path=path)) is None
        assert hooks.handle(real("BeforeModel", transcript_path=path)) is None
        assert hooks.handle(real("AfterAgent", transcript_path=path)) is None
