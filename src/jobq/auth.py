"""Authentication: one shared token for the TCP protocol, the HTTP API and the clients.

What a token is (:func:`encode_token`: 1-4096 printable ASCII characters), how it is compared
(:func:`token_matches`, in constant time) and the two refusals both frontends give. The TCP
``auth <token>`` command is :mod:`jobq.server.auth`, the HTTP ``Authorization: Bearer`` check
:mod:`jobq.http.auth`; clients take theirs as ``token=`` (:class:`jobq.client.Client`, the
worker's runtime) or from the command line's ``--auth-token`` options. A token is never logged.
"""

from __future__ import annotations

import hmac
import re

AUTH_REQUIRED = "Authentication required"
INVALID_TOKEN = "Invalid token"
#: the refusal of what a token's role may not do: ``Forbidden: <command> needs the <role> role``
FORBIDDEN = "Forbidden"
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
