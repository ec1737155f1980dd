"""The redis-py client of a shared-state URL (docs/shared-state.md): a plain client or a Redis
Cluster's, each command one attempt bounded by ``timeout_ms``, and the charge script sent packed.
"""

from __future__ import annotations

import inspect
from typing import Any, Final

import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.commands.core import Script
from redis.connection import PythonRespSerializer
from redis.exceptions import NoScriptError
from redis.retry import Retry

from otelguard.config import StateSettings
from otelguard.config.state import CLUSTER_SCHEMES, state_password

__all__ = ["make_client", "pack", "send_packed"]

# redis-py 7 names it driver_info; earlier versions lib_name and lib_version
_NO_CLIENT_INFO: Final[dict[str, None]] = (
    {"driver_info": None}
    if "driver_info" in inspect.signature(redis.connection.AbstractConnection.__init__).parameters
    else {"lib_name": None, "lib_version": None}
)


def _encode(value: bytes | str | int) -> bytes:
    if isinstance(value, bytes):
        return value
    return value.encode() if isinstance(value, str) else b"%d" % value


_PACKER: Final = PythonRespSerializer(6000, _encode)
"""redis-py's own RESP packer (what a connection packs a command with); the arguments are already
bytes, text of the script's digest, or integers."""


def pack(*args: bytes | str | int) -> bytes:
    """One command in the Redis protocol, by redis-py's packer."""
    return b"".join(_PACKER.pack(*args))  # type: ignore[no-untyped-call]


def send_packed(pool: redis.ConnectionPool, script: Script, packed: bytes) -> Any:
    """One packed ``EVALSHA`` on one connection of the pool (the client's own path around each
    command would double the CPU of a charge); a Redis that does not know the script (restarted) is
    given it first."""
    connection = pool.get_connection()
    try:
        connection.send_packed_command((packed,), check_health=False)  # type: ignore[no-untyped-call]
        try:
            return connection.read_response()
        except NoScriptError:
            connection.send_command("SCRIPT", "LOAD", script.script)  # type: ignore[no-untyped-call]
            connection.read_response()
            connection.send_packed_command((packed,), check_health=False)  # type: ignore[no-untyped-call]
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
