"""Authentication: one shared token, for TCP and HTTP.

TCP: a connection of a server with a token must send ``auth <token>`` before any other
command; until then every command is refused with ``-CLIENT-ERROR Authentication required``
and a wrong token with ``-CLIENT-ERROR Invalid token``. Without a token ``auth`` is accepted
and ignored, so clients that always send it work, and workq clients work unchanged.

HTTP: every route but the web UI's shell (the page that asks for the token) needs
``Authorization: Bearer <token>``; otherwise 401 with a JSON error.

Tokens are printable ASCII (:func:`encode_token`), compared in constant time
(``hmac.compare_digest``) and never logged.
"""

from __future__ import annotations

import hmac
import json
import re
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any, ClassVar, Protocol

from jobq.server import protocol as p

AUTH_REQUIRED = "Authentication required"
INVALID_TOKEN = "Invalid token"
#: longest token accepted, in bytes
MAX_TOKEN_BYTES = 4096


def token_matches(expected: bytes, given: bytes) -> bool:
    """Constant-time comparison (for equal lengths; the length itself is not secret)."""
    return hmac.compare_digest(expected, given)


def encode_token(token: str | None) -> bytes | None:
    """The configured token as bytes; None or empty means no authentication.

    ValueError unless it is 1-4096 printable ASCII characters (``!`` to ``~``). A TCP
    client sends the token in a command line, an HTTP client in a header, a browser through
    ``fetch``: only ASCII is the same bytes in all three (a non-ASCII token matched over
    HTTP but never over TCP), so the server refuses any other token when it starts.
    """
    if not token:
        return None
    if len(token) > MAX_TOKEN_BYTES or _TOKEN_RE.fullmatch(token) is None:
        raise ValueError("an auth token is 1-4096 printable ASCII characters, without spaces")
    return token.encode("ascii")


_TOKEN_RE = re.compile(r"[!-~]+")


# ---------------------------------------------------------------------------------- TCP


class Auth(p.Request, frozen=True):
    """``auth <token>``"""

    command: ClassVar[str] = "auth"
    token: str

    def to_bytes(self) -> bytes:
        return b"auth " + self.token.encode("utf-8") + p.CRLF

    def __repr__(self) -> str:  # never show the token
        return "Auth(token=***)"


def _parse_auth(args: tuple[str, ...], flags: Mapping[str, str], data: bytes | None) -> p.Request:
    if flags or len(args) != 1:
        raise p.ClientError(p.INVALID_COMMAND_ARGS)
    return Auth(args[0])


def register_auth_command(registry: p.CommandRegistry | None = None) -> None:
    """Add ``auth <token>`` to ``registry`` (default: the protocol's default registry).
    Idempotent."""
    target = registry if registry is not None else p.DEFAULT_REGISTRY
    spec = target.get("auth")
    if spec is not None and spec.parse is _parse_auth:
        return
    target.register("auth", _parse_auth, replace=True)


class AuthState(Protocol):
    """What :func:`check_auth` needs of a connection."""

    #: the server's token (None: no authentication)
    auth_token: bytes | None
    #: whether this connection sent the right token
    authenticated: bool


def check_auth(conn: AuthState, request: p.Request) -> bytes | None:
    """The reply to send instead of running ``request``, or None to run it.

    ``auth`` itself is always answered here: ``+OK`` when the token matches (or the server
    has none), else ``-CLIENT-ERROR Invalid token``. Other commands of a connection that has
    not authenticated get ``-CLIENT-ERROR Authentication required``.
    """
    expected = conn.auth_token
    if isinstance(request, Auth):
        if expected is None:
            return p.ok()
        if token_matches(expected, request.token.encode("utf-8", "surrogateescape")):
            conn.authenticated = True
            return p.ok()
        conn.authenticated = False
        return p.client_error(INVALID_TOKEN)
    if expected is None or conn.authenticated:
        return None
    return p.client_error(AUTH_REQUIRED)


# ---------------------------------------------------------------------------------- HTTP

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


# ---------------------------------------------------------------------------------- clients


def authenticating_client_class(token: str) -> type[Any]:
    """A :class:`jobq.client.Client` subclass that sends ``auth <token>`` on each new
    connection (for ``jobq up``'s worker and ``jobq status`` until the client library takes
    a token itself)."""
    from jobq.client import Client, ClientError, ConnectionLost

    line = b"auth " + token.encode("utf-8") + p.CRLF

    class AuthClient(Client):
        def _connect(self) -> Any:
            conn = super()._connect()
            try:
                conn.sock.sendall(line)
                reply = b""
                while not reply.endswith(b"\r\n") and len(reply) < 4096:
                    chunk = conn.sock.recv(4096 - len(reply))
                    if not chunk:
                        break
                    reply += chunk
            except OSError as exc:
                self._drop(conn)
                raise ConnectionLost(f"authentication failed: {exc}") from exc
            if not reply.startswith(b"+OK"):
                self._drop(conn)
                text = reply.decode("utf-8", "replace").strip().lstrip("-")
                if not text:
                    raise ConnectionLost("authentication failed: no reply")
                raise ClientError(text.removeprefix("CLIENT-ERROR ").strip())
            return conn

    return AuthClient
