"""Replaying recorded agent transcripts through the guard (``otelguard replay``).

Readers per format stream lines into a normalised event stream (``events``); the runner feeds it to
one ``Guard`` per session; the report is the document of docs/replay.md and its tables.
"""

from otelguard.readers.events import EventSink, SessionKey, ToolCall
from otelguard.readers.follow import follow_inputs
from otelguard.readers.sources import (
    AUTO,
    FORMATS,
    STDIN,
    UsageError,
    detect_format,
    expand_paths,
    replay_bytes,
    replay_inputs,
)
from otelguard.replay.report import ReplayReport, SessionReport
from otelguard.replay.runner import ReplayRunner

__all__ = [
    "AUTO",
    "FORMATS",
    "STDIN",
    "EventSink",
    "ReplayReport",
    "ReplayRunner",
    "SessionKey",
    "SessionReport",
    "ToolCall",
    "UsageError",
    "detect_format",
    "expand_paths",
    "follow_inputs",
    "replay_bytes",
    "replay_inputs",
]
