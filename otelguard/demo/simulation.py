"""Simulated agents for ``otelguard demo``: realistic turns run through a real ``Guard``.

Each agent is a thread that plays scenarios (a healthy turn, a failing test loop, a model re-reading
one file, a denial storm, an A→B→A→B cycle, a runaway web search, a delegation storm, a delegation
tree running away across agents, edits of files never read that all fail with the same error, a
model that answers without acting, a context that grows until the turn's token cap...) the way a
host would: a model call asking for each tool call (``before_model``, ``after_model`` with its
tokens, inside a GenAI ``chat`` span), ``before_call``, run the fake tool unless refused,
``after_call``, a final answer, and stop the turn when the guard halts it. The first pass plays the loop scenarios in an order that shows every kind
of decision within seconds; then scenarios are drawn at random (``seed``), mostly healthy.
"""

from __future__ import annotations

import random
import threading
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

import orjson
from opentelemetry import trace

from otelguard.config import GuardConfig
from otelguard.core.decisions import Decision
from otelguard.core.scripted import ScriptedCall, play_call
from otelguard.hosting import Guard, TelemetryOption
from otelguard.propagation import use_tree
from otelguard.telemetry.genai import GEN_AI_OPERATION_NAME, GEN_AI_REQUEST_MODEL

__all__ = [
    "AGENT_NAMES",
    "DEMO_TOKEN_CAP",
    "SCENARIOS",
    "TREE_SCENARIO",
    "DemoStats",
    "SimulatedAgent",
    "tree_config",
]

AGENT_NAMES: Final = ("support-bot", "research-agent", "coder", "ops-cron", "sales-assistant", "triage")
TURNS_PER_SESSION: Final = 8
# A runaway turn stops by itself after this many calls even when a --config lifts every cap.
MAX_STEPS_PER_TURN: Final = 120


def _json(**fields: Any) -> str:
    return orjson.dumps(fields).decode()


def healthy(rng: random.Random) -> Iterator[ScriptedCall]:
    path = rng.choice(("src/app.py", "src/models.py", "README.md", "tests/test_api.py"))
    yield ScriptedCall(
        "search_files", {"pattern": "def handler", "path": "src"}, _json(matches=rng.randint(1, 9))
    )
    yield ScriptedCall("read_file", {"path": path}, f"# {path}\n" + "x = 1\n" * rng.randint(5, 50))
    yield ScriptedCall(
        "patch", {"path": path, "diff": f"@@ -{rng.randint(1, 99)} +1 @@"}, _json(success=True)
    )
    yield ScriptedCall(
        "terminal", {"command": "pytest -q"}, _json(exit_code=0, output=f"{rng.randint(10, 90)} passed")
    )
    if rng.random() < 0.5:
        yield ScriptedCall(
            "web_search", {"query": f"python release notes {rng.randint(1, 999)}"}, _json(results=5)
        )


def failing_terminal(rng: random.Random) -> Iterator[ScriptedCall]:
    """The model reruns the same failing test command without changing anything."""
    error = _json(exit_code=1, output="FAILED tests/test_api.py::test_login - AssertionError")
    yield ScriptedCall("read_file", {"path": "tests/test_api.py"}, "def test_login(): ...")
    for _ in range(13):  # 5 run, 7 are refused, the 13th stops the turn
        yield ScriptedCall("terminal", {"command": "pytest tests/test_api.py -x"}, error, failed=True)


def rereading_file(rng: random.Random) -> Iterator[ScriptedCall]:
    """The model reads the same file again and again, getting the same content."""
    content = "[server]\nport = 8080\nworkers = 4\n"
    for _ in range(13):  # 5 run, 7 are refused, the 13th stops the turn
        yield ScriptedCall("read_file", {"path": "config/settings.toml"}, content)


