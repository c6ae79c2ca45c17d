"""The workq protocol's ``auth <token>`` command, and the check a connection runs before
each request when the server has a token (:mod:`jobq.auth` holds the token's rules).

A connection of a server with a token must send ``auth <token>`` before any other command;
until then every command is refused with ``-CLIENT-ERROR Authentication required`` and a wrong
token with ``-CLIENT-ERROR Invalid token``. Without a token ``auth`` is accepted and ignored,
so clients that always send it work, and workq clients work unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Protocol

from jobq.auth import AUTH_REQUIRED, INVALID_TOKEN, token_matches
from jobq.server import protocol as p


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
