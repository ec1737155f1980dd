"""otelguard's monitoring mixin: the Grafana dashboard and Prometheus rules, generated from one source.

Run ``python dashboards/generate.py`` to rewrite the committed files (and their package-data copies);
``--check`` exits 1 when a committed file differs from what this code generates.
"""
