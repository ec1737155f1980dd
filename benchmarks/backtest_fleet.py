"""Fleets of timestamped Claude Code sessions for the backtest tests and measurements.

Each session is one ``<session-id>.jsonl`` file as Claude Code writes it under
``~/.claude/projects/<project>/``: user and assistant lines with ``sessionId``, ``uuid`` and an ISO
``timestamp``, tool calls as ``tool_use`` blocks and their results as ``tool_result`` blocks one or
two seconds later. The guard's defaults cap a turn at 50 web searches and 50 subagents, so a runaway
turn makes 51 and hits the cap on its last one.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

UTC = timezone.utc
DAY = datetime(2025, 3, 3, tzinfo=UTC)
"""The fixed day the fleets live on (a Monday)."""

RUNAWAY_CALLS = 51
"""One more than the default turn caps of web_search and subagents."""

_HEALTHY_TOOLS = ("Read", "Grep", "Glob", "Bash", "Edit", "Write", "WebSearch", "WebFetch")


def stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class SessionWriter:
    """Builds one session's lines; ``call`` adds a tool call and its result."""

    session_id: str
    timestamps: bool = True
    lines: list[dict[str, Any]] = field(default_factory=list)
    calls: list[tuple[datetime, str]] = field(default_factory=list)
    _serial: int = 0
    sidechain: str | None = None
    """A subagent's conversation inside the session: its lines are ``isSidechain`` and chained by
    ``parentUuid`` (the first to ``parent``), their uuids prefixed with this name."""
    parent: str | None = None

    def _line(self, kind: str, moment: datetime, message: dict[str, Any]) -> None:
        self._serial += 1
        prefix = self.session_id if self.sidechain is None else f"{self.session_id}-{self.sidechain}"
        line: dict[str, Any] = {
            "type": kind,
            "sessionId": self.session_id,
            "uuid": f"{prefix}-{self._serial}",
            "isSidechain": self.sidechain is not None,
            "message": message,
        }
        if self.sidechain is not None:
            line["parentUuid"] = self.lines[-1]["uuid"] if self.lines else self.parent
        if self.timestamps:
            line["timestamp"] = stamp(moment)
        self.lines.append(line)

    def prompt(self, moment: datetime, text: str = "please look into it") -> None:
        self._line("user", moment, {"role": "user", "content": text})

    def call(
        self,
        moment: datetime,
        tool: str,
        args: dict[str, Any],
        result: str,
        *,
        error: bool = False,
        took: float = 1,
        usage: dict[str, int] | None = None,
    ) -> None:
        call_id = f"toolu_{self.sidechain or ''}{self.session_id[:8]}_{self._serial:05d}"
        use = {"type": "tool_use", "id": call_id, "name": tool, "input": args}
        message: dict[str, Any] = {"id": f"msg_{call_id}", "role": "assistant", "content": [use]}
        if usage is not None:
            message["usage"] = usage
        self._line("assistant", moment, message)
        answer = {"type": "tool_result", "tool_use_id": call_id, "content": result, "is_error": error}
        done = moment + timedelta(seconds=took)
        self._line("user", done, {"role": "user", "content": [answer]})
        self.calls.append((done, tool))

    def reply(self, moment: datetime, text: str, input_tokens: int, output_tokens: int) -> None:
        """An assistant message that calls no tool: text only, with the usage Claude Code records."""
        self._line(
            "assistant",
            moment,
            {
                "id": f"msg_{self.session_id}_{self._serial:05d}",
                "role": "assistant",
                "content": [{"type": "text", "text": text}],
                "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
            },
        )

    def text(self) -> str:
        return "".join(json.dumps(line) + "\n" for line in self.lines)

    def write(self, directory: Path) -> Path:
        path = directory / f"{self.session_id}.jsonl"
        path.write_text(self.text(), encoding="utf-8")
        return path


def healthy_session(
    session_id: str, start: datetime, rng: random.Random, *, timestamps: bool = True
) -> SessionWriter:
    """One to three turns of a few varied calls each: reads, searches and edits with distinct
    arguments, the odd failing command; nothing any detector or cap stops."""
    writer = SessionWriter(session_id, timestamps)
    moment = start
    for turn in range(rng.randint(1, 3)):
        writer.prompt(moment, f"task {turn} of {session_id}")
        for index in range(rng.randint(3, 10)):
            moment += timedelta(seconds=rng.randint(4, 20))
            tool = _HEALTHY_TOOLS[(index + turn) % len(_HEALTHY_TOOLS)]
            args = {"target": f"{session_id}/{turn}/{index}"}
            writer.call(moment, tool, args, f"output {session_id} {turn} {index}", error=rng.random() < 0.05)
        moment += timedelta(seconds=rng.randint(20, 90))
    return writer


