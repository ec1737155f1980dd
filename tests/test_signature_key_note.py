"""The note about a random signature key: said once, and only where a random key changes what the user
gets (hashes compared across processes: `otelguard serve`, and telemetry that exports the hashes);
never by a guard that keeps its hashes to itself, the README's snippets or a plain replay."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.e2e import free_port, stop_process
from tests.markdown_docs import README, blocks

TIMEOUT = 60.0
NO_KEY_ENV = {k: v for k, v in os.environ.items() if k != "OTELGUARD_SIGNATURE_KEY"}
EXAMPLE = Path(__file__).parents[1] / "otelguard" / "data" / "examples" / "claude-code-runaway-search.jsonl"


def notes(stderr: str) -> list[str]:
    """The lines about the key (each names the variable that sets it)."""
    return [line for line in stderr.splitlines() if "OTELGUARD_SIGNATURE_KEY" in line]


def run_python(code: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env if env is not None else NO_KEY_ENV,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=True,
    )
    return done.stderr


SPANS_TO_A_COLLECTOR = """
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry
from otelguard import Guard, GuardConfig
from otelguard.telemetry import Telemetry

provider = TracerProvider()
exporter = InMemorySpanExporter()
provider.add_span_processor(SimpleSpanProcessor(exporter))
telemetry = Telemetry(tracer_provider=provider, registry=CollectorRegistry())
for _ in range(2):  # two guards: the note is once per process
    guard = Guard(GuardConfig({config}), telemetry=telemetry)
    guard.start_turn()
    for n in range(3):
        guard.before_call("read_file", {{"path": n}}, call_id=str(n))
        guard.after_call("read_file", {{"path": n}}, "text", failed=False, call_id=str(n))
    guard.end_turn()
assert len(exporter.get_finished_spans()) == 6
"""


def test_spans_exported_with_a_random_key_say_it_once_with_how_to_set_a_key() -> None:
    (note,) = notes(run_python(SPANS_TO_A_COLLECTOR.format(config="")))
    assert "signature_key:" in note and "OTELGUARD_SIGNATURE_KEY" in note


def test_a_configured_or_environment_key_says_nothing() -> None:
    assert notes(run_python(SPANS_TO_A_COLLECTOR.format(config="signature_key='k'"))) == []
    keyed = {**NO_KEY_ENV, "OTELGUARD_SIGNATURE_KEY": "fleet"}
    assert notes(run_python(SPANS_TO_A_COLLECTOR.format(config=""), env=keyed)) == []


def test_a_looping_signature_exported_as_a_series_says_it() -> None:
    """Metrics only (no tracer provider): the hash leaves the process as the `signature` label of a
    loop, so a random key is worth the note there too."""
    code = (
        "from prometheus_client import CollectorRegistry\n"
        "from otelguard import Guard, GuardConfig\n"
        "from otelguard.telemetry import Telemetry\n"
        "guard = Guard(GuardConfig(), telemetry=Telemetry(registry=CollectorRegistry()))\n"
        "guard.start_turn()\n"
        "for _ in range(3):\n"
        "    guard.before_call('web_fetch', {'url': 'x'})\n"
        "    guard.after_call('web_fetch', {'url': 'x'}, 'Error: 503', failed=True)\n"
        "print(guard.end_turn().decisions)\n"
    )
    assert len(notes(run_python(code))) == 1


def test_the_readme_snippets_say_nothing() -> None:
    code = "\n\n".join(block.text for block in blocks(README, "python"))
    assert notes(run_python(code)) == []


def test_a_plain_replay_says_nothing() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "otelguard", "replay", str(EXAMPLE)],
        env=NO_KEY_ENV,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0
    assert notes(done.stderr) == []


def start_serve_and_read_startup(tmp_path: Path, config: str) -> list[str]:
    """The lines serve writes to stderr up to the one that says it listens."""
    path = tmp_path / "otelguard.yaml"
    path.write_text(config)
    process = subprocess.Popen(
        [sys.executable, "-m", "otelguard", "serve", "--port", str(free_port()), "--config", str(path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=NO_KEY_ENV,
    )
    lines: list[str] = []
    try:
        assert process.stderr is not None
        for line in process.stderr:
            lines.append(line)
            if "listening on" in line:
                break
    finally:
        stop_process(process)
    return lines


def test_serve_without_a_key_says_it_once_at_startup(tmp_path: Path) -> None:
    lines = start_serve_and_read_startup(tmp_path, "mode: unattended\n")
    assert "listening on" in lines[-1]
    (note,) = notes("".join(lines))
    assert note.startswith("otelguard serve: ") and "OTELGUARD_SIGNATURE_KEY" in note


def test_serve_with_a_key_says_nothing(tmp_path: Path) -> None:
    lines = start_serve_and_read_startup(tmp_path, "mode: unattended\nsignature_key: k\n")
    assert notes("".join(lines)) == []
