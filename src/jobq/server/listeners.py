"""The TCP listeners of the workq protocol: ``--listen``, with TLS when the server has a
certificate (``--tls-cert``/``--tls-key``), and ``--listen-plain``, a second listener of plain
TCP beside it for workq clients that cannot speak TLS.

Both serve the same connections (one protocol factory); only the transport differs.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from collections.abc import Callable

from jobq.config import ConfigError, ServerConfig

logger = logging.getLogger("jobq.server")

#: how long a client may take to finish the TLS handshake before its connection is closed
#: (asyncio's own default is a minute); the connection counts for nothing until then
TLS_HANDSHAKE_TIMEOUT_S = 10.0
#: connections the OS queues before the server accepts them
BACKLOG = 1024


class ListenError(OSError):
    """A listener that cannot be opened, with its address (for the one-line message)."""

    def __init__(self, address: str, exc: OSError) -> None:
        # uvloop's strerror is a sentence of its own; the C library's is the usual one
        reason = os.strerror(exc.errno) if exc.errno else exc.strerror or str(exc)
        super().__init__(exc.errno, reason)
        self.address = address

    def __str__(self) -> str:
        return f"cannot listen on {self.address}: {self.strerror}"


def server_tls_context(cert: str, key: str) -> ssl.SSLContext:
    """The context TLS connections are served with (TLS 1.2 at least, as Python's
    defaults); :class:`ConfigError` if the files cannot be read or do not match."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:  # ssl.SSLError: not PEM, or a key of another
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"--tls-cert {cert} / --tls-key {key}: {reason}") from None
    return context


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def open_listeners(
    factory: Callable[[], asyncio.Protocol], config: ServerConfig
) -> list[asyncio.Server]:
    """The servers of ``config``'s listeners, the ``--listen`` one first (TLS when the
    config has a certificate), then the ``--listen-plain`` one if there is one."""
    loop = asyncio.get_running_loop()
    tls = None
    if config.tls_cert is not None and config.tls_key is not None:
        tls = server_tls_context(config.tls_cert, config.tls_key)
    main = await loop.create_server(
        factory,
        config.host,
        config.port,
        backlog=BACKLOG,
        reuse_address=True,
        ssl=tls,
        ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S if tls is not None else None,
    )
    servers = [main]
    if config.listen_plain is not None:
        host, port = config.listen_plain
        try:
            plain = await loop.create_server(
                factory, host, port, backlog=BACKLOG, reuse_address=True
            )
        except OSError as exc:
            main.close()
            raise ListenError(_address(host, port), exc) from exc
        servers.append(plain)
        bound_host, bound_port = plain.sockets[0].getsockname()[:2]
        logger.info(
            "plain TCP (no TLS) listener on %s, beside TLS on the main one",
            _address(bound_host, bound_port),
        )
    return servers
