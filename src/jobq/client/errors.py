"""The exceptions the client raises, and the one for each error reply of the protocol.

Every error of a request is a :class:`JobqError` carrying the reply's ``kind`` and ``text``;
a connection that fails (or a reply that breaks the protocol) is a :class:`ConnectionLost`.
The protocol's replies carry a kind and a text only, so the refusals that have a class of
their own (:class:`LeaseLost`, :class:`AuthenticationFailed`, :class:`Forbidden`) are told by
their text, in one table (``_BY_TEXT``; a forbidden request's text names the command).
"""

from __future__ import annotations

from jobq.auth import AUTH_REQUIRED, FORBIDDEN, INVALID_TOKEN
from jobq.server import protocol as p

#: the error text of :class:`LeaseLost`
LEASE_NOT_HELD = "Lease not held"
#: how the error text of :class:`NotPrimary` begins
NOT_THE_PRIMARY = "Not the primary"


class JobqError(Exception):
    """Base of every error this module raises for a request.

    :ivar kind: the error reply's kind (``CLIENT-ERROR``, ...), or "" for connection errors
    :ivar text: the error text after the kind (may be empty)
    """

    kind: str = ""

    def __init__(self, text: str = "", *, kind: str | None = None) -> None:
        if kind is not None:
            self.kind = kind
        self.text = text
        shown = f"{self.kind} {text}".strip() if self.kind else text
        super().__init__(shown)


class ClientError(JobqError):
    """``-CLIENT-ERROR <text>``: the server rejected the command (``Duplicate job``, ...)."""

    kind = p.CLIENT_ERROR


class LeaseLost(ClientError):
    """``-CLIENT-ERROR Lease not held``: this worker no longer holds the job's lease (it ran
    out and another worker adopted the job, or the job finished or was released)."""


class AccessRefused(ClientError):
    """The server refused this client what its token (or the lack of one) does not allow:
    retrying cannot help (a worker stops on it)."""


class AuthenticationFailed(AccessRefused):
    """The server refused this client's token: ``-CLIENT-ERROR Invalid token`` to its
    ``auth``, or ``-CLIENT-ERROR Authentication required`` (the server has a token and the
    client gave none). Raised for the whole request or batch; the connection is closed."""


class Forbidden(AccessRefused):
    """``-CLIENT-ERROR Forbidden: <command> needs the <role> role``: the token's role may
    not do that (a viewer's token trying to lease, say)."""


class ServerError(JobqError):
    """``-SERVER-ERROR <text>``: the server could not do it (e.g. its log is unwritable)."""

    kind = p.SERVER_ERROR


class JobTimeout(JobqError):
    """``-TIMEOUT``: nothing happened within the request's wait-timeout (lease, run, result)."""

    kind = p.TIMEOUT


class NotFound(JobqError):
    """``-NOT-FOUND``: no job with that id."""

    kind = p.NOT_FOUND


class ConnectionLost(JobqError):
    """The connection failed: connect refused, dropped mid-request, or a malformed reply.

    A request that raises this may or may not have run on the server.
    """


class ReplyTimeout(ConnectionLost):
    """The reply did not arrive within the client's timeout; the connection was closed."""


class OutcomeUnknown(ConnectionLost):
    """A client of several servers lost its connection after it sent a request that is not
    safe to send twice (``lease``, ``cancel``...): it may or may not have run, and it was
    not sent again (:mod:`jobq.client.failover` says which requests are)."""


class NoPrimary(ConnectionLost):
    """A client of several servers found no primary before its deadline: the servers it
    reached were standbys, and the primary they named could not be reached."""


class NotPrimary(ServerError):
    """``-SERVER-ERROR Not the primary: ...``: a primary that was deposed (fenced) and knows
    no new primary yet refused a change, or answered one it had taken before it was fenced
    (``in_flight``: that change may or may not have been applied). A client of several
    servers looks for the primary among its other addresses."""

    primary = ""

    @property
    def in_flight(self) -> bool:
        return self.text == p.FENCED_IN_FLIGHT


class ReadOnly(JobqError):
    """``-READONLY <host:port>``: a standby refused a change; ``primary`` is the address it
    names. A client of several servers sends the change there instead."""

    kind = "READONLY"

    @property
    def primary(self) -> str:
        return self.text


_ERRORS: dict[str, type[JobqError]] = {
    p.CLIENT_ERROR: ClientError,
    p.SERVER_ERROR: ServerError,
    p.TIMEOUT: JobTimeout,
    p.NOT_FOUND: NotFound,
    ReadOnly.kind: ReadOnly,
}


#: the ``-CLIENT-ERROR`` texts that have a class of their own
_BY_TEXT: dict[str, type[ClientError]] = {
    LEASE_NOT_HELD: LeaseLost,
    AUTH_REQUIRED: AuthenticationFailed,
    INVALID_TOKEN: AuthenticationFailed,
    FORBIDDEN: Forbidden,
}


def error_from_reply(reply: p.Error) -> JobqError:
    """The exception an error reply stands for."""
    if reply.kind == p.SERVER_ERROR and reply.text.startswith(NOT_THE_PRIMARY):
        return NotPrimary(reply.text)
    if reply.kind == p.CLIENT_ERROR:
        special = _BY_TEXT.get(reply.text.partition(":")[0])
        if special is not None:
            return special(reply.text)
    cls = _ERRORS.get(reply.kind)
    if cls is None:  # a kind workq does not define: keep it on the base class
        return JobqError(reply.text, kind=reply.kind)
    return cls(reply.text)


def malformed(reply: p.Reply) -> ConnectionLost:
    """The error for a reply of another shape than its request expects."""
    return ConnectionLost(f"unexpected reply {type(reply).__name__}")
