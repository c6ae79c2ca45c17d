"""The protocol's requests: one frozen ``msgspec.Struct`` per command, each able to encode
itself as a client sends it (``to_bytes()``), and :class:`ReplyShape`, what a command's
success reply looks like."""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum
from typing import ClassVar

import msgspec

from jobq.server.protocol.errors import CRLF
from jobq.server.protocol.values import format_id, format_time_exact

__all__ = [
    "Add",
    "Complete",
    "Delete",
    "Extension",
    "Fail",
    "InspectJob",
    "InspectJobs",
    "InspectQueue",
    "InspectQueues",
    "InspectScheduledJobs",
    "InspectServer",
    "Lease",
    "ReplyShape",
    "Request",
    "Result",
    "Run",
    "Schedule",
]


class ReplyShape(Enum):
    """What a command's success reply looks like."""

    #: ``+OK``
    OK = "ok"
    #: ``+OK 1`` then ``<id> <name> <ttr> <payload-size>`` and the payload (lease)
    JOB = "job"
    #: ``+OK 1`` then ``<id> <success> <result-size>`` and the result (run, result)
    RESULT = "result"
    #: ``+OK <n>`` then n records of ``<name> <k>`` and k ``<key> <value>`` lines (inspect)
    RECORDS = "records"
    #: ``+OK <size>`` then a data block (jobq's extension commands: a JSON body)
    DATA = "data"


class Request(msgspec.Struct, frozen=True):
    """Base of every parsed command; ``command`` is its command word.

    Requests are frozen ``msgspec.Struct`` classes: created and constructed in C, so the
    parser builds them by calling the class. A registered command's request subclasses
    ``Request`` (it inherits ``frozen``); ``msgspec.structs.replace()`` copies one.
    """

    command: ClassVar[str] = ""

    def reply_word(self) -> str:
        """The command word whose reply shape this request expects."""
        return self.command

    def to_bytes(self) -> bytes:
        """The command as a client sends it."""
        raise NotImplementedError


def _line(*words: object) -> bytes:
    return " ".join(str(w) for w in words).encode("latin-1") + CRLF


def _flags_suffix(flags: Iterable[tuple[str, int, int]]) -> str:
    """`` -key=value`` for each flag not at its default (like the Go client)."""
    return "".join(f" -{key}={value}" for key, value, default in flags if value != default)


class _NewJob(Request, frozen=True):
    """What the commands that make a job (add, schedule, run) start with."""

    id: bytes
    name: str
    ttr_ms: int

    def _encode(self, middle: str, payload: bytes, flags: Iterable[tuple[str, int, int]]) -> bytes:
        """``<command> <id> <name> <ttr> <middle> <payload-size> [flags]``, the payload."""
        head = (
            f"{self.command} {format_id(self.id)} {self.name} {self.ttr_ms} {middle} "
            f"{len(payload)}{_flags_suffix(flags)}"
        )
        return head.encode("latin-1") + CRLF + payload + CRLF


class _QueuedJob(_NewJob, frozen=True):
    """What add and schedule go on with: a job queued for workers, with a time to live."""

    ttl_ms: int
    payload: bytes


class Add(_QueuedJob, frozen=True):
    """``add <id> <name> <ttr> <ttl> <payload-size> [-priority] [-max-attempts] [-max-fails]``"""

    command: ClassVar[str] = "add"
    #: an add's job is leasable at once (a :class:`Schedule`'s from its ``time_ns``)
    time_ns: ClassVar[None] = None
    priority: int = 0
    max_attempts: int = 0
    max_fails: int = 0

    def to_bytes(self) -> bytes:
        return self._encode(str(self.ttl_ms), self.payload, _job_flags(self))


class Schedule(_QueuedJob, frozen=True):
    """``schedule <id> <name> <ttr> <ttl> <time> <payload-size> [flags as add]``"""

    command: ClassVar[str] = "schedule"
    #: when the job becomes leasable, Unix nanoseconds
    time_ns: int
    priority: int = 0
    max_attempts: int = 0
    max_fails: int = 0

    def to_bytes(self) -> bytes:
        middle = f"{self.ttl_ms} {format_time_exact(self.time_ns)}"
        return self._encode(middle, self.payload, _job_flags(self))


