"""Stagnation: a shell command that keeps returning what it already returned.

An agent stuck on a task reruns the same check (``python reproduce.py``, the tests) after each edit
and gets the same failure back in other words; or it lists the same directory again and again. No
exact rule sees it when the output differs in a timestamp, an address or a line number, or when an
edit comes between two runs. Here each run of a shell command from its second on is compared with
the results that command gave earlier in the turn: first by the raw digest the guard already made
of the result (the very same output: nothing more to do), else by its normalised text (ANSI codes,
hex addresses and ids, temporary paths, dates and free-standing numbers with their units out,
whitespace collapsed) and a bottom-k sketch of its word shingles (an estimate of their Jaccard
similarity). ``StagnationMemory.record`` says which runs count: a check failing the same way across
fix attempts, and identical calls returning the very same output back to back. A result that
shrinks (fewer errors or failing tests printed, a shorter output) is progress, as a new one is.

Cheap when nothing repeats: a command's first run only leaves its raw digest in its signature's
state; only a result new for the command is normalised and sketched, by C-level string, map and set
operations. Bounded and private: per turn at most ``_CHECKS`` commands (fewer for a guard tracking
fewer signatures), each keeping its last ``_KEPT`` results as a raw digest and a sketch of
``_SKETCH`` 64-bit shingle digests (no text), digests that never leave the process; only the count
and the code leave it, in the decision.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from heapq import nsmallest
from itertools import islice
from typing import Any, Final

import xxhash

from otelguard.core.bounded_map import BoundedMap
from otelguard.core.decisions import Signature

__all__ = [
    "ResultSketch",
    "ShellCheck",
    "StagnationMemory",
    "measure",
    "near",
    "normalised",
    "shrank",
    "sketch",
]

_CHECKS: Final = 256  # commands tracked per turn
_KEPT: Final = 8  # results kept per command
_SKETCH: Final = 16  # shingle hashes per result
_NEAR: Final = 0.8  # estimated Jaccard similarity from which two results are the same
_HEAD: Final = 2048  # characters read from each end of a long result: a traceback ends at the bottom
_NODES: Final = 4096  # keys, values and items read of a structured result

# Each of the first three runs only when the text holds its first characters (a substring test costs
# next to nothing; a regular expression tried at every position of a 4 KB result costs more than the
# rest of the call). The others start at a literal, a capital or a digit, so the engine skips to
# those in C.
_ANSI: Final = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")
_HEX: Final = re.compile(rb"0[xX][0-9a-fA-F]+")
_TEMP: Final = re.compile(rb"(?:/tmp|/var/folders|/private/var)/\S+")
# Hex ids (a UUID, a commit, a container, a request id) whether they start with a letter or a digit:
# found in a copy of the text where every hex digit is one byte, _H (a run of eight of them is a plain
# substring search), and taken out of the text where they stand alone (not inside a name)
_H: Final = 0x01
_HEX_DIGITS: Final = b"0123456789abcdefABCDEF"
_AS_H: Final = bytes.maketrans(_HEX_DIGITS + bytes([_H]), bytes([_H]) * len(_HEX_DIGITS) + b"\x02")
_ID: Final = re.compile(rb"\x01\x01\x01\x01\x01\x01\x01\x01(?:-\x01{4}-\x01{4}-\x01{4}-\x01{12}|\x01*)")
_NAME_BYTES: Final = frozenset(b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
# A month's or a weekday's name in a date, before a number or a month (Dec  7, Mon, 07 Dec, Monday
# Dec 7th); a month after its day goes with the day's number (7 Dec 2026, 07-Dec-2026). One flat
# alternation of names: the engine skips to their capitals in C
_MONTHS: Final = (
    rb"Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|Sep(?:t(?:ember)?)?"
    rb"|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?|JAN|FEB|MAR|APR|MAY|JUN|JUL|AUG|SEP|OCT|NOV|DEC"
)
_DAYS: Final = (
    rb"Mon(?:day)?|Tue(?:s(?:day)?)?|Wed(?:nesday)?|Thu(?:r(?:s(?:day)?)?)?|Fri(?:day)?|Sat(?:urday)?"
    rb"|Sun(?:day)?|MON|TUE|WED|THU|FRI|SAT|SUN"
)
_DATE_NAME: Final = re.compile(
    rb"(?:" + _MONTHS + rb"|" + _DAYS + rb")\.?,?(?=[\s/-]+\d|\s+(?:" + _MONTHS + rb")(?![a-z]))"
)
# A number, not one inside a name (test_3, py3) except after a timestamp's T, with what makes it one
# value: a duration's units (1m5.2s, 250ms, 3 seconds), a size's (1.5 MB, 512KiB, 100 bytes), an
# ordinal's (7th), or its hex digits and dots and its parts joined by : , / - (pids, counters, line
# numbers, versions, ids starting with a digit, 00:01:05 PM, 1,234, 2026-12-07, 127.0.0.1:8080)
_NUMBER: Final = re.compile(
    rb"\d(?<![A-SU-Za-z_0-9]\d)[0-9.]*(?:,\d\d\d)*(?:(?=[\sA-Za-z\xc2\xce-])(?:"  # a unit, or
    rb"(?:ns|us|\xc2\xb5s|\xce\xbcs|ms|mins?|secs?|hrs?|[hmsd])"
    rb"(?:\d[0-9.]*(?:ns|us|\xc2\xb5s|\xce\xbcs|ms|[hms]))*(?![A-Za-z])"
    rb"|(?:\s?(?:[KMGTPEkmgtpe]i?[Bb]|B|bytes?|bits?)|[KMGTPE]i?)(?![A-Za-z])"
    rb"|\s(?:(?:milli|micro|nano)?seconds?|secs?|minutes?|mins?|hours?|hrs?|days?|weeks?|[mun]s)(?![A-Za-z])"
    rb"|(?:st|nd|rd|th)?[\s/-](?:" + _MONTHS + rb")\.?(?![A-Za-z])"  # 7 Dec, 07-Dec-2026, 07/Dec/2026
    rb"|(?:st|nd|rd|th)(?![A-Za-z]))"
    rb"|[0-9a-fA-F.]*(?:[:/-]\d[0-9a-fA-F.,]*)*"
    rb")(?:\s?(?:AM|PM|am|pm)(?![A-Za-z]))?"  # after any of them: a clock's half, or a word it took
)

_hash64: Final = xxhash.xxh3_64_intdigest
_join: Final = b" ".join
# Of a result's _FILTERED different shingles or more, an eighth are below _LOW: the _SKETCH smallest
# are among those but once in over a million results (counted in distinct shingles: a long output
# repeating a few lines has few)
_FILTERED: Final = 512
_LOW: Final = 1 << 61

ResultSketch = tuple[int, tuple[int, ...]]
"""A result as compared here: the digest of its normalised text and its shingle sketch."""


def _text(result: Any) -> str:
    if isinstance(result, str):
        return _ends(result)
    if isinstance(result, (bytes, bytearray, memoryview)):
        return _ends(bytes(result).decode("utf-8", "replace"))
    return _ends(_structure_text(result))


def _ends(text: str) -> str:
    """A long text as its first and last ``_HEAD`` characters."""
    return text[:_HEAD] + " " + text[-_HEAD:] if len(text) > 2 * _HEAD else text


def _structure_text(result: Any) -> str:
    """A host's structured result (a mapping of stdout and stderr, a list of blocks): its keys and
    values, one a line, keys in order, read with a stack. Bounded whatever it holds: at most
    ``_NODES`` keys, values and items are read, no text past what ``_text`` keeps, and nothing
    recurses (a result nested thousands deep, or holding itself, is read as far as the bound goes).
    What cannot be read becomes its type's name."""
    parts: list[str] = []
    stack: list[Any] = [result]
    room = _NODES  # items that may still be put on the stack
    size = 0
    while stack and size <= 2 * _HEAD:
        item = stack.pop()
        if isinstance(item, Mapping):
            pairs = _first(_items(item), room)
            pairs.sort(key=_key_order)
            room -= 2 * len(pairs)
            for key, value in reversed(pairs):
                stack.append(value)
                stack.append(key)
        elif isinstance(item, (list, tuple, set, frozenset)):
            values = _first(item, room)
            if isinstance(item, (set, frozenset)):
                values.sort(key=_order)
            room -= len(values)
            stack.extend(reversed(values))
        else:
            text = _ends(_scalar_text(item))
            parts.append(text)
            size += len(text) + 1
    return "\n".join(parts)


