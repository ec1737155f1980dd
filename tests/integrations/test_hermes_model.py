"""The hermes-agent plugin at hermes' model-request hooks (``pre_api_request``/``post_api_request``):
real hermes ``AIAgent`` runs in the side venv with a scripted OpenAI-compatible model, and the
plugin's hooks fed hermes' own payload shapes."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from otelguard.integrations.hermes import HermesGuardPlugin
from tests.e2e import free_port
from tests.integrations.model_turns import NO_ACTION_HALT, NO_ACTION_WARN, REPLY_TOKENS, stalls, watched
from tests.integrations.test_hermes import _guard_code, _Hooks, _sample
from tests.side_venvs import PROJECT_ROOT, hermes_python

SCRIPT = Path(__file__).resolve().parent.parent / "side" / "hermes_model_run.py"
TOKEN_CAP = f"mode: unattended\ncaps: {{turn: {{tokens: {3 * REPLY_TOKENS}}}}}\n"


def side_run(scenario: str, config_text: str, work: Path) -> dict[str, Any]:
    python = hermes_python()
    config = work / "otelguard.yaml"
    config.write_text(config_text)
    env = {
        **os.environ,
        "OTELGUARD_CONFIG": str(config),
        "OTELGUARD_METRICS_PORT": str(free_port()),
        "OTELGUARD_SIGNATURE_KEY": "hermes-test-key",
        "PYTHONPATH": str(PROJECT_ROOT),  # the checkout under test, whatever the venv last installed
    }
    done = subprocess.run(
        [str(python), str(SCRIPT), str(work), scenario], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def model_codes(run: dict[str, Any]) -> list[str]:
    """The guard's answers to the plugin's model hooks, other than ``allow``."""
    return [answer["code"] for answer in run["answers"] if answer["action"] != "allow"]


def test_a_model_burning_tokens_has_every_call_refused_once_the_turn_cap_is_spent(tmp_path: Path) -> None:
    """hermes ignores what its model hooks return, so the reply that spends the cap halts the turn:
    its call and every call the model asks for after it are refused, and hermes ends the run at its
    iteration budget."""
    run = side_run("burn", TOKEN_CAP, tmp_path)

    results = run["shown"]
    assert [_guard_code(r) for r in results[:2]] == [None, None]  # the third reply crossed the cap
    assert len(results) > 3 and {_guard_code(r) for r in results[2:]} == {"turn_halted"}
    codes = model_codes(run)
    assert codes[0] == "cap_turn" and set(codes[1:]) <= {"turn_halted"}
    assert _sample(run["metrics"], "otelguard_turns_total", outcome="halted") == 1


def test_a_normal_run_gets_no_decision(tmp_path: Path) -> None:
    run = side_run("normal", "mode: unattended\n", tmp_path)

    assert run["final"] == "It says hello." and run["requests"] == 2
    assert [answer["event"] for answer in run["answers"]] == ["before", "after"] * 2
    assert model_codes(run) == []
    assert _sample(run["metrics"], "otelguard_decisions_total") == 0
    assert _sample(run["metrics"], "otelguard_turns_total", outcome="completed") == 1


def test_calls_whose_arguments_do_not_parse_are_warned_then_stopped() -> None:
    """hermes' non-streaming path answers a call with malformed JSON by asking the model again (its
    streaming path retries such a reply as truncated, before ``post_api_request``): the plugin
    counts each one as a reply without a valid call (hermes' payloads, hook by hook)."""
    host, watch = watched(stalls(), agent="hermes")
    registry = _Hooks()
    HermesGuardPlugin(host=host).register(registry)
    hooks = registry.hooks
    common = {"session_id": "s", "turn_id": "t", "task_id": "s", "platform": "cli", "model": "scripted"}
    hooks["pre_llm_call"](user_message="go", conversation_history=[], is_first_turn=True, **common)
    call = SimpleNamespace(
        id="c", type="function", function=SimpleNamespace(name="read_file", arguments="{path")
    )
    message = SimpleNamespace(role="assistant", content=None, tool_calls=[call])
    usage = {"input_tokens": 400, "output_tokens": 100, "prompt_tokens": 400, "total_tokens": 500}
    for n in range(NO_ACTION_HALT):
        hooks["pre_api_request"](api_call_count=n + 1, **common)
        hooks["post_api_request"](
            api_call_count=n + 1,
            assistant_message=message,
            usage=usage,
            assistant_tool_call_count=1,
            **common,
        )

    assert watch.model_codes() == {"no_action_warn": NO_ACTION_HALT - NO_ACTION_WARN, "no_action_halt": 1}
    assert watch.replies() == {"invalid_tool_call": NO_ACTION_HALT}
    assert watch.input_tokens() == NO_ACTION_HALT * 400
    refused = hooks["pre_tool_call"](
        tool_name="read_file", args={"path": "a"}, tool_call_id="later", **common
    )
    assert refused is not None and refused["action"] == "block"  # the halted turn refuses every call


def test_payloads_of_any_shape_never_raise_into_hermes() -> None:
    """hermes catches a plugin's exceptions, but a plugin that raised would lose the event: odd
    payloads are read as far as they make sense, the rest as not reported."""
    host, watch = watched(stalls(), agent="hermes")
    registry = _Hooks()
    HermesGuardPlugin(host=host).register(registry)
    hooks = registry.hooks
    odd_calls = [object(), SimpleNamespace(function=SimpleNamespace(arguments=b"\xff")), {"function": 3}]
    for message, usage in [
        (object(), "lots"),
        (SimpleNamespace(content=["a", 1], tool_calls="x"), {"input_tokens": -5, "output_tokens": "9"}),
        (SimpleNamespace(content="ok", tool_calls=odd_calls), {"input_tokens": True}),
        (None, None),
    ]:
        hooks["pre_api_request"](session_id="s", turn_id="t")
        hooks["post_api_request"](session_id="s", turn_id="t", assistant_message=message, usage=usage)

    assert watch.internal_errors == ()
    assert len([e for e in watch.model_events if e.outcome is not None]) == 4
    assert watch.input_tokens() == 0
