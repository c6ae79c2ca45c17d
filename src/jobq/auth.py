"""Authentication: one shared token for the TCP protocol, the HTTP API and the clients.

What a token is (:func:`encode_token`: 1-4096 printable ASCII characters), how it is compared
(:func:`token_matches`, in constant time) and the two refusals both frontends give. The TCP
``auth <token>`` command is :mod:`jobq.server.auth`, the HTTP ``Authorization: Bearer`` check
:mod:`jobq.http.auth`, and a client that authenticates is :func:`authenticating_client_class`.
A token is never logged.
"""

from __future__ import annotations

import hmac
import re
from typing import Any

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


def authenticating_client_class(token: str) -> type[Any]:
    """A :class:`jobq.client.Client` subclass that sends ``auth <token>`` on each new
    connection (for ``jobq up``'s worker and ``jobq status`` until the client library takes
    a token itself)."""
    from jobq.client import Client, ClientError, ConnectionLost

    line = b"auth " + token.encode("utf-8") + b"\r\n"

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
