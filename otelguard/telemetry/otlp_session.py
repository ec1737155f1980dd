"""The requests session the OTLP/HTTP exporters send through: what a collector answers is read up to
``MAX_ANSWER_BYTES`` and within the export's timeout, and the rest is never read.

The exporters read a collector's whole answer into memory: a collector answering 160 MB bodies took
``otelguard serve`` to 665 MB resident. An export only needs the answer's status; a collector's real
answers (an empty or partial-success message) are a few bytes. An answer read whole keeps its
connection for the next export; a longer one (or one still arriving at the deadline) is cut off and
its connection closed. The body is never decompressed.

A credential provider named in ``OTEL_PYTHON_EXPORTER_OTLP_HTTP_*CREDENTIAL_PROVIDER`` hands the
exporters its own session: that one is left as it is.
"""

from __future__ import annotations

import io
import os
import time
from typing import Final

import requests
from requests.adapters import HTTPAdapter
from requests.models import PreparedRequest, Response

__all__ = ["MAX_ANSWER_BYTES", "bounded_session", "exporter_session"]

MAX_ANSWER_BYTES: Final = 64 * 1024
_READ_BYTES: Final = 16 * 1024


def exporter_session(signal: str) -> requests.Session | None:
    """The ``session=`` of one signal's exporter (``TRACES``, ``METRICS``): a bounded one, or
    ``None`` when a credential provider is to give the exporter its session."""
    providers = (
        "OTEL_PYTHON_EXPORTER_OTLP_HTTP_CREDENTIAL_PROVIDER",
        f"OTEL_PYTHON_EXPORTER_OTLP_HTTP_{signal}_CREDENTIAL_PROVIDER",
    )
    if any(os.environ.get(name) for name in providers):
        return None
    return bounded_session()


def bounded_session(max_bytes: int = MAX_ANSWER_BYTES) -> requests.Session:
    """A session whose every answer's body is at most ``max_bytes`` (for the exporters' ``session=``)."""
    session = requests.Session()
    adapter = _BoundedAnswers(max_bytes)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


class _BoundedAnswers(HTTPAdapter):
    def __init__(self, max_bytes: int) -> None:
        super().__init__()
        self.max_bytes = max_bytes

    def send(
        self,
        request: PreparedRequest,
        stream: bool = False,
        timeout: float | tuple[float | None, float | None] | None = None,
        verify: bool | str = True,
        cert: str | tuple[str, str] | None = None,
        proxies: dict[str, str] | None = None,
    ) -> Response:
        # streamed: only the head is read here, the body below, bounded
        response = super().send(request, True, timeout, verify, cert, proxies)
        seconds = timeout[1] if isinstance(timeout, tuple) else timeout  # the read timeout
        # (a urllib3 ``Timeout`` object, which the exporters never pass: its own per-read limits)
        deadline = time.monotonic() + seconds if isinstance(seconds, (int, float)) else None
        raw = response.raw
        # what has arrived, at most one receive: a collector sending a byte at a time meets the
        # deadline (urllib3 1.x has only ``read``, which waits for the whole slice)
        read = getattr(raw, "read1", None) or raw.read
        body = bytearray()
        whole = False
        try:
            while len(body) <= self.max_bytes and (deadline is None or time.monotonic() < deadline):
                chunk = read(_READ_BYTES, decode_content=False)
                if not chunk:
                    whole = True
                    break
                body += chunk
        except Exception:  # the status is what an export needs: keep what arrived
            whole = False
        if not whole:
            raw.close()  # the rest is never read: this connection is not used again
        raw.release_conn()
        encoded = response.headers.get("content-encoding", "identity").strip().lower() != "identity"
        # what was read stands in for the connection (``raw`` is where requests reads a body from)
        response.raw = io.BytesIO(b"" if encoded else bytes(body[: self.max_bytes]))
        return response
