"""The HTTP API's token check: ``Authorization: Bearer <token>`` on every route but the web
UI's shell (the page that asks for the token); otherwise 401 with a JSON error, after a
delay that grows with the address's recent failures (the audit trail counts them).

The token's principal is the request's (:data:`PRINCIPAL`): the routes' requests run
through the core with it (:mod:`jobq.http.bridge`), where the permission table decides
(:mod:`jobq.server.access`). :mod:`jobq.server.tokens` holds the tokens.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from jobq.auth import AUTH_REQUIRED, INVALID_TOKEN
from jobq.server.tokens import digest

if TYPE_CHECKING:
    from jobq.server.access import Principal
    from jobq.server.audit import AuditTrail
    from jobq.server.tokens import Access

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: whom the HTTP request being served acts for (None: a server without tokens)
PRINCIPAL: contextvars.ContextVar[Principal | None] = contextvars.ContextVar(
    "jobq_principal", default=None
)

#: the tokens and the token's digest of the HTTP request being served (None: a server
#: without tokens), to find its principal again in a long answer (:func:`principal_now`)
_TOKEN: contextvars.ContextVar[tuple[Access, bytes] | None] = contextvars.ContextVar(
    "jobq_token", default=None
)


class Revoked(Exception):
    """The token of the HTTP request being served names nobody any more."""


def principal_now() -> Principal | None:
    """The principal of the HTTP request being served as the tokens name it now (they may
    have been reloaded since it came): a long answer, a log follow, asks before each step,
    so that a changed role applies at once. None on a server without tokens; raises
    :class:`Revoked` once its token was revoked."""
    held = _TOKEN.get()
    if held is None:
        return None
    access, key = held
    principal = access.by_digest(key)
    if principal is None:
        raise Revoked
    return principal


#: what the browser may load without a token: the UI's shell, which asks for it
PUBLIC_PATHS = frozenset({"/", "/index.html", "/favicon.ico"})
PUBLIC_PREFIXES = ("/static/",)


def is_public(method: str, path: str) -> bool:
    if method not in ("GET", "HEAD"):
        return False
    return path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES)


async def send_json(
    send: Send, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


class BearerAuth:
    """ASGI middleware: ``Authorization: Bearer <token>`` on every non-public route; the
    token's principal is :data:`PRINCIPAL` while the route runs."""

    def __init__(self, app: ASGIApp, access: Access, audit: AuditTrail) -> None:
        self.app = app
        self.access = access
        self.audit = audit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or is_public(scope["method"], scope["path"]):
            await self.app(scope, receive, send)
            return
        given = None
        for key, value in scope["headers"]:
            if key == b"authorization":
                scheme, _, rest = value.partition(b" ")
                if scheme.lower() == b"bearer":
                    given = rest.strip()
                break
        key = None if given is None else digest(given)
        principal = None if key is None else self.access.by_digest(key)
        if principal is not None:
            assert key is not None
            reset = PRINCIPAL.set(principal)
            reset_token = _TOKEN.set((self.access, key))
            try:
                await self.app(scope, receive, send)
            finally:
                _TOKEN.reset(reset_token)
                PRINCIPAL.reset(reset)
            return
        error = AUTH_REQUIRED
        if given is not None:  # a wrong token is counted and waits; a missing one is no guess
            error = INVALID_TOKEN
            client = scope.get("client")
            address = str(client[0]) if client else ""
            await asyncio.sleep(self.audit.auth_failed(address, "http", "invalid token"))
        await send_json(send, 401, {"error": error}, [(b"www-authenticate", b"Bearer")])
