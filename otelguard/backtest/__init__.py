"""Backtesting the alerts on recorded transcripts (``otelguard backtest``, docs/backtest.md).

The replay's events, with the transcripts' timestamps, become TSDB blocks through ``promtool``; a real
``prometheus`` evaluates the recording rules and alerts over them. Nothing here re-implements PromQL.
"""
