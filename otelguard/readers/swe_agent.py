"""SWE-agent trajectories (``.traj``: one pretty-printed JSON document per run).

With function calling, the ``history`` holds the calls (assistant entries with OpenAI ``tool_calls``)
and their results (tool entries with ``tool_call_ids``); it may stop before the run's last step (the
``submit`` that ended it), so trajectory steps past the history's calls are read as below. Which
steps the history holds is told by their actions (each history call records its step's ``action``),
not by counting: the trajectory also holds steps the history does not, a reply SWE-agent asked the
model again for (a format error) and the step it writes when a run ends at a limit.
Otherwise each ``trajectory`` step is one call, named as SWE-agent runs it: by the agent's own
command when the action's first word is one (``open``, ``edit``, ``submit``, ... and the commands the
run's recorded config declares), else the shell, tool ``bash``; the arguments are
``{"command": <the whole action>}``, the result the step's ``observation``. There is no error flag:
a result is failed when it is one of SWE-agent's own failure answers (its linter refusing an edit, a
command's usage line, ``No file open``, ``File ... not found``, a timed-out command, an editor refusal;
see ``recorded_failures``), else the fallback classifier decides. Demonstration entries (``is_demo``) are examples shown to the
model, not calls of this run, and neither is the ``exit_cost``-like step SWE-agent writes when the run
ends at a limit, nor a step with an empty action (a reply with no command: SWE-agent ran nothing). A run is one task: one session (named after the file) of one turn.

A multi-agent system built on SWE-agent 0.x (CodeR: a manager, a reproducer, a fault localizer, a
programmer, a tester) records which role wrote each model message (the history entries' ``agent``).
When every step has its role so, each role's steps are a turn of their own (a role starts with a
conversation of its own), and a role's last step before the next role's, when its first line is one
word that is not a command (``succeed``, ``fail``, ``plan``), is read under that word: the role
handing the task on, not a shell command.

Each step (each assistant entry of a function-calling history) is one model reply, its text the
step's ``response``. A reply that ran nothing (an empty action, an assistant entry with no tool call)
is one SWE-agent answered with its format error and asked again: a reply with an invalid tool call,
unless it is the run's last (the reply the run ended on).
"""

from __future__ import annotations

import re
from typing import Any, Final

import orjson

from otelguard.readers.events import EventSink, SessionKey, ToolCall
from otelguard.readers.feed import SessionFeed, result_text, type_name
from otelguard.readers.recorded_failures import editor_failed, swe_agent_step_failed
from otelguard.readers.replies import reply_text

__all__ = ["AGENT_COMMANDS", "SWE_AGENT", "SweAgentReader", "declared_commands", "is_swe_agent_trajectory"]

SWE_AGENT: Final = "swe-agent"
SHELL: Final = "bash"
"""The tool a plain shell command runs as: SWE-agent hands every action that is not one of its own
commands to bash, so ``python reproduce.py`` and ``pytest`` are one tool, not two."""
AGENT_COMMANDS: Final = frozenset(
    (
        "open", "goto", "scroll_up", "scroll_down", "create", "edit", "insert", "search_dir",
        "search_file", "find_file", "filemap", "submit", "str_replace_editor",
    )
)  # fmt: skip
"""SWE-agent's own commands in its shipped tool bundles."""
HARNESS_EXITS: Final = frozenset(
    {"exit_cost", "exit_context", "exit_api", "exit_format", "exit_error", "exit_forfeit"}
)
"""The last step SWE-agent writes itself when a run ends at a limit (it autosubmits then): the action
is the exit's name, the observation ``Exited``; the model never called it."""
_MAX_DECLARED: Final = 256
"""Commands taken from one trajectory's recorded config, at most."""
# SWE-agent 1.x writes its commands' documentation as "<name>:\n  docstring: ..." or "  signature:".
_DOCUMENTED_COMMAND: Final = re.compile(r"^([A-Za-z_][\w.-]{0,63}):\n  (?:docstring|signature):", re.M)


def is_swe_agent_trajectory(record: Any) -> bool:
    return (
        isinstance(record, dict)
        and "source" not in record
        and "instance_id" not in record
        and (isinstance(record.get("trajectory"), list) or isinstance(record.get("history"), list))
    )


def _uses_function_calls(history: Any) -> bool:
    return isinstance(history, list) and any(
        isinstance(entry, dict)
        and entry.get("role") == "assistant"
        and entry.get("tool_calls")
        and not entry.get("is_demo")
        for entry in history
    )


