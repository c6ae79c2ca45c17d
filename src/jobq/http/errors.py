"""HTTP statuses for refusals: one table, by the kind of refusal (:class:`ErrorKind`) that
every protocol error reply carries, and the JSON error body, ``{"error": text}``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from jobq.engine.errors import ErrorKind
from jobq.server import protocol as p

#: the HTTP status for each kind of refusal
STATUS = {
    ErrorKind.INVALID: 400,
    ErrorKind.NOT_FOUND: 404,
    ErrorKind.CONFLICT: 409,
    ErrorKind.TIMEOUT: 504,
    ErrorKind.UNAVAILABLE: 503,
    ErrorKind.FORBIDDEN: 403,
    ErrorKind.FULL: 507,
    ErrorKind.READONLY: 409,
}
#: the text for an error reply that has none (workq's ``-NOT-FOUND`` and ``-TIMEOUT``)
_DEFAULT_TEXT = {
    ErrorKind.NOT_FOUND: "Not found",
    ErrorKind.TIMEOUT: "Timeout",
    ErrorKind.UNAVAILABLE: "Server error",
    ErrorKind.FULL: "Server full",
}


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


def refusal(reply: p.ErrorReply) -> Outcome:
    """The status for the reply's kind, and the reply's text."""
    line = reply[1:].split(b"\r\n", 1)[0].decode("utf-8", "replace")
    text = line.partition(" ")[2] or _DEFAULT_TEXT.get(reply.kind, "")
    if reply.kind is ErrorKind.READONLY:  # a standby: ``-READONLY <primary>``
        body = {"error": f"read-only standby: changes go to the primary at {text}"}
        return Outcome(409, json.dumps({**body, "primary": text}).encode())
    return error(STATUS[reply.kind], text)
