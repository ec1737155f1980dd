"""hermes-agent plugin: a ``Guard`` per hermes session, fed by hermes' own tool-call hooks.

Installed with otelguard, hermes discovers it through the ``hermes_agent.plugins`` entry point; enable
it with ``hermes plugins enable otelguard``. hermes calls ``register(ctx)`` once per process; the
plugin then answers:

* ``pre_tool_call`` → ``before_call``; a refused call returns ``{"action": "block", "message": ...}``,
  which hermes hands to the model as the tool result without running the tool;
* ``post_tool_call`` → ``after_call`` with hermes' ``status``: ``ok`` succeeded, ``error`` failed,
  ``blocked`` refused by another plugin (category ``plugin_block``; a call this guard refused itself
  is not reported twice);
* ``transform_tool_result`` (hermes runs it right after ``post_tool_call``) appends a warning's or
  halt's guidance to the result the model sees (``Decision.annotate``);
* ``subagent_start``/``subagent_stop`` (hermes' ``delegate_task`` fires them per child): in a
  delegation tree, a child's calls (its own ``session_id``) go to a guard one level below its
  parent's (its own turn, from start to stop), labelled ``<agent>/<role>`` (``hermes/leaf``,
  ``hermes/orchestrator``). A ``delegate_task`` call for one task is a delegation to that role's
  agent (the depth limit, the tree caps and delegation cycles apply); a batch spawns unnamed
  children (the depth limit and the tree caps apply);
* ``pre_api_request``/``post_api_request`` (each request to the model in a turn) →
  ``before_model``/``after_model``, with the reply's text, its tool calls (one whose arguments do
  not parse as JSON is invalid: hermes answers it with a retry) and the usage hermes reports.
  hermes ignores what these hooks return, so a ``block``/``halt`` cannot keep the model from being
  called: the turn is halted and each tool call it then asks for is refused. A model warning is
  recorded only: no hook adds to a request once the turn has begun (``pre_llm_call``'s context
  goes in once, before the turn's first request);
* ``pre_llm_call`` and a new ``turn_id`` start a turn; ``on_session_end`` (hermes fires it at the end
  of every conversation run) ends it, as ``errored`` when hermes says the run did not complete
  (``completed: false``: an API error, the iteration budget spent) and the user did not interrupt it;
  ``on_session_finalize`` forgets the session.

Configuration comes from the environment, since hermes passes plugins no arguments:
``OTELGUARD_CONFIG`` (a config file), ``OTELGUARD_METRICS_PORT`` (serve ``/metrics`` on loopback),
``OTELGUARD_AGENT`` (the ``agent`` label, default ``hermes``). This module never imports hermes.

hermes-agent's own config dialect (its ``tool_loop_guardrails`` keys: ``warnings_enabled`` and
``hard_stop_enabled`` are ``warnings`` and ``hard_stop``; ``loop_caps`` sets turn caps; the
no-progress detector is ``idempotent_no_progress`` there, with its own nested and flat threshold
keys) is read here too: ``hermes_dialect`` translates a section into otelguard's keys, and
``config_from_hermes`` builds the config. The plugin reads ``OTELGUARD_CONFIG`` in either dialect.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol

from otelguard.config import GuardConfig
from otelguard.config.checks import as_mapping, boolean, check_keys, integer
from otelguard.config.environment import OTELGUARD_AGENT, OTELGUARD_CONFIG, OTELGUARD_METRICS_PORT
from otelguard.core.bounded_map import BoundedMap
from otelguard.core.decisions import Decision
from otelguard.core.guard import Guard
from otelguard.core.sessions import Session
from otelguard.errors import ConfigError
from otelguard.hosting import SessionHosted
from otelguard.integrations._protocol import CallMemory, guidance, model_stop, refusal, replied, tokens

__all__ = ["HermesGuardPlugin", "config_from_hermes", "hermes_dialect", "register"]

logger = logging.getLogger("otelguard")

DEFAULT_AGENT: Final = "hermes"
PLUGIN_BLOCK: Final = "plugin_block"
_UNNAMED_TURN: Final = object()  # the turn of calls hermes sent without a turn id
_CALL_MEMORY: Final = 1024
"""Calls remembered between two hooks of the same call (a refusal, a warning to annotate)."""
MAX_CHILDREN: Final = 4096
"""Children of ``delegate_task`` running at once whose guards the plugin holds; past it the least
recently started child's turn is ended and its guard forgotten."""
DELEGATE_TOOL: Final = "delegate_task"
ROLES: Final = ("leaf", "orchestrator")
"""hermes' child roles (any other is taken as ``leaf``, as hermes does)."""


class HookRegistry(Protocol):
    """The part of hermes' ``PluginContext`` the plugin uses."""

    def register_hook(self, hook_name: str, callback: Callable[..., Any]) -> None: ...


