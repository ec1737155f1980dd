"""Shared state backends: where session caps live when ``state.url`` is set (docs/shared-state.md).

An edge of the package: the core reaches it only through a function-local import, and only when a
URL is configured, so a process without one never loads the ``redis`` client.
"""