def denial_storm(rng: random.Random) -> Iterator[ScriptedCall]:
    """Every attempt is refused by the host's permission gate, with different arguments and texts."""
    category = rng.choice(("permission_denied", "sandbox_denied", "permission_required"))
    for i in range(12):
        target = f"/etc/service-{rng.randint(1, 10_000)}.conf"
        yield ScriptedCall(
            "write_file",
            {"path": target, "content": f"enabled = {i % 2 == 0}"},
            f"{category.replace('_', ' ').capitalize()}: {target} is outside the workspace (attempt {i + 1})",
            refusal=category,
        )


def cycle(rng: random.Random) -> Iterator[ScriptedCall]:
    """A→B→A→B: the model bounces between two pages, each answer slightly different."""
    for i in range(12):
        yield ScriptedCall(
            "browser_navigate", {"url": "https://shop.example/cart"}, _json(title="Cart", nonce=i)
        )
        yield ScriptedCall("browser_click", {"ref": "checkout-button"}, _json(clicked=True, step=i))


def runaway_search(rng: random.Random) -> Iterator[ScriptedCall]:
    """Search after search with ever-new queries: only the per-turn web_search cap stops it."""
    topics = ("gpu prices", "llm benchmarks", "vector databases", "rust async", "kubernetes operators")
    for i in range(MAX_STEPS_PER_TURN):
        query = f"{rng.choice(topics)} {2020 + i % 7} comparison {i}"
        yield ScriptedCall(
            "web_search", {"query": query}, _json(results=10, first=f"https://example.com/{i}")
        )


def delegation_storm(rng: random.Random) -> Iterator[ScriptedCall]:
    """The model fans out to batches of subagents until the subagents cap refuses the next batch."""
    for i in range(30):
        tasks = [{"goal": f"research vendor {i * 5 + j}"} for j in range(5)]
        yield ScriptedCall("delegate_task", {"tasks": tasks}, _json(success=True, completed=len(tasks)))


TREE_SCENARIO: Final = "runaway_tree"
HANDOFF: Final = "handoff"
"""The tool an agent of the tree hands its task to another agent with (the call names that agent)."""
TREE_CAP: Final = 30
"""The demo's ``caps.tree`` on subagents when the config sets none: one conversation's whole tree."""


def runaway_tree(rng: random.Random) -> Iterator[ScriptedCall]:
    """One conversation whose delegation tree runs away, in three branches. The calls are those of the
    agent at hand: each ``handoff`` starts the next agent (its own guard, one level down in the tree).

    A reviewer and a writer hand one draft back and forth (a cycle: warned, refused, then stopped);
    a chain of specialists delegates down to the depth limit; then the root fans out batch after
    batch of subagents until the tree cap refuses one. No agent is near its own caps."""
    for name in ("reviewer", "writer", "reviewer", "writer", "writer"):
        yield ScriptedCall(HANDOFF, {"to": name}, _json(handed_to=name))
    yield ScriptedCall(HANDOFF, {"to": "root"}, _json(back=True))  # back to the root: a new branch
    for name in ("planner", "researcher", "analyst", "summarizer", "checker"):
        yield ScriptedCall(HANDOFF, {"to": name}, _json(handed_to=name))
    yield ScriptedCall(HANDOFF, {"to": "root"}, _json(back=True))
    for i in range(6):
        tasks = [{"goal": f"audit supplier {i * 8 + j}"} for j in range(8)]
        yield ScriptedCall("delegate_task", {"tasks": tasks}, _json(success=True, completed=len(tasks)))


STALLED_SCENARIO: Final = "stalled_model"
TOKENS_SCENARIO: Final = "runaway_tokens"
DEMO_TOKEN_CAP: Final = 200_000
"""The demo's ``caps.turn.tokens`` when it runs without ``--config``: far above any other scenario's
turn, spent by the runaway context's fourth reply."""
MODEL: Final = "demo-model"
STALLED_REPLIES: Final = 12


