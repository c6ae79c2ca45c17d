"""The HTTP front end's way into the core: the same path a TCP request takes.

A request becomes a protocol request (``Extension(word, body)``, ``Delete(id)``, ...) and
runs through :meth:`Core.execute` with a :class:`~jobq.server.core.Slot` of its own; its
reply is released, like a TCP reply, only once the command log holds what it acknowledges.
:func:`call` awaits that reply and :func:`to_outcome` turns the reply bytes into an HTTP
status and a JSON body: the one place where protocol replies become HTTP responses.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any

from jobq.server import protocol as p
from jobq.server.core import Core, Slot

logger = logging.getLogger("jobq.http")

#: HTTP status for each protocol error kind
_STATUS = {
    p.CLIENT_ERROR: 400,
    p.NOT_FOUND: 404,
    p.TIMEOUT: 504,
    p.SERVER_ERROR: 503,
}
#: client errors that say the job's state does not allow the operation
_CONFLICTS = ("Job is ", "Duplicate", "Lease not held", "Schedule is ")


@dataclass(frozen=True, slots=True)
class Outcome:
    """An HTTP status and the JSON body to send (already encoded)."""

    status: int
    body: bytes

    @property
    def ok(self) -> bool:
        return self.status < 400

    def json(self) -> Any:
        return json.loads(self.body)


def error_body(text: str) -> bytes:
    """``{"error": text}``; a text that may quote client input is cut like a TCP error
    line (at :data:`~jobq.server.protocol.MAX_ERROR_TEXT_BYTES`, ending in ``...``)."""
    if len(text) > p.MAX_ERROR_TEXT_BYTES:
        text = text[: p.MAX_ERROR_TEXT_BYTES - len(p.ELLIPSIS)] + "..."
    return json.dumps({"error": text}).encode()


def error(status: int, text: str) -> Outcome:
    return Outcome(status, error_body(text))


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


async def call(core: Core, request: p.Request) -> bytes:
    """Run ``request`` in the core; the reply bytes, once the log holds its commands."""
    waiter = _Waiter(asyncio.get_running_loop())
    try:
        core.execute(waiter, request, waiter.slot)
    except Exception:  # a bug in a handler: refuse the request rather than answer 500
        logger.exception("request %s failed", type(request).__name__)
        return p.client_error("Invalid request")
    try:
        return await waiter.future
    except asyncio.CancelledError:
        core.cancel(waiter.slot)  # the HTTP client went away: withdraw a waiting request
        raise


def to_outcome(reply: bytes, *, ok_body: bytes = b"{}") -> Outcome:
    """The HTTP status and JSON body for a protocol reply."""
    if reply.startswith(b"+OK"):
        line, _, rest = reply.partition(b"\r\n")
        words = line.split()
        if len(words) == 2 and rest.endswith(b"\r\n"):
            size = int(words[1])
            body = rest[:size]
            if len(body) == size:
                return Outcome(200, body)
        return Outcome(200, ok_body)
    if reply.startswith(b"-"):
        text_line = reply[1:].split(b"\r\n", 1)[0].decode("utf-8", "replace")
        kind, _, text = text_line.partition(" ")
        status = _STATUS.get(kind)
        if status is None:
            return error(503, "Unexpected reply")
        if kind == p.CLIENT_ERROR and text.startswith(_CONFLICTS):
            status = 409
        elif kind == p.CLIENT_ERROR and text.lower().endswith("not found"):
            status = 404  # "Schedule not found"
        if kind == p.NOT_FOUND:
            text = text or "Not found"
        elif kind == p.SERVER_ERROR:
            text = text or "Server error"
        elif kind == p.TIMEOUT:
            text = text or "Timeout"
        return error(status, text)
    return error(503, "Unexpected reply")


async def extension(core: Core, word: str, body: dict[str, Any]) -> Outcome:
    """Run the extension command ``word`` with a JSON ``body``."""
    if word not in core.dispatcher.extensions.handlers:
        return error(404, f"The server has no {word!r} command")
    data = json.dumps(body, separators=(",", ":")).encode()
    if len(data) > p.MAX_EXTENSION_BODY_BYTES:
        return error(413, "Request body too large")
    return to_outcome(await call(core, p.Extension(word, data)))


def has_command(core: Core, word: str) -> bool:
    return word in core.dispatcher.extensions.handlers
