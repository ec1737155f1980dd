"""`otelguard bench` smoke tests: it runs with small N and prints the bench document (docs/overhead.md).

No timing asserts: the numbers belong to the machine. These tests pin the document's shape, the
figure names, and that each measurement really exercises what it claims to.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from otelguard.bench import FIGURE_NAMES, TARGETS
from otelguard.bench.measure import percentile, retained_bytes, series_after_signatures
from otelguard.bench.tricks import PAYS, TRICKS, plain_alternatives
from otelguard.bench.workloads import DistinctCalls, large_turns, mixed_turns
from otelguard.cli import main

SMALL = ["--calls", "200", "--memory-calls", "300", "--growth-calls", "400", "--loop-signatures", "300"]


def _bench_json(capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, Any]:
    assert main(["bench", *SMALL, "--json", *extra]) == 0
    out = capsys.readouterr().out
    document: dict[str, Any] = json.loads(out)  # exactly one JSON document on stdout
    return document


def test_json_document_has_every_spec_field_and_figure(capsys: pytest.CaptureFixture[str]) -> None:
    """The document: calls, floor_us, naive_floor_us, figures (the six names), growth, memory, series."""
    document = _bench_json(capsys)
    assert document["calls"] == 200
    assert set(document["floor_us"]) == {"mixed", "large"}
    assert set(document["naive_floor_us"]) == {"mixed", "large"}
    assert [f["name"] for f in document["figures"]] and {f["name"] for f in document["figures"]} == set(
        FIGURE_NAMES
    )
    for figure in document["figures"]:
        assert {"name", "per_call_us", "p99_us", "ratio_to_floor"} <= set(figure)
        assert figure["per_call_us"] > 0 and figure["p99_us"] >= figure["per_call_us"]
        assert figure["ratio_to_floor"] > 0
    assert document["growth_ratio"] > 0
    assert isinstance(document["retained_bytes_after_1m_distinct"], int)
    assert document["series_after_100k_signatures"] > 0
    assert document["metrics_body_bytes"] > 0
    assert {row["name"] for row in document["targets"]} == set(TARGETS)


def test_workload_option_runs_every_configuration_on_that_workload(
    capsys: pytest.CaptureFixture[str],
) -> None:
    document = _bench_json(capsys, "--workload", "distinct")
    assert set(document["floor_us"]) == {"distinct"}
    assert {f["name"] for f in document["figures"]} == {
        f"{prefix}_distinct"
        for prefix in (
            "guard_alone",
            "guard_in_tree",
            "guard_metrics",
            "guard_metrics_spans_own",
            "guard_metrics_spans_auto",
            "guard_metrics_spans_decisions",
        )
    }


def test_human_output_is_a_table_with_targets(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", *SMALL, "--workload", "mixed"]) == 0
    out = capsys.readouterr().out
    for name in ("floor_mixed", "naive_floor_mixed", "guard_alone_mixed", "guard_metrics_spans_own_mixed"):
        assert name in out
    assert "≤ 3" in out and "targets met" in out


def test_bad_calls_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--calls", "0"])
    assert exc.value.code == 2


def test_mixed_workload_matches_the_issue_mix() -> None:
    """60% reads, 20% terminal, 10% web_search, 10% writes; 3–6 keys; 1–4 KB results, half JSON."""
    calls = [call for turn in mixed_turns(4000) for call in turn]
    share = {kind: 0 for kind in ("read", "terminal", "web_search", "write")}
    for call in calls:
        kind = call.tool_name if call.tool_name in ("terminal", "web_search") else None
        kind = kind or ("write" if call.tool_name in ("write_file", "patch") else "read")
        share[kind] += 1
        assert 3 <= len(call.args) <= 6
        assert 900 <= len(call.result) <= 5200
    assert share["read"] / len(calls) == pytest.approx(0.6, abs=0.04)
    assert share["terminal"] / len(calls) == pytest.approx(0.2, abs=0.04)
    assert share["web_search"] / len(calls) == pytest.approx(0.1, abs=0.03)
    json_share = sum(call.result.startswith("{") for call in calls) / len(calls)
    assert json_share == pytest.approx(0.5, abs=0.05)
    assert any(call.failed for call in calls) and not all(call.failed for call in calls)


def test_large_workload_has_10kb_args_and_100kb_results() -> None:
    calls = [call for turn in large_turns(60) for call in turn]
    for call in calls:
        assert len(json.dumps(call.args)) >= 10_000
        assert len(call.result) >= 95_000


def test_distinct_calls_are_all_different_and_windows_match_in_shape() -> None:
    source = DistinctCalls()
    calls = [source.call(n) for n in range(500)]
    assert len({json.dumps(call.args, sort_keys=True) for call in calls}) == 500
    assert len({call.result for call in calls}) == 500
    early, late = source.call(100, shape=0), source.call(100_000, shape=0)
    assert early.tool_name == late.tool_name and early.args.keys() == late.args.keys()
    assert early.args != late.args


def test_series_workload_produces_one_loop_decision_per_signature() -> None:
    """Each signature fails twice: the second failure is a loop-detector decision."""
    figures = series_after_signatures(120)
    assert figures.loop_decisions >= 120
    assert figures.series > 0 and figures.body_bytes > 0


def test_retained_bytes_is_measured() -> None:
    assert retained_bytes(200) >= 0


def test_percentile_is_nearest_rank() -> None:
    values = list(range(1, 101))
    assert percentile(values, 0.5) == 50
    assert percentile(values, 0.99) == 99
    assert percentile([7.0], 0.99) == 7.0


def test_each_hot_path_trick_is_measured_beside_its_plain_alternative_on_its_path(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every hot-path trick of the core keeps a figure of its own: its path with the trick and with
    the plain alternative, side by side, and the share saved against the 5% it must pay."""
    tricks = _bench_json(capsys, "--workload", "mixed")["hot_path_tricks"]
    assert set(tricks) == set(TRICKS)
    for name, trick in tricks.items():
        assert trick["path"] == TRICKS[name].path
        assert trick["with_us"] > 0 and trick["without_us"] > 0
        assert isinstance(trick["saving"], float) and isinstance(trick["pays"], bool)
        assert trick["pays"] == (trick["saving"] >= PAYS)


