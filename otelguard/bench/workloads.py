"""Synthetic tool-call workloads for ``otelguard bench``.

Every workload is generated before anything is timed, from a seeded RNG, so the guard configurations
and the floors of one run see exactly the same calls, each an ``otelguard.core.scripted.ScriptedCall``.
Argument dicts are distinct objects per call; the big strings inside them and the results come from
pools, because the guard must hash their bytes whatever object holds them and the pools keep a large
run's memory small.

* ``mixed``: 60% read tools with varied args, 20% terminal (some failures), 10% web_search, 10%
  writes; 3–6 keys of 50–200 character strings; results of 1–4 KB, half of them JSON. One call
  in ten repeats an earlier call of the turn, as agents do, so the detectors have work.
* ``large``: the same mix with about 10 KB of arguments and 100 KB results.
* ``distinct``: every call new (no repeats, results distinct strings), and no capped tools so one
  turn can run for a million calls without a cap stopping it.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any, Final

import orjson

from otelguard.core.scripted import ScriptedCall

__all__ = [
    "TURN_CALLS",
    "WORKLOADS",
    "DistinctCalls",
    "large_turns",
    "looping_signatures",
    "mixed_turns",
    "workload_turns",
]

WORKLOADS: Final = ("mixed", "large", "distinct")
TURN_CALLS: Final = 50
"""Calls per turn in the timed workloads: a long agent turn, short enough to give many rounds."""

_REPEAT_SHARE: Final = 0.1
_SAME_RESULT_SHARE: Final = 0.7
_TERMINAL_FAILURE_SHARE: Final = 0.3

_WORDS: Final = (
    "agent", "tool", "guard", "loop", "result", "signature", "config", "turn", "session", "metric",
    "span", "trace", "export", "render", "parser", "buffer", "socket", "thread", "worker", "queue",
    "cache", "index", "vector", "token", "model", "prompt", "schema", "record", "module", "package",
    "import", "build", "deploy", "commit", "branch", "review", "patch", "error", "status", "output",
    "stream",
)  # fmt: skip

_READ_TOOLS: Final = ("read_file", "search_files", "grep", "list_directory", "web_fetch", "web_extract")
_WRITE_TOOLS: Final = ("write_file", "patch")


class _Text:
    """Random but plausible text, sliced from one corpus so generation stays fast."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._corpus = " ".join(rng.choice(_WORDS) for _ in range(40_000))

    def sentence(self, low: int, high: int) -> str:
        size = self._rng.randint(low, high)
        start = self._rng.randrange(0, len(self._corpus) - size)
        return self._corpus[start : start + size]

    def path(self, low: int = 50, high: int = 200) -> str:
        parts = [self._rng.choice(_WORDS) for _ in range(self._rng.randint(4, 30))]
        return ("/home/agent/project/" + "/".join(parts))[: self._rng.randint(low, high)] + ".py"


def _args_for(tool: str, text: _Text, rng: random.Random, pad: str | None) -> dict[str, Any]:
    """3–6 keys, string values of 50–200 characters; ``pad`` (large workload) adds ~10 KB."""
    if tool == "terminal":
        args: dict[str, Any] = {"command": text.sentence(50, 200), "workdir": text.path(), "timeout": 120}
    elif tool == "web_search":
        args = {"query": text.sentence(50, 200), "region": text.sentence(50, 80), "limit": 10}
    elif tool in _WRITE_TOOLS:
        args = {
            "path": text.path(),
            "old_string": text.sentence(50, 200),
            "new_string": text.sentence(50, 200),
        }
    else:
        args = {"path": text.path(), "pattern": text.sentence(50, 200), "context": text.sentence(50, 120)}
    for extra in range(rng.randint(0, 3)):
        args[f"option_{extra}"] = text.sentence(50, 200)
    if pad is not None:
        args["content"] = pad
    return args


