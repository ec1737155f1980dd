"""The redis-py client of a shared-state URL (docs/shared-state.md): a plain client or a Redis
Cluster's, each command one attempt bounded by ``timeout_ms``, and the charge script sent packed.

Only redis-py's public API: ``Redis``/``RedisCluster``, ``register_script``, and a pool's
``get_connection``/``release`` with a connection's ``pack_command``, ``send_packed_command``,
``send_command``, ``read_response`` and ``disconnect``. Two of them changed between the supported
versions (redis-py 5.0 to 8.x), chosen here by ``redis.__version__`` (``tests/test_redis_py_versions.py``
runs the backend on each):

* turning off ``CLIENT SETINFO``: ``driver_info=None`` from 7.2 (``lib_name``/``lib_version`` are
  deprecated there), ``lib_name=None, lib_version=None`` before;
* ``ConnectionPool.get_connection()``: the command's name is required before 5.3, deprecated after.
"""

from __future__ import annotations

from typing import Any, Final

import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.exceptions import NoScriptError
from redis.retry import Retry

from otelguard.config import StateSettings
from otelguard.state.urls import CLUSTER_SCHEMES, state_password

__all__ = ["REDIS_PY", "Packer", "make_client", "send_packed"]


def _version(text: str) -> tuple[int, int]:
    major, _, rest = text.partition(".")
    minor = "".join(c for c in rest.partition(".")[0] if c.isdigit())
    return int(major), int(minor or 0)


REDIS_PY: Final = _version(redis.__version__)
"""The installed redis-py's (major, minor)."""

_NO_CLIENT_INFO: Final[dict[str, None]] = (
    {"driver_info": None} if REDIS_PY >= (7, 2) else {"lib_name": None, "lib_version": None}
)
_CONNECTION_ARGS: Final[tuple[str, ...]] = () if REDIS_PY >= (5, 3) else ("EVALSHA",)

Packed = list[bytes]
"""One command in the Redis protocol, as a connection's ``pack_command`` gives it."""


class Packer:
    """Packs commands as a connection of the pool would (a connection that is never connected:
    ``pack_command`` needs no socket), so that a command sent many times is packed once."""

    def __init__(self) -> None:
        self._connection = redis.Connection()  # type: ignore[no-untyped-call]

    def pack(self, *args: bytes | str | int) -> Packed:
        return list(self._connection.pack_command(*args))  # type: ignore[no-untyped-call]


def send_packed(pool: redis.ConnectionPool, script: Any, packed: Packed) -> Any:
    """One packed ``EVALSHA`` on one connection of the pool (the client's own path around each
    command would cost a third more CPU per charge); a Redis that does not know the script
    (restarted) is given it first. ``script`` is the ``register_script`` object of the command."""
    connection = pool.get_connection(*_CONNECTION_ARGS)
    try:
        connection.send_packed_command(packed, check_health=False)  # type: ignore[no-untyped-call]
        try:
            return connection.read_response()
        except NoScriptError:
            connection.send_command("SCRIPT", "LOAD", script.script)  # type: ignore[no-untyped-call]
            connection.read_response()
            connection.send_packed_command(packed, check_health=False)  # type: ignore[no-untyped-call]
            return connection.read_response()
    except redis.ResponseError:
        raise  # an error reply leaves the connection usable
    except BaseException:
        # after a timeout an answer may still be on its way: that socket is never used again
        connection.disconnect()  # type: ignore[no-untyped-call]
        raise
    finally:
        pool.release(connection)


def make_client(state: StateSettings, timeout: float, max_connections: int) -> Any:
    """A plain client, or a cluster client for ``redis+cluster://``; each command one attempt, its
    connect and read each bounded by ``timeout`` (redis-py retries three times with a back-off by
    default: a tool call would wait for all of them; the back-off of the link is the retry)."""
    assert state.url is not None
    scheme, _, rest = state.url.partition("://")
    options: dict[str, Any] = {
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        "retry": Retry(NoBackoff(), 0),
        # RESP2 and no CLIENT SETINFO: a new connection costs no round trip before the command
        "protocol": 2,
        "max_connections": max_connections,
        **_NO_CLIENT_INFO,
    }
    password = state_password(state)
    if password is not None:  # given apart from the URL, it wins over the URL's (redis-py's would win)
        options["password"] = password
        scheme, rest = _without_password(scheme, rest)
    if scheme in CLUSTER_SCHEMES:
        url = f"{scheme.removesuffix('+cluster')}://{rest}"
        # the retry above also stands for the cluster's (ten attempts by default): a node that fails
        # makes the client re-read the cluster's layout once, then the link backs off
        return RedisCluster.from_url(url, **options)
    options["retry_on_error"] = []
    return redis.Redis(connection_pool=redis.ConnectionPool.from_url(f"{scheme}://{rest}", **options))


def _without_password(scheme: str, rest: str) -> tuple[str, str]:
    """The URL (after ``scheme://``) with no password in its user info or its query."""
    if "@" in rest:
        userinfo, _, rest = rest.rpartition("@")
        user = userinfo.partition(":")[0]
        rest = f"{user}@{rest}" if user else rest
    path, question, query = rest.partition("?")
    if question:
        kept = [pair for pair in query.split("&") if not pair.lower().startswith("password=")]
        rest = f"{path}?{'&'.join(kept)}" if kept else path
    return scheme, rest
