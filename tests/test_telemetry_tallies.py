"""Tally counter families: the exposition prometheus_client's ``Counter`` gives for the same calls,
exact counts from many threads, and the ``Counter``-backed families where tallies cannot be used."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.id_generator import IdGenerator
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_text

from otelguard import Guard, GuardConfig
from otelguard.telemetry import Telemetry, tallies
from otelguard.telemetry.metrics import families_for
from otelguard.telemetry.tallies import CounterChildren, CounterFamily, Tally, counter_family

KEY = "test-signature-key"


class CountingIds(IdGenerator):
    """Trace and span ids 1, 2, 3...: two runs of the same calls get the same exemplars."""

    def __init__(self) -> None:
        self._next = 0

    def _step(self) -> int:
        self._next += 1
        return self._next

    def generate_span_id(self) -> int:
        return self._step()

    def generate_trace_id(self) -> int:
        return self._step()


def scripted_run(registry: CollectorRegistry, span_mode: str) -> None:
    """Every kind of counter increment: outcomes, decisions with exemplars, cap hits, loop signatures
    past their bound (evictions), and tool and agent names past the label bound (``_other``)."""
    provider = TracerProvider(id_generator=CountingIds())
    telemetry = Telemetry(provider, registry, span_mode=span_mode, max_tool_values=4, max_signature_series=3)
    config = GuardConfig.from_mapping(
        {"mode": "unattended", "signature_key": KEY, "caps": {"on_hit": "reject", "turn": {"web_search": 2}}}
    )
    for agent in ("planner", "coder", "tester", "reviewer", "extra-agent"):
        guard = Guard(config, telemetry, agent=agent)
        guard.start_turn()
        for tool, args in [("web_search", {"q": n}) for n in range(3)] + [
            ("read_file", {"p": 1}),
            ("grep", {}),
        ]:
            if guard.before_call(tool, args).allows_execution:  # the third search is over the cap
                guard.after_call(tool, args, "found")
        for tool in ("mcp_a", "mcp_b", "mcp_c"):
            guard.before_call(tool, {"n": 1})
            guard.after_call(tool, {"n": 1}, "Error: no", failed=True)
        for n in range(6):  # distinct failing signatures, twice each: loop decisions past the bound
            args = {"target": n}
            for _ in range(2):
                if guard.before_call("terminal", args).allows_execution:
                    guard.after_call("terminal", args, "Error", failed=True)
        guard.end_turn()
    provider.shutdown()


_CREATED = re.compile(r"^(\w+_created(?:\{[^}]*\})?) [0-9.e+]+$", re.MULTILINE)
_EXEMPLAR_TIME = re.compile(r"(# \{[^}]*\} [0-9.e+]+) [0-9.e+]+$", re.MULTILINE)


def normalised(text: bytes) -> str:
    """The exposition with the clock readings (series creation, exemplar times) blanked."""
    return _EXEMPLAR_TIME.sub(r"\1 T", _CREATED.sub(r"\1 T", text.decode()))


def exposition(render: Callable[[CollectorRegistry], bytes], span_mode: str) -> str:
    registry = CollectorRegistry()
    scripted_run(registry, span_mode)
    return normalised(render(registry))


@pytest.mark.parametrize("render", [generate_latest, openmetrics_text], ids=["text", "openmetrics"])
@pytest.mark.parametrize("span_mode", ["own", "decisions", "off"])
def test_a_scrape_is_what_prometheus_counters_give_for_the_same_calls(
    render: Callable[[CollectorRegistry], bytes], span_mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert tallies.TALLIES
    with_tallies = exposition(render, span_mode)
    monkeypatch.setattr(tallies, "TALLIES", False)  # the Counter-backed families
    with_counters = exposition(render, span_mode)
    assert with_tallies == with_counters
    # the run exercised what the comparison is about
    assert 'otelguard_tool_calls_total{agent="_other",outcome="failed",tool="_other"}' in with_tallies
    assert with_tallies.count("otelguard_loop_signature_hits_total{") == 3
    assert 'otelguard_cap_hits_total{agent="planner",cap="web_search",scope="turn"}' in with_tallies
    if span_mode != "off" and render is openmetrics_text:  # exemplars, compared above with the counters'
        assert re.search(
            r'^otelguard_decisions_total\{.*\} 1\.0 # \{span_id="\w{16}",trace_id="\w{32}"\} 1\.0 T$',
            with_tallies,
            re.M,
        )


def test_created_samples_can_be_turned_off_as_for_counters(monkeypatch: pytest.MonkeyPatch) -> None:
    from prometheus_client import metrics

    monkeypatch.setattr(metrics, "_use_created", False)  # what disable_created_metrics() sets
    registry = CollectorRegistry()
    family = CounterFamily("otelguard_probe", "Probe.", ("tool",), registry)
    family.labels("read_file").add()
    assert generate_latest(registry).decode().splitlines()[2:] == [
        'otelguard_probe_total{tool="read_file"} 1.0'
    ]


def test_a_tally_counts_exactly_from_many_threads() -> None:
    registry = CollectorRegistry()
    family = CounterFamily("otelguard_probe", "Probe.", ("tool",), registry)
    threads_n, per_thread = 8, 20_000
    barrier = threading.Barrier(threads_n)

    def work(index: int) -> None:
        barrier.wait()
        for n in range(per_thread):
            family.labels("shared").add()
            family.labels(f"own-{index}-{n % 4}").inc()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(threads_n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert registry.get_sample_value("otelguard_probe_total", {"tool": "shared"}) == threads_n * per_thread
    own = [
        registry.get_sample_value("otelguard_probe_total", {"tool": f"own-{i}-{k}"})
        for i in range(threads_n)
        for k in range(4)
    ]
    assert own == [per_thread / 4] * (threads_n * 4)


def test_a_tally_reads_back_any_count() -> None:
    tally = Tally()
    assert tally.value == 0
    for _ in range(1234):
        tally.add()
    assert tally.value == 1234
    with pytest.raises(ValueError):
        tally.inc(2)


def test_a_removed_series_leaves_the_scrape_and_starts_again_at_zero() -> None:
    registry = CollectorRegistry()
    family = CounterFamily("otelguard_probe", "Probe.", ("tool",), registry)
    family.labels("a").add()
    family.labels("a").add()
    family.remove("a")
    assert registry.get_sample_value("otelguard_probe_total", {"tool": "a"}) is None
    family.labels("a").add()
    assert registry.get_sample_value("otelguard_probe_total", {"tool": "a"}) == 1


def test_family_names_are_owned_once_per_registry() -> None:
    registry = CollectorRegistry()
    CounterFamily("otelguard_probe", "Probe.", ("tool",), registry)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        CounterFamily("otelguard_probe", "Probe.", ("tool",), registry)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        counter_family("otelguard_probe", "Probe.", ("tool",), registry)


def test_without_in_process_values_the_families_are_counters(monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``PROMETHEUS_MULTIPROC_DIR`` prometheus_client keeps values in files (the families must
    write there: tests/test_metrics_server.py runs real workers); ``TALLIES`` is then false."""
    monkeypatch.setattr(tallies, "TALLIES", False)
    families: Any = families_for(CollectorRegistry())
    for name in ("tool_calls", "decisions", "cap_hits", "loop_signature_hits"):
        assert isinstance(getattr(families, name), CounterChildren)
    monkeypatch.undo()
    families = families_for(CollectorRegistry())
    assert isinstance(families.tool_calls, CounterFamily)
