"""Refusing an HTTP request sent to the workq port: a web page's cross-protocol request.

A browser lets any page send a POST to any port of the user's machine, its body as the page
likes. A server without tokens (the default, on loopback) would run the workq commands in
such a body after refusing the request's header lines one by one, as Redis did until it
closed these connections. No workq command starts like an HTTP request line, so a
connection whose first bytes are one (``POST /``, ``GET /``...) is answered with one error
line and closed, and none of its bytes are parsed (docs/server.md, "Security").
"""

from __future__ import annotations

import logging
import time
from typing import Final

logger = logging.getLogger("jobq.server")

#: the request methods of HTTP: a request line starts with one and a space
HTTP_METHODS: Final = frozenset(
    {b"GET", b"HEAD", b"POST", b"PUT", b"DELETE", b"CONNECT", b"OPTIONS", b"TRACE", b"PATCH"}
)
#: the answer before the connection closes
HTTP_REFUSAL: Final = "HTTP request on the workq port (HTTP is served on --http)"
#: at most one log line per this many seconds
LOG_INTERVAL_S: Final = 10.0
_last_logged_s = -LOG_INTERVAL_S


def starts_http_request(head: bytes) -> bool | None:
    """Whether a connection's first bytes ``head`` start an HTTP request line; None while
    they are a method's beginning and too few to tell."""
    word, space, _ = head.partition(b" ")
    if space:
        return word in HTTP_METHODS
    if any(method.startswith(word) for method in HTTP_METHODS):
        return None
    return False


def log_refusal(address: str) -> None:
    """Say that an HTTP request came to the workq port (at most every LOG_INTERVAL_S)."""
    global _last_logged_s
    now_s = time.monotonic()
    if now_s - _last_logged_s < LOG_INTERVAL_S:
        return
    _last_logged_s = now_s
    source = f" from {address}" if address else ""
    logger.warning(
        "refused an HTTP request on the workq port%s and closed it: a web page's "
        "cross-protocol request, or a client given the workq port for the HTTP one", source,
    )
