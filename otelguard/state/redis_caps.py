"""Session caps shared through Redis (or Valkey): one atomic script per capped call (docs/shared-state.md).

A session is one hash, ``<key_prefix>:{<digest>}`` (the braces are a Redis Cluster hash tag), with
one field per session cap key; the digest is the session id keyed with the signature key, so the
raw id is never sent. A charge is one ``EVALSHA`` that checks every cap of the call and charges all
or none of them (a batch of three spawns with two left is refused whole); a refund is one that
takes the amount back, floored at 0. Both set the hash's TTL back to ``ttl_seconds``.

A process never believes a count lower than one it has seen: each charge carries the marker of the
hash the process last saw (each hash holds one, written when it is made), and where the hash is not
that one (Redis restarted empty, or the key was lost) the script asks for the process's counts and
raises the stored ones to them before checking. A session's usual charge is the same bytes every
time: its store keeps that one command, packed.

Redis is never allowed to hold up or break a tool call: each command is bounded by ``timeout_ms``
(the wait for a free connection, the connect and the read; no client retries), a failed link falls
back to the process's own counts (kept all along, in step with what Redis answered), and after it
the process leaves Redis alone for a back-off (0.1 s, doubling, at most 5 s) in which one call at a
time probes it. An error reply about one key (it holds another type) is that session's problem: that
call is decided locally, the others go on using Redis. Charges made during an outage are not written
back while the hash lives on: a session can overshoot by what was charged while Redis was away.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import redis

from otelguard.config import StateSettings, mask_url
from otelguard.core.caps import CapRefusal, ChargeAnswer, LocalSessionCaps
from otelguard.core.session_keys import session_digest
from otelguard.state.redis_client import Packed, Packer, make_client, send_packed
from otelguard.state.reports import StateOp, StateReport
from otelguard.state.urls import CLUSTER_SCHEMES

__all__ = ["MAX_BACKOFF_SECONDS", "RedisLink", "RedisSessionCaps", "link_for", "open_session_caps"]

logger = logging.getLogger("otelguard")

FIRST_BACKOFF_SECONDS: Final = 0.1
MAX_BACKOFF_SECONDS: Final = 5.0
_MAX_CONNECTIONS: Final = 64
"""Commands in flight per link; a caller past them waits up to ``timeout_ms`` for one to finish."""
_MAX_LINKS: Final = 8
_KEY_ERROR_LOG_SECONDS: Final = 60.0
_TTL_MARGIN_SECONDS: Final = 0.5
"""How much sooner than ``ttl_seconds`` this process takes a session's hash for expired (its clock and
Redis's are not one)."""
NO_LIMIT: Final = 1 << 53
"""The limit of an ``add``: never reached (the script compares Lua numbers, exact to 2**53)."""
MARKER: Final = b"\xff"
"""The hash field that tells one hash of a session from a later one of the same name: never a cap
key's field (cap keys are sent as UTF-8, where the byte 0xFF never appears)."""

