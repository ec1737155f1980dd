"""A Prometheus rule file as the backtest uses it: recording rules in levels, alerts with their timing.

``promtool tsdb create-blocks-from rules`` evaluates every rule it is given against the same data, in
no particular order: a rule built on another recorded rule would read nothing. So the recording
rules are sorted into levels — level 1 reads only exported series, level *n* reads rules of levels
below *n* — and each level is backfilled once the levels below are in the database.

Prometheus evaluates a group at an offset inside its interval derived from a hash of the group's
name and rule file path (``Group.EvalTimestamp``); ``eval_offset`` computes the same offset, so the
alerts are evaluated at the times a Prometheus loading the backtest's rule file would evaluate them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import xxhash
import yaml

from otelguard.errors import UsageError
from otelguard.readers.times import parse_duration

__all__ = [
    "RULE_FILE_NAME",
    "AlertRule",
    "RecordingRule",
    "RuleGroup",
    "RuleSet",
    "eval_offset",
    "load_rules",
    "referenced_names",
]

RULE_FILE_NAME: Final = "otelguard-backtest-rules.yaml"
"""The fixed (relative) name every rule file of a backtest is written under, in a fixed working
directory: Prometheus and promtool offset a group's evaluations by a hash of its file path."""
DEFAULT_EVALUATION_INTERVAL: Final = 60.0
"""Prometheus's own default ``global.evaluation_interval``, for groups that set no ``interval``."""