def runaway_session(session_id: str, start: datetime, tool: str, *, spacing: float = 0.9) -> SessionWriter:
    """One turn that calls ``tool`` (``WebSearch`` or ``Task``) 51 times with distinct arguments, a
    call every ``spacing`` seconds: the 51st hits the turn cap and halts the turn."""
    writer = SessionWriter(session_id)
    writer.prompt(start, "find everything about it")
    for index in range(RUNAWAY_CALLS):
        moment = start + timedelta(seconds=1 + index * spacing)
        args = (
            {"query": f"{session_id} angle {index}"} if tool == "WebSearch" else {"prompt": f"part {index}"}
        )
        writer.call(moment, tool, args, f"{tool} answer {session_id} {index}")
    return writer


STALLED_REPLIES = 12
"""Replies of a stalled turn: the model answers without acting, again and again."""


def stalled_session(session_id: str, start: datetime) -> SessionWriter:
    """One turn in which the model never acts: 12 replies, ten seconds apart, each saying it will
    look at the build log and calling no tool, each rereading a longer context. Every reply after
    the second is near-identical to an earlier one of the turn: a repeated-reply warning each."""
    writer = SessionWriter(session_id)
    writer.prompt(start, "the nightly build fails: find out why and fix it")
    for index in range(STALLED_REPLIES):
        moment = start + timedelta(seconds=10 * (index + 1))
        text = f"I will look at the build log first to see why the nightly build fails (attempt {index})."
        writer.reply(moment, text, input_tokens=6000 + 400 * index, output_tokens=40)
    return writer


def runaway_minutes(prefix: str, start: datetime, minutes: int, tool: str) -> Iterator[SessionWriter]:
    """A runaway session starting every minute for ``minutes`` minutes."""
    for minute in range(minutes):
        yield runaway_session(f"{prefix}-{minute:03d}", start + timedelta(minutes=minute), tool)


def healthy_sessions(
    prefix: str, start: datetime, end: datetime, every: timedelta, seed: int = 7
) -> Iterator[SessionWriter]:
    rng = random.Random(seed)
    moment, serial = start, 0
    while moment < end:
        yield healthy_session(f"{prefix}-{serial:05d}", moment, rng)
        moment += every
        serial += 1


def write_fleet(directory: Path, sessions: Iterator[SessionWriter]) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    return [session.write(directory) for session in sessions]


HISTORY = Path(__file__).resolve().parent.parent / "otelguard" / "data" / "history"
"""The shipped history that ``docs/backtest.md`` backtests: a morning of one project's Claude Code
sessions with a web-search runaway in it (regenerate with ``python -m benchmarks.backtest_fleet``)."""


def shipped_history() -> Iterator[SessionWriter]:
    """Healthy sessions every six minutes from 09:00 to 09:54, from 09:20 to 09:38 a runaway
    web-search turn every three minutes, seven of them: each makes 51 searches and hits the turn cap
    of 50; and from 09:38 to 09:50 a stalled model every two minutes, seven of them: replies that call
    nothing and repeat themselves. The runaway-search alert (for: 10m) and the stalled-model alert
    (for: 10m) fire; the halt-rate and loop-rate alerts (for: 15m) hold for less than their for: and
    stay quiet."""
    morning = DAY + timedelta(hours=9)
    yield from healthy_sessions(
        "work", morning, morning + timedelta(minutes=55), timedelta(minutes=6), seed=3
    )
    for n in range(7):
        yield runaway_session(f"search-{n}", morning + timedelta(minutes=20 + 3 * n), "WebSearch")
    for n in range(7):
        yield stalled_session(f"stalled-{n}", morning + timedelta(minutes=38 + 2 * n))


EXAMPLES = HISTORY.parent / "examples" / "backtest"
"""The shipped examples for the backtest (the timestamped ones; ``delegation_storm`` writes one)."""


def delegation_storm() -> SessionWriter:
    """The shipped ``claude-code-delegation-storm.jsonl``: one Claude Code session with a turn every
    two and a half minutes for 20 minutes, each fanning out ``Task`` subagents with distinct prompts.
    The first four spawn 51 and hit the turn cap of 50 subagents; by then the session has spawned
    200, its session cap, so the next four are stopped at their first spawn (the second call shows
    the halted turn). The runaway-delegation alert (for: 10m) fires in ``otelguard backtest``."""
    writer = SessionWriter("delegation-storm")
    start = DAY + timedelta(hours=14)
    for turn in range(8):
        moment = start + timedelta(seconds=150 * turn)
        writer.prompt(moment, f"compare vendor batch {turn}: one subagent per vendor")
        for index in range(RUNAWAY_CALLS if turn < 4 else 2):
            args = {"description": f"vendor {index}", "prompt": f"research vendor {turn * 100 + index}"}
            writer.call(moment + timedelta(seconds=1 + index * 0.9), "Task", args, f"report {turn}.{index}")
    return writer


TREES = HISTORY.parent / "examples" / "delegation-tree"
"""The shipped delegation-tree histories and the config that gives their conversations a tree cap."""
TREE_CONFIG = """\
# The config the delegation-tree histories are backtested with: a budget of 30 subagents across each
# conversation's whole delegation tree (the main session and every subagent it starts).
caps:
  tree: {subagents: 30}
"""


