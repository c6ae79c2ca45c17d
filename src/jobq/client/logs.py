"""Attempt logs from the client's side: the values ``logs`` and ``append_logs`` take and
return, and following a job's log as it grows (:func:`follow`, ``Client.follow_logs``).

A page says what a follower does next (``follow``, decided by the server): ``read`` (more
is there: read on from ``next_offset``), ``wait`` (the attempt runs, or the job waits for
its next attempt), ``next_attempt`` (this attempt is over and read; a later one exists) or
``end`` (the job finished and its last attempt is read).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from jobq.client.arguments import JobId
from jobq.client.errors import ConnectionLost
from jobq.client.models import Body

__all__ = ["DEFAULT_FOLLOW_POLL_S", "LogLines", "LogPage", "follow", "to_log_page"]

#: how often a follower asks for more while an attempt runs, in seconds
DEFAULT_FOLLOW_POLL_S = 0.5


@dataclass(frozen=True, slots=True)
class LogLines:
    """Lines for the log of one attempt of a job (``append_logs``): ``dropped`` counts the
    lines not sent because the server said the log is cut at its cap."""

    id: JobId
    attempt: int
    worker_id: str
    lines: Sequence[str]
    dropped: int = 0


@dataclass(frozen=True, slots=True)
class LogPage:
    """A piece of an attempt's log (``logs``).

    :ivar text: the log from ``offset`` to ``next_offset`` (bytes of UTF-8), whole lines
    :ivar size: the bytes the log holds now
    :ivar attempt: the attempt it is the log of (0: the job has not run yet)
    :ivar attempts: the attempts the job has had
    :ivar running: whether the attempt still runs (more lines may come)
    :ivar cut: None, or the marker line of a log cut at the server's cap
        (``… log cut at 1 MiB: N lines dropped``), which follows its last line
    :ivar follow: what a follower does next (see the module doc)
    """

    id: str
    attempt: int
    attempts: int
    status: str
    running: bool
    offset: int
    next_offset: int
    size: int
    text: str
    cut: str | None
    dropped_lines: int
    follow: str

    @property
    def complete(self) -> bool:
        """Whether this page reaches the end of what the log holds now."""
        return self.next_offset >= self.size


def to_log_page(body: Body) -> LogPage:
    try:
        cut: Any = body.get("cut")
        return LogPage(
            id=str(body["id"]),
            attempt=int(body["attempt"]),
            attempts=int(body["attempts"]),
            status=str(body["status"]),
            running=bool(body["running"]),
            offset=int(body["offset"]),
            next_offset=int(body["next_offset"]),
            size=int(body["size"]),
            text=str(body["text"]),
            cut=None if not cut else str(cut["marker"]),
            dropped_lines=0 if not cut else int(cut["dropped_lines"]),
            follow=str(body["follow"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ConnectionLost(f"malformed logs reply: {exc!r}") from exc


def to_full(body: Body) -> bool:
    full = body.get("full")
    if not isinstance(full, bool):
        raise ConnectionLost("malformed logappend reply: no full")
    return full


def log_lines_body(entry: LogLines) -> Body:
    from jobq.client.arguments import ext_id

    if entry.attempt < 1:
        raise ValueError("attempt counts from 1")
    body: Body = {
        "id": ext_id(entry.id),
        "attempt": entry.attempt,
        "worker_id": entry.worker_id,
        "lines": [str(line) for line in entry.lines],
    }
    if entry.dropped:
        body["dropped"] = entry.dropped
    return body


def follow(
    read: Callable[[str, int | None, int], LogPage],
    id: str,
    attempt: int | None = None,
    *,
    poll_s: float = DEFAULT_FOLLOW_POLL_S,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[LogPage]:
    """The pages of a job's log as it grows, until the job finishes; with ``attempt``, until
    that attempt is over. ``read(id, attempt, offset)`` asks the server (``attempt`` None:
    the latest). Without ``attempt`` it starts at the latest attempt (or waits for the
    first) and goes on to each later one. A page is yielded when it has text, when the
    attempt changes (``page.attempt``; 0 while the job has not run) and at the end."""
    only = attempt is not None
    offset = 0
    shown: int | None = None
    while True:
        page = read(id, attempt, offset)
        id = page.id  # a prefix is resolved once: to the job it named then
        step = page.follow
        if only and step != "read" and not page.running:
            step = "end"  # the attempt asked for is over, and read
            page = dataclasses.replace(page, follow=step)
        if page.text or page.attempt != shown or step == "end":
            shown = page.attempt
            yield page
        if step == "end":
            return
        if step == "next_attempt":
            attempt, offset = page.attempt + 1, 0
            continue
        if not only:
            attempt = page.attempt or None  # 0: not run yet, so ask for the latest again
        offset = page.next_offset
        if step == "wait":
            sleep(poll_s)