def _items(mapping: Mapping[Any, Any]) -> Any:
    try:
        return mapping.items()
    except Exception:  # a hostile mapping: its contents are not read
        return ()


def _first(values: Any, room: int) -> list[Any]:
    try:
        return list(islice(values, max(0, room)))
    except Exception:  # a hostile container: its contents are not read
        return []


def _order(value: Any) -> str:
    """A set's order: strings and numbers by their text, anything else by its type's name (never
    its text: a tuple's text is made by recursion)."""
    if isinstance(value, str):
        return value
    if value is None or isinstance(value, (int, float)):
        return _scalar_text(value)
    return type(value).__name__


def _key_order(pair: tuple[Any, Any]) -> str:
    return _order(pair[0])


def _scalar_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    if value is None or isinstance(value, (bool, float)):
        return str(value)
    if isinstance(value, int):
        return str(value) if value.bit_length() < 256 else "<int>"
    try:
        text = str(value)
    except Exception:  # a hostile __str__ (one that raises, or recurses) must not break the call
        return f"<{type(value).__name__}>"
    return text if type(text) is str else f"<{type(value).__name__}>"


def _words(result: Any) -> list[bytes]:
    """The result's UTF-8 words with its volatile parts out."""
    data = _text(result).encode("utf-8", "surrogatepass")
    if b"\x1b" in data:
        data = _ANSI.sub(b" ", data)
    if b"0x" in data or b"0X" in data:
        data = _HEX.sub(b" ", data)
    if b"/tmp/" in data or b"/var/" in data:
        data = _TEMP.sub(b" ", data)
    data = _without_ids(data)
    data = _DATE_NAME.sub(b" ", data)
    return _NUMBER.sub(b"", data).split()


