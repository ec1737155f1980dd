"""What the ``reworded_query`` detector (``reworded.py``) knows of searches: a search call's query
read as the digests of its words (``query``, ``words``), its result as whether it found nothing and
a sketch of it (``searched``, ``nothing_found``), and a turn's memory of each search tool's streak of
searches that brought nothing new (``SearchMemory``).

Bounded and private: per turn at most ``_TOOLS`` tools, each keeping 64-bit digests only: of the
streak's query words (``_WORDS``), its queries and the titles its results quoted (``_TITLES``), and a
sketch of its last ``_RESULTS`` results. No query or result text is kept.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterator, Mapping
from itertools import islice
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import orjson
import xxhash

from otelguard.core.bounded_map import BoundedMap

if TYPE_CHECKING:
    from otelguard.core.decisions import Signature

__all__ = [
    "QUERY_ARGS",
    "Query",
    "SearchMemory",
    "Searched",
    "nothing_found",
    "query_of",
    "searched",
    "sent_query",
    "sketch",
    "words",
]

_TOOLS: Final = 32  # search tools tracked per turn
_WORDS: Final = 256  # word digests kept per streak
_TITLES: Final = 128  # digests of queries sent and of titles quoted, per streak
_RESULTS: Final = 16  # result sketches kept per tool
_QUERIES: Final = 16  # queries' word sets kept per streak
_READ: Final = 4096  # characters of a query or a result read
_SHORT: Final = 240  # a result this short saying nothing was found says only that
_NEAR: Final = 0.8  # estimated Jaccard similarity from which two results are the same
_SKETCH: Final = 16  # shingle digests per result
_SKETCHED: Final = 1024  # characters of a result read for its sketch and for "nothing found"
_NODES: Final = 512  # keys, values and items read of a structured result

ResultSketch = tuple[int, tuple[int, ...]]
"""A result as compared: the digest of its words and the smallest digests of its three-word shingles."""
_NEVER: Final = 1 << 62  # a streak no turn reaches: rewordings in the strict sense only

QUERY_ARGS: Final = (
    "query", "q", "search_query", "search_term", "search", "keyword", "keywords", "entity", "term",
    "terms", "topic", "question", "text",
)  # fmt: skip
"""The arguments that hold a search tool's query, in the order they are looked for; without one of
them, the call's one string argument."""

# A small English stop list: the words that change a query's wording, not what it asks for
_STOP: Final = frozenset((
    "a", "an", "and", "are", "as", "at", "be", "been", "by", "did", "do", "does", "for", "from", "how",
    "in", "into", "is", "it", "its", "of", "on", "or", "that", "the", "these", "this", "those", "to",
    "was", "were", "what", "when", "where", "which", "who", "whom", "whose", "why", "with", "about",
))  # fmt: skip
_WORD: Final = re.compile(r"[^\W_]+")
# ``_WORD`` on ASCII text: its letters and digits kept, every other byte a space (``_ascii_words``)
_ASCII_WORD_BYTES: Final = bytes(c if chr(c).isalnum() and c < 128 else 32 for c in range(256))
# "nothing found" in the wordings search tools use: at the start of a result, or anywhere in a short one
_NOTHING: Final = re.compile(
    r"no (?:search )?results?\b"
    r"|no (?:matches|match|matching|hits|documents|pages|entries|items|links|records)\b"
    r"|nothing (?:was )?(?:found|matched)"
    r"|(?:could ?n[o']?t|can ?n[o']?t|did ?n[o']?t|unable to|failed to) find"
    r"|\bnot found\b|\b(?:0|zero) (?:results|matches|hits)\b|did not match any|returned no\b|found no\b"
)
_RESULT_LISTS: Final = (
    "results", "items", "hits", "data", "web", "organic", "organic_results", "documents", "matches",
    "links", "pages", "entries", "records", "search_results", "content",
)  # fmt: skip
_QUOTED: Final = re.compile(r"'([^'\n]{1,200})'|\"([^\"\n]{1,200})\"")
_EDGES: Final = "\"'[]() \t\n"
_hash64: Final = xxhash.xxh3_64_intdigest
_DIGESTS: Final = 1 << 64  # how many values ``_hash64`` gives


def _digest(text: str) -> int:
    return _hash64(text.encode("utf-8", "surrogatepass"))


def _ascii_spaced(text: str) -> bytes | None:
    """ASCII ``text`` encoded with every byte ``_WORD`` does not match made a space, so that its
    ``split`` is ``_WORD.findall(text)`` (``None`` for any other text): a translation and a split,
    each one pass in C, where the pattern tests each character's Unicode category (on a search
    result's 4,096 characters, about ten times the instructions). ASCII letters and digits are the
    only ASCII characters it matches."""
    return text.encode("ascii").translate(_ASCII_WORD_BYTES) if text.isascii() else None