def _result_pool(rng: random.Random, text: _Text, size_bytes: int, count: int) -> tuple[list[str], list[str]]:
    """(text results, JSON results) of roughly ``size_bytes`` each, in shapes real tools return."""
    plain: list[str] = []
    structured: list[str] = []
    for i in range(count):
        target = rng.randint(size_bytes // 4, size_bytes) if size_bytes < 10_000 else size_bytes
        lines: list[str] = []
        while sum(len(line) + 1 for line in lines) < target:
            lines.append(f"{len(lines) + 1:>5}| {text.sentence(20, 100)}")
        body = "\n".join(lines)
        plain.append(body)
        if i % 2:
            # hermes-style file read: one large content string with a few small fields
            doc: Any = {"content": body, "path": text.path(), "total_lines": len(lines), "truncated": False}
        else:
            # search-style listing: many small objects, the costly shape to parse
            hits: list[dict[str, str]] = []
            size = 0
            while size < target:
                hit = {"title": text.sentence(20, 60), "url": text.path(), "snippet": text.sentence(40, 160)}
                hits.append(hit)
                size += len(orjson.dumps(hit)) + 1
            doc = {"results": hits, "count": len(hits), "duration_ms": rng.randint(5, 900)}
        structured.append(orjson.dumps(doc).decode())
    return plain, structured


def _pick_tool(rng: random.Random, capped: bool = True) -> str:
    roll = rng.random()
    if roll < 0.6:
        return rng.choice(_READ_TOOLS)
    if roll < 0.8:
        return "terminal"
    if roll < 0.9:
        return "web_search" if capped else "web_fetch"
    return rng.choice(_WRITE_TOOLS)


def _turns(
    calls: int, seed: int, result_bytes: int, pool_size: int, pad_bytes: int
) -> list[list[ScriptedCall]]:
    rng = random.Random(seed)
    text = _Text(rng)
    plain, structured = _result_pool(rng, text, result_bytes, pool_size)
    pads = [text.sentence(pad_bytes, pad_bytes) for _ in range(16)] if pad_bytes else []
    turns: list[list[ScriptedCall]] = []
    number = 0
    while number < calls:
        turn: list[ScriptedCall] = []
        for _ in range(min(TURN_CALLS, calls - number)):
            number += 1
            call_id = f"call_{number:08d}"
            if turn and rng.random() < _REPEAT_SHARE:
                earlier = rng.choice(turn)
                result = (
                    earlier.result if rng.random() < _SAME_RESULT_SHARE else rng.choice(plain + structured)
                )
                turn.append(
                    ScriptedCall(
                        earlier.tool_name, dict(earlier.args), result, earlier.failed, call_id=call_id
                    )
                )
                continue
            tool = _pick_tool(rng)
            failed = tool == "terminal" and rng.random() < _TERMINAL_FAILURE_SHARE
            args = _args_for(tool, text, rng, rng.choice(pads) if pads else None)
            result = rng.choice(structured if rng.random() < 0.5 else plain)
            turn.append(ScriptedCall(tool, args, result, failed, call_id=call_id))
        turns.append(turn)
    return turns


def mixed_turns(calls: int, seed: int = 1) -> list[list[ScriptedCall]]:
    """The ``mixed`` workload as turns of ``TURN_CALLS`` calls."""
    return _turns(calls, seed, result_bytes=4096, pool_size=256, pad_bytes=0)


def large_turns(calls: int, seed: int = 1) -> list[list[ScriptedCall]]:
    """The ``large`` workload: about 10 KB of arguments and 100 KB results per call."""
    return _turns(calls, seed, result_bytes=100_000, pool_size=24, pad_bytes=10_000)


class DistinctCalls:
    """Calls that are all different (args and results), generated on demand, for long turns.

    ``call(n)`` is deterministic in ``n``: the tool, the shape of the arguments and the result follow
    ``n % period`` and only the identity changes, so windows at different positions of a turn time the
    same kind of work.
    """

    def __init__(self, seed: int = 1, period: int = 64) -> None:
        rng = random.Random(seed)
        text = _Text(rng)
        self._templates: list[tuple[str, dict[str, Any], bool]] = []
        for _ in range(period):
            tool = _pick_tool(rng, capped=False)
            failed = tool == "terminal" and rng.random() < _TERMINAL_FAILURE_SHARE
            self._templates.append((tool, _args_for(tool, text, rng, None), failed))
        plain, structured = _result_pool(rng, text, 2048, period)
        self._results = [structured[i] if i % 2 else plain[i] for i in range(period)]
        self.period = period

    def call(self, n: int, shape: int | None = None) -> ScriptedCall:
        """Call number ``n``; ``shape`` picks the template (default ``n``) so windows can match."""
        index = (n if shape is None else shape) % self.period
        tool, template, failed = self._templates[index]
        args = dict(template)
        args["request_id"] = f"req-{n:012d}"
        # a new string each time: a guard that kept results alive would show in retained memory
        base = self._results[index]
        result = base[:-1] + f',"n":{n}}}' if base.startswith("{") else f"{base}\n# {n}"
        return ScriptedCall(tool, args, result, failed, call_id=f"call_{n:012d}")

    def calls(self, start: int, count: int) -> Iterator[ScriptedCall]:
        for n in range(start, start + count):
            yield self.call(n)


def distinct_turns(calls: int, seed: int = 1) -> list[list[ScriptedCall]]:
    """The ``distinct`` workload as turns of ``TURN_CALLS`` calls."""
    source = DistinctCalls(seed)
    every = [source.call(n) for n in range(calls)]
    return [every[i : i + TURN_CALLS] for i in range(0, calls, TURN_CALLS)]


def workload_turns(name: str, calls: int, seed: int = 1) -> list[list[ScriptedCall]]:
    if name == "mixed":
        return mixed_turns(calls, seed)
    if name == "large":
        return large_turns(calls, seed)
    if name == "distinct":
        return distinct_turns(calls, seed)
    raise ValueError(f"unknown workload {name!r}; expected one of {', '.join(WORKLOADS)}")


def looping_signatures(count: int, tools: int = 300) -> Iterator[tuple[str, dict[str, Any]]]:
    """``count`` distinct signatures spread over ``tools`` tool names (more than the label bound)."""
    for n in range(count):
        yield f"mcp_bench{n % tools}_run", {"target": f"item-{n:09d}", "mode": "strict"}
