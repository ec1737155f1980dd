"""Fast construction of frozen slotted dataclasses for the per-call hot path.

A frozen dataclass ``__init__`` sets each field through ``object.__setattr__``. The hot-path
constructors (``decisions.allow_decision``, ``observers.new_call_event``, written out by hand) set
the fields on an instance of a plain slotted twin of the class instead (the same slots, in the same
order: the same memory layout), whose attribute stores the interpreter specialises, and the instance
then becomes an instance of the class itself (``__class__`` assignment, which CPython allows between
layouts that match). The object is exactly what the class's ``__init__`` would have built. Kept
because it pays: the allow decision and the call event are built on every call, and ``otelguard
bench`` measures the guard with these constructors and with the classes' own side by side
(``hot_path_tricks``); where the assignment is refused, the classes' own constructors are used.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ResultSlot", "slotted_twin"]


class ResultSlot:
    """The previous ok result of one signature: raw digest, content fingerprint (``None`` until it
    is needed) and, while the fingerprint is unknown, the result itself. Its owner may reset it for
    another signature (``TurnDetectors.state`` does, once its map is full): see ``ResultMemory._hold`` in ``results.py``; it lives here, a leaf module, so that the detectors' state reaches it in one import."""

    __slots__ = ("fingerprint", "held", "raw")

    def __init__(self) -> None:
        self.raw: int | None = None
        self.fingerprint: int | None = None
        self.held: Any = None


def slotted_twin(cls: type[Any]) -> type[Any] | None:
    """A plain class with the slots of ``cls`` (a frozen slotted dataclass), whose instances can become
    instances of ``cls``; ``None`` when the interpreter does not allow it (or ``cls`` adds more than
    its slots): then the hot-path constructor calls the class itself."""
    if cls.__bases__ != (object,):
        return None
    twin = type(f"_{cls.__name__}Twin", (), {"__slots__": cls.__slots__})
    try:
        probe = twin()
        probe.__class__ = cls
    except TypeError:
        return None
    return twin
