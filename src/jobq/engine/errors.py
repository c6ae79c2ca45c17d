"""Engine errors: one class per kind of refusal, each with its :class:`ErrorKind`.

Front ends map errors to replies in one table each: the TCP protocol by class (workq has its
own reply for some), HTTP by kind. None of them reads an error's text to decide.
"""

from __future__ import annotations

import enum
from typing import ClassVar


class ErrorKind(enum.Enum):
    """What kind of refusal an error is, for a front end to answer in kind."""

    #: the request itself is wrong (a bad argument, an unknown name)
    INVALID = "invalid"
    #: what it names does not exist
    NOT_FOUND = "not_found"
    #: the state does not allow it (a finished job, a lease not held, a name in use)
    CONFLICT = "conflict"
    #: nothing came within the wait (workq's TIMEOUT)
    TIMEOUT = "timeout"
    #: the server cannot do it now (the command log cannot be written)
    UNAVAILABLE = "unavailable"
    #: the caller's role may not do it (a server with named tokens: jobq.server.access)
    FORBIDDEN = "forbidden"
    #: the server is at a limit of what it holds (jobs, memory, schedules: ``ceiling.py``)
    FULL = "full"
    #: a standby: changes go to its primary (jobq.server.replication; docs/ha.md)
    READONLY = "readonly"


class EngineError(Exception):
    """A command the engine refuses; nothing changed."""

    #: workq's text for this refusal, where workq has one
    text: str = "Invalid command"
    kind: ClassVar[ErrorKind] = ErrorKind.INVALID

    def __init__(self, text: str | None = None) -> None:
        super().__init__(text or self.text)
        if text is not None:
            self.text = text


class JobNotFound(EngineError):
    """No job with that id (never added, deleted, or expired)."""

    kind = ErrorKind.NOT_FOUND

    text = "Not found"


class DuplicateJob(EngineError):
    """A job with that id exists already."""

    kind = ErrorKind.CONFLICT

    text = "Duplicate job"


class DuplicateResult(EngineError):
    """The job is finished already; it has its result."""

    kind = ErrorKind.CONFLICT

    text = "Duplicate result"


class InvalidArgument(EngineError):
    """An argument out of its range (for callers that bypass the protocol's validation)."""


class LeaseNotHeld(EngineError):
    """A worker acted on a job whose lease it no longer holds (expired, adopted, finished)."""

    kind = ErrorKind.CONFLICT

    text = "Lease not held"


class InvalidStatus(EngineError):
    """The job's status does not allow the command (e.g. resume of a running job)."""

    kind = ErrorKind.CONFLICT


class AmbiguousId(EngineError):
    """An id prefix that matches more than one job."""

    text = "Ambiguous id"


class TooManyJobs(InvalidArgument):
    """A bulk action whose selection holds more jobs than its limit; nothing changed."""


class ScheduleError(InvalidArgument):
    """A schedule that cannot be created or changed as asked; nothing changed."""


class ScheduleNotFound(InvalidArgument):
    """No schedule of that name or id."""

    text = "Schedule not found"
    kind = ErrorKind.NOT_FOUND


class DuplicateSchedule(ScheduleError):
    """A schedule of that name exists already."""

    kind = ErrorKind.CONFLICT


class ServerFull(EngineError):
    """The server holds as much as its ceiling allows (``ceiling.py``): no new job or
    schedule until some go (or its memory falls); nothing changed. ``limit`` says which:
    ``jobs``, ``memory`` or ``schedules``."""

    kind = ErrorKind.FULL

    text = "Server full"

    def __init__(self, text: str | None = None, limit: str = "jobs") -> None:
        super().__init__(text)
        self.limit = limit



#: longest piece of client input an error text quotes, in characters
MAX_QUOTED_CHARS = 80


def clipped(text: str) -> str:
    """``text``, cut after :data:`MAX_QUOTED_CHARS` characters and then ending in ``...``:
    for error texts that echo client input (a 100 KB cron spec is not worth sending back)."""
    if len(text) <= MAX_QUOTED_CHARS:
        return text
    return text[:MAX_QUOTED_CHARS] + "..."


def quoted(text: str) -> str:
    """``repr(text)``, cut like :func:`clipped` (the ``...`` after the closing quote)."""
    if len(text) <= MAX_QUOTED_CHARS:
        return repr(text)
    return repr(text[:MAX_QUOTED_CHARS]) + "..."
