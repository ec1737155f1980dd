"""GuardMiddleware's session caps in the graph's state: a LangGraph checkpointer carries them to the
next worker (two compiled agents sharing one ``InMemorySaver``) and past a restart, without Redis."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("langchain.agents")

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from otelguard import GuardConfig
from otelguard.integrations.langchain import CAPS_CHANNEL, GuardMiddleware
from tests.integrations.test_langchain import Counter, calls, model
from tests.redis_e2e import RedisServer

KEY = "checkpoint-test-key"


def two_searches_per_run(messages: list[BaseMessage]) -> AIMessage:
    """Search twice after each user message, then answer."""
    last_user = max(i for i, m in enumerate(messages) if isinstance(m, HumanMessage))
    done = sum(isinstance(m, ToolMessage) for m in messages[last_user:])
    if done < 2:
        return calls(("web_search", {"query": f"q{len(messages)}"}), prefix=f"s{len(messages)}")
    return AIMessage(content="done")


def worker(saver: InMemorySaver, ran: Counter, config: GuardConfig) -> Any:
    """One worker process's agent: its own middleware (its own sessions), the shared checkpointer."""

    @tool
    def web_search(query: str) -> str:
        """Search the web."""
        ran.tick()
        return f"results for {query}"

    return create_agent(
        model(two_searches_per_run), [web_search], middleware=[GuardMiddleware(config)], checkpointer=saver
    )


def capped(**state: Any) -> GuardConfig:
    caps = {"turn": {"web_search": 0}, "session": {"web_search": 3}}
    return GuardConfig.from_mapping({"signature_key": KEY, "caps": caps, **state})


def ask(agent: Any, thread: str) -> list[ToolMessage]:
    out = agent.invoke({"messages": [HumanMessage("search")]}, {"configurable": {"thread_id": thread}})
    assert CAPS_CHANNEL not in out  # private: never in the graph's output
    return [m for m in out["messages"] if isinstance(m, ToolMessage)]


def test_the_next_worker_continues_the_threads_session_count() -> None:
    saver, ran = InMemorySaver(), Counter()
    first, second = worker(saver, ran, capped()), worker(saver, ran, capped())
    assert [m.status for m in ask(first, "thread-1")] == ["success", "success"]
    assert first.get_state({"configurable": {"thread_id": "thread-1"}}).values[CAPS_CHANNEL] == {
        "web_search": 2
    }
    second_run = ask(second, "thread-1")[2:]
    assert [m.status for m in second_run] == ["success", "error"]
    assert '"cap_session"' in str(second_run[-1].content)
    assert ran.n == 3  # the cap of 3 held across the two workers
    # a thread the first worker never saw starts from zero on it
    assert [m.status for m in ask(first, "thread-2")] == ["success", "success"]


def test_a_restarted_worker_continues_from_the_checkpoint_and_back_again() -> None:
    saver, ran = InMemorySaver(), Counter()
    first = worker(saver, ran, capped())
    ask(first, "thread-3")
    restarted = worker(saver, ran, capped())
    assert [m.status for m in ask(restarted, "thread-3")[2:]] == ["success", "error"]
    # the first worker's own count (2) is below the checkpoint's (3): it takes the higher
    assert [m.status for m in ask(first, "thread-3")[4:]] == ["error"]
    assert ran.n == 3


def test_without_the_shared_checkpointer_each_worker_counts_alone() -> None:
    """The control: two workers with their own checkpointers do not see each other's counts."""
    ran = Counter()
    first, second = worker(InMemorySaver(), ran, capped()), worker(InMemorySaver(), ran, capped())
    ask(first, "thread-4")
    assert [m.status for m in ask(second, "thread-4")] == ["success", "success"]
    assert ran.n == 4


def test_with_shared_state_redis_holds_the_count_and_the_channel_is_not_added_twice(
    redis_server: RedisServer,
) -> None:
    saver, ran = InMemorySaver(), Counter()
    config = capped(state={"url": redis_server.url})
    first, second = worker(saver, ran, config), worker(saver, ran, config)
    ask(first, "thread-5")
    assert [m.status for m in ask(second, "thread-5")[2:]] == ["success", "error"]
    assert ran.n == 3
    # two workers with separate checkpointers still share the count, through Redis
    assert [m.status for m in ask(worker(InMemorySaver(), ran, config), "thread-5")] == ["error"]
