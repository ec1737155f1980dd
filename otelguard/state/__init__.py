"""Shared state backends: where session caps live when ``state.url`` is set (docs/shared-state.md).

An edge of the package: the core knows a backend only as the ``SessionCapStore`` protocol of
``otelguard.core.caps``; ``otelguard.hosting`` picks this one for a config with a URL (so a process without
one never loads the ``redis`` client) and wires its health reports (``reports.StateReport``) to a
listener, the telemetry's.
"""
