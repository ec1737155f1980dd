"""The Redis backend on each supported redis-py version, against a real redis-server and a real
three-node Redis Cluster: charges, a refusal, a refund, Redis forgetting the script, an error reply
about one key, and no deprecation warning from redis-py.

redis-py changed two of the calls the backend makes (how ``CLIENT SETINFO`` is turned off, and
whether ``ConnectionPool.get_connection`` takes the command's name); the backend picks them by
``redis.__version__``, and this test pins each choice to the versions it was made for. A version
other than the installed one is installed once, with pip, into ``OTELGUARD_REDIS_PY_DIR`` (default
``~/.cache/otelguard/redis-py``); when pip cannot get it the case is skipped, or fails under
OTELGUARD_REQUIRE_E2E=1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from otelguard.config.environment import OTELGUARD_REQUIRE_E2E
from tests.redis_e2e import RedisServer, run_redis_cluster

ROOT = Path(__file__).resolve().parents[1]

SUPPORTED = ("5.0.0", "5.3.1", "6.4.0", "7.1.1", "7.2.0", "7.4.1", "8.0.1", "8.2.0")
"""The first supported version, the versions on either side of each change, the newest of each
major version."""

SCRIPT = r"""
import json, sys, warnings

warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import redis
    from otelguard.config import GuardConfig
    from otelguard.state.redis_caps import RedisLink, RedisSessionCaps
    from otelguard.state.redis_client import REDIS_PY

    url, cluster, tag = sys.argv[1], sys.argv[2] == "cluster", sys.argv[3]
    key, wrong_key = f"otelguard:{{{tag}}}", f"otelguard:{{wrong-{tag}}}"
    state = GuardConfig.from_mapping(
        {"signature_key": "k", "state": {"url": url, "timeout_ms": 3000}}
    ).state
    link = RedisLink(state)
    store = RedisSessionCaps(link, key, 60)
    caps = [("web_search", 2)]
    answers = [store.charge(caps, 1) for _ in range(3)]
    store.refund(["web_search"], 1)
    after_refund = store.charge(caps, 1)
    direct = link.client()
    direct.script_flush()  # Redis forgets the scripts: the next charge gives them again
    store.refund(["web_search"], 1)
    after_flush = store.charge(caps, 1)
    stored = direct.hget(key, "web_search")
    direct.set(wrong_key, "x")
    wrong = RedisSessionCaps(link, wrong_key, 60).charge(caps, 1)
    names = [] if cluster else [c.get("lib-name", "") for c in direct.client_list()]
print(json.dumps({
    "version": redis.__version__,
    "parsed": list(REDIS_PY),
    "refusals": [None if a.refusal is None else list(a.refusal) for a in answers],
    "fell_back": [a.fell_back for a in answers],
    "after_refund": after_refund.refusal is None and not after_refund.fell_back,
    "after_flush": after_flush.refusal is None and not after_flush.fell_back,
    "stored": int(stored),
    "wrong_type": {"fell_back": wrong.fell_back, "key_errors": link.key_errors, "healthy": link.healthy},
    "failures": link.failures,
    "lib_names": names,
    "warnings": [f"{w.category.__name__}: {w.message}" for w in caught
                 if issubclass(w.category, (DeprecationWarning, FutureWarning))],
}))
"""


def redis_py(version: str) -> str | None:
    """A folder holding redis-py ``version`` to put first on the path; ``None`` for the installed one."""
    if version == redis.__version__:
        return None
    root = Path(os.environ.get("OTELGUARD_REDIS_PY_DIR", Path.home() / ".cache" / "otelguard" / "redis-py"))
    target = root / version
    if not (target / "redis" / "__init__.py").exists():
        command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                   f"redis=={version}"]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
        if done.returncode != 0:
            reason = f"pip could not install redis=={version}"
            if os.environ.get(OTELGUARD_REQUIRE_E2E) == "1":
                pytest.fail(f"{reason}; {OTELGUARD_REQUIRE_E2E}=1 forbids skipping", pytrace=False)
            pytest.skip(reason)
    return str(target)


def run_backend(version: str, url: str, kind: str) -> dict[str, object]:
    folder = redis_py(version)
    path = [p for p in (folder, str(ROOT), os.environ.get("PYTHONPATH")) if p]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, url, kind, f"v{version}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    answer: dict[str, object] = json.loads(done.stdout)
    assert answer["version"] == version
    return answer


def check(answer: dict[str, object]) -> None:
    assert answer["refusals"] == [None, None, ["web_search", 2, 2]]
    assert answer["fell_back"] == [False, False, False]  # every charge answered by Redis
    assert answer["after_refund"] and answer["after_flush"]
    assert answer["stored"] == 2
    # an error reply about one key: that call decided locally, the link still up
    assert answer["wrong_type"] == {"fell_back": True, "key_errors": 1, "healthy": True}
    assert answer["failures"] == 0
    assert answer["warnings"] == []


@pytest.mark.parametrize("version", SUPPORTED)
def test_the_backend_on_a_plain_redis(version: str, redis_server: RedisServer) -> None:
    answer = run_backend(version, redis_server.url, "plain")
    check(answer)
    # no CLIENT SETINFO: the connections carry no library name
    assert answer["lib_names"] and set(answer["lib_names"]) <= {""}


@pytest.fixture(scope="module")
def cluster_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with run_redis_cluster(tmp_path_factory.mktemp("cluster")) as nodes:
        yield f"redis+cluster://127.0.0.1:{nodes[0].port}/0"


@pytest.mark.parametrize("version", SUPPORTED)
def test_the_backend_on_a_redis_cluster(version: str, cluster_url: str) -> None:
    check(run_backend(version, cluster_url, "cluster"))


def test_the_installed_version_is_among_those_tested() -> None:
    assert redis.__version__ in SUPPORTED
