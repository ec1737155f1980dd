"""The demo's simulated agents (``otelguard demo``): scenarios played through a real guard."""
