"""Times in transcripts and durations on the command line.

A transcript line's ``timestamp`` is read as seconds since the epoch: an ISO 8601 string (``Z``, an
offset, or none, which is read as UTC: OpenHands writes naive UTC times) or a number of seconds
(milliseconds when it is too large to be seconds). Anything else is no time at all: a replay does
not need times, so an odd one is not an input error. Durations are Prometheus's (``15s``, ``1m30s``).
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timezone
from typing import Any, Final

__all__ = ["format_duration", "iso_utc", "parse_duration", "parse_moment", "parse_time", "unix_text"]

_MILLISECONDS_FROM: Final = 1e11
"""A number this large is milliseconds: as seconds it would be past the year 5000."""
_EARLIEST: Final = 0.0
_LATEST: Final = 253402300799.0  # 9999-12-31T23:59:59Z
_MAX_TIME_TEXT: Final = 64

_UNITS: Final = {"y": 365 * 86400, "w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1, "ms": 0.001}
_DURATION: Final = re.compile(
    r"(?:(\d+)y)?(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?"
)
_ORDER: Final = ("y", "w", "d", "h", "m", "s", "ms")


def parse_time(value: Any) -> float | None:
    """Seconds since the epoch, or ``None`` when ``value`` is not a time."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        seconds = float(value) / 1000 if abs(value) >= _MILLISECONDS_FROM else float(value)
    elif isinstance(value, str) and 0 < len(value) <= _MAX_TIME_TEXT:
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=timezone.utc)
        seconds = parsed.timestamp()
    else:
        return None
    if not math.isfinite(seconds) or not _EARLIEST <= seconds <= _LATEST:
        return None
    return seconds


def parse_duration(text: str) -> float:
    """A Prometheus duration (``15s``, ``1m30s``, ``500ms``, ``2h``) in seconds; ``ValueError`` when it
    is not one or is zero."""
    match = _DURATION.fullmatch(text.strip()) if text else None
    if match is None or not any(match.groups()):
        raise ValueError(f"{text!r} is not a duration like 15s, 1m30s, 500ms or 2h")
    seconds = sum(int(n) * _UNITS[unit] for n, unit in zip(match.groups(), _ORDER, strict=True) if n)
    if seconds <= 0:
        raise ValueError(f"{text!r} is not a positive duration")
    return float(round(seconds, 3))


def parse_moment(text: str, now: float) -> float:
    """A moment on the command line: an ISO 8601 date or time (UTC unless it says otherwise), or a
    duration (``7d``, ``36h``) meaning that long before ``now``; ``ValueError`` when it is neither."""
    moment = parse_time(text.strip())
    if moment is not None:
        return moment
    try:
        return now - parse_duration(text)
    except ValueError:
        raise ValueError(
            f"{text!r} is neither a time like 2025-09-01T10:00:00Z nor a duration like 7d"
        ) from None


def format_duration(seconds: float) -> str:
    """``seconds`` as a Prometheus duration (whole milliseconds): 90 -> ``1m30s``."""
    millis = round(seconds * 1000)
    if millis <= 0:
        return "0s"
    parts = []
    for unit in _ORDER:
        size = round(_UNITS[unit] * 1000)
        if millis >= size:
            parts.append(f"{millis // size}{unit}")
            millis %= size
    return "".join(parts)


def iso_utc(seconds: float) -> str:
    """``2025-09-01T10:00:00Z`` (milliseconds shown only when there are some)."""
    moment = datetime.fromtimestamp(seconds, timezone.utc)
    text = moment.isoformat(timespec="milliseconds" if moment.microsecond else "seconds")
    return text.replace("+00:00", "Z")


def unix_text(seconds: float) -> str:
    """Seconds since the epoch as OpenMetrics writes them: whole seconds plainly, else milliseconds."""
    millis = round(seconds * 1000)
    whole, rest = divmod(millis, 1000)
    return str(whole) if not rest else f"{whole}.{rest:03d}".rstrip("0")
