"""Claude Code's hooks: the events, the session host behind ``otelguard serve``, and the ``otelguard hook`` command."""
