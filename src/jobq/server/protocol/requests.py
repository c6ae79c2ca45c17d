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


class Add(_NewJob, frozen=True):
    """``add <id> <name> <ttr> <ttl> <payload-size> [-priority] [-max-attempts] [-max-fails]``"""

    command: ClassVar[str] = "add"
    ttl_ms: int
    payload: bytes
    priority: int = 0
    max_attempts: int = 0
    max_fails: int = 0

    def to_bytes(self) -> bytes:
        return self._encode(str(self.ttl_ms), self.payload, _job_flags(self))


class Schedule(_NewJob, frozen=True):
    """``schedule <id> <name> <ttr> <ttl> <time> <payload-size> [flags as add]``"""

    command: ClassVar[str] = "schedule"
    ttl_ms: int
    payload: bytes
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


class InspectServer(Request, frozen=True):
    """``inspect server``"""

    command: ClassVar[str] = "inspect"

    def to_bytes(self) -> bytes:
        return _line("inspect", "server")


class InspectQueues(Request, frozen=True):
    """``inspect queues <cursor-offset> <limit>``"""

    command: ClassVar[str] = "inspect"
    offset: int
    limit: int

    def to_bytes(self) -> bytes:
        return _line("inspect", "queues", self.offset, self.limit)


class InspectQueue(Request, frozen=True):
    """``inspect queue <name>``"""

    command: ClassVar[str] = "inspect"
    name: str

    def to_bytes(self) -> bytes:
        return _line("inspect", "queue", self.name)


class _JobPage(Request, frozen=True):
    """``inspect <object> <name> <cursor-offset> <limit>``: a page of a queue's jobs."""

    command: ClassVar[str] = "inspect"
    inspect_object: ClassVar[str] = ""
    name: str
    offset: int
    limit: int

    def to_bytes(self) -> bytes:
        return _line("inspect", self.inspect_object, self.name, self.offset, self.limit)


class InspectJobs(_JobPage, frozen=True):
    """``inspect jobs <name> <cursor-offset> <limit>``: ready and leased jobs"""

    inspect_object: ClassVar[str] = "jobs"


class InspectScheduledJobs(_JobPage, frozen=True):
    """``inspect scheduled-jobs <name> <cursor-offset> <limit>``"""

    inspect_object: ClassVar[str] = "scheduled-jobs"


class InspectJob(Request, frozen=True):
    """``inspect job <id>``"""

    command: ClassVar[str] = "inspect"
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
