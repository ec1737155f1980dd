"""Framework adapters: one line puts a guard inside the agent framework you already run.

* ``otelguard.integrations.langchain`` — ``GuardMiddleware`` for ``langchain.agents.create_agent``
* ``otelguard.integrations.openai_agents`` — ``guard_agent(agent)`` returns the ``RunHooks`` for ``Runner.run``
* ``otelguard.integrations.pydantic_ai`` — ``GuardCapability`` for ``Agent(..., capabilities=[...])``

This package imports nothing: each adapter module imports its framework when it is imported, and
raises an ``ImportError`` naming the extra to install when the framework is missing. See
``docs/integrations.md``.
"""
