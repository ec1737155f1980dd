"""``POST /v1/before_model`` and ``/v1/after_model`` on a real ``otelguard serve``: the model's turns over
HTTP, their checks, the bearer token, the tree in ``baggage``; and token caps held exactly by two real
sidecars sharing one real redis-server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from otelguard import Guard, GuardConfig, propagation
from otelguard.coding_agents.mapping import MAX_COUNT, MAX_REPLY_CHARS
from tests.e2e import stop_process
from tests.redis_e2e import RedisServer
from tests.test_cli_serve import Serve
from tests.test_sidecar_state import start_replica, stderr_of

KEY = "model-key"
CONFIG = f"mode: unattended\nsignature_key: {KEY}\ncaps:\n  turn: {{tokens: 1000}}\n"
REPLY = {"text": "Let me look at the logs.", "tool_calls": 1, "input_tokens": 250, "output_tokens": 50}


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    running = start_replica(tmp_path, config=CONFIG)
    yield running
    stop_process(running.process)


def model_turn(serve: Serve, session: str, replies: int, headers: dict[str, str] | None = None) -> list[Any]:
    """``replies`` requests of one turn: ``before_model``, then the reply through ``after_model``;
    every answer, up to the first that stops the turn."""
    answers: list[Any] = []
    for _ in range(replies):
        before = serve.post("/v1/before_model", {"session_id": session}, headers=headers)
        answers.append(before)
        if before["action"] == "block":
            break
        after = serve.post("/v1/after_model", {"session_id": session, **REPLY}, headers=headers)
        answers.append(after)
        if after["action"] in ("halt", "block"):
            break
    return answers


def test_model_events_answer_the_decision_and_a_token_cap_stops_at_its_limit(serve: Serve) -> None:
    """300 tokens a reply, a turn cap of 1,000: three replies are allowed; the fourth reaches the
    limit and halts the turn, never one before."""
    serve.post("/v1/start_turn", {"session_id": "m", "agent": "go-agent"})
    first = serve.post("/v1/before_model", {"session_id": "m"})
    assert first == {
        "action": "allow",
        "code": "allow",
        "message": "",
        "count": 0,
        "limit": 0,
        "args_hash": first["args_hash"],
        "synthetic_result": None,
    }
    answers = model_turn(serve, "m", 10)
    actions = [answer["action"] for answer in answers]
    assert actions[:7] == ["allow"] * 7  # three requests and their replies, the fourth request
    stop = answers[-1]
    assert len(answers) == 8, actions  # the fourth reply, which reaches the limit, halts the turn
    assert (stop["action"], stop["code"], stop["cap"]) == ("halt", "cap_turn", "tokens")
    assert (stop["count"], stop["limit"]) == (1200, 1000) and stop["message"]
    assert serve.post("/v1/before_model", {"session_id": "m"})["code"] == "turn_halted"
    summary = serve.post("/v1/end_turn", {"session_id": "m"})
    assert summary["halted"] is True and summary["halt_code"] == "cap_turn"
    # the next turn has a budget of its own
    serve.post("/v1/start_turn", {"session_id": "m"})
    assert serve.post("/v1/before_model", {"session_id": "m"})["action"] == "allow"


@pytest.mark.parametrize(
    ("path", "body", "reason"),
    [
        ("/v1/before_model", b"{not json", b"body: malformed JSON\n"),
        ("/v1/after_model", b"[1]", b"body: expected a JSON object\n"),
        ("/v1/before_model", b'{"agent": "a"}', b"session_id: expected a string (missing)\n"),
        ("/v1/after_model", b'{"text": "t"}', b"session_id: expected a string (missing)\n"),
        (
            "/v1/before_model",
            b'{"session_id": "s", "agent": 4242}',
            b"agent: expected a string of at most 256 characters, or null\n",
        ),
        (
            "/v1/after_model",
            b'{"session_id": "s", "text": 31337}',
            f"text: expected a string of at most {MAX_REPLY_CHARS} characters, or null\n".encode(),
        ),
        (
            "/v1/after_model",
            b'{"session_id": "s", "tool_calls": "7777"}',
            f"tool_calls: expected a whole number from 0 to {MAX_COUNT}, or null\n".encode(),
        ),
        (
            "/v1/after_model",
            b'{"session_id": "s", "invalid_tool_calls": -3}',
            f"invalid_tool_calls: expected a whole number from 0 to {MAX_COUNT}, or null\n".encode(),
        ),
        (
            "/v1/after_model",
            b'{"session_id": "s", "input_tokens": true}',
            f"input_tokens: expected a whole number from 0 to {MAX_COUNT}, or null\n".encode(),
        ),
        (
            "/v1/after_model",
            b'{"session_id": "s", "output_tokens": 12.5}',
            f"output_tokens: expected a whole number from 0 to {MAX_COUNT}, or null\n".encode(),
        ),
        (
            "/v1/after_model",
            b'{"session_id": "s", "output_tokens": 98765432109876543}',
            f"output_tokens: expected a whole number from 0 to {MAX_COUNT}, or null\n".encode(),
        ),
    ],
)
def test_a_bad_body_is_a_400_naming_the_field_never_its_value(
    serve: Serve, path: str, body: bytes, reason: bytes
) -> None:
    status, answer = serve.request("POST", path, raw=body)
    assert (status, answer) == (400, reason)


def test_a_reply_over_the_text_bound_is_refused_whole_and_counts_nothing(serve: Serve) -> None:
    """A reply longer than the bound is a 400 naming ``text``: no token of it is charged."""
    body = {"session_id": "long", "text": "x" * (MAX_REPLY_CHARS + 1), "input_tokens": 5000}
    status, answer = serve.request("POST", "/v1/after_model", body)
    expected = f"text: expected a string of at most {MAX_REPLY_CHARS} characters, or null\n"
    assert (status, answer) == (400, expected.encode())
    serve.post("/v1/start_turn", {"session_id": "long"})
    assert serve.post("/v1/before_model", {"session_id": "long"})["action"] == "allow"


def test_model_events_need_the_token_and_never_log_the_reply(tmp_path: Path) -> None:
    running = start_replica(tmp_path, config=CONFIG, env_extra={"OTELGUARD_TOKEN": "s3cret"})
    try:
        for path in ("/v1/before_model", "/v1/after_model"):
            status, body = running.request("POST", path, {"session_id": "a"})
            assert status == 401 and b"s3cret" not in body
        right = {"Authorization": "Bearer s3cret"}
        canary = {"session_id": "a", "text": "CANARY-51c7 the reply", "tool_calls": 0, "agent": "go"}
        assert running.post("/v1/after_model", canary, headers=right)["action"] == "allow"
        running.request("POST", "/v1/after_model", raw=b'{"text": "CANARY-51c7"', headers=right)
    finally:
        stop_process(running.process)
    assert "CANARY" not in stderr_of(tmp_path, running)


TREE_CONFIG = (
    f"mode: unattended\nsignature_key: {KEY}\ncaps:\n  turn: {{tokens: 0}}\n  tree: {{tokens: 2000}}\n"
)


def test_the_baggage_puts_two_agents_of_one_tree_under_one_token_budget(tmp_path: Path) -> None:
    """Two sessions sent with one tree's ``baggage``: their replies count against one
    ``caps.tree.tokens``; a session outside the tree is not touched by it."""
    running = start_replica(tmp_path, config=TREE_CONFIG)
    try:
        root = Guard(GuardConfig(signature_key=KEY, caps={"tree": {"tokens": 2000}}), session_id="root-1")
        headers: dict[str, str] = {"content-type": "application/json"}
        propagation.inject(headers, root)
        answers = [
            a
            for turn in range(4)
            for a in model_turn(running, ("delegate-a", "delegate-b")[turn % 2], 2, headers)
        ]
        stops = [a for a in answers if a["action"] in ("halt", "block")]
        assert stops and stops[0]["code"] == "cap_tree" and stops[0]["cap"] == "tokens", answers
        # 300 a reply: the 7th reply reaches 2,000, whichever agent sent it, and halts its turn
        assert [a["action"] for a in answers].index("halt") == 13 and stops[0]["action"] == "halt"
        assert all(a["action"] == "allow" for a in model_turn(running, "outside", 3))
    finally:
        stop_process(running.process)


# two sidecars, one Redis ---------------------------------------------------------------------------

REDIS_CONFIG = (
    f"signature_key: {KEY}\n"
    "mode: unattended\n"
    "caps:\n  turn: {tokens: 0}\n  session: {tokens: 10000}\n"
    "state:\n  timeout_ms: 1000\n"  # a loaded machine must not fail over where no outage is meant
)


@pytest.fixture
def replicas(redis_server: RedisServer, tmp_path: Path) -> Iterator[tuple[Serve, Serve]]:
    first = start_replica(tmp_path, "--state", redis_server.url, config=REDIS_CONFIG)
    second = start_replica(tmp_path, "--state", redis_server.url, config=REDIS_CONFIG)
    yield first, second
    stop_process(first.process)
    stop_process(second.process)


def test_two_sidecars_on_one_redis_stop_a_session_at_exactly_its_token_limit(
    replicas: tuple[Serve, Serve], redis_server: RedisServer
) -> None:
    """``caps.session.tokens: 10000``, 1,500 tokens a reply, the replies of one session alternating
    between two sidecars: six replies are allowed (9,000), the seventh reaches the limit and is the
    one that stops the session, once; from then on both sidecars refuse its model requests."""
    reply = {"text": "Reading the next file.", "tool_calls": 1, "input_tokens": 1200, "output_tokens": 300}
    answers: list[tuple[int, str, dict[str, Any]]] = []
    for number in range(1, 11):
        serve = replicas[number % 2]
        before = serve.post("/v1/before_model", {"session_id": "shared"})
        answers.append((number, "before", before))
        if before["action"] != "allow":
            continue
        after = serve.post("/v1/after_model", {"session_id": "shared", **reply})
        answers.append((number, "after", after))
    stops = [(number, event, a) for number, event, a in answers if a["action"] != "allow"]
    shown = [(number, event, a["action"], a["code"], a.get("cap")) for number, event, a in stops]
    # the 7th reply (10,500 tokens) halts the session's turn on the sidecar that had it, once; the
    # other sidecar refuses the next request from the shared count; then both refuse as halted
    assert shown == [
        (7, "after", "halt", "cap_session", "tokens"),
        (8, "before", "block", "cap_session", "tokens"),
        (9, "before", "block", "turn_halted", None),
        (10, "before", "block", "turn_halted", None),
    ]
    assert (stops[0][2]["count"], stops[0][2]["limit"]) == (10_500, 10_000)
    # both sidecars refuse the session's next request, in a new turn as well
    for serve in replicas:
        serve.post("/v1/start_turn", {"session_id": "shared"})
        refused = serve.post("/v1/before_model", {"session_id": "shared"})
        assert (refused["action"], refused["code"], refused["cap"]) == ("block", "cap_session", "tokens")
    # another session has its own budget
    assert replicas[0].post("/v1/before_model", {"session_id": "other"})["action"] == "allow"
    assert not any(b"shared" in key for key in redis_server.client.keys("*"))  # keys hold no raw id
