"""How one use of a shared session-cap store went: what a backend tells the listener its host wires
to telemetry (``otelguard_state_*``). Imports nothing: telemetry reads it without loading a backend.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

__all__ = ["StateOp", "StateReport"]

StateOp = Literal["connect", "charge", "refund"]


class StateReport(NamedTuple):
    """What one use of the shared session-cap store (``state.url``) came to.

    ``sent``: a command reached for the store (``False``: it was backing off after a failure, so the
    process's own counts answered without trying). ``error``: the operation that failed (``connect``,
    ``charge`` or ``refund``), ``None`` when the command succeeded or none was sent. ``fell_back``:
    the call was decided from the process's own counts. ``key_error``: the store answered, with an
    error about this session's key alone (a key of another type, a field that is not a count): the
    link is up, only that session is decided here. Holds no session id, key or value.
    """

    sent: bool
    error: StateOp | None
    fell_back: bool
    key_error: bool = False
