"""Fast construction of frozen slotted dataclasses for the per-call hot path.

A frozen dataclass ``__init__`` sets each field through ``object.__setattr__``. Here the fields are
set on an instance of a plain slotted twin of the class (the same slots, in the same order: the same
memory layout), whose attribute stores the interpreter specialises, and the instance then becomes an
instance of the class itself (``__class__`` assignment, which CPython allows between layouts that
match). The object is then exactly what the class's ``__init__`` would have built, in a fifth of the
time; where the assignment is refused, the slots are filled through their descriptors instead (a
third of the ``__init__`` time). Kept because it pays: the allow decision is built on every call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["ResultSlot", "positional_factory"]


class ResultSlot:
    """The previous ok result of one signature: raw digest, content fingerprint (``None`` until it
    is needed) and, while the fingerprint is unknown, the result itself. Its owner may reset it for
    another signature (``TurnDetectors.state`` does, once its map is full): see ``ResultMemory._hold`` in ``results.py``; it lives here, a leaf module, so that the detectors' state reaches it in one import."""

    __slots__ = ("fingerprint", "held", "raw")

    def __init__(self) -> None:
        self.raw: int | None = None
        self.fingerprint: int | None = None
        self.held: Any = None


def positional_factory(cls: type[T], fixed: Mapping[str, object] | None = None) -> Callable[..., T]:
    """A function ``make(*values)`` taking every field of ``cls`` not in ``fixed``, in ``__slots__``
    order; the fields in ``fixed`` get those values."""
    names: tuple[str, ...] = cls.__slots__  # type: ignore[attr-defined]
    fixed = fixed or {}
    given = [name for name in names if name not in fixed]
    namespace: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
    namespace.update({f"_fixed_{name}": value for name, value in fixed.items()})
    twin = _twin(cls, names)
    if twin is not None:
        namespace["_twin"] = twin
        lines = [f"def make({', '.join(given)}):", "    obj = _twin()"]
        lines += [f"    obj.{name} = {f'_fixed_{name}' if name in fixed else name}" for name in names]
        lines.append("    obj.__class__ = _cls")
    else:
        lines = [f"def make({', '.join(given)}):", "    obj = _new(_cls)"]
        for name in names:
            namespace[f"_set_{name}"] = cls.__dict__[name].__set__
            lines.append(f"    _set_{name}(obj, {f'_fixed_{name}' if name in fixed else name})")
    lines.append("    return obj")
    exec("\n".join(lines), namespace)  # generated once per class, from field names only
    make: Callable[..., T] = namespace["make"]
    return make


def _twin(cls: type[Any], names: tuple[str, ...]) -> type[Any] | None:
    """A plain class with the slots of ``cls``, whose instances can become instances of ``cls``;
    ``None`` when the interpreter does not allow it (or ``cls`` adds more than its slots)."""
    if cls.__bases__ != (object,):
        return None
    twin = type(f"_{cls.__name__}Twin", (), {"__slots__": names})
    try:
        probe = twin()
        probe.__class__ = cls
    except TypeError:
        return None
    return twin
