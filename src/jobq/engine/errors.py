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
