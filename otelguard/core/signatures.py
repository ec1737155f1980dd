"""Canonical arguments, keyed argument hashes, and result fingerprints (docs/detectors.md).

The hot path is ``orjson.dumps(args, OPT_SORT_KEYS)`` plus one keyed BLAKE2b. Whatever orjson
rejects (lone surrogates, non-string keys, huge ints, sets, bytes, nesting past its depth limit)
goes through ``_canonical_slow``, an iterative encoder with the same rules: deterministic, any depth,
never raises.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import threading
from collections.abc import Mapping, Set
from typing import Any, Final

import orjson
import xxhash

from otelguard.config.environment import OTELGUARD_SIGNATURE_KEY
from otelguard.core.session_keys import key_bytes

__all__ = [
    "MAX_NAME_CHARS",
    "RANDOM_KEY_NOTE",
    "ArgsHasher",
    "ResultFingerprinter",
    "bounded_name",
    "canonical_args",
    "claim_random_key_note",
    "name_of",
    "resolve_signature_key",
    "uses_random_key",
]


_SORT: Final = orjson.OPT_SORT_KEYS
_dumps: Final = orjson.dumps
_EMPTY: Final = b"{}"

_random_key: bytes | None = None
_random_key_lock = threading.Lock()


RANDOM_KEY_NOTE: Final = (
    "no signature key is set, so args_hash values come from a random key of this process and match "
    "no other process's (nor the next run's); set `signature_key:` in the config or "
    f"{OTELGUARD_SIGNATURE_KEY} to the same secret everywhere"
)
"""Said once per process, and only where hashes are compared across processes (``otelguard serve``,
telemetry that exports them): anywhere else a random key changes nothing the user sees."""
_note_claimed = False


def uses_random_key(configured: str | None) -> bool:
    """Whether ``resolve_signature_key(configured)`` is the process's random key."""
    return not (configured or os.environ.get(OTELGUARD_SIGNATURE_KEY))


def claim_random_key_note() -> bool:
    """True for the first caller in this process, which then says ``RANDOM_KEY_NOTE``; later callers
    stay quiet, so the note is said once whoever says it."""
    global _note_claimed
    with _random_key_lock:
        first, _note_claimed = not _note_claimed, True
    return first


def resolve_signature_key(configured: str | None) -> bytes:
    """The hash key: the config's, else ``OTELGUARD_SIGNATURE_KEY``, else one random key per process."""
    global _random_key
    secret = configured or os.environ.get(OTELGUARD_SIGNATURE_KEY)
    if secret:
        return key_bytes(secret)
    with _random_key_lock:
        if _random_key is None:
            _random_key = os.urandom(32)
        return _random_key


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")


def canonical_args(args: Any, ignored: frozenset[str] = frozenset()) -> bytes:
    """Canonical bytes of tool arguments: compact JSON, keys sorted at every level, UTF-8.

    ``None`` is ``{}``; a string is parsed as JSON (OpenAI sends arguments as a string) and, when it
    does not parse, used raw. A JSON string and the value it encodes give the same bytes, lone
    surrogates and integers past 64 bits included. ``ignored`` names top-level keys of a mapping
    left out (cosmetic arguments such as a free-text ``description``).
    """
    if args is None:
        return _EMPTY
    if isinstance(args, (str, bytes, bytearray, memoryview)):
        return _canonical_text(args, ignored)
    return _canonical_value(args, ignored)


def _canonical_value(value: Any, ignored: frozenset[str]) -> bytes:
    if ignored and isinstance(value, Mapping):
        value = _without_top_level(value, ignored)
    try:
        return orjson.dumps(value, option=_SORT)
    except (TypeError, orjson.JSONEncodeError):
        return _canonical_slow(value)


def _canonical_text(text: str | bytes | bytearray | memoryview, ignored: frozenset[str]) -> bytes:
    return _read_text(text, ignored)[0]


def _read_text(text: str | bytes | bytearray | memoryview, ignored: frozenset[str]) -> tuple[bytes, Any]:
    """JSON-string arguments read once: their canonical bytes and the value they encode (``None``
    when they are not JSON)."""
    try:
        value = orjson.loads(text)
    except (orjson.JSONDecodeError, TypeError):
        # orjson refuses lone surrogates that json.dumps writes (escaped or raw): read them as it does
        value = _stdlib_loads(text)
        if value is _NOT_JSON:
            return (_utf8(text) if isinstance(text, str) else bytes(text)), None
        return (_EMPTY if value is None else _canonical_value(value, ignored)), value
    canonical = _EMPTY if value is None else _canonical_value(value, ignored)
    if _has_exponent(canonical):
        # orjson reads an integer past 64 bits as a float (printed with an exponent, like every
        # float of that size): read the text again exactly, as the mapping it encodes would hash.
        exact = _stdlib_loads(text)
        if exact is not _NOT_JSON and exact is not None:
            return _canonical_value(exact, ignored), exact
    return canonical, value