class HermesGuardPlugin(SessionHosted):
    """The hook callbacks, one ``Guard`` per hermes ``session_id`` in a bounded pool.

    ``HermesGuardPlugin(config=None, *, telemetry=None, agent=None, max_sessions=10_000, host=None)``
    (``otelguard.hosting.SessionHosted``; the agent label defaults to ``hermes``)."""

    default_agent = DEFAULT_AGENT

    def _set_up(self) -> None:
        self._refused: CallMemory[bool] = CallMemory(_CALL_MEMORY)
        self._to_annotate: CallMemory[Decision] = CallMemory(_CALL_MEMORY)
        self._children: BoundedMap[str, Guard] = BoundedMap(MAX_CHILDREN)
        self._children_lock = threading.Lock()

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> HermesGuardPlugin:
        """The plugin as ``OTELGUARD_CONFIG``, ``OTELGUARD_METRICS_PORT`` and ``OTELGUARD_AGENT`` say."""
        config_path = environ.get(OTELGUARD_CONFIG)
        config = GuardConfig.from_file(config_path, dialect=hermes_dialect) if config_path else GuardConfig()
        port_text = environ.get(OTELGUARD_METRICS_PORT)
        if port_text:
            from otelguard import serve_metrics

            try:
                port = int(port_text)
            except ValueError:
                raise ConfigError(OTELGUARD_METRICS_PORT, port_text, "expected a port number") from None
            serve_metrics(port=port)
        return cls(config, telemetry=True, agent=environ.get(OTELGUARD_AGENT))

    def _session_for_turn(self, session_id: str, turn_id: str) -> Session:
        session = self.sessions.session(session_id or None)
        # hermes leaves turn_id empty where it has none: such calls continue the current turn.
        if turn_id or session.run is None:
            session.enter_run(turn_id or _UNNAMED_TURN, turn_id or None)
        return session

    def on_pre_llm_call(self, *, session_id: str = "", turn_id: str = "", **_: Any) -> None:
        if self._child(session_id) is None:  # a child's turn runs from its start to its stop
            self._session_for_turn(session_id, turn_id)

    def on_pre_api_request(self, *, session_id: str = "", turn_id: str = "", **_: Any) -> None:
        model_stop(self._child(session_id) or self._session_for_turn(session_id, turn_id).main)

    def on_post_api_request(
        self,
        *,
        session_id: str = "",
        turn_id: str = "",
        assistant_message: Any = None,
        usage: Any = None,
        **_: Any,
    ) -> None:
        guard = self._child(session_id) or self._session_for_turn(session_id, turn_id).main
        content = getattr(assistant_message, "content", None)
        calls = getattr(assistant_message, "tool_calls", None)
        calls = calls if isinstance(calls, list) else []
        valid = sum(_parses(getattr(getattr(call, "function", None), "arguments", None)) for call in calls)
        reported = usage if isinstance(usage, Mapping) else {}
        replied(
            guard,
            content if isinstance(content, str) else None,
            tool_calls=valid,
            invalid_tool_calls=len(calls) - valid,
            input_tokens=tokens(reported.get("input_tokens")),
            output_tokens=tokens(reported.get("output_tokens")),
        )

    def on_pre_tool_call(
        self,
        *,
        tool_name: str,
        args: Any = None,
        session_id: str = "",
        tool_call_id: str = "",
        turn_id: str = "",
        **_: Any,
    ) -> dict[str, str] | None:
        guard = self._child(session_id) or self._session_for_turn(session_id, turn_id).main
        delegate_to = self._delegate_of(tool_name, args) if guard.delegation_tree is not None else None
        refused = refusal(guard, tool_name, args, tool_call_id or None, delegate_to)
        if refused is None:
            return None
        if tool_call_id:
            self._refused.add((session_id, tool_call_id), True)
        return {"action": "block", "message": refused.synthetic_result()}

    def on_post_tool_call(
        self,
        *,
        tool_name: str,
        args: Any = None,
        result: Any = None,
        session_id: str = "",
        tool_call_id: str = "",
        turn_id: str = "",
        status: str | None = None,
        error_type: str | None = None,
        **_: Any,
    ) -> None:
        if status == "blocked" and tool_call_id and self._refused.take((session_id, tool_call_id)):
            return
        guard = self._child(session_id) or self._session_for_turn(session_id, turn_id).main
        blocked = status == "blocked"
        note = guidance(
            guard,
            tool_name,
            args,
            result,
            failed=None if blocked else status == "error",
            refusal=(error_type or PLUGIN_BLOCK) if blocked else None,
            call_id=tool_call_id or None,
        )
        if note is not None:
            self._to_annotate.add((session_id, tool_call_id), note)

    def on_transform_tool_result(
        self, *, result: Any = None, session_id: str = "", tool_call_id: str = "", **_: Any
    ) -> str | None:
        decision = self._to_annotate.take((session_id, tool_call_id))
        if decision is None or not isinstance(result, str):
            return None
        annotated: str = decision.annotate(result)
        return annotated

    def on_turn_end(
        self, *, session_id: str = "", completed: object = True, interrupted: object = False, **_: Any
    ) -> None:
        session = self.sessions.peek(session_id or None)
        if session is not None and session.run is not None:
            # an interrupt is the user's doing (control flow), not an error of the run
            session.end_turn(errored=completed is False and interrupted is not True)

    def on_session_finalize(self, *, session_id: str = "", **_: Any) -> None:
        self.sessions.end_session(session_id or None)

    # -- delegate_task's children ----------------------------------------------------------------

    def on_subagent_start(
        self,
        *,
        parent_session_id: str | None = None,
        child_session_id: str | None = None,
        child_role: str | None = None,
        **_: Any,
    ) -> None:
        """A child of ``delegate_task`` starts: in a delegation tree, its guard is one level below
        its parent's (a child of a child below that child's)."""
        if not child_session_id or not isinstance(child_session_id, str):
            return
        parent_id = parent_session_id if isinstance(parent_session_id, str) else ""
        parent = self._child(parent_id) or self.sessions.session(parent_id or None).main
        if parent.delegation_tree is None:
            return  # no tree: the child is a session of its own, as before
        child = parent.subagent_guard(self._role_agent(child_role))
        child.start_turn()
        with self._children_lock:
            evicted = self._children.put(child_session_id, child)
        for _key, dropped in evicted:
            dropped.end_turn()

    def on_subagent_stop(self, *, child_session_id: str | None = None, **_: Any) -> None:
        if not child_session_id or not isinstance(child_session_id, str):
            return
        with self._children_lock:
            child = self._children.pop(child_session_id, None)
        if child is not None:
            child.end_turn()

    def _child(self, session_id: object) -> Guard | None:
        if not session_id or not isinstance(session_id, str):
            return None
        with self._children_lock:
            return self._children.get(session_id)

    def _role_agent(self, role: object) -> str:
        """The agent a child of role ``role`` is (its label and its name on the tree's path)."""
        name = role.strip().lower() if isinstance(role, str) else ""
        return f"{self.sessions.agent}/{name if name in ROLES else ROLES[0]}"

    def _delegate_of(self, tool_name: str, args: Any) -> str | None:
        """The agent a ``delegate_task`` call for one task starts (a batch names none)."""
        if tool_name != DELEGATE_TOOL or not isinstance(args, Mapping) or args.get("tasks"):
            return None
        return self._role_agent(args.get("role"))

    def register(self, ctx: HookRegistry) -> None:
        ctx.register_hook("pre_llm_call", self.on_pre_llm_call)
        ctx.register_hook("pre_api_request", self.on_pre_api_request)
        ctx.register_hook("post_api_request", self.on_post_api_request)
        ctx.register_hook("pre_tool_call", self.on_pre_tool_call)
        ctx.register_hook("post_tool_call", self.on_post_tool_call)
        ctx.register_hook("transform_tool_result", self.on_transform_tool_result)
        ctx.register_hook("on_session_end", self.on_turn_end)
        ctx.register_hook("on_session_finalize", self.on_session_finalize)
        ctx.register_hook("subagent_start", self.on_subagent_start)
        ctx.register_hook("subagent_stop", self.on_subagent_stop)


