"""hermes-agent's dialect: its ``tool_loop_guardrails`` keys, read as otelguard's (docs/configuration.md).

``warnings_enabled`` and ``hard_stop_enabled`` are ``warnings`` and ``hard_stop``; ``loop_caps`` sets
turn caps; the no-progress detector is ``idempotent_no_progress`` there, with its own nested and flat
threshold keys. A key given in both dialects is an error naming both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from otelguard.config.checks import as_mapping, boolean, check_keys, integer
from otelguard.errors import ConfigError

__all__ = ["apply_hermes_aliases", "in_otelguard_keys"]

_HERMES_FLAT: Final = {
    "exact_failure_warn_after": ("warn_after", "exact_failure"),
    "exact_failure_block_after": ("hard_stop_after", "exact_failure"),
    "same_tool_failure_warn_after": ("warn_after", "same_tool_failure"),
    "same_tool_failure_halt_after": ("hard_stop_after", "same_tool_failure"),
    "no_progress_warn_after": ("warn_after", "no_progress"),
    "no_progress_block_after": ("hard_stop_after", "no_progress"),
}
_HERMES_KEYS: Final = (
    "warnings_enabled", "hard_stop_enabled", "non_interactive_hard_stop_enabled", "loop_caps",
    "idempotent_no_progress", *_HERMES_FLAT,
)  # fmt: skip


def apply_hermes_aliases(section: dict[str, Any]) -> dict[str, Any]:
    """Translate hermes-agent ``tool_loop_guardrails`` keys into otelguard's."""
    if not any(key in section for key in _HERMES_KEYS):
        return _rename_no_progress(section)
    out = dict(section)
    for hermes_key, key in (("warnings_enabled", "warnings"), ("hard_stop_enabled", "hard_stop")):
        if hermes_key in out:
            value = out.pop(hermes_key)
            if key in out:
                raise ConfigError(hermes_key, value, f"set either {hermes_key} or {key}, not both")
            out[key] = value
    if "non_interactive_hard_stop_enabled" in out:
        value = boolean("non_interactive_hard_stop_enabled", out.pop("non_interactive_hard_stop_enabled"))
        if value is False and out.get("hard_stop") is None:
            out["hard_stop"] = False
    if "loop_caps" in out:
        loop_caps = as_mapping("loop_caps", out.pop("loop_caps"))
        check_keys("loop_caps", loop_caps, ("max_web_searches", "max_subagents"))
        caps = dict(as_mapping("caps", out.get("caps", {})))
        turn = dict(as_mapping("caps.turn", caps.get("turn", {})))
        for hermes_key, cap_key in (("max_web_searches", "web_search"), ("max_subagents", "subagents")):
            if hermes_key in loop_caps:
                turn[cap_key] = integer(f"loop_caps.{hermes_key}", loop_caps[hermes_key], 0)
        caps["turn"] = turn
        out["caps"] = caps
    if "idempotent_no_progress" in out:
        nested = as_mapping("idempotent_no_progress", out.pop("idempotent_no_progress"))
        check_keys("idempotent_no_progress", nested, ("warn_after", "block_after", "hard_stop_after"))
        for nested_key, target in (("warn_after", "warn_after"), ("block_after", "hard_stop_after"),
                                   ("hard_stop_after", "hard_stop_after")):  # fmt: skip
            if nested_key in nested:
                out[target] = {**as_mapping(target, out.get(target, {})), "no_progress": nested[nested_key]}
    for flat, (target, detector) in _HERMES_FLAT.items():
        if flat in out:
            out[target] = {**as_mapping(target, out.get(target, {})), detector: out.pop(flat)}
    return _rename_no_progress(out)


def _rename_no_progress(section: dict[str, Any]) -> dict[str, Any]:
    """hermes names the no-progress detector ``idempotent_no_progress`` inside the threshold maps."""
    for target in ("warn_after", "hard_stop_after"):
        thresholds = section.get(target)
        if isinstance(thresholds, Mapping) and "idempotent_no_progress" in thresholds:
            renamed = {k: v for k, v in thresholds.items() if k != "idempotent_no_progress"}
            renamed.setdefault("no_progress", thresholds["idempotent_no_progress"])
            section = {**section, target: renamed}
    return section


def in_otelguard_keys(section: Mapping[str, Any]) -> dict[str, Any]:
    """``section`` in otelguard's own keys: a lone ``tool_loop_guardrails:`` block is unwrapped and
    hermes-agent's aliases are translated."""
    if set(section) == {"tool_loop_guardrails"}:
        section = as_mapping("tool_loop_guardrails", section["tool_loop_guardrails"])
    return apply_hermes_aliases(dict(section))
