"""``ResultSlot``: the previous ok result of one signature, in a leaf module so that the detectors'
state and the results' memory reach it in one import."""

from __future__ import annotations

from typing import Any

__all__ = ["ResultSlot"]


class ResultSlot:
    """The previous ok result of one signature: raw digest, content fingerprint (``None`` until it
    is needed) and, while the fingerprint is unknown, the result itself. Its owner may reset it for
    another signature (``TurnDetectors.state`` does, once its map is full): see ``ResultMemory._hold`` in ``results.py``; it lives here, a leaf module, so that the detectors' state reaches it in one import."""

    __slots__ = ("fingerprint", "held", "raw")

    def __init__(self) -> None:
        self.raw: int | None = None
        self.fingerprint: int | None = None
        self.held: Any = None