# KEYS[1]: the session's hash. ARGV: ttl, amount, the marker this process last saw ('' for none),
# n, then n (field, limit) pairs in the order the guard checks them, then optionally n floors (the
# counts this process has seen). A hash without a marker is new (or from before markers) and gets
# one (the server's time: never the same twice for one key). A hash whose marker is not the one last
# seen is not the hash this process counted in: without floors the answer is {-1} (nothing done:
# send them); with floors its counts are raised to them before the check.
# Answers {0, marker, used...} after charging (the counts after the charge) or {i, marker, used...}
# when the i-th cap would overshoot (the counts before, nothing charged, the TTL set only when the
# hash was made or raised).
_CHARGE: Final = """
local amount = tonumber(ARGV[2])
local n = tonumber(ARGV[4])
local floors = #ARGV > 4 + 2 * n
local marker = redis.call('HGET', KEYS[1], '\\255')
if marker ~= ARGV[3] and ARGV[3] ~= '' and not floors then return {-1} end
local fields = {}
for i = 1, n do fields[i] = ARGV[3 + 2 * i] end
local written = false
if not marker then
  local now = redis.call('TIME')
  marker = now[1] .. '.' .. now[2]
  redis.call('HSET', KEYS[1], '\\255', marker)
  written = true
end
local used = redis.call('HMGET', KEYS[1], unpack(fields))
for i = 1, n do used[i] = tonumber(used[i]) or 0 end
if floors and marker ~= ARGV[3] then
  for i = 1, n do
    local floor = tonumber(ARGV[4 + 2 * n + i])
    if used[i] < floor then
      used[i] = floor
      redis.call('HSET', KEYS[1], fields[i], floor)
      written = true
    end
  end
end
for i = 1, n do
  if used[i] + amount > tonumber(ARGV[4 + 2 * i]) then
    if written then redis.call('EXPIRE', KEYS[1], ARGV[1]) end
    table.insert(used, 1, marker)
    table.insert(used, 1, i)
    return used
  end
end
for i = 1, n do used[i] = redis.call('HINCRBY', KEYS[1], fields[i], amount) end
redis.call('EXPIRE', KEYS[1], ARGV[1])
table.insert(used, 1, marker)
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

_KEY_REPLIES: Final = ("WRONGTYPE", "hash value is not an integer", "value is not an integer")
"""Error replies about the session's own key (it holds another type, or a field is not a number):
that session's problem, not an outage (redis-py drops the ``ERR`` code from the text). Every other
error reply is taken for a Redis that cannot serve."""
_REDIRECTS: Final = ("MovedError", "AskError")


Prepared = Packed | tuple[str, tuple[bytes | int, ...]]
"""A command ready to send: packed for a plain client, key and arguments for a cluster's."""

_SENT_OK: Final = StateReport(sent=True, error=None, fell_back=False)
_BACKING_OFF: Final = StateReport(sent=False, error=None, fell_back=True)
_BUSY: Final = StateReport(sent=False, error=None, fell_back=True)


class _Failed(Exception):
    """Redis did not answer (``cause``, at step ``op``): the link is down."""

    def __init__(self, op: StateOp, cause: BaseException) -> None:
        super().__init__(op)
        self.op = op
        self.cause = cause


class _KeyError(Exception):
    """Redis answered with an error about this session's key: the link is fine."""


class _Busy(Exception):
    """Every connection stayed in use for ``timeout_ms``: Redis is answering, this process is busy."""