def test_the_plain_alternatives_really_run_the_plain_constructors() -> None:
    from otelguard import Guard, GuardConfig
    from otelguard.core import decisions, observers
    from otelguard.core.observers import CallEvent
    from otelguard.testing import RecordingObserver

    twin_allow, twin_event = decisions.allow_decision, observers.new_call_event
    recorder = RecordingObserver()
    guard = Guard(GuardConfig(signature_key="k"), observers=[recorder])
    guard.start_turn()
    swaps = [swap for trick in TRICKS.values() for swap in trick.plain()]
    with plain_alternatives(swaps):
        assert decisions.allow_decision is decisions.plain_allow_decision
        assert observers.new_call_event is CallEvent
        decision = guard.before_call("read_file", {"p": 1})
        guard.after_call("read_file", {"p": 1}, "x")
    assert decisions.allow_decision is twin_allow and observers.new_call_event is twin_event
    assert decision.action == "allow" and type(decision) is decisions.Decision
    assert recorder.outcomes == ["ok"]


def test_the_model_event_is_measured_beside_the_tool_call(capsys: pytest.CaptureFixture[str]) -> None:
    """``model_events``: per configuration, a model event's and a tool call's µs in the same run and
    their ratio against the target (a model event costs no more than a call); no timing asserted."""
    from otelguard.bench.model_turns import MODEL_TARGET

    document = _bench_json(capsys)
    figures = document["model_events"]
    assert figures["target"] == MODEL_TARGET == 1.0
    for name in ("quiet", "token_caps"):
        row = figures[name]
        assert row["model_event_us"] > 0 and row["tool_call_us"] > 0
        assert row["ratio"] == pytest.approx(row["model_event_us"] / row["tool_call_us"], rel=0.02)
        assert row["met"] is (row["ratio"] <= MODEL_TARGET)
