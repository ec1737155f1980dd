"""Pydantic AI: ``GuardCapability``, a capability for ``Agent(..., capabilities=[...])``.

    agent = Agent(model, tools=[...], capabilities=[GuardCapability(GuardConfig(mode="unattended"))])

* Every tool call goes through the guard around the tool's execution (``wrap_tool_execute``, which
  encloses ``before_tool_execute``). A refused call never runs: it raises ``ToolFailed`` with the
  synthetic result, which the model sees as the call's failed result. (Not ``ModelRetry``: that
  would burn the tool's retry budget and end the run with ``UnexpectedModelBehavior``.)
* Failures: a tool's own ``ToolFailed``/``ModelRetry`` (they arrive as ``ToolFailedError``/
  ``ToolRetryError``) and any other exception (``on_tool_execute_error``, then handled as Pydantic
  AI would without the capability). Warnings are appended to the result the model sees.
* A turn is one agent run. After a ``block``/``halt`` the next ``before_model_request`` raises
  ``otelguard.GuardHalted``, so the refused call's result is in the history and the run ends. A run
  that raises anything else (an exception no capability's ``on_run_error`` recovered) is an
  ``errored`` turn.
* Model calls: ``before_model`` in ``before_model_request`` (a ``block`` raises ``GuardHalted``),
  ``after_model`` in ``after_model_request`` with the response's text, tool-call parts and usage.
  A model warning from either reaches the model in its next request of the run: a ``ModelRequest``
  with a ``UserPromptPart`` at the end of the request's messages, a new list, which Pydantic AI sends
  with this request only (not in the message history, so a saved conversation stays as it was).
* One guard per ``conversation_id`` (Pydantic AI always has one: given, inherited from the message
  history, or new; a run without history is a new session).
* Pydantic AI already traces ``execute_tool``: with ``span_mode: auto`` otelguard's attributes go
  on that span instead of a second one.
* Delegation trees: a tool runs inside its guard's tree (``otelguard.propagation``), so an agent
  run from a tool, guarded by a ``GuardCapability``, is one level down in the caller's tree. A tool
  whose ``metadata`` names the agent it runs (``{DELEGATES_TO: "worker"}``, the name that agent's
  capability labels it with) is a delegation to it: the depth limit and delegation cycles apply to
  its calls. A ``GuardHalted`` that ends the run of an agent called from a tool reaches the calling
  agent as that tool's failure, not as the end of its own run.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Final

from otelguard.core.guard import Guard
from otelguard.core.sessions import Session
from otelguard.errors import GuardHalted
from otelguard.hosting import SessionHosted
from otelguard.integrations._protocol import (
    DELEGATES_TO,
    CallMemory,
    ModelNotes,
    delegate_of,
    end_run,
    guidance,
    in_tree,
    missing_framework,
    model_stop,
    raised,
    refusal,
    replied,
    stop_if_halted,
    tokens,
)

try:
    from pydantic_ai import RunContext
    from pydantic_ai.capabilities import (
        AbstractCapability,
        ValidatedToolArgs,
        WrapRunHandler,
        WrapToolExecuteHandler,
    )
    from pydantic_ai.exceptions import (
        ApprovalRequired,
        CallDeferred,
        SkipToolExecution,
        ToolFailed,
        ToolFailedError,
        ToolRetryError,
    )
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, UserPromptPart
    from pydantic_ai.models import ModelRequestContext
    from pydantic_ai.run import AgentRunResult
    from pydantic_ai.tools import ToolDefinition
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without the framework
    raise missing_framework("pydantic-ai", "pydantic-ai") from exc

__all__ = ["DELEGATES_TO", "GuardCapability"]


_NOT_RUN: Final = (SkipToolExecution, CallDeferred, ApprovalRequired)


class GuardCapability(SessionHosted, AbstractCapability[Any]):
    """Guards every tool call of a Pydantic AI agent; see the module docstring.

    ``GuardCapability(config=None, *, telemetry=None, agent=None, max_sessions=10_000, host=None)``
    (``otelguard.hosting.SessionHosted``)."""

    def _set_up(self) -> None:
        # Calls whose exception another capability turned into a result: still failures.
        self._recovered: CallMemory[bool] = CallMemory()
        self._notes = ModelNotes()

    def _session(self, ctx: RunContext[Any]) -> Session:
        return self.sessions.session(ctx.conversation_id)

    async def wrap_run(self, ctx: RunContext[Any], *, handler: WrapRunHandler) -> AgentRunResult[Any]:
        session = self._session(ctx)
        run = object()
        session.enter_run(run, turn_id=ctx.run_id)
        try:
            result = await handler()
        except BaseException as error:  # what no capability's on_run_error recovered
            end_run(session, run, error)
            raise
        end_run(session, run)
        return result

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        session = self._session(ctx)
        stop_if_halted(session)  # the run's turn ends in wrap_run, as the exception leaves
        stop = model_stop(session.main, self._notes)
        if stop is not None:
            raise GuardHalted(stop)
        note = self._notes.take(session.main)
        if note is None:
            return request_context
        # a new list: Pydantic AI sends it with this request only (appending in place would go to history)
        note_request = ModelRequest(parts=[UserPromptPart(note)])
        return replace(request_context, messages=[*request_context.messages, note_request])

    async def after_model_request(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, response: ModelResponse
    ) -> ModelResponse:
        """Record the response: its text, its tool calls (one of a tool the request did not offer,
        or with arguments that do not parse, is invalid: Pydantic AI answers it with a retry
        prompt) and its usage."""
        known = request_context.model_request_parameters.tool_defs
        calls = [part for part in response.parts if isinstance(part, ToolCallPart)]
        valid = sum(part.tool_name in known and _parses(part) for part in calls)
        usage = response.usage
        reported = usage.has_values()
        replied(
            self._session(ctx).main,
            "\n".join(part.content for part in response.parts if isinstance(part, TextPart)),
            tool_calls=valid,
            invalid_tool_calls=len(calls) - valid,
            input_tokens=tokens(usage.input_tokens) if reported else None,
            output_tokens=tokens(usage.output_tokens) if reported else None,
            notes=self._notes,
        )
        return response

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: ValidatedToolArgs,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        guard = self._session(ctx).main
        name, call_id = call.tool_name, call.tool_call_id
        refused = refusal(guard, name, args, call_id, delegate_of(tool_def.metadata))
        if refused is not None:
            raise ToolFailed(refused.synthetic_result())
        try:
            with in_tree(guard):  # an agent run by the tool joins the tree
                result = await handler(args)
        except GuardHalted as halted:  # an agent this tool ran was stopped; this one goes on
            raised(guard, name, args, halted, call_id)
            raise ToolFailed(halted.decision.synthetic_result()) from halted
        except _NOT_RUN:
            # Deferred or skipped by another capability: the tool did not run (caps are refunded).
            guard.after_call(name, args, None, cancelled=True, call_id=call_id)
            raise
        except ToolFailedError as failure:
            _annotate_part(failure.tool_failed, guard, name, args, call_id)
            raise
        except ToolRetryError as retry:
            _annotate_part(retry.tool_retry, guard, name, args, call_id)
            raise
        except Exception as error:
            self._recovered.take(call_id)
            raised(guard, name, args, error, call_id)
            raise
        recovered = self._recovered.take(call_id) is not None
        note = guidance(guard, name, args, result, failed=recovered, call_id=call_id)
        return result if note is None else note.annotate(result)

    async def on_tool_execute_error(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: ValidatedToolArgs,
        error: Exception,
    ) -> Any:
        self._recovered.add(call.tool_call_id, True)
        raise error


def _parses(part: ToolCallPart) -> bool:
    try:
        part.args_as_dict(raise_if_invalid=True)
    except (ValueError, AssertionError):
        return False
    return True


def _annotate_part(part: Any, guard: Guard, name: str, args: Any, call_id: str) -> None:
    """Record a failure whose message part the model will read; a warning is appended to it."""
    content = getattr(part, "content", None)
    note = guidance(guard, name, args, content, failed=True, call_id=call_id)
    if note is not None and isinstance(content, str):
        part.content = note.annotate(content)