class SweAgentReader:
    def __init__(self, sink: EventSink, path: str, session_id: str) -> None:
        self.sink = sink
        self.path = path
        self._session_id = session_id
        self._runs = 0

    def feed(self, line: int, record: Any) -> None:
        if not is_swe_agent_trajectory(record):
            self.sink.error(self.path, line, "expected a SWE-agent trajectory with a trajectory or history")
            return
        self._runs += 1
        session_id = self._session_id if self._runs == 1 else f"{self._session_id}:{self._runs}"
        feed = SessionFeed(self.sink, SessionKey(self.path, session_id))
        feed.start_turn()
        trajectory = record.get("trajectory")
        commands = declared_commands(record)
        if _uses_function_calls(record.get("history")):
            made = self._history(line, record["history"], feed)
            if isinstance(trajectory, list):  # the history may end before the last step (the submit)
                first = _past_history(trajectory, record["history"], made)
                self._steps(line, trajectory, feed, commands, first=first)
        elif isinstance(trajectory, list):
            self._steps(line, trajectory, feed, commands, roles=step_roles(record))
        else:
            feed.error(line, "history has no tool calls and there is no trajectory array; nothing replayed")
        feed.close()

    def close(self) -> None:
        """Each trajectory is complete when fed: nothing stays open."""

    def _history(self, line: int, history: list[Any], feed: SessionFeed) -> int:
        """Feed the history's calls and results; returns how many calls it made."""
        made = 0
        last = max(
            (i for i, e in enumerate(history) if isinstance(e, dict) and e.get("role") == "assistant"),
            default=-1,
        )
        for index, entry in enumerate(history):
            where = f"history[{index}]"
            if not isinstance(entry, dict):
                feed.error(line, f"{where} is {type_name(entry)}, expected an object")
                continue
            if entry.get("is_demo"):
                continue
            role = entry.get("role")
            if role == "assistant":
                feed.tick()
                reply = feed.open_reply(line)
                calls = self._calls(line, entry.get("tool_calls"), feed, where)
                made += calls
                invalid = 1 if calls == 0 and index != last else 0
                feed.close_reply(reply, text=reply_text(entry.get("content")), invalid_tool_calls=invalid)
            elif role == "tool":
                ids = entry.get("tool_call_ids", entry.get("tool_call_id"))
                ids = [ids] if isinstance(ids, str) else ids
                if not isinstance(ids, list) or not ids:
                    feed.error(line, f"{where}.tool_call_ids is {type_name(ids)}, expected an array of ids")
                    continue
                content = result_text(entry.get("content"))
                failed = True if isinstance(content, str) and editor_failed(content) else None
                for call_id in ids:
                    if isinstance(call_id, str):
                        feed.add_result(call_id, content, failed, line)
        return made

    def _calls(self, line: int, tool_calls: Any, feed: SessionFeed, where: str) -> int:
        if tool_calls is None:
            return 0
        if not isinstance(tool_calls, list):
            feed.error(line, f"{where}.tool_calls is {type_name(tool_calls)}, expected an array")
            return 0
        made = 0
        for index, item in enumerate(tool_calls):
            function = item.get("function") if isinstance(item, dict) else None
            call_id = item.get("id") if isinstance(item, dict) else None
            name = function.get("name") if isinstance(function, dict) else None
            if not isinstance(call_id, str) or not isinstance(name, str) or not name:
                feed.error(line, f"{where}.tool_calls[{index}] needs a string id and function.name")
                continue
            assert isinstance(function, dict)
            feed.add_call(ToolCall(call_id, name, function.get("arguments"), line))
            made += 1
        return made

    def _steps(
        self,
        line: int,
        trajectory: list[Any],
        feed: SessionFeed,
        commands: frozenset[str],
        first: int = 0,
        roles: list[str] | None = None,
    ) -> None:
        current_role: str | None = None
        for index, step in enumerate(trajectory[first:], start=first):
            where = f"trajectory[{index}]"
            action = step.get("action") if isinstance(step, dict) else None
            if not isinstance(action, str):
                feed.error(line, f"{where}.action is {type_name(action)}, expected a command; step skipped")
                continue
            assert isinstance(step, dict)
            if not action.strip():  # a reply with no command (SWE-agent asked again, or ended the run)
                reply = feed.open_reply(line)
                last = index == len(trajectory) - 1
                feed.close_reply(
                    reply, text=reply_text(step.get("response")), invalid_tool_calls=0 if last else 1
                )
                continue
            if action.strip() in HARNESS_EXITS:  # how the run ended, written by SWE-agent: not a call
                continue
            if roles is not None:
                if current_role is not None and roles[index] != current_role:
                    feed.start_turn()  # another role takes over, with a conversation of its own
                current_role = roles[index]
            feed.tick()
            reply = feed.open_reply(line)
            slot = f"step {index + 1}"
            word = action.split()[0]
            tool = word if word in AGENT_COMMANDS or word in commands else SHELL
            if tool == SHELL and roles is not None and _hands_off(roles, index, action):
                tool = word  # the role's answer to the system running the roles, not a shell command
            feed.add_call(ToolCall(None, tool, {"command": action}, line), slot)
            feed.close_reply(reply, text=reply_text(step.get("response")))
            if "observation" in step:
                observation = result_text(step["observation"])
                feed.add_result(slot, observation, swe_agent_step_failed(tool, observation), line)