_NOT_JSON: Final = object()
_EXPONENT: Final = b"e+"
_DIGITS: Final = frozenset(b"0123456789")


def _has_exponent(canonical: bytes) -> bool:
    """Whether a number with a positive exponent may be in the bytes (a string value holding, say,
    ``"3e+4"`` only costs a second parse)."""
    at = canonical.find(_EXPONENT)
    while at > 0:
        if canonical[at - 1] in _DIGITS:
            return True
        at = canonical.find(_EXPONENT, at + 2)
    return False


def _stdlib_loads(text: str | bytes | bytearray | memoryview) -> Any:
    try:
        return json.loads(bytes(text) if isinstance(text, memoryview) else text)
    except (ValueError, TypeError, RecursionError):
        return _NOT_JSON


def _without_top_level(mapping: Mapping[Any, Any], ignored: frozenset[str]) -> Mapping[Any, Any]:
    try:
        if ignored.isdisjoint(mapping):
            return mapping
        return {key: value for key, value in mapping.items() if key not in ignored}
    except Exception:  # a hostile mapping: hash it whole rather than fail the call
        return mapping


_MAX_CONTAINERS: Final = 100_000
_MAX_SET_DEPTH: Final = 16
_TRUNCATED: Final = '"<truncated>"'
_CYCLE: Final = '"<cycle>"'


def _object_parts(item: Mapping[Any, Any]) -> list[Any]:
    """A mapping as ``_canonical_slow``'s stack items: literals around its values, keys sorted."""
    # Keys that stringify alike (1 and "1") are ordered by type, never by insertion.
    pairs = [(_key_text(k), type(k).__name__, v) for k, v in _safe_items(item)]
    pairs.sort(key=lambda entry: (entry[0], entry[1]))
    parts: list[Any] = [_Literal("{")]
    for i, (key, _, val) in enumerate(pairs):
        if i:
            parts.append(_Literal(","))
        parts.append(_Literal(_json_string(key) + ":"))
        parts.append(val)
    parts.append(_Literal("}", id(item)))
    return parts


def _array_parts(item: list[Any] | tuple[Any, ...]) -> list[Any]:
    """A list or tuple as ``_canonical_slow``'s stack items: literals around its elements."""
    parts: list[Any] = [_Literal("[")]
    for i, element in enumerate(item):
        if i:
            parts.append(_Literal(","))
        parts.append(element)
    parts.append(_Literal("]", id(item)))
    return parts


def _canonical_slow(value: Any, budget: list[int] | None = None, sets: int = 0) -> bytes:
    """Iterative canonical JSON for what orjson rejects. Never raises, always ends: a container
    inside itself becomes ``"<cycle>"``; past ``_MAX_CONTAINERS`` containers the rest is
    ``"<truncated>"``. Only a set's elements are encoded by a call of their own (to sort them), and
    so sets inside ``_MAX_SET_DEPTH`` sets are ``"<truncated>"``: ``sets`` counts those around
    ``value``."""
    if budget is None:
        budget = [_MAX_CONTAINERS]
    out: list[str] = []
    on_path: set[int] = set()  # containers being encoded: meeting one again is a cycle
    # The stack holds values to encode, or literals (already-encoded separators).
    stack: list[Any] = [value]
    encode_str = _json_string
    while stack:
        item = stack.pop()
        if isinstance(item, _Literal):
            out.append(item.text)
            if item.closes:
                on_path.discard(item.closes)
            continue
        if isinstance(item, (Mapping, list, tuple)):
            if id(item) in on_path:
                out.append(_CYCLE)
                continue
            if budget[0] > 0:
                on_path.add(id(item))
        if item is None or isinstance(item, (bool, str, int, float)):
            out.append(_scalar_json(item))
        elif isinstance(item, (Mapping, list, tuple, Set, frozenset)) and budget[0] <= 0:
            out.append(_TRUNCATED)
        elif isinstance(item, Mapping):
            budget[0] -= 1
            stack.extend(reversed(_object_parts(item)))
        elif isinstance(item, (list, tuple)):
            budget[0] -= 1
            stack.extend(reversed(_array_parts(item)))
        elif isinstance(item, (Set, frozenset)):
            budget[0] -= 1
            out.append(_set_json(item, budget, sets))
        elif isinstance(item, (bytes, bytearray, memoryview)):
            out.append(encode_str(repr(bytes(item))))
        else:
            out.append(encode_str(_safe_str(item)))
    return "".join(out).encode("utf-8", "surrogatepass")