def _parses(arguments: object) -> bool:
    """Arguments hermes can run a call with: JSON, an empty text (hermes reads it as ``{}``) or
    already a mapping or list."""
    if isinstance(arguments, (dict, list)) or arguments is None:
        return True
    if not isinstance(arguments, str):
        return False
    if not arguments.strip():
        return True
    try:
        json.loads(arguments)
    except ValueError:
        return False
    return True


def register(ctx: HookRegistry) -> None:
    """hermes-agent's plugin entry point: guard every tool call of this process's sessions."""
    HermesGuardPlugin.from_environment().register(ctx)


# -- hermes-agent's config dialect ------------------------------------------------------------------


def config_from_hermes(section: Mapping[str, Any] | None) -> GuardConfig:
    """A config from hermes-agent's ``tool_loop_guardrails`` section (or otelguard's own keys, or a
    mapping holding only that section), as it stands."""
    return GuardConfig.from_mapping(section, dialect=hermes_dialect)


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


def hermes_dialect(section: Mapping[str, Any]) -> dict[str, Any]:
    """``section`` in otelguard's own keys: a lone ``tool_loop_guardrails:`` block is unwrapped and
    hermes-agent's aliases are translated (``GuardConfig.from_mapping(section, dialect=hermes_dialect)``;
    a key given in both dialects is a ``ConfigError`` naming both)."""
    if set(section) == {"tool_loop_guardrails"}:
        section = as_mapping("tool_loop_guardrails", section["tool_loop_guardrails"])
    return apply_hermes_aliases(dict(section))
