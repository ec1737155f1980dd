"""Simulated agents for ``otelguard demo``: realistic turns run through a real ``Guard``.

Each agent is a thread that plays scenarios (a healthy turn, a failing test loop, a model re-reading
one file, a denial storm, an A→B→A→B cycle, a runaway web search, a delegation storm, a delegation
tree running away across agents, edits of files never read that all fail with the same error...) the
way a host would: ``before_call``, run
the fake tool unless refused, ``after_call``, and stop the turn when the guard halts it. Two more play
the model's side (``before_model``, the reply through ``after_model``): a model stalled on a call its
harness cannot parse, and a token runaway whose context grows with every reply. The first pass plays the loop scenarios in an order that shows every kind
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

from otelguard.config import GuardConfig
from otelguard.core.decisions import Decision
from otelguard.core.scripted import ScriptedCall, play_call
from otelguard.hosting import Guard, TelemetryOption
from otelguard.propagation import use_tree

__all__ = [
    "AGENT_NAMES",
    "DEMO_TURN_TOKENS",
    "MODEL_SCENARIOS",
    "SCENARIOS",
    "TREE_SCENARIO",
    "DemoStats",
    "ModelReply",
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


DEMO_TURN_TOKENS: Final = 200_000
"""The demo's ``caps.turn.tokens`` (when no ``--config`` is given): the token runaway spends it."""


@dataclass(frozen=True, slots=True)
class ModelReply:
    """One reply of the model, as a host reports it to ``after_model``, and the call it asks for."""

    text: str | None
    tool_calls: int = 0
    invalid_tool_calls: int = 0
    input_tokens: int | None = None
    output_tokens: int | None = None
    call: ScriptedCall | None = None


_CALLED_TOOLS: Final = ("search", "read_file", "open_url", "grep", "list_dir", "run_tests", "fetch", "lookup")
_TOPICS: Final = (
    "quarterly revenue", "kernel panic", "login timeout", "invoice totals", "cache misses",
    "deploy logs", "memory leak", "flaky test", "release notes", "user churn",
)  # fmt: skip


def stalled_model(rng: random.Random) -> Iterator[ModelReply]:
    """The model answers with a call its harness cannot parse, in a new broken shape each time, and
    the harness asks again: no reply repeats, none calls a tool."""
    for i in range(20):
        tool, topic = _CALLED_TOOLS[i % len(_CALLED_TOOLS)], rng.choice(_TOPICS)
        broken = (
            f'<tool_call>{{"name": "{tool}", "arguments": {{"query": "{topic}"',
            f"I will call {tool} now. {{tool: {tool}, args: [{topic}]}}",
            f'```json\n{{"function": "{tool}", "parameters": "{topic}"\n```',
            f"Action: {tool}[{topic}",
        )[i % 4]
        yield ModelReply(
            broken, invalid_tool_calls=1, input_tokens=3_000 + 150 * i, output_tokens=rng.randint(30, 60)
        )


def token_runaway(rng: random.Random) -> Iterator[ModelReply]:
    """Page after page read into a context that grows with every reply: no call repeats, no tool cap is
    near; only a cap on the turn's tokens stops it."""
    context = 6_000
    for i in range(MAX_STEPS_PER_TURN):
        context += rng.randint(3_000, 6_000)
        path = f"docs/handbook/chapter_{i:03d}.md"
        yield ModelReply(
            f"Reading {path} next.",
            tool_calls=1,
            input_tokens=context,
            output_tokens=rng.randint(200, 600),
            call=ScriptedCall(
                "read_file", {"path": path}, f"# Chapter {i}\n" + "text " * rng.randint(50, 90)
            ),
        )


MODEL_SCENARIOS: Final[dict[str, Callable[[random.Random], Iterator[ModelReply]]]] = {
    "stalled_model": stalled_model,
    "token_runaway": token_runaway,
}

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
}
_FIRST_PASS: Final = (*SCENARIOS, *MODEL_SCENARIOS)
_WEIGHTS: Final = {name: (6 if name == "healthy" else 1) for name in _FIRST_PASS}


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
    ) -> None:
        self.name = name
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
        if scenario in MODEL_SCENARIOS:
            self.run_model_turn(guard, scenario)
            return
        self._turns += 1
        guard.start_turn(turn_id=f"{self.name}-{self._turns}")
        # Some hosts ignore a halt once before giving up: that shows the `turn_halted` refusal.
        stubborn = self.rng.random() < 0.3
        for number, call in enumerate(SCENARIOS[scenario](self.rng)):
            if self.stop.wait(self.interval) or number >= MAX_STEPS_PER_TURN:
                break
            self.play(guard, scenario, call, f"call_{self._turns}_{number}")
            if guard.halt_decision is not None:
                if not stubborn:
                    break
                stubborn = False
        summary = guard.end_turn()
        self.stats.record_turn(summary.halted)

    def run_model_turn(self, guard: Guard, scenario: str) -> None:
        """A turn of model replies: ``before_model`` for each request (a refused one is not made),
        the reply through ``after_model``, then the call it asks for; until the guard stops it."""
        self._turns += 1
        guard.start_turn(turn_id=f"{self.name}-{self._turns}")
        for number, reply in enumerate(MODEL_SCENARIOS[scenario](self.rng)):
            if self.stop.wait(self.interval) or number >= MAX_STEPS_PER_TURN:
                break
            before = guard.before_model()
            if before.action != "allow":
                self.stats.record_decision(self.name, scenario, before)
            if not before.allows_execution:
                break
            after = guard.after_model(
                reply.text,
                tool_calls=reply.tool_calls,
                invalid_tool_calls=reply.invalid_tool_calls,
                input_tokens=reply.input_tokens,
                output_tokens=reply.output_tokens,
            )
            if after.action != "allow":
                self.stats.record_decision(self.name, scenario, after)
            if guard.halt_decision is not None:
                break
            if reply.call is not None:
                self.play(guard, scenario, reply.call, f"call_{self._turns}_{number}")
                if guard.halt_decision is not None:
                    break
        self.stats.record_turn(guard.end_turn().halted)

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
