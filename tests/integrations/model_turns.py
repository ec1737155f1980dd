"""What the adapters' model-turn tests share: the config that keeps the scripts short, and an
observer of every model event the adapter's guards report."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from otelguard import GuardConfig
from otelguard.core.edges import Edges
from otelguard.core.observers import ModelEvent
from otelguard.core.sessions import SessionHost
from otelguard.hosting import Guard
from otelguard.testing import RecordingObserver

NO_ACTION_WARN = 2
NO_ACTION_HALT = 4
REPLY_TOKENS = 500  # every scripted reply reports 400 input + 100 output tokens
INPUT_TOKENS, OUTPUT_TOKENS = 400, 100


def stalls() -> GuardConfig:
    """Replies without a valid call: warned from the 2nd on, stopped at the 4th."""
    return GuardConfig(
        mode="unattended",
        warn_after={"no_action": NO_ACTION_WARN},
        hard_stop_after={"no_action": NO_ACTION_HALT},
    )


def token_caps(turn: int = 0, session: int = 0) -> GuardConfig:
    caps: dict[str, Any] = {}
    if turn:
        caps["turn"] = {"tokens": turn}
    if session:
        caps["session"] = {"tokens": session}
    return GuardConfig(mode="unattended", caps=caps)


class Watch(RecordingObserver):
    """A ``RecordingObserver`` that also records the model events."""

    def __init__(self) -> None:
        super().__init__()
        self._model_lock = threading.Lock()
        self._model_events: list[ModelEvent] = []

    def on_model_call(self, event: ModelEvent) -> None:
        with self._model_lock:
            self._model_events.append(event)

    @property
    def model_events(self) -> tuple[ModelEvent, ...]:
        with self._model_lock:
            return tuple(self._model_events)

    def model_codes(self) -> Counter[str]:
        """The codes of the model decisions other than ``allow``."""
        return Counter(e.decision.code for e in self.model_events if e.decision.action != "allow")

    def replies(self) -> Counter[str]:
        """The replies' outcomes (``after_model`` events)."""
        return Counter(e.outcome for e in self.model_events if e.outcome is not None)

    def input_tokens(self) -> int:
        return sum(e.input_tokens or 0 for e in self.model_events)

    def turn_outcomes(self) -> list[str]:
        return [summary.outcome for summary in self.summaries]


def watched(config: GuardConfig, agent: str | None = None) -> tuple[SessionHost, Watch]:
    """A session host whose every guard reports to one ``Watch``: hand it to an adapter as ``host``."""
    watch = Watch()
    host = SessionHost(config, edges=Edges(observer=lambda _config: watch), guard_class=Guard, agent=agent)
    return host, watch
