"""Refusing what another web site's page makes the user's browser do: writes (CSRF), and
on a server without tokens, any request under a name that is not loopback (DNS rebinding).

A server without a token (the default, on loopback) takes any request that reaches it: a
page from another site, open in the user's browser, can reach it too with a form or a
``no-cors`` fetch (its answer hidden from the page, its effect not). A browser says where a
request comes from: ``Sec-Fetch-Site`` (``same-origin``, ``none`` for what the user typed or
bookmarked, else ``same-site`` or ``cross-site``) and, on older browsers, ``Origin``. So a
request whose method may change something (not GET, HEAD or OPTIONS) is refused with 403
when ``Sec-Fetch-Site`` is neither ``same-origin`` nor ``none``, or, without it, when its
``Origin`` names another host than its ``Host`` (the rule of Go's
``http.CrossOriginProtection``). Clients that are no browser (the CLI, curl, the Python
client) send neither header and are not concerned. Reads stay open: the browser keeps their
answers from the other site's page.

Unless the site's own name points at the server: DNS rebinding (a name of the attacker's that
first resolves to its server, which serves the page, then to ``127.0.0.1``) makes the page
same-origin with a server without tokens, reads and writes alike. Such a request still
carries the attacker's name in ``Host``; a server without tokens that listens on loopback
therefore answers only loopback names (``localhost``, ``*.localhost``, loopback addresses),
as Jupyter and the Docker daemon do, and 403 to any other.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from jobq.config import is_loopback
from jobq.http.auth import ASGIApp, Receive, Scope, Send, send_json

CROSS_ORIGIN = "Forbidden: a cross-origin request from a browser may not change anything"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: what ``Sec-Fetch-Site`` says of a request the server's own pages (or the user) made
_OWN_SITES = frozenset({b"same-origin", b"none"})


def is_cross_origin(method: str, headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether a browser made this request for another site's page and it may change
    something."""
    if method in SAFE_METHODS:
        return False
    fetch_site = origin = host = None
    for key, value in headers:
        if key == b"sec-fetch-site":
            fetch_site = value.strip().lower()
        elif key == b"origin":
            origin = value.strip()
        elif key == b"host":
            host = value.strip().lower()
    if fetch_site is not None:
        return fetch_site not in _OWN_SITES
    if origin is None:
        return False  # no browser, or one that says nothing: nothing to go by
    try:
        netloc = urlsplit(origin.decode("latin-1")).netloc.lower()
    except ValueError:
        return True
    return not netloc or host is None or netloc != host.decode("latin-1")


class CrossOriginGuard:
    """ASGI middleware: 403 JSON for a write a browser made for another site's page."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and is_cross_origin(scope["method"], scope["headers"]):
            await send_json(send, 403, {"error": CROSS_ORIGIN})
            return
        await self.app(scope, receive, send)


NOT_LOOPBACK = (
    "Forbidden: a server without a token answers only loopback names (localhost, "
    "127.0.0.1, [::1]) in Host; give it a token to serve it under another name"
)


def is_loopback_name(host: bytes) -> bool:
    """Whether a ``Host`` header (``name[:port]``) names a loopback address or localhost."""
    text = host.decode("latin-1").strip().lower()
    if text.startswith("["):
        name = text[1:].partition("]")[0]
    else:
        name = text.rpartition(":")[0] if text.count(":") == 1 else text
    return name.rstrip(".").endswith(".localhost") or is_loopback(name)


class LoopbackHostGuard:
    """ASGI middleware of a server without tokens on loopback: 403 JSON for a request whose
    ``Host`` is not a loopback name (one without ``Host``, HTTP/1.0, is no browser's)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for key, value in scope["headers"]:
                if key == b"host":
                    if not is_loopback_name(value):
                        await send_json(send, 403, {"error": NOT_LOOPBACK})
                        return
                    break
        await self.app(scope, receive, send)
