"""The shipped token runaway (otelguard/data/examples/token-runaway/), backtested with the config
beside it against Debian's real prometheus and promtool: the model replies read from the Claude Code
assistant entries and their usage spend each turn's token cap, and ``OtelguardRunawayTokens`` fires
(and only it), the model stops marked in its interval; without a token cap nothing is seen."""

from __future__ import annotations

import contextlib
import io
import json
from typing import Any

import pytest

from benchmarks.backtest_fleet import TOKEN_CONFIG, TOKENS, token_history
from otelguard.cli import main
from tests.e2e import require_binary

CONFIG = TOKENS / "otelguard.yaml"
ALERT = "OtelguardRunawayTokens"


def backtest(*arguments: str) -> tuple[int, dict[str, Any]]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["backtest", *arguments, "--json"])
    return code, json.loads(out.getvalue())


def test_the_shipped_token_runaway_is_what_the_generator_writes() -> None:
    assert CONFIG.read_text(encoding="utf-8") == TOKEN_CONFIG
    written = token_history()
    directory = TOKENS / "runaway"
    assert {p.name for p in directory.glob("*.jsonl")} == set(written)
    for name, text in written.items():
        assert (directory / name).read_text(encoding="utf-8") == text, name


@pytest.mark.e2e
def test_the_token_runaway_fires_the_tokens_alert_and_nothing_else() -> None:
    require_binary("prometheus")
    require_binary("promtool")
    code, document = backtest(str(TOKENS / "runaway"), "--config", str(CONFIG))
    assert code == 1
    assert document["fired"] == [ALERT]
    [entry] = [a for a in document["alerts"] if a["alert"] == ALERT]
    [interval] = entry["intervals"]
    assert interval["labels"]["cap"] == "tokens" and interval["labels"]["severity"] == "critical"
    assert interval["cap_hits_total"] >= 1 and interval["halts_total"] >= 1
    [hit, *_] = interval["cap_hits"]
    assert (hit["tool"], hit["code"], hit["cap"], hit["scope"], hit["call_id"]) == (
        "model",
        "cap_turn",
        "tokens",
        "turn",
        None,
    )
    assert document["replay"]["totals"]["cap_hits"] == {"tokens": 15}
    assert document["replay"]["errors"] == []


@pytest.mark.e2e
def test_without_a_token_cap_the_runaway_goes_unseen() -> None:
    """No call repeats and no call cap is reached: only the tokens say the turns ran away."""
    require_binary("prometheus")
    require_binary("promtool")
    code, document = backtest(str(TOKENS / "runaway"))
    assert code == 0 and document["fired"] == []
