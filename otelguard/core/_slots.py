"""Fast construction of frozen slotted dataclasses for the per-call hot path.

A frozen dataclass ``__init__`` sets each field through ``object.__setattr__``; filling the slots
through their descriptors builds the same immutable object in a third of the time. Kept because it
pays: built the plain way, the allow decision and the call events make ``otelguard bench``'s
guard_alone_mixed about 8% slower (the bench's ratio to the floor, measured side by side).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["positional_factory"]


def positional_factory(cls: type[T], fixed: Mapping[str, object] | None = None) -> Callable[..., T]:
    """A function ``make(*values)`` taking every field of ``cls`` not in ``fixed``, in ``__slots__``
    order; the fields in ``fixed`` get those values."""
    names: tuple[str, ...] = cls.__slots__  # type: ignore[attr-defined]
    fixed = fixed or {}
    namespace: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
    given = [name for name in names if name not in fixed]
    lines = [f"def make({', '.join(given)}):", "    obj = _new(_cls)"]
    for name in names:
        namespace[f"_set_{name}"] = cls.__dict__[name].__set__
        if name in fixed:
            namespace[f"_fixed_{name}"] = fixed[name]
            lines.append(f"    _set_{name}(obj, _fixed_{name})")
        else:
            lines.append(f"    _set_{name}(obj, {name})")
    lines.append("    return obj")
    exec("\n".join(lines), namespace)  # generated once per class, from field names only
    make: Callable[..., T] = namespace["make"]
    return make
