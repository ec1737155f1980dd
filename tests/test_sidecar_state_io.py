"""A real ``otelguard serve`` waiting on a real, stopped redis-server still answers other requests."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from tests.e2e import stop_process
from tests.redis_e2e import RedisServer
from tests.test_sidecar_state import start_replica

SLOW_CONFIG = (
    "signature_key: replica-key\n"
    "caps:\n  session: {web_search: 10}\n"
    "state:\n  timeout_ms: 3000\n"  # the guard call waits this long on a stopped Redis
)


def test_a_call_waiting_on_a_stopped_redis_does_not_hold_up_healthz(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    serve = start_replica(tmp_path, "--state", redis_server.url, config=SLOW_CONFIG)
    try:
        body = {"session_id": "s1", "tool_name": "web_search", "args": {"q": 1}, "call_id": "c1"}
        assert serve.post("/v1/before_call", body)["action"] == "allow"  # Redis answers: the link is up
        finished: list[str] = []

        def waiting_call() -> None:
            serve.post("/v1/before_call", {**body, "call_id": "c2", "args": {"q": 2}})
            finished.append("before_call")

        redis_server.hang()  # SIGSTOP: connected, never answers
        try:
            caller = threading.Thread(target=waiting_call)
            caller.start()
            time.sleep(0.3)  # the call has reached the sidecar and waits on Redis
            status, _ = serve.request("GET", "/healthz")
            finished.append("healthz")
            caller.join(30)
        finally:
            redis_server.resume()
        assert status == 200
        assert finished == ["healthz", "before_call"], "healthz waited for the guard call's Redis command"
    finally:
        stop_process(serve.process)
