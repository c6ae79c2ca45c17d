"""The HTTP API's token check: ``Authorization: Bearer <token>`` on every route but the web
UI's shell (the page that asks for the token); otherwise 401 with a JSON error.
:mod:`jobq.auth` holds the token's rules.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from jobq.auth import AUTH_REQUIRED, INVALID_TOKEN, token_matches

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

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
    """ASGI middleware: ``Authorization: Bearer <token>`` on every non-public route."""

    def __init__(self, app: ASGIApp, token: bytes) -> None:
        self.app = app
        self.token = token

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
        if given is None:
            error = AUTH_REQUIRED
        elif token_matches(self.token, given):
            await self.app(scope, receive, send)
            return
        else:
            error = INVALID_TOKEN
        await send_json(send, 401, {"error": error}, [(b"www-authenticate", b"Bearer")])
