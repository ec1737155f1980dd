"""Adapters that put a ``Guard`` inside an agent framework's own extension points.

* ``otelguard.integrations.langchain`` — ``GuardMiddleware`` for ``langchain.agents.create_agent``
* ``otelguard.integrations.openai_agents`` — ``guard_agent(agent)`` returns the ``RunHooks`` for ``Runner.run``
* ``otelguard.integrations.pydantic_ai`` — ``GuardCapability`` for ``Agent(..., capabilities=[...])``
* ``otelguard.integrations.hermes`` — the hermes-agent plugin

Each adapter lives in its own module and imports its framework only when used; this package imports
nothing. A missing framework raises an ``ImportError`` naming the extra to install. See
``docs/integrations.md``.
"""