def _without_ids(data: bytes) -> bytes:
    """The text without its hex ids of eight hex digits or more, a letter among them (UUIDs whole),
    that stand alone."""
    marked = data.translate(_AS_H)
    if _ID.search(marked) is None:
        return data
    kept: list[bytes] = []
    start = 0
    names = _NAME_BYTES
    for found in _ID.finditer(marked):
        begin, end = found.span()
        if (begin and data[begin - 1] in names) or (end < len(data) and data[end] in names):
            continue  # inside a name: a word of its own
        if data[begin:end].replace(b"-", b"").isdigit():
            continue  # a number, with its unit if it has one: the numbers' to take out
        kept.append(data[start:begin])
        start = end
    kept.append(data[start:])
    return b" ".join(kept)


def normalised(result: Any) -> str:
    """The result's text with its volatile parts out and its whitespace collapsed."""
    return b" ".join(_words(result)).decode("utf-8", "surrogatepass")


def sketch(result: Any) -> ResultSketch:
    """The digest of the normalised result and the ``_SKETCH`` smallest digests of its three-word
    shingles, built by C-level maps, filters and sets (no Python loop over the words)."""
    words = _words(result)
    digest = _hash64(b" ".join(words))
    if len(words) <= 3:
        return digest, (digest,)
    shingles = set(map(_hash64, map(_join, zip(words, words[1:], words[2:], strict=False))))
    hashes: Iterable[int] = shingles
    if len(shingles) >= _FILTERED:  # the smallest are below an eighth of the range: skip the rest in C
        hashes = filter(_LOW.__gt__, hashes)
    return digest, tuple(sorted(nsmallest(_SKETCH, hashes)))


def _near(a: ResultSketch, b: ResultSketch) -> bool:
    if a[0] == b[0]:
        return True
    small_a, small_b = a[1], b[1]
    union = nsmallest(_SKETCH, set(small_a) | set(small_b))
    shared = set(small_a) & set(small_b)
    return sum(1 for h in union if h in shared) >= _NEAR * len(union)


near: Final = _near
"""Whether two sketches are of one text in other words (the model's replies are compared so too)."""