def runaway_tokens(rng: random.Random) -> Iterator[ScriptedCall]:
    """Distinct reads, each reply rereading a context 40,000 tokens longer: only the turn's token cap
    stops it (no call repeats)."""
    for i in range(MAX_STEPS_PER_TURN):
        yield ScriptedCall("read_file", {"path": f"docs/chapter_{i}.md"}, f"# chapter {i}\n" + "text\n" * 20)


def stalled_model(rng: random.Random) -> Iterator[ScriptedCall]:
    """The model answers without acting (no tool call, or one the harness cannot run), saying the
    same again: no call at all, only replies (``SimulatedAgent.stall``)."""
    return iter(())


def tree_config(config: GuardConfig) -> GuardConfig:
    """The config of a tree's guards: ``config``, with a tree cap on subagents when it sets none."""
    if config.caps.tree:
        return config
    return config.with_changes(caps={**_caps_mapping(config), "tree": {"subagents": TREE_CAP}})


def _caps_mapping(config: GuardConfig) -> dict[str, Any]:
    caps = config.caps
    return {"on_hit": caps.on_hit, "turn": dict(caps.turn), "session": dict(caps.session)}


def flaky_fetch(rng: random.Random) -> Iterator[ScriptedCall]:
    """One tool failing again and again with different URLs and different errors."""
    for i in range(10):
        url = f"https://api.example.com/v1/items/{rng.randint(1, 10**6)}"
        error = rng.choice(("Error: 502 Bad Gateway", "Error: timeout after 30s", "Error: connection reset"))
        yield ScriptedCall("web_fetch", {"url": url}, f"{error} (attempt {i + 1})", failed=True)


def repeated_message(rng: random.Random) -> Iterator[ScriptedCall]:
    """The same message sent again and again, the same acknowledgement each time."""
    for _ in range(12):  # 4 run, 7 are refused, the 12th runs and stops the turn
        yield ScriptedCall(
            "send_message", {"channel": "#ops", "text": "Deploy finished"}, _json(ok=True, queued=True)
        )


def unread_edits(rng: random.Random) -> Iterator[ScriptedCall]:
    """The model switches editing tools on files it never read: every one fails with the same error."""
    error = "Error: file has not been read yet. Read it first before writing to it."
    for i in range(13):
        tool = ("patch", "write_file", "edit_file")[i % 3]
        path = f"src/module_{rng.randint(1, 10**6)}.py"
        yield ScriptedCall(tool, {"path": path, "content": f"# rewrite {i}"}, error, failed=True)


Scenario = Callable[[random.Random], Iterator[ScriptedCall]]
SCENARIOS: Final[dict[str, Scenario]] = {
    "runaway_search": runaway_search,
    "delegation_storm": delegation_storm,
    TREE_SCENARIO: runaway_tree,
    "denial_storm": denial_storm,
    "failing_terminal": failing_terminal,
    "healthy": healthy,
    "rereading_file": rereading_file,
    "cycle": cycle,
    "flaky_fetch": flaky_fetch,
    "repeated_message": repeated_message,
    "unread_edits": unread_edits,
    STALLED_SCENARIO: stalled_model,
    TOKENS_SCENARIO: runaway_tokens,
}
_FIRST_PASS: Final = tuple(SCENARIOS)
_WEIGHTS: Final = {name: (6 if name == "healthy" else 1) for name in SCENARIOS}


@dataclass(frozen=True, slots=True)
class DecisionRow:
    agent: str
    scenario: str
    tool_name: str
    action: str
    code: str
    count: int
    limit: int