# -- reading a query -----------------------------------------------------------------------------


def _stem(word: str) -> str:
    """``word`` without its plural, verb or final ``e`` ending, repeated until none is left (so a stem
    is its own stem): "affiliated", "affiliates", "affiliate" are one word."""
    while True:
        stemmed = _stem_once(word)
        if stemmed == word:
            return word
        word = stemmed


def _stem_once(word: str) -> str:
    size = len(word)
    if size > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if size > 5 and word.endswith("ing"):
        return word[:-3]
    if size > 5 and word.endswith("ed"):
        return word[:-2]
    plural = size > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is"))
    return word[:-1] if plural or (size > 4 and word.endswith("e")) else word


def _fold(text: str) -> str:
    """``text`` case folded so that its upper and lower case fold alike (``casefold`` alone keeps a
    dotless ``ı`` apart from the ``i`` of its upper case ``I``)."""
    return text.upper().casefold()


def words(query: str) -> tuple[str, ...]:
    """The query's words as compared: case folded, punctuation and stop words out, each word stemmed,
    sorted, each once. Two queries with the same words ask the same thing."""
    folded = _fold(query[:_READ])
    spaced = _ascii_spaced(folded)
    read = _WORD.findall(folded) if spaced is None else spaced.decode("ascii").split()
    found = (_stem(word) for word in read if word not in _STOP)
    return tuple(sorted({word for word in found if word not in _STOP}))


def sent_query(query: str) -> str:
    """The query as the model sent it, case and spacing aside (a title taken up word for word)."""
    return " ".join(query[:_READ].casefold().split()).strip(_EDGES)


def query_of(args: Any) -> str | None:
    """The query of a search call's arguments (a mapping, or its JSON text): the first of
    ``QUERY_ARGS`` holding a string (a list of strings is joined), else its one string argument; a
    plain string that is not JSON is the query itself. ``None``: no query to read."""
    if isinstance(args, (str, bytes)):
        try:
            parsed = orjson.loads(args[: 16 * _READ])
        except orjson.JSONDecodeError:
            return args if isinstance(args, str) else None
        args = parsed
    if not isinstance(args, Mapping):
        return None
    try:
        for name in QUERY_ARGS:
            value = args.get(name)
            if isinstance(value, str):
                return value
            if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value[:64]):
                return " ".join(value[:64])
        strings = [value for value in list(args.values())[:64] if isinstance(value, str)]
    except Exception:  # a hostile mapping: no query read
        return None
    return strings[0] if len(strings) == 1 else None


class Query(NamedTuple):
    """A search call as ``before`` judges it: digests of its words and of its text."""

    sig: Signature
    words: frozenset[int]
    sent: int


def _digests(text: str) -> tuple[frozenset[int], int, str]:
    sent = sent_query(text)
    return frozenset(map(_digest, words(text))), _digest(sent), sent


def query(sig: Signature, args: Any) -> Query | None:
    """The search call ``sig`` with ``args`` as ``before`` judges it; ``None``: no query to read."""
    text = query_of(args)
    if text is None:
        return None
    digests = _digests(text)
    return Query(sig, digests[0], digests[1])


# -- reading a result ----------------------------------------------------------------------------


def _result_text(result: Any) -> str | None:
    """The first ``_READ`` characters of a text result; ``None`` for a structured one."""
    if isinstance(result, str):
        return result[:_READ]
    if isinstance(result, (bytes, bytearray, memoryview)):
        return bytes(result[:_READ]).decode("utf-8", "replace")
    return None


def _empty(result: Any, depth: int = 0) -> bool | None:
    """A structured result: whether its lists of results are all empty (``None``: it has none, or
    is not structured). Text blocks (``[{"type": "text", "text": ...}]``) are read as their text."""
    try:
        if isinstance(result, (list, tuple)):
            return _empty_blocks(result)
        if not isinstance(result, Mapping) or depth > 2:
            return None
        lists = [result[key] for key in _RESULT_LISTS if key in result]
        verdicts = [_empty_value(value, depth) for value in lists]
    except Exception:  # a hostile container: not read
        return None
    known = [verdict for verdict in verdicts if verdict is not None]
    return all(known) if known else None


def _empty_blocks(blocks: list[Any] | tuple[Any, ...]) -> bool | None:
    if not blocks:
        return True
    found = [block.get("text") for block in blocks[:8] if isinstance(block, Mapping)]
    texts: list[str] = [text for text in found if isinstance(text, str)]
    return _said_nothing(" ".join(texts)) if texts else None


def _empty_value(value: Any, depth: int) -> bool | None:
    """One list of results (or what stands in its place) of a structured result: whether it is empty."""
    if value is None:
        return True
    if isinstance(value, str):
        return _said_nothing(value)
    if isinstance(value, (list, tuple)):
        return _empty_blocks(value) is True
    return _empty(value, depth + 1)


