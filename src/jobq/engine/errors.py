"""Engine errors: one class per kind of refusal; each front end maps them to replies once."""

from __future__ import annotations


class EngineError(Exception):
    """A command the engine refuses; nothing changed."""

    #: workq's text for this refusal, where workq has one
    text: str = "Invalid command"

    def __init__(self, text: str | None = None) -> None:
        super().__init__(text or self.text)
        if text is not None:
            self.text = text


class JobNotFound(EngineError):
    """No job with that id (never added, deleted, or expired)."""

    text = "Not found"


class DuplicateJob(EngineError):
    """A job with that id exists already."""

    text = "Duplicate job"


class DuplicateResult(EngineError):
    """The job is finished already; it has its result."""

    text = "Duplicate result"


class InvalidArgument(EngineError):
    """An argument out of its range (for callers that bypass the protocol's validation)."""


class LeaseNotHeld(EngineError):
    """A worker acted on a job whose lease it no longer holds (expired, adopted, finished)."""

    text = "Lease not held"


class InvalidStatus(EngineError):
    """The job's status does not allow the command (e.g. resume of a running job)."""


class AmbiguousId(EngineError):
    """An id prefix that matches more than one job."""

    text = "Ambiguous id"


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