class DemoStats:
    """What the simulated hosts saw, for the live table and the closing summary. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls = 0
        self.turns = 0
        self.halted_turns = 0
        self.codes: Counter[str] = Counter()
        self.by_agent: Counter[tuple[str, str]] = Counter()
        self.recent: deque[DecisionRow] = deque(maxlen=12)
        self.first_decision = threading.Event()

    def record_call(self) -> None:
        with self._lock:
            self.calls += 1

    def record_decision(self, agent: str, scenario: str, decision: Decision) -> None:
        row = DecisionRow(
            agent,
            scenario,
            decision.tool_name,
            decision.action,
            decision.code,
            decision.count,
            decision.limit,
        )
        with self._lock:
            self.codes[decision.code] += 1
            self.by_agent[(agent, decision.code)] += 1
            self.recent.append(row)
        self.first_decision.set()

    def record_turn(self, halted: bool) -> None:
        with self._lock:
            self.turns += 1
            self.halted_turns += halted

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "calls": self.calls,
                "turns": self.turns,
                "halted_turns": self.halted_turns,
                "codes": dict(self.codes),
                "by_agent": dict(self.by_agent),
                "recent": list(self.recent),
            }


class SimulatedAgent:
    """One agent replica: sessions of turns through a real ``Guard``, paced to ``interval`` seconds."""

    def __init__(
        self,
        name: str,
        index: int,
        config: GuardConfig,
        telemetry: TelemetryOption,
        stats: DemoStats,
        stop: threading.Event,
        *,
        seed: int | None,
        interval: float,
        tracer: trace.Tracer | None = None,
    ) -> None:
        self.name = name
        self.tracer = tracer if tracer is not None else trace.get_tracer("otelguard-demo")
        """Where the simulated model client's ``chat`` spans go (the global provider by default)."""
        self.config = config
        self.telemetry = telemetry
        self.stats = stats
        self.stop = stop
        self.interval = interval
        self.rng = random.Random(None if seed is None else seed * 1000 + index)
        self.tree_config = tree_config(config)
        # agents start at different places of the first pass so every loop shows up early
        offset = (2 * index) % len(_FIRST_PASS)
        self._first_pass = list(_FIRST_PASS[offset:] + _FIRST_PASS[:offset])
        self._turns = 0

    def run(self) -> None:
        while not self.stop.is_set():
            guard = Guard(self.config, telemetry=self.telemetry, agent=self.name)
            for _ in range(TURNS_PER_SESSION):
                if self.stop.is_set():
                    return
                self.run_turn(guard, self.next_scenario())

    def next_scenario(self) -> str:
        if self._first_pass:
            return self._first_pass.pop(0)
        names = list(_WEIGHTS)
        return self.rng.choices(names, weights=[_WEIGHTS[n] for n in names])[0]

    def run_turn(self, guard: Guard, scenario: str) -> None:
        if scenario == TREE_SCENARIO:
            self.run_tree()
            return
        self._turns += 1
        guard.start_turn(turn_id=f"{self.name}-{self._turns}")
        # Some hosts ignore a halt once before giving up: that shows the `turn_halted` refusal.
        stubborn = self.rng.random() < 0.3
        if scenario == STALLED_SCENARIO:
            self.stall(guard)
        for number, call in enumerate(SCENARIOS[scenario](self.rng)):
            if self.stop.wait(self.interval) or number >= MAX_STEPS_PER_TURN:
                break
            if not self.model(guard, scenario, number, tool_calls=1) and not stubborn:
                break  # blocked or halted: the reply's call is not run
            self.play(guard, scenario, call, f"call_{self._turns}_{number}")
            if guard.halt_decision is not None:
                if not stubborn:
                    break
                stubborn = False
        else:
            if scenario != STALLED_SCENARIO:
                self.model(guard, scenario, 0, tool_calls=0)  # the final answer
        summary = guard.end_turn()
        self.stats.record_turn(summary.halted)

    def stall(self, guard: Guard) -> None:
        """``stalled_model``: replies that call nothing the harness can run, each answered by the
        harness, until the guard stops the turn (or the host gives up)."""
        for number in range(STALLED_REPLIES):
            text = f"I will check the deployment logs before changing anything (step {number % 3})."
            if self.stop.wait(self.interval):
                return
            if not self.model(guard, STALLED_SCENARIO, number, tool_calls=0, invalid=number % 2, text=text):
                return

    def model(
        self,
        guard: Guard,
        scenario: str,
        number: int,
        *,
        tool_calls: int,
        invalid: int = 0,
        text: str | None = None,
    ) -> bool:
        """One model call of the simulated host, inside its model client's ``chat`` span: whether the
        turn goes on (``False``: the call was blocked, or the reply halted the turn)."""
        # a context that grows by 40,000 tokens a reply, or an ordinary one
        usage = (40_000 * (number + 1), 300) if scenario == TOKENS_SCENARIO else (800 + 40 * number, 120)
        attributes = {GEN_AI_OPERATION_NAME: "chat", GEN_AI_REQUEST_MODEL: MODEL}
        with self.tracer.start_as_current_span(f"chat {MODEL}", attributes=attributes):
            before = guard.before_model()
            if before.action != "allow":
                self.stats.record_decision(self.name, scenario, before)
            if not before.allows_execution:
                return False
            after = guard.after_model(
                text,
                tool_calls=tool_calls,
                invalid_tool_calls=invalid,
                input_tokens=usage[0],
                output_tokens=usage[1],
            )
        if after.action != "allow":
            self.stats.record_decision(self.name, scenario, after)
        return guard.halt_decision is None

    def run_tree(self) -> None:
        """``runaway_tree``: a new conversation (its root guard, in a tree of its own); each handoff
        makes the next agent's guard one level down, as a service handed the tree's baggage would."""
        self._turns += 1
        root = Guard(self.tree_config, telemetry=self.telemetry, agent=self.name)
        root.start_turn(turn_id=f"{self.name}-{self._turns}")
        current, opened = root, [root]
        for number, call in enumerate(runaway_tree(self.rng)):
            if self.stop.wait(self.interval) or root.halt_decision is not None:
                break
            call_id = f"call_{self._turns}_{number}"
            if call.tool_name != HANDOFF:
                self.play(current, TREE_SCENARIO, call, call_id)
            elif call.args["to"] == "root":
                current = root
            elif current.halt_decision is None:
                current = self.hand_off(current, call, call_id, opened)
        for guard in reversed(opened):
            self.stats.record_turn(guard.end_turn().halted)

    def hand_off(self, guard: Guard, call: ScriptedCall, call_id: str, opened: list[Guard]) -> Guard:
        """``guard``'s agent hands the task to the agent the call names: that agent's guard, or
        ``guard`` again when the handoff was refused."""
        self.stats.record_call()
        name = call.args["to"]
        decision = guard.before_call(HANDOFF, call.args, call_id=call_id, delegate_to=name)
        if not decision.allows_execution:
            self.stats.record_decision(guard.agent, TREE_SCENARIO, decision)
            return guard
        with use_tree(guard.delegation_tree):  # the next agent runs inside the handoff
            child = Guard(self.tree_config, telemetry=self.telemetry, agent=name)
            child.start_turn(turn_id=f"{self.name}-{self._turns}-{len(opened)}")
        opened.append(child)
        decision = guard.after_call(HANDOFF, call.args, call.result, failed=False, call_id=call_id)
        if decision.action != "allow":
            self.stats.record_decision(guard.agent, TREE_SCENARIO, decision)
        return child

    def play(self, guard: Guard, scenario: str, call: ScriptedCall, call_id: str) -> None:
        self.stats.record_call()
        # The fake tools know whether they failed: an unset `failed` means they did not, so the
        # guard's fallback classifier never guesses from the demo's texts.
        played = play_call(guard, call._replace(failed=bool(call.failed), call_id=call_id))
        if played.ran and played.before.action != "allow":
            self.stats.record_decision(self.name, scenario, played.before)
        if played.decision.action != "allow":
            self.stats.record_decision(self.name, scenario, played.decision)
