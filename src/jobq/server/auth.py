"""The workq protocol's ``auth <token>`` command (:mod:`jobq.auth` holds a token's rules).

A connection of a server with tokens must send ``auth <token>`` before any other command;
until then every command is refused with ``-CLIENT-ERROR Authentication required`` and a
wrong token with ``-CLIENT-ERROR Invalid token`` (answered by the connection,
``tcp.py``; the tokens are ``tokens.py``'s). Without tokens ``auth`` is accepted and
ignored, so clients that always send it work, and workq clients work unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

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
