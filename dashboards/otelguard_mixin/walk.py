"""Read a generated dashboard back: its queries, and Grafana's variable substitution.

Used by the tests (PromQL parsing, the end-to-end run against a real Prometheus) so they check the
committed JSON itself, not the code that produced it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Characters Grafana's Prometheus data source escapes in a multi-value regex variable.
_REGEX_METACHARS = re.compile(r"([\\^$*+?.()|{}\[\]])")
_VARIABLE = re.compile(r"\$(\w+)|\$\{(\w+)\}")


@dataclass(frozen=True)
class Target:
    panel_id: int
    panel_title: str
    panel_type: str
    expr: str
    legend: str
    instant: bool
    exemplar: bool


def targets(dashboard: Mapping[str, Any]) -> Iterator[Target]:
    """Every Prometheus query of every panel, rows' collapsed panels included."""
    for panel in _panels(dashboard.get("panels", [])):
        for target in panel.get("targets", []):
            yield Target(
                panel_id=panel["id"],
                panel_title=panel["title"],
                panel_type=panel["type"],
                expr=target["expr"],
                legend=target.get("legendFormat", ""),
                instant=bool(target.get("instant")),
                exemplar=bool(target.get("exemplar")),
            )


def _panels(panels: Sequence[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def grafana_regex(values: Sequence[str]) -> str:
    """What Grafana puts in ``=~"$var"`` for a multi-value selection."""
    # Two backslashes: the regex escape itself, escaped again for the PromQL string literal.
    escaped = [_REGEX_METACHARS.sub(r"\\\\\1", value) for value in values]
    return escaped[0] if len(escaped) == 1 else f"({'|'.join(escaped)})"


def substitute(expr: str, variables: Mapping[str, str]) -> str:
    """Replace ``$name`` / ``${name}`` like Grafana does; an unknown variable is an error."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in variables:
            raise KeyError(f"no value for ${name} in {expr!r}")
        return variables[name]

    return _VARIABLE.sub(replace, expr)