# A count of what is wrong in a check's output: a number before a word for errors, failures,
# warnings or problems (30 errors, 3 failed, 2 tests failing), or after one (failures=2, errors: 1)
_COUNT_WORDS: Final = r"(?:errors?|fail(?:ed|ures?|ing|s)?|warnings?|problems?|issues?|violations?)"
_COUNT: Final = re.compile(
    r"(\d{1,9})[ \t]+(?:[a-z-]+[ \t]+)?"
    + _COUNT_WORDS
    + r"(?![a-z])|(?<![a-z])"
    + _COUNT_WORDS
    + r"[ \t]*[=:][ \t]*(\d{1,9})"
)
_COUNT_HINTS: Final = ("error", "fail", "warn", "problem", "issue", "violation")
_SHRUNK: Final = 8  # a result shorter by an eighth or more than the shortest since a new one...
_SHRUNK_CHARS: Final = 64  # ...and by this many characters has shrunk (a shorter traceback)


def measure(result: Any) -> tuple[int, int]:
    """What a result says is wrong, as ``(count, size)``: the sum of the counts of errors, failures,
    warnings and problems it prints (-1: none printed), and its length in characters."""
    text = _text(result)
    size = len(result) if isinstance(result, (str, bytes, bytearray, memoryview)) else len(text)
    lowered = text.lower()
    if not any(hint in lowered for hint in _COUNT_HINTS):
        return -1, size
    found = _COUNT.findall(lowered)
    if not found:
        return -1, size
    return sum(int(before or after) for before, after in found), size


