"""Session caps shared through Redis (or Valkey): one atomic script per capped call (docs/shared-state.md).

A session is one hash, ``<key_prefix>:{<digest>}`` (the braces are a Redis Cluster hash tag), with
one field per session cap key; the digest is the session id keyed with the signature key, so the
raw id is never sent. A charge is one ``EVAL`` that checks every cap of the call and charges all or
none of them (a batch of three spawns with two left is refused whole); a refund is one ``EVAL`` that
takes the amount back, floored at 0. Both set the hash's TTL back to ``ttl_seconds``.

Redis is never allowed to hold up or break a tool call: each command is bounded by ``timeout_ms``
(connect and read, no client retries), a failure falls back to the process's own counts (kept all
along, in step with what Redis answered), and after a failure the process leaves Redis alone for a
back-off (0.1 s, doubling, at most 5 s) in which one call at a time probes it. Charges made during an
outage are not written back: a session can overshoot by what was charged while Redis was away.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from otelguard.caps import CapRefusal, LocalSessionCaps
from otelguard.config import StateSettings, mask_url
from otelguard.observers import StateOp, StateReport
from otelguard.session_keys import session_digest

__all__ = ["MAX_BACKOFF_SECONDS", "RedisLink", "RedisSessionCaps", "link_for", "open_session_caps"]

logger = logging.getLogger("otelguard")

FIRST_BACKOFF_SECONDS: Final = 0.1
MAX_BACKOFF_SECONDS: Final = 5.0
_MAX_CONNECTIONS: Final = 64
_MAX_LINKS: Final = 8
_MAX_PACKED: Final = 256
"""Charge commands kept per session (one per tool's caps and batch size: a handful)."""

# KEYS[1]: the session's hash. ARGV: ttl, amount, then (field, limit) pairs in the order the guard
# checks them. Answers {0, used...} after charging (the counts after the charge) or {i, used...}
# when the i-th cap would overshoot (the counts before, nothing charged, TTL untouched).
_CHARGE: Final = """
local n = (#ARGV - 2) / 2
local amount = tonumber(ARGV[2])
local fields = {}
for i = 1, n do fields[i] = ARGV[2 * i + 1] end
local used = redis.call('HMGET', KEYS[1], unpack(fields))
for i = 1, n do used[i] = tonumber(used[i]) or 0 end
for i = 1, n do
  if used[i] + amount > tonumber(ARGV[2 * i + 2]) then
    table.insert(used, 1, i)
    return used
  end
end
for i = 1, n do used[i] = redis.call('HINCRBY', KEYS[1], fields[i], amount) end
redis.call('EXPIRE', KEYS[1], ARGV[1])
table.insert(used, 1, 0)
return used
"""

# KEYS[1]: the session's hash. ARGV: ttl, amount, then the fields. A session that expired meanwhile
# has nothing to give back and is not created again.
_REFUND: Final = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local amount = tonumber(ARGV[2])
for i = 3, #ARGV do
  local left = (tonumber(redis.call('HGET', KEYS[1], ARGV[i])) or 0) - amount
  if left < 0 then left = 0 end
  redis.call('HSET', KEYS[1], ARGV[i], left)
end
redis.call('EXPIRE', KEYS[1], ARGV[1])
return 1
"""

# redis-py 7 names it driver_info; earlier versions lib_name and lib_version
_NO_CLIENT_INFO: Final[dict[str, None]] = (
    {"driver_info": None}
    if "driver_info" in inspect.signature(redis.connection.AbstractConnection.__init__).parameters
    else {"lib_name": None, "lib_version": None}
)


def pack(*args: str | bytes | int) -> bytes:
    """One command in the Redis protocol (RESP): a session's charge of given caps and amount is the
    same bytes every time, so it is packed once and kept."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else (b"%d" % arg if isinstance(arg, int) else _field(arg))
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


_PING: Final = b"*1\r\n$4\r\nPING\r\n"

_SENT_OK: Final = StateReport(sent=True, error=None, fell_back=False)
_BACKING_OFF: Final = StateReport(sent=False, error=None, fell_back=True)


class _Failed(Exception):
    def __init__(self, op: StateOp, cause: BaseException) -> None:
        super().__init__(op)
        self.op = op
        self.cause = cause


class RedisLink:
    """One connection pool per URL (and timeout) in a process, and the health every session on it
    shares: whether Redis answered last, and until when to leave it alone after a failure.

    ``commands`` and ``failures`` count what was sent and what failed (read by tests and the bench).
    """

    def __init__(self, state: StateSettings, clock: Callable[[], float] = time.monotonic) -> None:
        assert state.url is not None
        timeout = state.timeout_ms / 1000
        self.shown_url = mask_url(state.url)
        self._pool = redis.ConnectionPool.from_url(
            state.url,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            # redis-py retries a failed command three times with a back-off by default: a tool call
            # would wait for all of them. One attempt; the back-off below is the retry.
            retry=Retry(NoBackoff(), 0),
            retry_on_error=[],
            # RESP2 and no CLIENT SETINFO: a new connection costs no round trip before the command
            protocol=2,
            max_connections=_MAX_CONNECTIONS,
            **_NO_CLIENT_INFO,
        )
        self._clock = clock
        self._lock = threading.Lock()
        self._healthy = True  # until a command fails: the first call tries
        self._probing = False
        self._retry_at = 0.0
        self._failures = 0
        self._down_since = 0.0
        self._decided_locally = 0
        self.commands = 0
        self.failures = 0

    @property
    def healthy(self) -> bool:
        return self._healthy

    def run(self, op: StateOp, command: bytes) -> Any:
        """Redis's answer to one command (packed by ``pack``), or ``_Failed`` naming the step that
        failed. Never waits longer than ``timeout_ms`` for the connection and again for the answer."""
        self.commands += 1
        pool = self._pool
        try:
            connection = pool.get_connection()
        except Exception as exc:
            raise _Failed("connect", exc) from None
        try:
            connection.send_packed_command((command,), check_health=False)  # type: ignore[no-untyped-call]
            return connection.read_response()
        except Exception as exc:
            # An error reply leaves the connection usable; after a timeout an answer may still be on
            # its way, so that socket is never used again.
            if not isinstance(exc, redis.ResponseError):
                connection.disconnect()  # type: ignore[no-untyped-call]
            raise _Failed(op, exc) from None
        finally:
            pool.release(connection)

    def may_send(self) -> bool:
        """Whether to use Redis for this call: always while it answers; after a failure, once the
        back-off has passed, one caller at a time probes it while the others decide locally."""
        if self._healthy:
            return True
        with self._lock:
            if self._healthy:
                return True
            if self._probing or self._clock() < self._retry_at:
                return False
            self._probing = True
            return True

    def answered(self) -> None:
        if self._healthy and not self._probing:
            return
        with self._lock:
            was_down, self._healthy, self._probing = not self._healthy, True, False
            self._failures = 0
            if not was_down:
                return
            seconds = self._clock() - self._down_since
            locally, self._decided_locally = self._decided_locally, 0
        logger.warning(
            "otelguard: shared state at %s answers again after %.1f s; %d calls were decided from "
            "this process's own counts meanwhile (their charges are not written back)",
            self.shown_url,
            seconds,
            locally,
        )

    def failed(self, failure: _Failed) -> None:
        self.failures += 1
        with self._lock:
            was_up, self._healthy, self._probing = self._healthy, False, False
            self._failures += 1
            backoff = min(MAX_BACKOFF_SECONDS, FIRST_BACKOFF_SECONDS * 2 ** min(self._failures - 1, 16))
            now = self._clock()
            self._retry_at = now + backoff
            if was_up:
                self._down_since = now
        if was_up:
            # the exception's type only: its text can hold the host, never needed to act on it
            logger.warning(
                "otelguard: shared state at %s failed (%s on %s); session caps are decided from this "
                "process's own counts until it answers again (retried after a back-off of at most %g s)",
                self.shown_url,
                type(failure.cause).__name__,
                failure.op,
                MAX_BACKOFF_SECONDS,
            )

    def decided_locally(self) -> None:
        """A call's session caps were decided without Redis (counted for the end-of-outage line)."""
        with self._lock:
            self._decided_locally += 1

    def ping(self) -> StateReport:
        """One cheap command (``otelguard serve --state`` checks Redis at start)."""
        try:
            self.run("connect", _PING)
        except _Failed as failure:
            self.failed(failure)
            return StateReport(sent=True, error=failure.op, fell_back=False)
        self.answered()
        return _SENT_OK

    def close(self) -> None:
        self._pool.disconnect()


_links: dict[tuple[str, int], RedisLink] = {}
_links_lock = threading.Lock()


def link_for(state: StateSettings) -> RedisLink:
    """The process's link to ``state.url`` (one per URL and timeout; a handful per process at most)."""
    assert state.url is not None
    key = (state.url, state.timeout_ms)
    with _links_lock:
        link = _links.get(key)
        if link is None:
            if len(_links) >= _MAX_LINKS:  # the oldest stays usable by the stores that hold it
                del _links[next(iter(_links))]
            link = _links[key] = RedisLink(state)
        return link


class RedisSessionCaps:
    """The session-scope cap counters of one session, in Redis, with the process's own counts beside
    them for when Redis does not answer. Thread-safe."""

    def __init__(self, link: RedisLink, key: str, ttl_seconds: int) -> None:
        self.link = link
        self.key = key
        self._ttl = ttl_seconds
        self._local = LocalSessionCaps()  # kept in step with Redis; decides when Redis does not answer
        self._lock = threading.Lock()  # for _unshared
        self._unshared: dict[str, int] = {}  # charged here while Redis did not answer
        self._packed: dict[tuple[tuple[tuple[str, int], ...], int], bytes] = {}

    # -- the store's protocol ------------------------------------------------------------------

    def try_charge(self, caps: Sequence[tuple[str, int]], amount: int) -> CapRefusal | None:
        return self.charge(caps, amount)[0]

    def refund(self, keys: Sequence[str], amount: int) -> None:
        self.give_back(keys, amount)

    def usage(self) -> Mapping[str, int]:
        return self._local.usage()

    # -- with what the guard reports -----------------------------------------------------------

    def charge(self, caps: Sequence[tuple[str, int]], amount: int) -> tuple[CapRefusal | None, StateReport]:
        """All or nothing: the first cap (in the given order) that ``amount`` would overshoot, or
        ``None`` after charging every cap; and how Redis took part."""
        link = self.link
        if not link.may_send():
            return self._charge_locally(caps, amount), _BACKING_OFF
        try:
            answer = link.run("charge", self._charge_command(caps, amount))
            refused_at, counts = int(answer[0]), [int(count) for count in answer[1:]]
        except _Failed as failure:
            link.failed(failure)
            return self._charge_locally(caps, amount), StateReport(True, failure.op, True)
        except (TypeError, ValueError, IndexError) as exc:  # not our script's answer: refusing to serve
            link.failed(_Failed("charge", exc))
            return self._charge_locally(caps, amount), StateReport(True, "charge", True)
        link.answered()
        self._local.set_counts(zip((cap for cap, _limit in caps), counts, strict=False))
        if refused_at:
            cap, limit = caps[refused_at - 1]
            return CapRefusal(cap, counts[refused_at - 1], limit), _SENT_OK
        return None, _SENT_OK

    def give_back(self, keys: Sequence[str], amount: int) -> StateReport | None:
        """Refund ``amount`` to each key, floored at 0, here and in Redis. ``None``: Redis was not
        asked (backing off, or the amount was charged here while Redis was away)."""
        self._local.refund(keys, amount)
        to_redis: list[bytes] = []
        with self._lock:
            for cap in keys:
                # What was charged here during an outage is given back here first: Redis never saw
                # it, and a refund it never saw a charge for would let the fleet overshoot.
                # (A part of it, from a batch of another size: Redis keeps the rest; too high is safe.)
                unshared = self._unshared.pop(cap, 0)
                if unshared > amount:
                    self._unshared[cap] = unshared - amount
                if not unshared:
                    to_redis.append(_field(cap))
        link = self.link
        if not to_redis or not link.may_send():
            return None
        try:
            link.run("refund", pack("EVAL", _REFUND, 1, self.key, self._ttl, amount, *to_redis))
        except _Failed as failure:
            link.failed(failure)
            return StateReport(True, failure.op, False)
        link.answered()
        return _SENT_OK

    def _charge_locally(self, caps: Sequence[tuple[str, int]], amount: int) -> CapRefusal | None:
        self.link.decided_locally()
        refusal = self._local.try_charge(caps, amount)
        if refusal is None:
            with self._lock:
                for cap, _limit in caps:
                    self._unshared[cap] = self._unshared.get(cap, 0) + amount
        return refusal

    def _charge_command(self, caps: Sequence[tuple[str, int]], amount: int) -> bytes:
        key = (tuple(caps), amount)
        command = self._packed.get(key)
        if command is None:
            fields = (part for cap, limit in key[0] for part in (_field(cap), limit))
            command = pack("EVAL", _CHARGE, 1, self.key, self._ttl, amount, *fields)
            if len(self._packed) < _MAX_PACKED:
                self._packed[key] = command
        return command


def _field(cap: str) -> bytes:
    # cap keys come from the config; a lone surrogate in one must not read as a Redis outage
    return cap.encode("utf-8", "surrogatepass")


def session_key(state: StateSettings, signature_key: bytes, session_id: str) -> str:
    """``<key_prefix>:{<digest>}``: only the digest is hashed to a slot, so a session's keys stay
    together and sessions spread over a cluster."""
    return f"{state.key_prefix}:{{{session_digest(session_id, signature_key)}}}"


def open_session_caps(state: StateSettings, signature_key: bytes, session_id: str) -> RedisSessionCaps:
    """The store for one session on the process's link to ``state.url`` (no command is sent here)."""
    return RedisSessionCaps(link_for(state), session_key(state, signature_key, session_id), state.ttl_seconds)
