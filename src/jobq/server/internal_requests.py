"""The internal requests: HTTP's, run through the core like any request, but never parsed
from the protocol (no command word). msgspec structs, kept out of the compiled dispatcher
(``jobq.build``: a class mypyc makes of a struct loses its field types)."""

from __future__ import annotations

from typing import ClassVar

from jobq.server import protocol as p


class ServerOverview(p.Request, frozen=True):
    """What the server holds: connections, jobs by status, schedules, jobs evicted (HTTP's
    ``/api/server``); the reply is JSON. Internal: no command word, never parsed."""

    command: ClassVar[str] = ""


class DeleteJob(p.Request, frozen=True):
    """Delete the job that ``ref`` names, an id or a unique prefix of one (HTTP's ``DELETE
    /api/jobs/{id}``); the reply is JSON, ``{"id": <the full id>}``. Internal: no command
    word, never parsed."""

    command: ClassVar[str] = ""
    ref: str