def _job_flags(job: Add | Schedule) -> list[tuple[str, int, int]]:
    return [
        ("priority", job.priority, 0),
        ("max-attempts", job.max_attempts, 0),
        ("max-fails", job.max_fails, 0),
    ]


class Run(_NewJob, frozen=True):
    """``run <id> <name> <ttr> <wait-timeout> <payload-size> [-priority]``"""

    command: ClassVar[str] = "run"
    wait_timeout_ms: int
    payload: bytes
    priority: int = 0

    def to_bytes(self) -> bytes:
        flags = [("priority", self.priority, 0)]
        return self._encode(str(self.wait_timeout_ms), self.payload, flags)


class Result(Request, frozen=True):
    """``result <id> <wait-timeout>``"""

    command: ClassVar[str] = "result"
    id: bytes
    wait_timeout_ms: int

    def to_bytes(self) -> bytes:
        return _line("result", format_id(self.id), self.wait_timeout_ms)


class Lease(Request, frozen=True):
    """``lease <name> [<name> ...] <wait-timeout>``"""

    command: ClassVar[str] = "lease"
    names: tuple[str, ...]
    wait_timeout_ms: int

    def to_bytes(self) -> bytes:
        return _line("lease", *self.names, self.wait_timeout_ms)


class _Finish(Request, frozen=True):
    """``<command> <id> <result-size>`` and the result."""

    id: bytes
    result: bytes

    def to_bytes(self) -> bytes:
        return _line(self.command, format_id(self.id), len(self.result)) + self.result + CRLF


class Complete(_Finish, frozen=True):
    """``complete <id> <result-size>`` and the result"""

    command: ClassVar[str] = "complete"


class Fail(_Finish, frozen=True):
    """``fail <id> <result-size>`` and the result"""

    command: ClassVar[str] = "fail"


class Delete(Request, frozen=True):
    """``delete <id>``"""

    command: ClassVar[str] = "delete"
    id: bytes

    def to_bytes(self) -> bytes:
        return _line("delete", format_id(self.id))


class _Inspect(Request, frozen=True):
    """``inspect <object> <fields>``: the object's word, then the fields in their order."""

    command: ClassVar[str] = "inspect"
    inspect_object: ClassVar[str] = ""

    def to_bytes(self) -> bytes:
        return _line("inspect", self.inspect_object, *msgspec.structs.astuple(self))


class InspectServer(_Inspect, frozen=True):
    """``inspect server``"""

    inspect_object: ClassVar[str] = "server"


class InspectQueues(_Inspect, frozen=True):
    """``inspect queues <cursor-offset> <limit>``"""

    inspect_object: ClassVar[str] = "queues"
    offset: int
    limit: int


class InspectQueue(_Inspect, frozen=True):
    """``inspect queue <name>``"""

    inspect_object: ClassVar[str] = "queue"
    name: str


class InspectJobs(_Inspect, frozen=True):
    """``inspect jobs <name> <cursor-offset> <limit>``: ready and leased jobs"""

    inspect_object: ClassVar[str] = "jobs"
    name: str
    offset: int
    limit: int


class InspectScheduledJobs(_Inspect, frozen=True):
    """``inspect scheduled-jobs <name> <cursor-offset> <limit>``"""

    inspect_object: ClassVar[str] = "scheduled-jobs"
    name: str
    offset: int
    limit: int


class InspectJob(_Inspect, frozen=True):
    """``inspect job <id>``"""

    inspect_object: ClassVar[str] = "job"
    id: bytes

    def to_bytes(self) -> bytes:
        return _line("inspect", "job", format_id(self.id))


class Extension(Request, frozen=True):
    """One of jobq's extension commands (docs/extensions.md): its word and its JSON body."""

    word: str
    body: bytes

    def reply_word(self) -> str:
        return self.word

    def to_bytes(self) -> bytes:
        return b"%s %d\r\n%s\r\n" % (self.word.encode("ascii"), len(self.body), self.body)