def tree_conversation(session_id: str, start: datetime, spawns: int, nested: int) -> list[dict[str, Any]]:
    """One Claude Code conversation as one file: the main agent starts ``spawns`` subagents (``Task``)
    one after the other, and each subagent (a sidechain) starts ``nested`` subagents of its own. Every
    agent stays far below its own caps (turn and session: 50 and 200 subagents)."""
    main = SessionWriter(session_id)
    main.prompt(start, "audit every supplier; split the work")
    lines: list[dict[str, Any]] = []
    moment = start
    for spawn in range(spawns):
        moment += timedelta(seconds=2)
        took = 1 + 1.2 * nested  # its result comes once its subagent is done
        task = {"description": f"audit part {spawn}", "prompt": f"part {spawn}"}
        main.call(moment, "Task", task, "done", took=took)
        sub = SessionWriter(session_id, sidechain=f"sub{spawn}", parent=main.lines[-2]["uuid"])
        sub.prompt(moment + timedelta(milliseconds=100), f"part {spawn}")
        for index in range(nested):
            sub.call(
                moment + timedelta(seconds=0.2 + 1.2 * index),  # each answered before the next
                "Task",
                {"description": f"supplier {spawn}.{index}", "prompt": f"audit supplier {spawn}.{index}"},
                f"report {spawn}.{index}",
            )
        lines += sub.lines
        moment += timedelta(seconds=took)
    lines += main.lines
    return sorted(lines, key=lambda line: line["timestamp"])


def tree_history(runaway: bool) -> dict[str, str]:
    """The conversations of a tree history, by file name: one a minute from 15:00 to 15:05.
    Runaway: each starts 4 subagents that start 10 each, so the tree's 31st and 32nd subagents are
    refused by its tree cap of 30, in every conversation: ``OtelguardRunawayDelegationTree`` (for: 5m)
    fires; the alerts with a longer ``for:`` (10m and more) stay quiet. Healthy: 2 subagents that
    start 5 each, 12 in a tree: nothing is refused."""
    start = DAY + timedelta(hours=15)
    files = {}
    for n in range(6):
        session_id = f"{'runaway' if runaway else 'healthy'}-tree-{n}"
        shape = (4, 10) if runaway else (2, 5)
        lines = tree_conversation(session_id, start + timedelta(minutes=n), *shape)
        files[f"{session_id}.jsonl"] = "".join(json.dumps(line) + "\n" for line in lines)
    return files


TOKENS = HISTORY.parent / "examples" / "token-runaway"
"""The shipped token runaway and the config that gives its turns a token cap."""
TOKEN_CONFIG = """\
# The config the token runaway is backtested with: at most 500,000 tokens (input and output, as the
# provider reports them) in one turn.
caps:
  turn: {tokens: 500000}
"""


def token_session(session_id: str, start: datetime) -> SessionWriter:
    """One turn of 20 distinct reads, one every 3 seconds, each reply rereading a context 1,500
    tokens longer than the last (from 30,000): no call repeats, but the turn's 13th reply takes it
    past 500,000 tokens."""
    writer = SessionWriter(session_id)
    writer.prompt(start, "summarise every module of the monorepo")
    for index in range(20):
        usage = {"input_tokens": 30_000 + 1_500 * index, "output_tokens": 300}
        moment = start + timedelta(seconds=1 + 3 * index)
        writer.call(moment, "Read", {"file_path": f"/repo/module_{index}.py"}, f"module {index}", usage=usage)
    return writer


def token_history() -> dict[str, str]:
    """The token runaway, by file name: one session a minute from 16:00 to 16:14, each running past
    its turn's token cap: ``OtelguardRunawayTokens`` (for: 10m) fires with the config beside it."""
    start = DAY + timedelta(hours=16)
    return {
        f"tokens-{n:02d}.jsonl": token_session(f"tokens-{n:02d}", start + timedelta(minutes=n)).text()
        for n in range(15)
    }


def write_tokens() -> None:
    TOKENS.mkdir(parents=True, exist_ok=True)
    (TOKENS / "otelguard.yaml").write_text(TOKEN_CONFIG, encoding="utf-8")
    directory = TOKENS / "runaway"
    directory.mkdir(exist_ok=True)
    for stale in directory.glob("*.jsonl"):
        stale.unlink()
    for name, text in token_history().items():
        (directory / name).write_text(text, encoding="utf-8")


def write_trees() -> None:
    TREES.mkdir(parents=True, exist_ok=True)
    (TREES / "otelguard.yaml").write_text(TREE_CONFIG, encoding="utf-8")
    for runaway in (True, False):
        directory = TREES / ("runaway" if runaway else "healthy")
        directory.mkdir(exist_ok=True)
        for stale in directory.glob("*.jsonl"):
            stale.unlink()
        for name, text in tree_history(runaway).items():
            (directory / name).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    write_trees()
    write_tokens()
    (EXAMPLES / "claude-code-delegation-storm.jsonl").write_text(delegation_storm().text(), encoding="utf-8")
    for stale in HISTORY.glob("*.jsonl"):
        stale.unlink()
    print(f"{len(write_fleet(HISTORY, shipped_history()))} sessions written to {HISTORY}")