def shrank(count: int, size: int, low_count: int, low_size: int) -> bool:
    """Whether a result measured ``(count, size)`` brings less of what is wrong than the results
    since the command's last new one: a count below the least they printed (fewer failing tests,
    fewer errors), or the output shorter than the last new one by an eighth and ``_SHRUNK_CHARS``
    characters (a traceback losing a frame at each edit shrinks by that every few edits)."""
    if 0 <= count < low_count:
        return True
    return low_size - size >= max(_SHRUNK_CHARS, low_size // _SHRUNK)


Resume = list[int]
"""What a new result reset: stale, rejects, unchanged, unchanged_rejects, and how many raw digests
and sketches the command has kept since (that result's own included)."""


class ShellCheck:
    __slots__ = (
        "edits",
        "keys",
        "low_count",
        "low_size",
        "rejects",
        "resume",
        "sketches",
        "stale",
        "unchanged",
        "unchanged_rejects",
    )

    def __init__(self, first: int | None, edits: int) -> None:
        self.keys: tuple[int, ...] = () if first is None else (first,)  # raw digests, newest last
        self.sketches: tuple[ResultSketch, ...] = ()  # of the results that were new by raw digest
        self.stale = 0  # runs returning a result the command already returned, since a new one
        self.rejects = 0  # rejects given since then
        self.edits = edits  # the turn's edit count at the command's previous run
        # successful runs returning what the command already returned with an edit since its
        # previous run (the edits are not changing the check's result), since a new result
        self.unchanged = 0
        self.unchanged_rejects = 0  # rejects given for them since then
        # the least count of what was wrong in the results since a new one, and that new one's
        # size (see ``measure``): a result that shrinks below them is progress
        self.low_count = -1
        self.low_size = 0
        # what the last new result reset, until the command's next repeat (see _resumed)
        self.resume: Resume | None = None


class StagnationMemory:
    """Per turn: the results each shell command returned, and how often it returned one again."""

    __slots__ = ("checks", "unchanged")

    def __init__(self, max_checks: int = _CHECKS) -> None:
        """``max_checks``: commands tracked, at most ``_CHECKS`` (a subagent tracking few signatures
        tracks as few commands, so a session's subagents stay within its budget)."""
        self.checks: BoundedMap[Signature, ShellCheck] = BoundedMap(max(1, min(_CHECKS, max_checks)))
        self.unchanged = 0  # the ``unchanged`` count of the command ``record`` last counted

    def record(
        self,
        sig: Signature,
        first: int | None,
        key: int | None,
        raw: Any,
        rerun: bool,
        ok: bool,
        first_edits: int = 0,
        edits: int = 0,
    ) -> int:
        """Count a run (the second or a later one) of the command ``sig`` that returned ``raw``, whose
        raw digest is ``key`` (``None``: none made); returns its stale count. ``first``: the raw
        digest of the command's first run; ``rerun``: the command's previous run was the call just
        before this one; ``ok``: the run succeeded.

        What counts: a failed run returning the very same output as an earlier run, or the same
        failure in other words with another call since the command's previous run (the check failing
        the same way across fix attempts); a successful run returning the very same output as the
        command's run just before it (a loop of identical calls). A result new for the command resets
        the count; any other run neither counts nor resets it: a check passing with the same output
        after an edit is not a failure repeated, and a rerun right after itself whose output moves
        only in its volatile parts (a build or a server being waited on) is not stuck by itself.

        Apart from that count, ``unchanged`` (left in ``self.unchanged``) counts the successful runs
        returning what the command already returned (the same output or in other words) with an
        edit (a ``write`` call: ``edits`` counts the turn's) since its previous run: a reproduction script that prints
        its error and exits 0, rerun after each fix attempt. A failure neither counts nor resets it
        (that is the count above); a result new for the command resets both.

        A result like one already returned but with less wrong in it (``shrank``) resets both as a
        new one does. After a new result (not a shrunk one), the command's next repeat of a result
        from before it, and not of the new one, takes the counts from before back (``_resumed``).
        ``first_edits``: the turn's edit count at the command's first run."""
        check = self.checks.get(sig)
        if check is None:
            check = self.checks.touch(sig, lambda: ShellCheck(first, first_edits))
        else:
            self.checks.move_to_end(sig)
        edited = check.edits != edits
        check.edits = edits
        if key is not None and key in check.keys:  # the very same output: no text to look at
            _same_output(check, key, rerun or not ok, ok and edited)
            self.unchanged = check.unchanged
            return check.stale
        result = sketch(raw)
        count, size = measure(raw)
        near = [_near(result, seen) for seen in check.sketches]
        if any(near) and not shrank(count, size, check.low_count, check.low_size):
            _like_output(check, near, count, not (rerun or ok), ok and edited and not rerun)
        else:  # new for the command, or less of what is wrong: progress
            _new_output(check, any(near), count, size)
        self.unchanged = check.unchanged
        _keep(check, key, result)
        return check.stale

    def stale(self, sig: Signature) -> ShellCheck | None:
        return self.checks.get(sig) if self.checks else None


def _same_output(check: ShellCheck, key: int, stale: bool, unchanged: bool) -> None:
    """A run returning the very same output as one the command returned: counted ``stale``, else
    ``unchanged`` (a success after an edit), else neither."""
    resume = check.resume
    if resume is not None:
        kept = check.keys
        since = len(kept) - min(len(kept), resume[4])
        _resumed(check, key in kept[:since] and key not in kept[since:])
    if stale:
        check.stale += 1
    elif unchanged:
        check.unchanged += 1


def _like_output(check: ShellCheck, near: list[bool], count: int, stale: bool, unchanged: bool) -> None:
    """A run returning what the command returned in other words (and not less wrong)."""
    resume = check.resume
    if resume is not None:  # the same as a result from before the last new one, not since?
        since = len(near) - min(len(near), resume[5])
        _resumed(check, any(near[:since]) and not any(near[since:]))
    if stale:
        check.stale += 1
    elif unchanged:
        check.unchanged += 1
    if count >= 0 and (check.low_count < 0 or count < check.low_count):
        check.low_count = count


def _new_output(check: ShellCheck, progress: bool, count: int, size: int) -> None:
    """A result new for the command, or ``progress``: less of what is wrong (no going back to the
    counts before then)."""
    check.resume = (
        None if progress else [check.stale, check.rejects, check.unchanged, check.unchanged_rejects, 0, 0]
    )
    check.stale = check.rejects = check.unchanged = check.unchanged_rejects = 0
    check.low_count, check.low_size = count, size


def _keep(check: ShellCheck, key: int | None, result: ResultSketch) -> None:
    """Keep the run's raw digest and sketch among the command's last ones."""
    resume = check.resume
    if key is not None:
        check.keys = (*check.keys[-(_KEPT - 1) :], key)
        if resume is not None:
            resume[4] += 1
    check.sketches = (*check.sketches[-(_KEPT - 1) :], result)
    if resume is not None:
        resume[5] += 1


def _resumed(check: ShellCheck, back: bool) -> None:
    """After a new result: the command returning what it returned before it (and not what it has
    returned since) takes its counts back: one different output between two runs of the same failure
    is not progress. Either way, the counts from before are given up."""
    resume = check.resume
    check.resume = None
    if back and resume is not None:
        check.stale, check.rejects, check.unchanged, check.unchanged_rejects = resume[:4]
