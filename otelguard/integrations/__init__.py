"""Adapters that put a guard inside an agent framework's own extension point.

Importing this package imports no framework; each adapter module imports its framework lazily.
"""