class RedisLink:
    """One client (a connection pool, or a cluster's pools) per URL and timeout in a process, and the
    health every session on it shares: whether Redis answered last, and until when to leave it alone
    after a failure.

    ``commands`` and ``failures`` count what was sent and what failed (read by tests and the bench);
    ``key_errors`` the error replies about one session's key; ``busy`` the calls that found every
    connection in use for ``timeout_ms``.
    """

    def __init__(self, state: StateSettings, clock: Callable[[], float] = time.monotonic) -> None:
        assert state.url is not None
        self.state = state
        self.shown_url = mask_url(state.url)
        self.cluster = state.url.split("://", 1)[0] in CLUSTER_SCHEMES
        self._timeout = state.timeout_ms / 1000
        self._client: Any = None  # made by the first command: a cluster's is made by asking a node
        self._client_lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(_MAX_CONNECTIONS)
        self._scripts: dict[StateOp, Any] = {}  # registered with the client when it is made
        self._charge_sha = hashlib.sha1(_CHARGE.encode()).hexdigest()  # what EVALSHA names it by
        self._packer = Packer()
        self._clock = clock
        self._lock = threading.Lock()
        self._healthy = True  # until a command fails: the first call tries
        self._probing = False
        self._retry_at = 0.0
        self._failures = 0
        self._down_since = 0.0
        self._decided_locally = 0
        self._key_error_logged_at: float | None = None
        self.commands = 0
        self.failures = 0
        self.key_errors = 0
        self.busy = 0

    @property
    def healthy(self) -> bool:
        return self._healthy

    def clock(self) -> float:
        return self._clock()

    def client(self) -> Any:
        """The redis-py client (made on first use; raises what making it raised)."""
        client = self._client
        if client is None:
            with self._client_lock:
                client = self._client
                if client is None:
                    client = make_client(self.state, self._timeout, _MAX_CONNECTIONS)
                    self._scripts = {
                        "charge": client.register_script(_CHARGE),
                        "refund": client.register_script(_REFUND),
                    }
                    self._client = client
        return client

    def prepare(self, key: str, args: Sequence[bytes | int]) -> Prepared:
        """The charge script's command for ``key`` and ``args``, in the form ``charge`` sends: packed
        once (a session's usual charge is the same bytes every time, so its store keeps them)."""
        if self.cluster:
            return (key, tuple(args))
        return self._packer.pack("EVALSHA", self._charge_sha, 1, key, *args)

    def charge(self, command: Prepared) -> Any:
        return self._run("charge", command)

    def refund(self, key: str, args: Sequence[bytes | int]) -> Any:
        return self._run("refund", (key, tuple(args)))

    def _run(self, op: StateOp, command: Prepared) -> Any:
        """Redis's answer to one script, or ``_Failed`` naming the step that failed, ``_KeyError``
        for an error reply about the key, ``_Busy`` when no connection came free in ``timeout_ms``."""
        if not self._slots.acquire(timeout=self._timeout):
            raise _Busy
        try:
            self.commands += 1
            try:
                client = self.client()
            except Exception as exc:
                raise _Failed("connect", exc) from None
            script = self._scripts[op]
            try:
                if isinstance(command, list):
                    return send_packed(client.connection_pool, script, command)
                key, args = command
                # the cluster client finds the node of the key's slot
                return script(keys=(key,), args=args, client=client)
            except redis.ResponseError as exc:
                if str(exc).startswith(_KEY_REPLIES):
                    raise _KeyError from None
                raise _Failed(op, exc) from None
            except redis.ConnectionError as exc:
                # redis-py closes a connection that failed or timed out: an answer still on its way
                # never reaches a later command
                raise _Failed("connect", exc) from None
            except Exception as exc:
                raise _Failed(op, exc) from None
        finally:
            self._slots.release()

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
            "this process's own counts meanwhile (their charges reach Redis only for sessions it has lost)",
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
            cause = type(failure.cause).__name__
            hint = " (a Redis Cluster node: use a redis+cluster:// URL)" if cause in _REDIRECTS else ""
            logger.warning(
                "otelguard: shared state at %s failed (%s on %s)%s; session caps are decided from this "
                "process's own counts until it answers again (retried after a back-off of at most %g s)",
                self.shown_url,
                cause,
                failure.op,
                hint,
                MAX_BACKOFF_SECONDS,
            )

    def key_failed(self, op: StateOp) -> None:
        """An error reply about one session's key: that call was decided locally, the link is fine
        (a probe that got this far found Redis answering). One log line a minute at most."""
        self.key_errors += 1
        self.answered()
        with self._lock:
            now = self._clock()
            last = self._key_error_logged_at
            if last is not None and now - last < _KEY_ERROR_LOG_SECONDS:
                return
            self._key_error_logged_at = now
        logger.warning(
            "otelguard: shared state at %s refused a %s: a session's key holds a value of another "
            "type (%d such replies so far); that session's caps are decided from this process's own "
            "counts, the others still use Redis",
            self.shown_url,
            op,
            self.key_errors,
        )

    def was_busy(self) -> None:
        """Every connection stayed in use for ``timeout_ms``: decided locally, never an outage."""
        with self._lock:
            self.busy += 1
        if self._probing:
            with self._lock:
                self._probing = False  # let another caller probe

    def decided_locally(self) -> None:
        """A call's session caps were decided without Redis (counted for the end-of-outage line)."""
        with self._lock:
            self._decided_locally += 1

    def ping(self) -> StateReport:
        """One cheap command (``otelguard serve --state`` checks Redis at start)."""
        self.commands += 1
        try:
            try:
                client = self.client()
            except Exception as exc:
                raise _Failed("connect", exc) from None
            try:
                client.ping()
            except Exception as exc:
                raise _Failed("connect", exc) from None
        except _Failed as failure:
            self.failed(failure)
            return StateReport(sent=True, error=failure.op, fell_back=False)
        self.answered()
        return _SENT_OK

    def close(self) -> None:
        client = self._client
        if client is not None:
            client.close()


_links: dict[tuple[str, int, str | None], RedisLink] = {}
_links_lock = threading.Lock()


def link_for(state: StateSettings) -> RedisLink:
    """The process's link to ``state.url`` (one per URL, timeout and password file; a handful per
    process at most)."""
    assert state.url is not None
    key = (state.url, state.timeout_ms, state.password_file)
    with _links_lock:
        link = _links.get(key)
        if link is None:
            if len(_links) >= _MAX_LINKS:  # the oldest stays usable by the stores that hold it
                del _links[next(iter(_links))]
            link = _links[key] = RedisLink(state)
        return link