def _said_nothing(text: str, query: str = "") -> bool:
    folded = " ".join(text[:_SKETCHED].casefold().split())
    if query:
        folded = folded.replace(query, " ").strip()
    if not folded or folded in ("[]", "{}", "null"):
        return True
    return _NOTHING.match(folded) is not None or (
        len(folded) <= _SHORT and _NOTHING.search(folded) is not None
    )


def nothing_found(result: Any, query: str = "") -> bool:
    """Whether a search's result says it found nothing: empty, an empty list of results, or a text
    saying so at its start ("No results", "Could not find [...]. Similar: [...]", "No matches
    found") or anywhere in a short one (the tool's echo of ``query``, given as ``sent_query``
    makes it, left out)."""
    text = _result_text(result)
    if text is None:
        return bool(_empty(result)) if result is not None else True
    stripped = text.lstrip()
    if stripped[:1] in ("{", "[") and len(text) < _READ:
        try:
            verdict = _empty(orjson.loads(text))
        except orjson.JSONDecodeError:
            verdict = None
        if verdict is not None:
            return verdict
    return _said_nothing(text, query)


def _titles(result: Any) -> frozenset[int]:
    """Digests of the titles a text result quotes (its suggestions), at most ``_TITLES``."""
    text = _result_text(result)
    if not text or ("'" not in text and '"' not in text):
        return frozenset()
    found = (sent_query(single or double) for single, double in _QUOTED.findall(text))
    return frozenset(_digest(title) for title, _ in zip(found, range(_TITLES), strict=False))


class Searched:
    """A search call that ran, as ``SearchMemory.record`` counts it (digests only): whether it found
    nothing, its result's sketch, its query's digest as sent; and, read only when the tool's streak
    needs them (``ToolSearches.reworded`` and ``extend``), the digests of its query's words and of
    the titles its result quoted. Most searches have no streak to join and end none: their words and
    titles are never read. It holds the query and the result until then: for the guard's
    ``after_call``, not longer."""

    __slots__ = ("_result", "_text", "_titles", "_words", "nothing", "sent", "sketch")

    def __init__(self, text: str, result: Any, sent: int, nothing: bool, sketch: ResultSketch | None) -> None:
        self._text, self._result = text, result
        self.sent, self.nothing, self.sketch = sent, nothing, sketch
        self._words: frozenset[int] | None = None
        self._titles: frozenset[int] | None = None

    @property
    def words(self) -> frozenset[int]:
        if self._words is None:
            self._words = frozenset(map(_digest, words(self._text)))
        return self._words

    @property
    def titles(self) -> frozenset[int]:
        if self._titles is None:
            self._titles = _titles(self._result)
        return self._titles


def searched(args: Any, result: Any) -> Searched | None:
    """A successful search call with ``args`` that returned ``result``, or ``None`` when its query
    cannot be read."""
    text = query_of(args)
    if text is None or result is None or (isinstance(result, (str, bytes)) and not result.strip()):
        return None  # no query; or no result to judge (a transcript that did not record it)
    sent = sent_query(text)
    nothing = nothing_found(result, sent)
    return Searched(text, result, _digest(sent), nothing, None if nothing else sketch(result))


def sketch(result: Any) -> ResultSketch:
    """The digest of the result's words (case folded, numbers kept: two pages differ by their
    addresses and ids) and the ``_SKETCH`` smallest digests of its three-word shingles."""
    text = _flat_text(result)[:_SKETCHED].casefold()
    # a search result has hundreds of shingles: each digested by C iterators, not a Python loop (a
    # word holds no surrogate, so its plain UTF-8 encoding is the one ``_digest`` hashes)
    spaced = _ascii_spaced(text)
    found = [word.encode() for word in _WORD.findall(text)] if spaced is None else spaced.split()
    digest = _hash64(b" ".join(found))
    if len(found) <= 3:
        return digest, (digest,)
    count = len(found) - 2
    if count > 4 * _SKETCH:
        # The smallest digests lie under a bound that about ``2 * _SKETCH`` of ``count`` uniform
        # digests fall under: only those are kept and sorted (sorting all of them, large integers,
        # cost as much as digesting them). Fewer under it, as in a text repeating itself: all sorted.
        bound = 2 * _SKETCH * _DIGESTS // count
        smallest = set(filter(bound.__gt__, _shingle_digests(found)))
        if len(smallest) >= _SKETCH:
            return digest, tuple(sorted(smallest)[:_SKETCH])
    return digest, tuple(sorted(set(_shingle_digests(found)))[:_SKETCH])


def _shingle_digests(found: list[bytes]) -> Iterator[int]:
    """The digest of each three-word shingle of ``found``, digested by C iterators."""
    return map(_hash64, map(b" ".join, zip(found, found[1:], found[2:], strict=False)))