def declared_commands(record: dict[str, Any]) -> frozenset[str]:
    """The commands a trajectory's recorded config declares (SWE-agent 1.x records its run config as
    ``replay_config``, an object or a JSON string, whose ``agent.tools`` documents every command);
    empty when the trajectory records none (SWE-agent 0.x) or the config is not readable."""
    config = record.get("replay_config")
    if isinstance(config, str):
        try:
            config = orjson.loads(config)
        except orjson.JSONDecodeError:
            return frozenset()
    agent = config.get("agent") if isinstance(config, dict) else None
    tools = agent.get("tools") if isinstance(agent, dict) else None
    if not isinstance(tools, dict):
        return frozenset()
    names: list[str] = []
    docs = tools.get("command_docs")
    if isinstance(docs, str):
        names.extend(_DOCUMENTED_COMMAND.findall(docs))
    endings = tools.get("multi_line_command_endings")
    if isinstance(endings, dict):
        names.extend(name for name in endings if isinstance(name, str))
    submit = tools.get("submit_command")
    if isinstance(submit, str):
        names.append(submit)
    return frozenset(name for name in names[:_MAX_DECLARED] if name)


def _action(step: Any) -> str:
    action = step.get("action") if isinstance(step, dict) else None
    return action.strip() if isinstance(action, str) else ""


def _past_history(trajectory: list[Any], history: list[Any], made: int) -> int:
    """The index of the first trajectory step after the ones the history's ``made`` calls hold.

    Each history call records its step's ``action``: the steps are matched in order by it, so a
    trajectory step the history does not hold (an empty reply asked again) does not shift the rest.
    A history without those actions (or one they do not match) holds the first ``made`` steps that
    have a command."""
    actions = [
        entry.get("action")
        for entry in history
        if isinstance(entry, dict)
        and entry.get("role") == "assistant"
        and entry.get("tool_calls")
        and not entry.get("is_demo")
    ]
    if actions and all(isinstance(a, str) for a in actions):
        matched = 0
        for index, step in enumerate(trajectory):
            if matched == len(actions):
                return index
            if _action(step) == str(actions[matched]).strip():
                matched += 1
        if matched == len(actions):
            return len(trajectory)
    counted = 0
    for index, step in enumerate(trajectory):
        if counted >= made:
            return index
        if _action(step) and _action(step) not in HARNESS_EXITS:
            counted += 1
    return len(trajectory)


def step_roles(record: dict[str, Any]) -> list[str] | None:
    """The role (``agent``) of each trajectory step, when the history of a multi-agent system built on
    SWE-agent names the role of every model message and gives one per step; else ``None``."""
    history = record.get("history")
    trajectory = record.get("trajectory")
    if not isinstance(history, list) or not isinstance(trajectory, list):
        return None
    roles: list[str] = []
    for entry in history:
        if isinstance(entry, dict) and entry.get("role") == "assistant" and not entry.get("is_demo"):
            role = entry.get("agent")
            if not isinstance(role, str) or not role:
                return None
            roles.append(role)
    return roles if len(roles) == len(trajectory) and len(set(roles)) > 1 else None


def _hands_off(roles: list[str], index: int, action: str) -> bool:
    """A role's last step before another role's whose first line is a single word (CodeR's
    ``succeed``/``fail`` answering "TASK STATUS", the manager's ``plan``): the role handing on."""
    last = index + 1 < len(roles) and roles[index + 1] != roles[index]
    return last and len(action.strip().splitlines()[0].split()) == 1