def _set_json(item: Any, budget: list[int], sets: int) -> str:
    """A set as a sorted JSON array of its elements, each encoded by a call of its own; inside
    ``_MAX_SET_DEPTH`` sets, ``"<truncated>"``."""
    if sets >= _MAX_SET_DEPTH:
        return _TRUNCATED
    try:
        elements = sorted(_canonical_slow(e, budget, sets + 1) for e in _safe_iter(item))
    except RecursionError:  # called already deep in the host's own stack
        return _TRUNCATED
    return "[" + ",".join(e.decode("utf-8", "surrogatepass") for e in elements) + "]"


def _scalar_json(item: bool | str | int | float | None) -> str:
    if item is None:
        return "null"
    if item is True:
        return "true"
    if item is False:
        return "false"
    if isinstance(item, str):
        return _json_string(item)
    if isinstance(item, int):
        return int.__repr__(item) if abs(item) < 10**4000 else _json_string(f"<int {item.bit_length()} bits>")
    # orjson's own float text, so a value hashes alike whichever encoder it went through
    return orjson.dumps(float(item)).decode() if math.isfinite(item) else "null"


class _Literal:
    __slots__ = ("closes", "text")

    def __init__(self, text: str, closes: int = 0) -> None:
        self.text = text
        self.closes = closes


_ESCAPES: Final = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}


def _json_string(text: str) -> str:
    if text.isprintable() and '"' not in text and "\\" not in text:
        return f'"{text}"'
    chars = []
    for ch in text:
        if ch in _ESCAPES:
            chars.append(_ESCAPES[ch])
        elif ch < " ":
            chars.append(f"\\u{ord(ch):04x}")
        else:
            chars.append(ch)
    return '"' + "".join(chars) + '"'


_KEY_CONSTANTS: Final = {True: "true", False: "false", None: "null"}


def _key_text(key: Any) -> str:
    """A non-string key as ``json.dumps`` writes it, so the mapping and its JSON text hash alike."""
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, bool):
        return _KEY_CONSTANTS[key]
    if isinstance(key, (int, float)):
        try:
            return json.dumps(key)
        except ValueError:  # an int past the interpreter's digit limit
            return _safe_str(key)
    return _safe_str(key)


def _safe_str(value: Any) -> str:
    try:
        return str(value)
    except Exception:  # a hostile __str__ must not break the agent loop
        return f"<{type(value).__name__}>"


def _safe_items(mapping: Mapping[Any, Any]) -> list[tuple[Any, Any]]:
    try:
        return list(mapping.items())
    except Exception:
        return []


def _safe_iter(values: Any) -> list[Any]:
    try:
        return list(values)
    except Exception:
        return []


class ArgsHasher:
    """Keyed hash of canonical arguments → the 16-hex ``args_hash``. Hashes of one key correlate."""

    __slots__ = ("_keyed",)

    def __init__(self, key: bytes) -> None:
        # Copying a keyed state is cheaper than keying a new one per call.
        self._keyed = hashlib.blake2b(digest_size=8, key=key)

    def args_hash(self, args: Any, ignored: frozenset[str] = frozenset()) -> str:
        """``ignored``: top-level keys left out of the canonical arguments (the tool's cosmetic ones)."""
        if type(args) is dict and (not ignored or ignored.isdisjoint(args)):
            try:
                canonical = _dumps(args, None, _SORT)  # positional: no keyword parsing, on every call
            except (TypeError, orjson.JSONEncodeError):
                canonical = _canonical_slow(args)
        else:
            canonical = canonical_args(args, ignored)
        h = self._keyed.copy()
        h.update(canonical)
        return h.hexdigest()

    def text_hash(
        self, text: str | bytes | bytearray | memoryview, ignored: frozenset[str]
    ) -> tuple[str, Any]:
        """``args_hash`` of JSON-string arguments, and the value they encode (``None`` when they are
        not JSON), from one parse: the guard reads them once per call."""
        canonical, value = _read_text(text, ignored)
        h = self._keyed.copy()
        h.update(canonical)
        return h.hexdigest(), value


