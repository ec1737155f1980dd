"""Adapters that put a ``Guard`` inside an agent framework's own extension points.

Each adapter lives in its own module and imports its framework only when used; this package imports
nothing.
"""