class RedisSessionCaps:
    """The session-scope cap counters of one session, in Redis, with the process's own counts beside
    them for when Redis does not answer. Thread-safe. Holds a few hundred bytes besides the counts:
    no command is kept."""

    __slots__ = (
        "__weakref__",  # a tree's table of stores holds them weakly past its bound
        "_command",
        "_last_use",
        "_listener",
        "_local",
        "_lock",
        "_seen",
        "_ttl",
        "_unshared",
        "key",
        "link",
    )

    def __init__(
        self,
        link: RedisLink,
        key: str,
        ttl_seconds: int,
        listener: Callable[[StateReport], None] | None = None,
    ) -> None:
        self.link = link
        self._listener = listener  # hears how each use of Redis went (the host wires it to telemetry)
        self.key = key
        self._ttl = ttl_seconds
        self._local = LocalSessionCaps()  # kept in step with Redis; decides when Redis does not answer
        self._lock = threading.Lock()  # for _unshared, _seen and _last_use
        self._unshared: dict[str, int] = {}  # charged here while Redis did not answer
        self._seen = b""  # the marker of the hash this process last saw
        self._last_use = 0.0  # when the last charge or refund that reset the TTL was sent
        self._command: tuple[Any, Prepared] | None = None  # the last charge without floors, packed

    # -- the store's protocol ------------------------------------------------------------------

    def charge(self, caps: Sequence[tuple[str, int]], amount: int) -> ChargeAnswer:
        refusal, report, _counts = self._charge(caps, amount)
        self._tell(report)
        return ChargeAnswer(refusal, report.fell_back)

    def add(self, key: str, amount: int) -> int:
        """The charge script with no limit: the count after comes from the same atomic step, so
        processes adding at once each get their own count (one of them crosses a limit, never two)."""
        _refusal, report, counts = self._charge(((key, NO_LIMIT),), amount)
        self._tell(report)
        if counts:
            return counts[0]
        return self._local.usage().get(key, 0)  # decided without Redis: this process's own count

    def refund(self, keys: Sequence[str], amount: int) -> None:
        report = self._refund(keys, amount)
        if report is not None:
            self._tell(report)

    def restore(self, counts: Mapping[str, int]) -> None:
        """Nothing to do: Redis holds the counts of every process of the session, a checkpoint's
        are never newer (and this process's own are kept in step with Redis's answers)."""

    def usage(self) -> Mapping[str, int]:
        return self._local.usage()

    # -- with how Redis took part --------------------------------------------------------------

    def _tell(self, report: StateReport) -> None:
        listener = self._listener
        if listener is None:
            return
        try:
            listener(report)
        except Exception as exc:  # a listener's failure never reaches the tool loop
            _listener_failed(exc)

    def _charge(
        self, caps: Sequence[tuple[str, int]], amount: int
    ) -> tuple[CapRefusal | None, StateReport, list[int] | None]:
        """All or nothing: the first cap (in the given order) that ``amount`` would overshoot, or
        ``None`` after charging every cap; how Redis took part; and the counts Redis answered (after
        the charge; ``None`` when decided without Redis)."""
        link = self.link
        if not link.may_send():
            return self._charge_locally(caps, amount), _BACKING_OFF, None
        sent_at = link.clock()
        try:
            answer = link.charge(self._charge_command(caps, amount, sent_at, floors=False))
            if int(answer[0]) == -1:  # not the hash this process counted in: Redis lost it
                answer = link.charge(self._charge_command(caps, amount, sent_at, floors=True))
            refused_at, marker = int(answer[0]), bytes(answer[1])
            counts = [int(count) for count in answer[2:]]
        except _Failed as failure:
            link.failed(failure)
            return self._charge_locally(caps, amount), StateReport(True, failure.op, True), None
        except _KeyError:
            link.key_failed("charge")
            report = StateReport(True, "charge", True, key_error=True)
            return self._charge_locally(caps, amount, outage=False), report, None
        except _Busy:
            link.was_busy()
            return self._charge_locally(caps, amount, outage=False), _BUSY, None
        except (TypeError, ValueError, IndexError) as exc:  # not our script's answer: refusing to serve
            link.failed(_Failed("charge", exc))
            return self._charge_locally(caps, amount), StateReport(True, "charge", True), None
        link.answered()
        self._local.restore(dict(zip((cap for cap, _limit in caps), counts, strict=False)))
        with self._lock:
            self._seen = marker
            if not refused_at:
                self._last_use = sent_at
        if refused_at:
            cap, limit = caps[refused_at - 1]
            return CapRefusal(cap, counts[refused_at - 1], limit), _SENT_OK, counts
        return None, _SENT_OK, counts

    def _refund(self, keys: Sequence[str], amount: int) -> StateReport | None:
        """Refund ``amount`` to each key, floored at 0, here and in Redis. ``None``: Redis was not
        asked (backing off, busy, or the amount was charged here while Redis was away)."""
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
        sent_at = link.clock()
        try:
            found = link.refund(self.key, (self._ttl, amount, *to_redis))
        except _Failed as failure:
            link.failed(failure)
            return StateReport(True, failure.op, False)
        except _KeyError:
            link.key_failed("refund")
            return StateReport(True, "refund", False, key_error=True)
        except _Busy:
            link.was_busy()
            return None
        link.answered()
        if found == 1:
            with self._lock:
                self._last_use = sent_at
        return _SENT_OK

    def _charge_locally(
        self, caps: Sequence[tuple[str, int]], amount: int, *, outage: bool = True
    ) -> CapRefusal | None:
        if outage:
            self.link.decided_locally()
        refusal = self._local.charge(caps, amount).refusal
        if refusal is None:
            with self._lock:
                for cap, _limit in caps:
                    self._unshared[cap] = self._unshared.get(cap, 0) + amount
        return refusal

    def _charge_command(
        self, caps: Sequence[tuple[str, int]], amount: int, now: float, *, floors: bool
    ) -> Prepared:
        """The charge script's command. The floors (this process's counts) go with it when Redis
        asked for them, or when this process has counts but has not seen the hash yet (it charged
        during an outage); never when the session may have expired in Redis since this process
        last used it (then a new hash starts from 0)."""
        with self._lock:
            seen, last_use = self._seen, self._last_use
        counts: Mapping[str, int] = {}
        if seen and now - last_use >= self._ttl - _TTL_MARGIN_SECONDS:
            seen, floors = b"", False  # may have expired: whatever Redis holds now stands
        elif floors or not seen:
            counts = self._local.usage()
            floors = floors or bool(counts)
        key = (tuple(caps), amount, seen)
        cached = self._command
        if not floors and cached is not None and cached[0] == key:
            return cached[1]
        args: list[bytes | int] = [self._ttl, amount, seen, len(caps)]
        for cap, limit in caps:
            args += (_field(cap), limit)
        if floors:
            args += (counts.get(cap, 0) for cap, _limit in caps)
        command = self.link.prepare(self.key, args)
        if not floors:
            self._command = (key, command)
        return command


def _field(cap: str) -> bytes:
    # cap keys come from the config; a lone surrogate in one must not read as a Redis outage
    return cap.encode("utf-8", "surrogatepass")


def session_key(state: StateSettings, signature_key: bytes, session_id: str) -> str:
    """``<key_prefix>:{<digest>}``: only the digest is hashed to a slot, so a session's keys stay
    together and sessions spread over a cluster."""
    return f"{state.key_prefix}:{{{session_digest(session_id, signature_key)}}}"


def open_session_caps(
    state: StateSettings,
    signature_key: bytes,
    session_id: str,
    listener: Callable[[StateReport], None] | None = None,
) -> RedisSessionCaps:
    """The store for one session on the process's link to ``state.url`` (no command is sent here);
    ``listener`` hears how each use of Redis went."""
    key = session_key(state, signature_key, session_id)
    return RedisSessionCaps(link_for(state), key, state.ttl_seconds, listener)


_failed_listeners: set[str] = set()


def _listener_failed(exc: Exception) -> None:
    # Only the exception type, once per type: its message may quote anything.
    name = type(exc).__name__
    if name in _failed_listeners:
        return
    _failed_listeners.add(name)
    logger.error("otelguard internal error in the shared state's listener (%s); the call goes on", name)