class ResultFingerprinter:
    """Fingerprints of tool results. They never leave the process, so a fast unkeyed hash is fine.

    JSON results compare by content with volatile keys dropped at any depth; other results as text.
    """

    __slots__ = ("_volatile",)

    def __init__(self, volatile_keys: tuple[str, ...]) -> None:
        self._volatile = frozenset(volatile_keys)

    @staticmethod
    def raw_digest(raw: bytes) -> int:
        digest: int = xxhash.xxh3_128_intdigest(raw)
        return digest

    def content(self, result: Any) -> int:
        """The content fingerprint of any result."""
        if isinstance(result, str):
            raw = _utf8(result)
        elif isinstance(result, (bytes, bytearray, memoryview)):
            raw = bytes(result)
        else:
            return self.structured(result)
        digest = self.raw_digest(raw)
        if raw.lstrip()[:1] in (b"{", b"["):
            return self.json_text(raw, digest)
        return digest

    def json_text(self, raw: bytes, raw_digest: int) -> int:
        """Content fingerprint of JSON text; text that does not parse compares by its raw bytes."""
        try:
            parsed = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return raw_digest
        if self._volatile and (type(parsed) is dict or type(parsed) is list):
            _prune(parsed, self._volatile)  # our own freshly parsed copy: prune in place
        try:
            return self.raw_digest(orjson.dumps(parsed, option=_SORT))
        except orjson.JSONEncodeError:
            return self.raw_digest(_canonical_slow(parsed))

    def structured(self, value: Any) -> int:
        """Content fingerprint of a host's JSON-like value, read through a copy (the value is never
        changed) without the volatile keys and with tuples as lists: orjson encodes a tuple inside a
        tuple with no depth limit, and a chain of a few thousand overruns its stack (the process
        aborts), where lists and dicts stop at its limit and go to the iterative encoder."""
        if isinstance(value, (dict, list, tuple)):
            value = _without_keys(value, self._volatile)
        return self.raw_digest(canonical_args(value) if value is not None else b"null")


def _prune(value: Any, drop: frozenset[str]) -> None:
    """Delete the keys in ``drop`` from a parsed JSON value, in place, at any depth. Iterative: the
    parser allows a depth the interpreter's recursion does not."""
    stack = [value]
    while stack:
        node = stack.pop()
        if type(node) is dict:
            for key in drop.intersection(node):
                del node[key]
            children: Any = node.values()
        else:
            children = node
        stack.extend(child for child in children if type(child) is dict or type(child) is list)


def _without_keys(value: Any, drop: frozenset[str]) -> Any:
    """A copy of a JSON-like value without the keys in ``drop``, at any depth, its tuples made
    lists (encoded alike). Iterative."""
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(value, root, 0)]
    seen: set[int] = set()
    while stack:
        node, parent, slot = stack.pop()
        if type(node) is tuple and not node:  # one shared object: never "seen" twice
            parent[slot] = []
            continue
        if isinstance(node, (dict, list, tuple)):
            if id(node) in seen:  # shared or self-referencing: a fixed marker keeps this finite
                parent[slot] = "<seen>"
                continue
            seen.add(id(node))
        if isinstance(node, dict):
            copy: dict[Any, Any] = {}
            parent[slot] = copy
            for key, child in node.items():
                if key not in drop:
                    copy[key] = None
                    stack.append((child, copy, key))
        elif isinstance(node, (list, tuple)):
            items: list[Any] = [None] * len(node)
            parent[slot] = items
            for i, child in enumerate(node):
                stack.append((child, items, i))
        else:
            parent[slot] = node
    return root[0]


MAX_NAME_CHARS: Final = 256
_NAME_PREFIX_CHARS: Final = 200


def name_of(value: object) -> str:
    """A tool name as the guard keeps it, and as its spans and metric labels export it: the text of
    the value, bounded by ``bounded_name``. The guard applies it once, where a call enters it."""
    return bounded_name(value if type(value) is str else str(value))


def bounded_name(name: str) -> str:
    """``name``, or beyond ``MAX_NAME_CHARS`` a prefix and a digest of the whole: tool names and call
    ids are kept per signature and per pending call, so their length must not set the guard's memory."""
    if len(name) <= MAX_NAME_CHARS:
        return name
    digest = hashlib.blake2b(name.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
    return f"{name[:_NAME_PREFIX_CHARS]}…{digest}"
