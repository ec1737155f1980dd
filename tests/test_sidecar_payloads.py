"""One set of payload checks and one decision answer for both of the sidecar's APIs.

A ``/v1/`` body and a Claude Code hook payload with the same wrong field get the same one-line
400; the decision answer is the decision's metadata (no tool name: the caller sent it) with the
message and the synthetic result, in a fixed order.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from otelguard import Decision, GuardConfig
from otelguard.serving.http_server import Request, Response
from otelguard.serving.sidecar import Sidecar

CONFIG = GuardConfig(mode="unattended", signature_key="payloads", caps={"turn": {"web_search": 1}})
ROUTES = (
    "/v1/start_turn",
    "/v1/before_call",
    "/v1/after_call",
    "/v1/end_turn",
    "/v1/end_session",
    "/v1/hooks/claude-code",
)
CANARY = "s3cr3t-canary"


def _sidecar() -> Sidecar:
    return Sidecar(CONFIG, registry=CollectorRegistry())


def _post(sidecar: Sidecar, path: str, body: object) -> Response:
    return sidecar.handle(Request("POST", path, "", {}, orjson.dumps(body)))


def _hook(event: str, **fields: Any) -> dict[str, Any]:
    return {"hook_event_name": event, "session_id": "s", **fields}


@pytest.mark.parametrize(
    ("v1_body", "hook_body", "line"),
    [
        (
            {"session_id": "s"},
            _hook("PreToolUse", tool_input={}),
            b"tool_name: expected a string (missing)\n",
        ),
        (
            {"session_id": "s", "tool_name": ""},
            _hook("PreToolUse", tool_name=""),
            b"tool_name: expected a non-empty string\n",
        ),
        (
            {"tool_name": "x"},
            {"hook_event_name": "PreToolUse", "tool_name": "x"},
            b"session_id: expected a string (missing)\n",
        ),
        (
            {"session_id": "s" * 300, "tool_name": "x"},
            _hook("PreToolUse", session_id="s" * 300, tool_name="x"),
            b"session_id: expected a string of 1 to 256 characters\n",
        ),
        (
            {"session_id": "s", "tool_name": "x", "call_id": 7},
            _hook("PreToolUse", tool_name="x", tool_use_id=7),
            None,  # the field's name differs; the reason is the same
        ),
    ],
)
def test_both_apis_answer_a_bad_field_with_the_same_line(
    v1_body: dict[str, Any], hook_body: dict[str, Any], line: bytes | None
) -> None:
    sidecar = _sidecar()
    v1 = _post(sidecar, "/v1/before_call", v1_body)
    hook = _post(sidecar, "/v1/hooks/claude-code", hook_body)
    assert (v1.status, hook.status) == (400, 400)
    if line is None:
        assert v1.body.split(b":", 1)[1] == hook.body.split(b":", 1)[1]
    else:
        assert v1.body == hook.body == line


def test_a_long_tool_name_is_not_a_bad_field_on_either_api() -> None:
    sidecar = _sidecar()
    name = "t" * 300
    assert _post(sidecar, "/v1/before_call", {"session_id": "s", "tool_name": name}).status == 200
    assert _post(sidecar, "/v1/hooks/claude-code", _hook("PreToolUse", tool_name=name)).status == 200


def _answer_of(decision: Decision) -> dict[str, Any]:
    meta = decision.to_metadata()
    del meta["tool_name"]
    return {
        **meta,
        "message": decision.message,
        "synthetic_result": None if decision.allows_execution else decision.synthetic_result(),
    }


def test_the_decision_answer_is_the_decisions_metadata_in_a_fixed_order() -> None:
    sidecar = _sidecar()
    _post(sidecar, "/v1/start_turn", {"session_id": "s"})
    allowed = _post(
        sidecar, "/v1/before_call", {"session_id": "s", "tool_name": "web_search", "args": {"q": 1}}
    )
    refused = _post(
        sidecar, "/v1/before_call", {"session_id": "s", "tool_name": "web_search", "args": {"q": 2}}
    )
    first, second = orjson.loads(allowed.body), orjson.loads(refused.body)
    assert list(first) == ["action", "code", "message", "count", "limit", "args_hash", "synthetic_result"]
    assert list(second) == [*first, "cap"]
    assert first["action"] == "allow" and first["synthetic_result"] is None
    assert second["code"] == "cap_turn" and second["cap"] == "web_search"
    # the same calls asked of a guard of the same session host: the answer is that decision's metadata
    session = sidecar.host.session("t")
    session.start_turn()
    assert _answer_of(session.main.before_call("web_search", {"q": 1})) == first
    assert _answer_of(session.main.before_call("web_search", {"q": 2})) == second


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8) | st.just(CANARY),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
FIELDS = st.sampled_from(
    [
        "session_id",
        "tool_name",
        "args",
        "result",
        "failed",
        "refusal",
        "cancelled",
        "call_id",
        "turn_id",
        "agent",
        "errored",
        "hook_event_name",
        "tool_input",
        "tool_use_id",
        "agent_id",
        "agent_type",
        "is_interrupt",
    ]
)
EVENTS = st.sampled_from(["PreToolUse", "PostToolUse", "PostToolUseFailure", "UserPromptSubmit", "Stop"])


@given(
    route=st.sampled_from(ROUTES),
    body=st.dictionaries(FIELDS, JSON | EVENTS, max_size=8),
)
def test_any_json_body_gets_200_or_a_400_that_names_a_field_and_no_value(
    route: str, body: dict[str, Any]
) -> None:
    response = _post(_sidecar(), route, body)
    assert response.status in (200, 400)
    if response.status == 400:
        field, _, reason = response.body.decode().partition(": expected ")
        assert reason.endswith("\n") and "\n" not in reason[:-1]
        assert field in body or field == "body" or field in ("session_id", "tool_name", "hook_event_name")
        assert CANARY not in response.body.decode()
