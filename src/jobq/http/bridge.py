"""The HTTP front end's way into the core: the same path a TCP request takes.

A route's request (``Extension(word, body)``, or one of the dispatcher's internal requests)
runs through :meth:`Core.execute` with a :class:`~jobq.server.core.Slot` of its own; its
reply is released, like a TCP reply, only once the command log holds what it acknowledges.
:func:`call` awaits that reply and :func:`to_outcome` turns it into an HTTP status and a
JSON body: the one place where protocol replies become HTTP responses (a refusal by its
kind, :mod:`jobq.http.errors`). A request runs for the principal of the HTTP request being
served (:data:`jobq.http.auth.PRINCIPAL`), and the core checks it as it checks TCP's.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from jobq.http.auth import PRINCIPAL
from jobq.http.errors import Outcome, error, refusal
from jobq.server import protocol as p
from jobq.server.access import Principal
from jobq.server.access import allowed as role_allows
from jobq.server.core import Core, Slot

logger = logging.getLogger("jobq.http")


class _Waiter:
    """One HTTP request as a connection of the core (``ReplySink``): its reply slot and the
    future that learns the reply."""

    __slots__ = ("future", "slot")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.future: asyncio.Future[bytes] = loop.create_future()
        self.slot = Slot(self)

    def slot_ready(self) -> None:
        data = self.slot.data
        if data is not None and not self.future.done():
            self.future.set_result(data)

    def unblock(self) -> None:
        self.slot_ready()


async def call(core: Core, request: p.Request, principal: Principal | None = None) -> bytes:
    """Run ``request`` in the core for ``principal`` (default: the HTTP request's); the
    reply bytes, once the log holds its commands."""
    waiter = _Waiter(asyncio.get_running_loop())
    if principal is None:
        principal = PRINCIPAL.get()
    try:
        core.execute(waiter, request, waiter.slot, principal)
    except Exception:  # a bug in a handler: refuse the request rather than answer 500
        logger.exception("request %s failed", type(request).__name__)
        return p.client_error("Invalid request")
    try:
        return await waiter.future
    except asyncio.CancelledError:
        core.cancel(waiter.slot)  # the HTTP client went away: withdraw a waiting request
        raise


def to_outcome(reply: bytes, *, ok_body: bytes = b"{}") -> Outcome:
    """The HTTP status and JSON body for a protocol reply: a refusal's status by its kind
    (:mod:`jobq.http.errors`); a data block is the body, else ``ok_body``."""
    if isinstance(reply, p.ErrorReply):
        return refusal(reply)
    if reply.startswith(b"+OK"):
        line, _, rest = reply.partition(b"\r\n")
        words = line.split()
        if len(words) == 2 and rest.endswith(b"\r\n"):
            size = int(words[1])
            body = rest[:size]
            if len(body) == size:
                return Outcome(200, body)
        return Outcome(200, ok_body)
    return error(503, "Unexpected reply")


async def extension(
    core: Core, word: str, body: dict[str, Any], principal: Principal | None = None
) -> Outcome:
    """Run the extension command ``word`` with a JSON ``body`` (for ``principal``, default
    the HTTP request's)."""
    if word not in core.dispatcher.extensions.handlers:
        return error(404, f"The server has no {word!r} command")
    data = json.dumps(body, separators=(",", ":")).encode()
    if len(data) > p.MAX_EXTENSION_BODY_BYTES:
        return error(413, "Request body too large")
    return to_outcome(await call(core, p.Extension(word, data), principal))


def allowed(core: Core, kind: str) -> bool:
    """Whether the HTTP request being served may run requests of ``kind`` (for a route
    that does not run through the core: ``/metrics``)."""
    if not core.dispatcher.checks_access:
        return True
    principal = PRINCIPAL.get()
    return principal is not None and role_allows(principal.role, kind)


def has_command(core: Core, word: str) -> bool:
    return word in core.dispatcher.extensions.handlers