def _flat_text(result: Any) -> str:
    """A result's text: a text result's first ``_READ`` characters; a structured one's scalars, in
    order, read with a stack and bounded (at most ``_NODES`` items, ``_READ`` characters)."""
    text = _result_text(result)
    if text is not None:
        return text
    parts: list[str] = []
    stack: list[Any] = [result]
    read = size = 0
    while stack and read < _NODES and size < _READ:
        item = stack.pop()
        read += 1
        try:
            if isinstance(item, Mapping):
                stack.extend(reversed(list(islice(item.values(), _NODES))))
            elif isinstance(item, (list, tuple)):
                stack.extend(reversed(item[:_NODES]))
            elif isinstance(item, (str, int, float)):
                parts.append(str(item)[:_READ])
                size += len(parts[-1])
        except Exception:  # a hostile container: not read
            continue
    return " ".join(parts)


def _alike(a: ResultSketch, b: ResultSketch) -> bool:
    if a[0] == b[0]:
        return True
    first = set(a[1])
    common = first.intersection(b[1])
    if len(common) < _NEAR * min(_SKETCH, len(first.union(b[1]))):
        return False  # too few in common wherever the union's smallest lie: no sort needed
    union = sorted(first.union(b[1]))[:_SKETCH]
    return len(common.intersection(union)) >= _NEAR * len(union)


# -- the memory of a turn ------------------------------------------------------------------------


class ToolSearches:
    """One search tool's turn: its streak of searches that brought nothing new, their words and
    queries, the titles their results quoted, the rejects given during it, its last results."""

    __slots__ = ("asked", "empty", "rejects", "results", "sent", "streak", "titles", "words")

    def __init__(self) -> None:
        self.streak = 0
        self.rejects = 0
        self.words: set[int] = set()
        self.asked: list[frozenset[int]] = []  # each query's words, the first ``_QUERIES``
        self.sent: set[int] = set()
        self.titles: set[int] = set()
        self.empty: set[int] = set()  # of ``sent``, the queries that found nothing
        self.results: deque[ResultSketch] = deque(maxlen=_RESULTS)

    def seen(self, result: ResultSketch) -> bool:
        return any(_alike(result, earlier) for earlier in self.results)

    def extend(self, call: Searched) -> None:
        """A search that brought nothing new: the streak goes on, with what it asked (past the bounds,
        new digests are not kept: a query with words not kept is not a rewording, never the reverse)."""
        self.streak += 1
        _add(self.words, call.words, _WORDS)
        if len(self.asked) < _QUERIES and call.words not in self.asked:
            self.asked.append(call.words)
        _add(self.sent, (call.sent,), _TITLES)
        _add(self.titles, call.titles, _TITLES)
        if call.nothing:
            _add(self.empty, (call.sent,), _TITLES)

    def end(self) -> None:
        self.streak = self.rejects = 0
        self.words.clear()
        self.asked.clear()
        self.sent.clear()
        self.titles.clear()
        self.empty.clear()

    def reworded(self, asked: Query | Searched, wider_at: int) -> bool:
        """Whether ``asked`` rewords the streak's queries (see ``reworded.py``'s docstring): its words
        all among one earlier query's; from a streak of ``wider_at``, all among the streak's; past it,
        one shared with them is enough."""
        if not self.streak or (asked.sent in self.titles and asked.sent not in self.sent):
            return False  # no streak; or a title a result quoted, taken up
        if any(asked.words <= earlier for earlier in self.asked):
            return True
        if self.streak < wider_at:
            return False  # joining two queries' words asks for what neither asked: a new search
        return asked.words <= self.words or (
            self.streak > wider_at and not asked.words.isdisjoint(self.words)
        )


def _add(kept: set[int], new: Any, bound: int) -> None:
    for digest in new:
        if len(kept) >= bound:
            return
        kept.add(digest)


class SearchMemory:
    """A turn's search tools, at most ``_TOOLS`` (least recently used dropped first)."""

    __slots__ = ("last", "tools")

    def __init__(self) -> None:
        self.tools: BoundedMap[str, ToolSearches] = BoundedMap(_TOOLS)
        self.last: tuple[Signature | None, int] = (None, 0)  # the call recorded last, its streak

    def record(self, sig: Signature, call: Searched) -> int:
        """Count the search ``sig`` that ran: the streak of its tool it continues when it brought
        nothing new and reworded the streak's queries (what ``after`` warns); else 0."""
        tool = self.tools.touch(sig.tool_name, ToolSearches)
        reworded = tool.reworded(call, _NEVER)
        if call.nothing or (call.sketch is not None and tool.seen(call.sketch)):
            tool.extend(call)
        else:
            tool.end()
            reworded = False
        if call.sketch is not None:
            tool.results.append(call.sketch)
        self.last = (sig, tool.streak if reworded else 0)
        return self.last[1]