_STRING: Final = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`|#[^\n]*')
_IDENTIFIER: Final = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_LABEL_SEPARATOR: Final = b"\xff"


@dataclass(frozen=True, slots=True)
class RecordingRule:
    record: str
    expr: str
    body: dict[str, Any]
    """The rule as the file wrote it, written back unchanged into its level's file."""


@dataclass(frozen=True, slots=True)
class AlertRule:
    name: str
    group: str
    expr: str
    interval: float
    hold: float
    """``for:`` in seconds."""
    keep_firing_for: float
    labels: dict[str, str]
    """The rule's own labels (templates are kept as written, not expanded)."""


@dataclass(slots=True)
class RuleGroup:
    name: str
    interval: float
    body: dict[str, Any]
    """The group's keys other than ``rules`` (``name``, ``interval``, ``limit``)."""
    recording: list[RecordingRule] = field(default_factory=list)
    alerts: list[AlertRule] = field(default_factory=list)


@dataclass(slots=True)
class RuleSet:
    path: str
    groups: list[RuleGroup]
    default_interval: float = DEFAULT_EVALUATION_INTERVAL
    """The interval of groups that set none (Prometheus's ``global.evaluation_interval``)."""

    @property
    def alerts(self) -> list[AlertRule]:
        return [alert for group in self.groups for alert in group.alerts]

    @property
    def intervals(self) -> list[float]:
        return [group.interval for group in self.groups]

    def levels(self) -> list[dict[str, Any]]:
        """One rule file document per level of recording rules, lowest first; groups keep their
        names and intervals (so their evaluation offsets) and only that level's rules."""
        level_of = _levels([rule for group in self.groups for rule in group.recording])
        documents = []
        for level in range(1, max(level_of.values(), default=0) + 1):
            groups = []
            for group in self.groups:
                rules = [rule.body for rule in group.recording if level_of[rule.record] == level]
                if rules:
                    groups.append({**group.body, "rules": rules})
            documents.append({"groups": groups})
        return documents


def referenced_names(expr: str) -> set[str]:
    """Every metric-name-like identifier of ``expr`` outside strings and comments (a superset of the
    series it selects: function names and keywords never collide with a recorded rule's name)."""
    return set(_IDENTIFIER.findall(_STRING.sub(" ", expr)))


def _levels(rules: list[RecordingRule]) -> dict[str, int]:
    """Level of every recorded name: 1 + the highest level among the recorded names its rules read."""
    reads: dict[str, set[str]] = {}
    for rule in rules:
        reads.setdefault(rule.record, set()).update(referenced_names(rule.expr))
    for name, names in reads.items():
        names.intersection_update(reads)
        names.discard(name)  # a rule reading its own earlier values reads nothing new at backfill
    level: dict[str, int] = {}

    def visit(name: str, path: tuple[str, ...]) -> int:
        if name in level:
            return level[name]
        if name in path:
            cycle = " -> ".join((*path[path.index(name) :], name))
            raise UsageError(
                f"recording rules read each other in a cycle ({cycle}); they cannot be backfilled"
            )
        found = 1 + max((visit(other, (*path, name)) for other in sorted(reads[name])), default=0)
        level[name] = found
        return found

    for name in reads:
        visit(name, ())
    return level


def eval_offset(file: str, group: str, interval: float) -> float:
    """Seconds into each interval at which Prometheus evaluates ``group`` of rule file ``file``:
    the xxHash64 of the labels ``file`` and ``name`` (sorted, each name and value followed by 0xff),
    modulo the interval in nanoseconds."""
    key = b"".join(part + _LABEL_SEPARATOR for part in (b"file", file.encode(), b"name", group.encode()))
    interval_ns = round(interval * 1e9)
    return (xxhash.xxh64_intdigest(key) % interval_ns) / 1e9


def load_rules(path: str | Path, default_interval: float = DEFAULT_EVALUATION_INTERVAL) -> RuleSet:
    """The rule file's groups (``UsageError`` naming what is wrong; promtool checks the PromQL)."""
    where = str(path)
    try:
        document = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read rules {where}: {getattr(exc, 'strerror', None) or exc}") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"rules {where} are not valid YAML: {' '.join(str(exc).split())}") from None
    groups = document.get("groups") if isinstance(document, dict) else None
    if not isinstance(groups, list):
        raise UsageError(f"rules {where}: expected a mapping with a 'groups' list")
    parsed = [_group(where, index, raw, default_interval) for index, raw in enumerate(groups)]
    return RuleSet(where, parsed, default_interval)


def _group(where: str, index: int, raw: Any, default_interval: float) -> RuleGroup:
    if (
        not isinstance(raw, dict)
        or not isinstance(raw.get("name"), str)
        or not isinstance(raw.get("rules"), list)
    ):
        raise UsageError(f"rules {where}: groups[{index}] needs a string 'name' and a 'rules' list")
    interval = _duration(where, f"groups[{index}].interval", raw.get("interval")) or default_interval
    body = {key: value for key, value in raw.items() if key != "rules"}
    group = RuleGroup(raw["name"], interval, body)
    for position, rule in enumerate(raw["rules"]):
        at = f"groups[{index}].rules[{position}]"
        if not isinstance(rule, dict) or not isinstance(rule.get("expr"), (str, int, float)):
            raise UsageError(f"rules {where}: {at} needs an 'expr'")
        expr = str(rule["expr"])
        if isinstance(rule.get("record"), str):
            group.recording.append(RecordingRule(rule["record"], expr, rule))
        elif isinstance(rule.get("alert"), str):
            labels = rule.get("labels") or {}
            if not isinstance(labels, dict):
                raise UsageError(f"rules {where}: {at}.labels must be a mapping")
            group.alerts.append(
                AlertRule(
                    rule["alert"],
                    group.name,
                    expr,
                    interval,
                    _duration(where, f"{at}.for", rule.get("for")) or 0.0,
                    _duration(where, f"{at}.keep_firing_for", rule.get("keep_firing_for")) or 0.0,
                    {str(k): str(v) for k, v in labels.items()},
                )
            )
        else:
            raise UsageError(f"rules {where}: {at} needs a 'record' or an 'alert' name")
    return group


def _duration(where: str, key: str, value: Any) -> float | None:
    if value is None:
        return None
    try:
        return parse_duration(str(value)) if str(value) not in ("0", "0s") else 0.0
    except ValueError as exc:
        raise UsageError(f"rules {where}: {key}: {exc}") from None
