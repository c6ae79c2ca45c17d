"""Who may run what: the roles, a caller's identity (:class:`Principal`) and the one
permission table, request kind -> the least role that may run it.

The dispatcher consults :func:`check` before it runs any request, TCP's and HTTP's alike
(HTTP's routes run through the core as TCP requests do), so this table is the only place
that decides. A server without authentication consults nothing: every request is allowed,
as in workq. Which tokens name which principals is :mod:`jobq.server.tokens`.
"""

from __future__ import annotations

import enum
from typing import ClassVar

from jobq.auth import FORBIDDEN
from jobq.engine.errors import EngineError, ErrorKind
from jobq.server import protocol as p


class Role(enum.IntEnum):
    """What a token may do; each role may do all that the roles below it may."""

    #: read-only: the job and schedule lists, a job, its history, inspect, /metrics
    VIEWER = 1
    #: a worker's and a producer's commands: lease, heartbeat, complete, fail, submit...
    WORKER = 2
    #: everything: pause, resume, cancel, delete, the schedules' changes, the audit trail
    ADMIN = 3

    @property
    def label(self) -> str:
        return self.name.lower()


ROLES = {role.label: role for role in Role}


class Principal:
    """Who a connection or an HTTP request acts as: a token's name and role."""

    __slots__ = ("name", "role")

    def __init__(self, name: str, role: Role) -> None:
        self.name = name
        self.role = role

    def __repr__(self) -> str:
        return f"Principal({self.name!r}, {self.role.label})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Principal) and other.name == self.name and other.role is self.role
        )

    def __hash__(self) -> int:
        return hash((self.name, self.role))


class Forbidden(EngineError):
    """The caller's role may not run the request; nothing ran."""

    kind: ClassVar[ErrorKind] = ErrorKind.FORBIDDEN
    text = FORBIDDEN


#: the least role that may run each kind of request: a workq command word (``inspect``
#: covers its every form), a jobq extension word, or the name of an internal request (the
#: HTTP front end's, which the protocol parser never makes; ``metrics`` is ``/metrics``).
#: A kind not here is for admins only, so a new command is closed until it has a row.
PERMISSIONS: dict[str, Role] = {
    # workq's commands
    "add": Role.WORKER,
    "schedule": Role.WORKER,
    "run": Role.WORKER,
    "result": Role.WORKER,
    "lease": Role.WORKER,
    "complete": Role.WORKER,
    "fail": Role.WORKER,
    "delete": Role.ADMIN,
    "inspect": Role.VIEWER,
    # jobq's extensions: a worker's and a producer's
    "submit": Role.WORKER,
    "xlease": Role.WORKER,
    "heartbeat": Role.WORKER,
    "xcomplete": Role.WORKER,
    "xfail": Role.WORKER,
    "release": Role.WORKER,
    "whello": Role.WORKER,
    "wbeat": Role.WORKER,
    "wbye": Role.WORKER,
    "logappend": Role.WORKER,
    # reads
    "jobs": Role.VIEWER,
    "job": Role.VIEWER,
    "history": Role.VIEWER,
    "slist": Role.VIEWER,
    "sshow": Role.VIEWER,
    "shistory": Role.VIEWER,
    "sruns": Role.VIEWER,
    "wlist": Role.VIEWER,
    "wshow": Role.VIEWER,
    "logs": Role.VIEWER,
    "logstate": Role.VIEWER,
    "limits": Role.VIEWER,
    "replication": Role.VIEWER,
    # an operator's
    "pause": Role.ADMIN,
    "resume": Role.ADMIN,
    "cancel": Role.ADMIN,
    "rerun": Role.ADMIN,
    "bulk": Role.ADMIN,
    "screate": Role.ADMIN,
    "spause": Role.ADMIN,
    "sresume": Role.ADMIN,
    "salter": Role.ADMIN,
    "strigger": Role.ADMIN,
    "sbackfill": Role.ADMIN,
    "sdrop": Role.ADMIN,
    "audit": Role.ADMIN,
    # a role change (replication/roles.py); a standby runs it too
    "promote": Role.ADMIN,
    # a standby's stream of the whole log (the connection checks it: replication/feed.py)
    "replicate": Role.ADMIN,
    "rsnapshot": Role.ADMIN,
    # internal requests (HTTP's)
    "ServerOverview": Role.VIEWER,
    "DeleteJob": Role.ADMIN,
    "metrics": Role.VIEWER,
}


def kind_of(request: p.Request) -> str:
    """The request's row in :data:`PERMISSIONS`: its command word (an extension's word),
    or its class's name for an internal request, which has no word."""
    return request.reply_word() or type(request).__name__


def allowed(role: Role, kind: str) -> bool:
    """Whether ``role`` may run requests of ``kind``."""
    return role >= PERMISSIONS.get(kind, Role.ADMIN)


#: the least role by request class, for the requests that are not extensions (filled from
#: PERMISSIONS on first use: a request then costs one lookup)
_NEEDED_BY_CLASS: dict[type[p.Request], Role] = {}


def needed_role(request: p.Request) -> Role:
    """The least role that may run ``request`` (:data:`PERMISSIONS`)."""
    if isinstance(request, p.Extension):  # its word says what it is
        return PERMISSIONS.get(request.word, Role.ADMIN)
    cls = type(request)
    role = _NEEDED_BY_CLASS.get(cls)
    if role is None:
        role = _NEEDED_BY_CLASS[cls] = PERMISSIONS.get(kind_of(request), Role.ADMIN)
    return role


def check(principal: Principal | None, request: p.Request) -> None:
    """Raise :class:`Forbidden` unless ``principal`` may run ``request`` (on a server that
    authenticates; None there is a request no token vouched for, refused too)."""
    if principal is None:
        raise Forbidden(f"{FORBIDDEN}: not authenticated")
    needed = needed_role(request)
    if principal.role < needed:
        raise Forbidden(f"{FORBIDDEN}: {kind_of(request)} needs the {needed.label} role")
