"""jobq's HTTP front end: the JSON API, the web UI and /metrics (docs/http.md).

``await start_http(core, host=..., port=..., auth_token=..., tls_cert=..., tls_key=...)``
serves them in the server's event loop and returns an awaitable stopper. FastAPI and
uvicorn are imported only when this is called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jobq.http.server import HttpServer
    from jobq.server.core import Core

__all__ = ["start_http"]


async def start_http(core: Core, **options: Any) -> HttpServer:
    """See :func:`jobq.http.server.start_http`."""
    from jobq.http.server import start_http as start

    return await start(core, **options)
