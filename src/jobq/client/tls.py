"""TLS for the clients: the ``ssl.SSLContext`` a client connects with, made once from its
``tls=`` and ``tls_ca=`` arguments, and telling a closed TLS connection from one that only
received TLS records of its own (session tickets) while it was idle.
"""

from __future__ import annotations

import os
import ssl
from typing import TypeAlias

#: what ``tls=`` takes: off (False or None), on with the system's CAs, or a context made by
#: the caller
TLSOption: TypeAlias = bool | ssl.SSLContext | None
#: a CA file (PEM): its certificates are the ones trusted
CAFile: TypeAlias = str | os.PathLike[str]


def client_context(tls: TLSOption, tls_ca: CAFile | None) -> ssl.SSLContext | None:
    """The context to connect with, or None for plain TCP.

    ``tls_ca`` (a PEM file of the certificates to trust, such as a self-signed server's
    own certificate) turns TLS on by itself; ``tls=True`` trusts the system's CAs. The
    server's certificate must name the host the client connects to (an IP address too).
    A CA file that cannot be read raises ``OSError``, one that does not parse
    ``ssl.SSLError``.
    """
    if isinstance(tls, ssl.SSLContext):
        if tls_ca is not None:
            raise ValueError("give tls_ca or an ssl.SSLContext as tls, not both")
        return tls
    if not isinstance(tls, bool | None):
        raise TypeError(f"tls is a bool or an ssl.SSLContext, not {type(tls).__name__}")
    if tls_ca is not None:
        return ssl.create_default_context(cafile=os.fspath(tls_ca))
    return ssl.create_default_context() if tls else None


def closed_while_idle(sock: ssl.SSLSocket) -> bool:
    """Whether an idle TLS connection whose socket is readable was closed (or was sent
    bytes nobody asked for): a readable socket may hold only TLS records, as the session
    tickets a TLS 1.3 server sends after the handshake, which carry no reply. Reads
    without blocking; the caller sets the timeout again before its next exchange."""
    try:
        sock.setblocking(False)
        sock.recv(1)  # b"": the end; bytes: a reply nobody asked for
    except ssl.SSLWantReadError:
        return False  # records only: no data, no end
    except (OSError, ValueError):
        return True
    return True

