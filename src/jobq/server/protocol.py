"""The workq wire protocol as a sans-I/O codec: bytes in, typed events out, and back.

Nothing here touches a socket, a clock or the engine; the server and the client library
drive it. ``docs/protocol.md`` describes the commands, the limits and where jobq differs
from workq-server.

Server side
===========
``RequestParser`` turns the bytes a client sends into requests::

    parser = RequestParser()
    parser.feed(chunk)                    # any split: a byte at a time or many commands
    while (event := parser.next_event()) is not None:
        if isinstance(event, ProtocolError):
            send(event.to_bytes())        # -CLIENT-ERROR <text>\\r\\n
            if event.fatal:               # framing lost: close the connection
                close()
        else:
            handle(event)                 # an Add, Lease, InspectJob, ... (a Request)

Every command yields exactly one event, a ``Request`` or a ``ProtocolError``, in order;
``next_event()`` returns None when it needs more bytes, and never raises. A rejected
command's data block is still consumed, so data is never read as a command. Drain
``next_event()`` until None before the next ``feed()``: the parser then holds at most
``max_line_bytes`` + ``max_data_bytes`` + 2 bytes plus one feed; oversize data blocks are
counted off without being buffered.

Replies are built by pure functions: ``ok()``, ``job_reply()``, ``result_reply()``,
``inspect_server_reply()``, ``inspect_queues_reply()``, ``inspect_queue_reply()``,
``inspect_jobs_reply()``, ``inspect_job_reply()``, ``records_reply()``, ``client_error()``,
``server_error()``, ``timeout()``, ``not_found()``. Inspect replies take plain values
(``ServerInfo``, ``QueueInfo``, ``JobInfo``), which the server fills from engine objects.

Extension commands: ``register_command(word, parse, data_args=..., reply=...)`` adds a
command word; ``parse(args, flags, data)`` gets the positional words after the command
word, the ``-key=value`` flags and the data block (None for commands without one) and
returns a ``Request`` or raises ``ClientError(text)``. ``register_inspect_object()`` adds
an ``inspect <object>``.

Client side
===========
Each request encodes itself: ``Add(...).to_bytes()``. ``ReplyParser`` reads the server's
replies; since the reply's shape depends on the command, tell it what each pipelined
request expects, in order::

    replies = ReplyParser()
    sock.send(request.to_bytes())
    replies.expect(request)               # or a command word ("lease"), or a ReplyShape
    replies.feed(sock.recv(65536))        # as often as needed
    reply = replies.next_reply()          # None until the whole reply has arrived

``next_reply()`` returns ``Ok()`` (add, schedule, complete, fail, delete), ``JobReply``
(lease), ``ResultReply`` (run, result), ``RecordsReply`` (every inspect: a tuple of
``Record(name, fields)``; field values are ``str`` except ``payload``, which is ``bytes``;
``JobInfo.from_record()`` and friends give typed values) or ``Error(kind, text)`` for any
``-CLIENT-ERROR``/``-SERVER-ERROR``/``-TIMEOUT``/``-NOT-FOUND`` reply. A reply that breaks
the protocol raises ``MalformedReplyError`` (then and on every later call): close the
connection. Calling ``next_reply()`` with bytes buffered but nothing expected raises
``RuntimeError``.
"""

from __future__ import annotations

import binascii
import re
from collections import deque
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import ClassVar, NamedTuple, TypeAlias

import msgspec

from jobq.engine import limits

# ---------------------------------------------------------------------------------------
# Limits
# ---------------------------------------------------------------------------------------

#: largest payload or result, in bytes (workq's MaxPayload / MaxResult)
MAX_DATA_BYTES = limits.MAX_DATA_BYTES
#: longest command line accepted, in bytes without its CRLF
DEFAULT_MAX_LINE_BYTES = 16_384
#: largest oversize data block that is skipped (counted, not buffered) to keep the
#: connection usable; a larger declared size makes the error fatal, in bytes
DEFAULT_MAX_DISCARD_BYTES = 16 * MAX_DATA_BYTES
#: longest reply line the client side accepts, in bytes without its CRLF
DEFAULT_MAX_REPLY_LINE_BYTES = 65_536
#: longest job or queue name, in characters
MAX_NAME_LEN = limits.MAX_NAME_LEN
#: largest time to run, in milliseconds (24 h)
MAX_TTR_MS = limits.MAX_TTR_MS
#: largest time to live, in milliseconds (uint64)
MAX_TTL_MS = limits.MAX_TTL_MS
#: largest wait-timeout of lease, run and result, in milliseconds (24 h, as workq)
MAX_WAIT_TIMEOUT_MS = 86_400_000
#: largest -max-attempts and -max-fails
MAX_ATTEMPTS = limits.MAX_ATTEMPTS
MAX_FAILS = limits.MAX_FAILS
#: -priority range (signed 32-bit)
MIN_PRIORITY = limits.MIN_PRIORITY
MAX_PRIORITY = limits.MAX_PRIORITY
#: most names one ``lease`` may list (not in workq: one waiting lease holds a place in every
#: name's queue); more is ``Invalid command args``
MAX_LEASE_NAMES = limits.MAX_LEASE_NAMES
#: largest inspect cursor offset (uint32)
MAX_CURSOR_OFFSET = 2**32 - 1
#: largest inspect limit (workq's MaxLimit)
MAX_INSPECT_LIMIT = 100

CRLF = b"\r\n"
#: longest error text in a reply line, in bytes; a longer one is cut and ends in ``...``
MAX_ERROR_TEXT_BYTES = 512
ELLIPSIS = b"..."

# ---------------------------------------------------------------------------------------
# Error kinds and texts (workq's, byte for byte, unless marked jobq)
# ---------------------------------------------------------------------------------------

CLIENT_ERROR = "CLIENT-ERROR"
SERVER_ERROR = "SERVER-ERROR"
TIMEOUT = "TIMEOUT"
NOT_FOUND = "NOT-FOUND"

UNKNOWN_COMMAND = "Unknown command"
INVALID_COMMAND_ARGS = "Invalid command args"
INVALID_COMMAND_FLAGS = "Invalid command flags"
INVALID_ID = "Invalid ID"
INVALID_NAME = "Invalid Name"
INVALID_PAYLOAD = "Invalid Payload"
INVALID_RESULT = "Invalid Result"
INVALID_MAX_ATTEMPTS = "Invalid Max Attempts"
INVALID_MAX_FAILS = "Invalid Max Fails"
INVALID_PRIORITY = "Invalid Priority"
INVALID_TTR = "Invalid TTR"
INVALID_TTL = "Invalid TTL"
INVALID_TIME = "Invalid Time"
#: workq defines it but its wait-timeout parser answers INVALID_WAIT_TIMEOUT first
INVALID_TIMEOUT = "Invalid Timeout"
INVALID_WAIT_TIMEOUT = "Invalid wait timeout"
INVALID_CURSOR_OFFSET = "Invalid cursor offset"
INVALID_LIMIT = "Invalid limit"
DUPLICATE_JOB = "Duplicate job"
DUPLICATE_RESULT = "Duplicate result"
#: jobq: a command line longer than max_line_bytes (fatal)
LINE_TOO_LONG = "Line too long"
#: jobq: a line ending in a bare LF (fatal; workq-server closes the connection silently)
INVALID_LINE_END = "Invalid line end"


class ClientError(Exception):
    """A command that is malformed or invalid; ``text`` goes after ``-CLIENT-ERROR``."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


class ProtocolError(msgspec.Struct, frozen=True):
    """A rejected command, as a parser event.

    :param kind: ``CLIENT-ERROR`` (the only kind the parser produces)
    :param text: the error text, e.g. ``Invalid ID``
    :param fatal: the framing is lost; reply, then close the connection
    """

    kind: str
    text: str
    fatal: bool = False

    def to_bytes(self) -> bytes:
        return error_reply(self.kind, self.text)


# ---------------------------------------------------------------------------------------
# Values: ids, names, numbers, times
# ---------------------------------------------------------------------------------------

_UUID_RE = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
)
_NAME_RE = limits.NAME_RE
_UINT_RE = re.compile(r"[0-9]+")
_INT_RE = re.compile(r"[+\-]?[0-9]+")
_TIME_RE = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{1,2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]+))?Z"
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NS_PER_S = 1_000_000_000
# more digits than any value we accept; int() refuses > 4300 digits anyway
_MAX_NUMBER_DIGITS = 24


def parse_id(text: str) -> bytes:
    """The 16 raw bytes of a UUID in ``8-4-4-4-12`` hex form (either case, as workq)."""
    # Same as _UUID_RE.fullmatch, faster: 36 characters with dashes at 8, 13, 18 and 23
    # leave at most 32 after dropping every dash, and fromhex() makes 16 bytes of them
    # only from exactly 32 ASCII hex digits (it raises on anything but hex and ASCII
    # whitespace, and whitespace would leave fewer digits).
    if len(text) == 36 and text[8:24:5] == "----":
        try:
            raw = bytes.fromhex(text.replace("-", ""))
        except ValueError:
            raise ClientError(INVALID_ID) from None
        if len(raw) == 16:
            return raw
    raise ClientError(INVALID_ID)


def format_id(job_id: bytes) -> str:
    """A raw 16-byte id in canonical lowercase ``8-4-4-4-12`` form."""
    h = job_id.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


#: names already found valid: queue names repeat on nearly every command, and a set
#: lookup is cheaper than the regex; bounded, past the bound names are checked each time
_VALID_NAMES: set[str] = set()
_VALID_NAMES_MAX = 4096


def parse_name(text: str) -> str:
    """A job or queue name: 1-255 of ``A-Z a-z 0-9 _ - .``."""
    if text in _VALID_NAMES:
        return text
    if _NAME_RE.fullmatch(text) is None:
        raise ClientError(INVALID_NAME)
    if len(_VALID_NAMES) < _VALID_NAMES_MAX and type(text) is str:
        _VALID_NAMES.add(text)
    return text


def _number(text: str, pattern: re.Pattern[str]) -> int | None:
    """ASCII decimal (Go's strconv, base 10): no spaces, underscores or non-ASCII digits."""
    if pattern.fullmatch(text) is None:
        return None
    sign = text[0] in "+-"
    digits = text[1:] if sign else text
    digits = digits.lstrip("0") or "0"
    if len(digits) > _MAX_NUMBER_DIGITS:
        return None
    value = int(digits)
    return -value if text[0] == "-" else value


def _uint(text: str, low: int, high: int, error: str) -> int:
    # fast path: isascii() and isdigit() together are _UINT_RE.fullmatch (isdigit() is
    # False for "" and, among ASCII characters, True only for 0-9); short enough that
    # int() of it is what _number() gives
    if text.isdigit() and text.isascii() and len(text) <= _MAX_NUMBER_DIGITS:
        value: int | None = int(text)
    else:
        value = _number(text, _UINT_RE)
    if value is None or not low <= value <= high:
        raise ClientError(error)
    return value


def _int(text: str, low: int, high: int, error: str) -> int:
    if text.isdigit() and text.isascii() and len(text) <= _MAX_NUMBER_DIGITS:
        value: int | None = int(text)
    else:
        value = _number(text, _INT_RE)
    if value is None or not low <= value <= high:
        raise ClientError(error)
    return value


def _data_size(text: str) -> int | None:
    """A data block size as workq reads it (Go's Atoi: an optional sign); None if invalid."""
    if text.isdigit() and text.isascii() and len(text) <= _MAX_NUMBER_DIGITS:
        return int(text)
    value = _number(text, _INT_RE)
    if value is None or value < 0:
        return None
    return value


def parse_time(text: str) -> int:
    """An RFC 3339 UTC time ``2016-06-14T06:46:46Z`` as Unix nanoseconds.

    Like Go's ``time.Parse("2006-01-02T15:04:05Z", ...)`` it also takes a one-digit hour
    and a fractional second (digits past nanoseconds are dropped).
    """
    m = _TIME_RE.fullmatch(text)
    if m is None:
        raise ClientError(INVALID_TIME)
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    try:
        when = datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    except ValueError:
        raise ClientError(INVALID_TIME) from None
    fraction = m.group(7) or ""
    nanos = int((fraction + "000000000")[:9])
    return limits.clamp_time_ns((when - _EPOCH) // timedelta(seconds=1) * _NS_PER_S + nanos)


def format_time(time_ns: int) -> str:
    """Unix nanoseconds as ``2016-06-14T06:46:46Z`` (UTC, whole seconds, as workq)."""
    when = _EPOCH + timedelta(seconds=time_ns // _NS_PER_S)
    return (
        f"{when.year:04d}-{when.month:02d}-{when.day:02d}"
        f"T{when.hour:02d}:{when.minute:02d}:{when.second:02d}Z"
    )


def _format_time_exact(time_ns: int) -> str:
    """Like format_time, with the fraction when there is one (requests only)."""
    base = format_time(time_ns)
    nanos = time_ns % _NS_PER_S
    if not nanos:
        return base
    return f"{base[:-1]}.{nanos:09d}".rstrip("0") + "Z"


def _flags_suffix(flags: Iterable[tuple[str, int, int]]) -> str:
    """`` -key=value`` for each flag not at its default (like the Go client)."""
    return "".join(f" -{key}={value}" for key, value, default in flags if value != default)


# ---------------------------------------------------------------------------------------
# Requests
# ---------------------------------------------------------------------------------------


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


class Add(Request, frozen=True):
    """``add <id> <name> <ttr> <ttl> <payload-size> [-priority] [-max-attempts] [-max-fails]``"""

    command: ClassVar[str] = "add"
    id: bytes
    name: str
    ttr_ms: int
    ttl_ms: int
    payload: bytes
    priority: int = 0
    max_attempts: int = 0
    max_fails: int = 0

    def to_bytes(self) -> bytes:
        head = (
            f"add {format_id(self.id)} {self.name} {self.ttr_ms} {self.ttl_ms} {len(self.payload)}"
        )
        head += _flags_suffix(
            [
                ("priority", self.priority, 0),
                ("max-attempts", self.max_attempts, 0),
                ("max-fails", self.max_fails, 0),
            ]
        )
        return head.encode("latin-1") + CRLF + self.payload + CRLF


class Schedule(Request, frozen=True):
    """``schedule <id> <name> <ttr> <ttl> <time> <payload-size> [flags as add]``"""

    command: ClassVar[str] = "schedule"
    id: bytes
    name: str
    ttr_ms: int
    ttl_ms: int
    payload: bytes
    #: when the job becomes leasable, Unix nanoseconds
    time_ns: int
    priority: int = 0
    max_attempts: int = 0
    max_fails: int = 0

    def to_bytes(self) -> bytes:
        head = (
            f"schedule {format_id(self.id)} {self.name} {self.ttr_ms} {self.ttl_ms} "
            f"{_format_time_exact(self.time_ns)} {len(self.payload)}"
        )
        head += _flags_suffix(
            [
                ("priority", self.priority, 0),
                ("max-attempts", self.max_attempts, 0),
                ("max-fails", self.max_fails, 0),
            ]
        )
        return head.encode("latin-1") + CRLF + self.payload + CRLF


class Run(Request, frozen=True):
    """``run <id> <name> <ttr> <wait-timeout> <payload-size> [-priority]``"""

    command: ClassVar[str] = "run"
    id: bytes
    name: str
    ttr_ms: int
    wait_timeout_ms: int
    payload: bytes
    priority: int = 0

    def to_bytes(self) -> bytes:
        head = (
            f"run {format_id(self.id)} {self.name} {self.ttr_ms} {self.wait_timeout_ms} "
            f"{len(self.payload)}"
        )
        head += _flags_suffix([("priority", self.priority, 0)])
        return head.encode("latin-1") + CRLF + self.payload + CRLF


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


class Complete(Request, frozen=True):
    """``complete <id> <result-size>`` and the result"""

    command: ClassVar[str] = "complete"
    id: bytes
    result: bytes

    def to_bytes(self) -> bytes:
        return _line("complete", format_id(self.id), len(self.result)) + self.result + CRLF


class Fail(Request, frozen=True):
    """``fail <id> <result-size>`` and the result"""

    command: ClassVar[str] = "fail"
    id: bytes
    result: bytes

    def to_bytes(self) -> bytes:
        return _line("fail", format_id(self.id), len(self.result)) + self.result + CRLF


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


class InspectJobs(Request, frozen=True):
    """``inspect jobs <name> <cursor-offset> <limit>``: ready and leased jobs"""

    command: ClassVar[str] = "inspect"
    name: str
    offset: int
    limit: int

    def to_bytes(self) -> bytes:
        return _line("inspect", "jobs", self.name, self.offset, self.limit)


class InspectScheduledJobs(Request, frozen=True):
    """``inspect scheduled-jobs <name> <cursor-offset> <limit>``"""

    command: ClassVar[str] = "inspect"
    name: str
    offset: int
    limit: int

    def to_bytes(self) -> bytes:
        return _line("inspect", "scheduled-jobs", self.name, self.offset, self.limit)


class InspectJob(Request, frozen=True):
    """``inspect job <id>``"""

    command: ClassVar[str] = "inspect"
    id: bytes

    def to_bytes(self) -> bytes:
        return _line("inspect", "job", format_id(self.id))


# ---------------------------------------------------------------------------------------
# Command parsers and their registry
# ---------------------------------------------------------------------------------------

#: ``parse(args, flags, data)``: positional words after the command word, the flags
#: without their ``-``, and the data block (None for commands without one)
ParseFn: TypeAlias = Callable[[tuple[str, ...], Mapping[str, str], bytes | None], Request]


class CommandSpec(msgspec.Struct, frozen=True):
    """How one command word is parsed.

    :param word: the command word
    :param parse: builds the request or raises ``ClientError``
    :param data_args: for commands with a data block, the number of positional
        arguments; the last one is the block's size. None: no data block.
    :param data_error: the error text for a bad data block (size, length, trailer)
    :param reply: the success reply's shape, for ``ReplyParser.expect()``
    """

    word: str
    parse: ParseFn
    data_args: int | None = None
    data_error: str = INVALID_PAYLOAD
    reply: ReplyShape = ReplyShape.OK
    #: this command's largest data block, if not the parser's ``max_data_bytes``
    max_data_bytes: int | None = None


class CommandRegistry:
    """Command words and ``inspect`` objects, mapped to their parsers."""

    def __init__(self) -> None:
        self._commands: dict[str, CommandSpec] = {}
        self._inspect: dict[str, tuple[ParseFn, ReplyShape]] = {}
        #: workq's hot commands are all registered as workq has them, so the parser may
        #: use its fast path for them (kept in step by register and register_inspect)
        self._fast = False

    def register(
        self,
        word: str,
        parse: ParseFn,
        *,
        data_args: int | None = None,
        data_error: str = INVALID_PAYLOAD,
        reply: ReplyShape = ReplyShape.OK,
        replace: bool = False,
        max_data_bytes: int | None = None,
    ) -> None:
        """Add a command word; see ``CommandSpec`` for the parameters."""
        _check_word(word)
        if word in self._commands and not replace:
            raise ValueError(f"command {word!r} is already registered")
        if data_args is not None and data_args < 1:
            raise ValueError("data_args counts the size argument, so it is at least 1")
        self._commands[word] = CommandSpec(
            word, parse, data_args, data_error, reply, max_data_bytes
        )
        self._update_fast()

    def register_inspect(
        self,
        obj: str,
        parse: ParseFn,
        *,
        reply: ReplyShape = ReplyShape.RECORDS,
        replace: bool = False,
    ) -> None:
        """Add ``inspect <obj> ...``; ``parse`` gets the words after ``obj``."""
        _check_word(obj)
        if "inspect" not in self._commands:
            self.register("inspect", self.parse_inspect, reply=ReplyShape.RECORDS)
        if obj in self._inspect and not replace:
            raise ValueError(f"inspect object {obj!r} is already registered")
        self._inspect[obj] = (parse, reply)
        self._update_fast()

    def _update_fast(self) -> None:
        def same(word: str, parse: ParseFn, data_args: int | None, data_error: str) -> bool:
            spec = self._commands.get(word)
            if spec is None or spec.data_args != data_args:
                return False
            return spec.parse is parse and (data_args is None or spec.data_error == data_error)

        inspect = self._commands.get("inspect")
        job = self._inspect.get("job")
        self._fast = (
            inspect is not None
            and inspect.data_args is None
            and inspect.parse == self.parse_inspect
            and job is not None
            and job[0] is _inspect_job
            and same("add", _parse_add, 5, INVALID_PAYLOAD)
            and same("complete", _parse_complete, 2, INVALID_RESULT)
            and same("fail", _parse_fail, 2, INVALID_RESULT)
            and same("lease", _parse_lease, None, "")
            and same("delete", _parse_delete, None, "")
            and same("result", _parse_result, None, "")
        )

    def get(self, word: str) -> CommandSpec | None:
        return self._commands.get(word)

    def reply_shape(self, word: str) -> ReplyShape:
        spec = self._commands.get(word)
        if spec is None:
            raise KeyError(word)
        return spec.reply

    def parse_inspect(
        self, args: tuple[str, ...], flags: Mapping[str, str], data: bytes | None
    ) -> Request:
        if not args:
            raise ClientError(INVALID_COMMAND_ARGS)
        entry = self._inspect.get(args[0])
        if entry is None:
            raise ClientError(UNKNOWN_COMMAND)
        return entry[0](args[1:], flags, data)


def _check_word(word: str) -> None:
    if not word or not word.isascii() or " " in word or word.startswith("-") or "\r" in word:
        raise ValueError(f"not a command word: {word!r}")


def _no_flags(flags: Mapping[str, str], most: int = 0) -> None:
    # workq ignores unknown flags but caps how many a command may carry
    if len(flags) > most:
        raise ClientError(INVALID_COMMAND_ARGS)


def _arity(args: tuple[str, ...], count: int) -> None:
    if len(args) != count:
        raise ClientError(INVALID_COMMAND_ARGS)


def _data(data: bytes | None) -> bytes:
    if data is None:  # only when a data command is registered without data_args
        raise ClientError(INVALID_COMMAND_ARGS)
    return data


def _ttr(text: str) -> int:
    return _uint(text, 1, MAX_TTR_MS, INVALID_TTR)


def _ttl(text: str) -> int:
    return _uint(text, 1, MAX_TTL_MS, INVALID_TTL)


def _wait_timeout(text: str) -> int:
    return _uint(text, 0, MAX_WAIT_TIMEOUT_MS, INVALID_WAIT_TIMEOUT)


def _priority(flags: Mapping[str, str]) -> int:
    text = flags.get("priority")
    return 0 if text is None else _int(text, MIN_PRIORITY, MAX_PRIORITY, INVALID_PRIORITY)


def _job_flags(flags: Mapping[str, str]) -> tuple[int, int, int]:
    """(max_attempts, max_fails, priority), checked in workq's order."""
    attempts = flags.get("max-attempts")
    fails = flags.get("max-fails")
    max_attempts = 0 if attempts is None else _uint(attempts, 0, MAX_ATTEMPTS, INVALID_MAX_ATTEMPTS)
    max_fails = 0 if fails is None else _uint(fails, 0, MAX_FAILS, INVALID_MAX_FAILS)
    return max_attempts, max_fails, _priority(flags)


def _parse_add(args: tuple[str, ...], flags: Mapping[str, str], data: bytes | None) -> Request:
    _arity(args, 5)
    _no_flags(flags, 3)
    job_id, name = parse_id(args[0]), parse_name(args[1])
    ttr_ms, ttl_ms = _ttr(args[2]), _ttl(args[3])
    max_attempts, max_fails, priority = _job_flags(flags)
    return Add(job_id, name, ttr_ms, ttl_ms, _data(data), priority, max_attempts, max_fails)


def _parse_schedule(args: tuple[str, ...], flags: Mapping[str, str], data: bytes | None) -> Request:
    _arity(args, 6)
    _no_flags(flags, 3)
    job_id, name = parse_id(args[0]), parse_name(args[1])
    ttr_ms, ttl_ms = _ttr(args[2]), _ttl(args[3])
    time_ns = parse_time(args[4])
    max_attempts, max_fails, priority = _job_flags(flags)
    return Schedule(
        job_id, name, ttr_ms, ttl_ms, _data(data), time_ns, priority, max_attempts, max_fails
    )


def _parse_run(args: tuple[str, ...], flags: Mapping[str, str], data: bytes | None) -> Request:
    _arity(args, 5)
    _no_flags(flags, 1)
    job_id, name = parse_id(args[0]), parse_name(args[1])
    ttr_ms = _ttr(args[2])
    priority = _priority(flags)
    wait_timeout_ms = _wait_timeout(args[3])
    return Run(job_id, name, ttr_ms, wait_timeout_ms, _data(data), priority)


def _parse_result(args: tuple[str, ...], flags: Mapping[str, str], data: bytes | None) -> Request:
    _arity(args, 2)
    _no_flags(flags)
    return Result(parse_id(args[0]), _wait_timeout(args[1]))


def _parse_lease(args: tuple[str, ...], flags: Mapping[str, str], data: bytes | None) -> Request:
    if not 2 <= len(args) <= MAX_LEASE_NAMES + 1:
        raise ClientError(INVALID_COMMAND_ARGS)
    _no_flags(flags)
    names = tuple(parse_name(a) for a in args[:-1])
    return Lease(names, _wait_timeout(args[-1]))


def _parse_complete(args: tuple[str, ...], flags: Mapping[str, str], data: bytes | None) -> Request:
    _arity(args, 2)
    _no_flags(flags)
    return Complete(parse_id(args[0]), _data(data))


def _parse_fail(args: tuple[str, ...], flags: Mapping[str, str], data: bytes | None) -> Request:
    _arity(args, 2)
    _no_flags(flags)
    return Fail(parse_id(args[0]), _data(data))


def _parse_delete(args: tuple[str, ...], flags: Mapping[str, str], data: bytes | None) -> Request:
    _arity(args, 1)
    _no_flags(flags)
    return Delete(parse_id(args[0]))


def _offset(text: str) -> int:
    return _uint(text, 0, MAX_CURSOR_OFFSET, INVALID_CURSOR_OFFSET)


def _limit(text: str) -> int:
    return _uint(text, 1, MAX_INSPECT_LIMIT, INVALID_LIMIT)


def _inspect_server(args: tuple[str, ...], flags: Mapping[str, str], data: bytes | None) -> Request:
    _arity(args, 0)
    _no_flags(flags)
    return InspectServer()


def _inspect_queues(args: tuple[str, ...], flags: Mapping[str, str], data: bytes | None) -> Request:
    _arity(args, 2)
    _no_flags(flags)
    return InspectQueues(_offset(args[0]), _limit(args[1]))


def _inspect_queue(args: tuple[str, ...], flags: Mapping[str, str], data: bytes | None) -> Request:
    _arity(args, 1)
    _no_flags(flags)
    return InspectQueue(parse_name(args[0]))


def _inspect_jobs(args: tuple[str, ...], flags: Mapping[str, str], data: bytes | None) -> Request:
    _arity(args, 3)
    _no_flags(flags)
    return InspectJobs(parse_name(args[0]), _offset(args[1]), _limit(args[2]))


def _inspect_scheduled_jobs(
    args: tuple[str, ...], flags: Mapping[str, str], data: bytes | None
) -> Request:
    _arity(args, 3)
    _no_flags(flags)
    return InspectScheduledJobs(parse_name(args[0]), _offset(args[1]), _limit(args[2]))


def _inspect_job(args: tuple[str, ...], flags: Mapping[str, str], data: bytes | None) -> Request:
    _arity(args, 1)
    _no_flags(flags)
    return InspectJob(parse_id(args[0]))


# -- the fast path: a whole hot command, in its plain form, already buffered -----------
#
# RequestParser.next_event() first tries _FAST_LINE_RE on the buffer: workq's hot
# commands, with exactly their arguments, single spaces, no flags, ids, names and numbers
# of the form parse_id, parse_name and _uint accept (numbers of at most 24 digits), and
# the CRLF. The regex has validated everything but number ranges, so a builder only
# converts; its event is the one the general path (_handle_tokens, _step_data and the
# parse functions above) gives for the same bytes. A builder returns None, consuming
# nothing, when it cannot finish (a data block not all buffered yet, or over
# max_data_bytes); then the general path takes the line. Used only while the registry
# has these commands as workq has them (CommandRegistry._fast).

_HEX = rb"[0-9a-fA-F]"
_ID_B = rb"(%s{8}-%s{4}-%s{4}-%s{4}-%s{12})" % ((_HEX,) * 5)
_NAME_B = rb"[A-Za-z0-9_.\-]{1,255}"
_NUM_B = rb"([0-9]{1,24})"
#: each alternative ends with its own group, so match.lastindex says which matched
_FAST_LINE_RE = re.compile(
    rb"add %s (%s) %s %s %s\r\n" % (_ID_B, _NAME_B, _NUM_B, _NUM_B, _NUM_B)  # 1-5
    + rb"|complete %s %s\r\n" % (_ID_B, _NUM_B)  # 6-7
    + rb"|lease ((?:%s )+)%s\r\n" % (_NAME_B, _NUM_B)  # 8-9
    + rb"|fail %s %s\r\n" % (_ID_B, _NUM_B)  # 10-11
    + rb"|delete %s\r\n" % _ID_B  # 12
    + rb"|result %s %s\r\n" % (_ID_B, _NUM_B)  # 13-14
    + rb"|inspect job %s\r\n" % _ID_B  # 15
)
_unhexlify = binascii.unhexlify

_FastBuild: TypeAlias = "Callable[[RequestParser, re.Match[bytes]], Event | None]"


def _fast_add(parser: RequestParser, m: re.Match[bytes]) -> Event | None:
    raw_id, name, ttr, ttl, size_text = m.group(1, 2, 3, 4, 5)
    data = parser._take_block(m.end(), int(size_text))
    if data is None:
        return None
    ttr_ms = int(ttr)
    if not 1 <= ttr_ms <= MAX_TTR_MS:
        return ProtocolError(CLIENT_ERROR, INVALID_TTR)
    ttl_ms = int(ttl)
    if not 1 <= ttl_ms <= MAX_TTL_MS:
        return ProtocolError(CLIENT_ERROR, INVALID_TTL)
    job_id = _unhexlify(raw_id.replace(b"-", b""))
    return Add(job_id, name.decode("ascii"), ttr_ms, ttl_ms, data, 0, 0, 0)


def _fast_complete(parser: RequestParser, m: re.Match[bytes]) -> Event | None:
    raw_id, size_text = m.group(6, 7)
    data = parser._take_block(m.end(), int(size_text))
    if data is None:
        return None
    return Complete(_unhexlify(raw_id.replace(b"-", b"")), data)


def _fast_lease(parser: RequestParser, m: re.Match[bytes]) -> Event | None:
    names, wait = m.group(8, 9)
    wait_ms = int(wait)
    parser._pos = m.end()
    if names.count(b" ") > MAX_LEASE_NAMES:
        return ProtocolError(CLIENT_ERROR, INVALID_COMMAND_ARGS)
    if wait_ms > MAX_WAIT_TIMEOUT_MS:
        return ProtocolError(CLIENT_ERROR, INVALID_WAIT_TIMEOUT)
    return Lease(tuple(names[:-1].decode("ascii").split(" ")), wait_ms)


def _fast_fail(parser: RequestParser, m: re.Match[bytes]) -> Event | None:
    raw_id, size_text = m.group(10, 11)
    data = parser._take_block(m.end(), int(size_text))
    if data is None:
        return None
    return Fail(_unhexlify(raw_id.replace(b"-", b"")), data)


def _fast_delete(parser: RequestParser, m: re.Match[bytes]) -> Event | None:
    parser._pos = m.end()
    return Delete(_unhexlify(m.group(12).replace(b"-", b"")))


def _fast_result(parser: RequestParser, m: re.Match[bytes]) -> Event | None:
    raw_id, wait = m.group(13, 14)
    wait_ms = int(wait)
    parser._pos = m.end()
    if wait_ms > MAX_WAIT_TIMEOUT_MS:
        return ProtocolError(CLIENT_ERROR, INVALID_WAIT_TIMEOUT)
    return Result(_unhexlify(raw_id.replace(b"-", b"")), wait_ms)


def _fast_inspect_job(parser: RequestParser, m: re.Match[bytes]) -> Event | None:
    parser._pos = m.end()
    return InspectJob(_unhexlify(m.group(15).replace(b"-", b"")))


#: match.lastindex -> builder (a tuple: indexing it is cheaper than a dict lookup)
_FAST_BUILD: tuple[_FastBuild, ...] = tuple(
    {
        5: _fast_add,
        7: _fast_complete,
        9: _fast_lease,
        11: _fast_fail,
        12: _fast_delete,
        14: _fast_result,
        15: _fast_inspect_job,
    }.get(index, _fast_add)  # other indexes are never the last group of a match
    for index in range(16)
)


def _workq_registry() -> CommandRegistry:
    registry = CommandRegistry()
    registry.register("add", _parse_add, data_args=5)
    registry.register("schedule", _parse_schedule, data_args=6)
    registry.register("run", _parse_run, data_args=5, reply=ReplyShape.RESULT)
    registry.register("result", _parse_result, reply=ReplyShape.RESULT)
    registry.register("lease", _parse_lease, reply=ReplyShape.JOB)
    registry.register("complete", _parse_complete, data_args=2, data_error=INVALID_RESULT)
    registry.register("fail", _parse_fail, data_args=2, data_error=INVALID_RESULT)
    registry.register("delete", _parse_delete)
    registry.register_inspect("server", _inspect_server)
    registry.register_inspect("queues", _inspect_queues)
    registry.register_inspect("queue", _inspect_queue)
    registry.register_inspect("jobs", _inspect_jobs)
    registry.register_inspect("scheduled-jobs", _inspect_scheduled_jobs)
    registry.register_inspect("job", _inspect_job)
    return registry


#: the registry parsers use unless given another: workq's commands plus registered ones
DEFAULT_REGISTRY = _workq_registry()


def register_command(
    word: str,
    parse: ParseFn,
    *,
    data_args: int | None = None,
    data_error: str = INVALID_PAYLOAD,
    reply: ReplyShape = ReplyShape.OK,
    replace: bool = False,
    max_data_bytes: int | None = None,
) -> None:
    """Add a command word to ``DEFAULT_REGISTRY`` (see ``CommandSpec``)."""
    DEFAULT_REGISTRY.register(
        word,
        parse,
        data_args=data_args,
        data_error=data_error,
        reply=reply,
        replace=replace,
        max_data_bytes=max_data_bytes,
    )


# ---------------------------------------------------------------------------------------
# jobq's extension commands (docs/extensions.md): ``<word> <size>`` and a JSON body
# ---------------------------------------------------------------------------------------

#: jobq's extension command words
EXTENSION_COMMANDS = (
    "submit",
    "xlease",
    "heartbeat",
    "xcomplete",
    "xfail",
    "release",
    "pause",
    "resume",
    "cancel",
    "jobs",
    "job",
    "history",
    "screate",
    "slist",
    "sshow",
    "spause",
    "sresume",
    "salter",
    "strigger",
    "sbackfill",
    "shistory",
    "sdrop",
)
#: largest JSON body of an extension command (a 1 MiB checkpoint in base64 fits), in bytes
MAX_EXTENSION_BODY_BYTES = 3 * 1024 * 1024


class Extension(Request, frozen=True):
    """One of jobq's extension commands: its word and its JSON body."""

    word: str
    body: bytes

    def reply_word(self) -> str:
        return self.word

    def to_bytes(self) -> bytes:
        return b"%s %d\r\n%s\r\n" % (self.word.encode("ascii"), len(self.body), self.body)


def _parse_extension(word: str) -> ParseFn:
    def parse(args: tuple[str, ...], flags: Mapping[str, str], data: bytes | None) -> Request:
        _no_flags(flags)
        return Extension(word, _data(data))

    parse.jobq_extension = True  # type: ignore[attr-defined]  # the parser's fast path
    return parse


#: an extension command's line: ``<word> <size>`` (the parser's fast path)
_EXTENSION_LINE_MATCH = re.compile(rb"([a-z]{2,16}) ([0-9]{1,8})\r\n").match


def register_extensions(registry: CommandRegistry) -> CommandRegistry:
    """Add jobq's extension commands to ``registry``; return it."""
    for word in EXTENSION_COMMANDS:
        registry.register(
            word,
            _parse_extension(word),
            data_args=1,
            reply=ReplyShape.DATA,
            max_data_bytes=MAX_EXTENSION_BODY_BYTES,
        )
    return registry


def default_registry() -> CommandRegistry:
    """A new registry with what ``DEFAULT_REGISTRY`` starts with: workq's commands and
    jobq's extensions."""
    return register_extensions(_workq_registry())


register_extensions(DEFAULT_REGISTRY)


def register_inspect_object(
    obj: str, parse: ParseFn, *, reply: ReplyShape = ReplyShape.RECORDS, replace: bool = False
) -> None:
    """Add ``inspect <obj> ...`` to ``DEFAULT_REGISTRY``."""
    DEFAULT_REGISTRY.register_inspect(obj, parse, reply=reply, replace=replace)


# ---------------------------------------------------------------------------------------
# RequestParser: the server side
# ---------------------------------------------------------------------------------------


class _State(Enum):
    #: waiting for a command line
    LINE = "line"
    #: buffering a data block of a command that may be valid, and its CRLF
    DATA = "data"
    #: counting off a rejected command's data block without buffering it
    DISCARD = "discard"
    #: expecting the CRLF after a discarded data block
    TRAILER = "trailer"
    #: a data block was not followed by CRLF: dropping bytes through the next CRLF
    RESYNC = "resync"
    #: framing lost; everything is ignored
    CLOSED = "closed"


Event: TypeAlias = Request | ProtocolError

_FAST_LINE_MATCH = _FAST_LINE_RE.match


class _NeedMore:
    """A step's answer when the buffer does not hold enough bytes yet."""


_NEED_MORE = _NeedMore()


class RequestParser:
    """Bytes from one client connection in, one event per command out.

    :param max_line_bytes: longest command line, without CRLF (default 16384); longer is fatal
    :param max_data_bytes: largest payload/result (default 1 MiB); larger is rejected
    :param max_discard_bytes: largest rejected data block skipped to keep the connection
        (default 16 MiB); a larger declared size is fatal
    :param registry: the commands (default ``DEFAULT_REGISTRY``)

    Transitions (one command at a time)::

        LINE --line ok, no data-------------------------> LINE     event: request/error
        LINE --data command, size <= max, line valid----> DATA
        LINE --line invalid or size > max, size known---> DISCARD  event: error
        LINE --size unreadable--------------------------> LINE     event: error
        LINE --too long / bare LF / size > discard max--> CLOSED   event: fatal error
        DATA --size bytes + CRLF------------------------> LINE     event: request/error
        DATA --size bytes, no CRLF----------------------> RESYNC   event: data error
        DISCARD --size bytes----------------------------> TRAILER
        TRAILER --CRLF----------------------------------> LINE
        TRAILER --anything else-------------------------> RESYNC
        RESYNC --through the next CRLF------------------> LINE
        RESYNC --no CRLF within max_line_bytes----------> CLOSED   event: fatal error
    """

    def __init__(
        self,
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        max_data_bytes: int = MAX_DATA_BYTES,
        max_discard_bytes: int = DEFAULT_MAX_DISCARD_BYTES,
        registry: CommandRegistry | None = None,
    ) -> None:
        self.max_line_bytes = max_line_bytes
        self.max_data_bytes = max_data_bytes
        self.max_discard_bytes = max(max_discard_bytes, max_data_bytes)
        self._registry = registry if registry is not None else DEFAULT_REGISTRY
        self._buf = bytearray()
        #: start of the unconsumed bytes; the consumed ones are dropped (_compact) only
        #: when next_event() runs out of whole commands, not per command
        self._pos = 0
        #: bytes after _pos already searched for a line end
        self._scanned = 0
        self._state = _State.LINE
        self._left = 0  # DATA: block size; DISCARD: bytes still to drop
        self._resync_dropped = 0
        self._pending: tuple[CommandSpec, tuple[str, ...], dict[str, str]] | None = None

    @property
    def closed(self) -> bool:
        """True after a fatal error: the connection must be closed."""
        return self._state is _State.CLOSED

    @property
    def buffered_bytes(self) -> int:
        """Bytes held and not yet consumed."""
        return len(self._buf) - self._pos

    def feed(self, data: bytes) -> None:
        """Add bytes received from the client."""
        state = self._state
        if state is _State.CLOSED or not data:
            return
        if state is _State.DISCARD and self._pos == len(self._buf):
            # drop straight from the input so an oversize block never reaches the buffer
            view = memoryview(data)
            drop = min(self._left, len(view))
            self._left -= drop
            view = view[drop:]
            if self._left == 0:
                self._state = _State.TRAILER
            self._buf += view
        else:
            self._buf += data

    def next_event(self) -> Event | None:
        """The next request or error, or None until more bytes are fed."""
        while True:
            state = self._state
            if state is _State.LINE:
                buf = self._buf
                start = self._pos
                if start == len(buf):  # all consumed (the usual end of a feed)
                    if start:
                        buf.clear()
                        self._pos = 0
                    return None
                if self._registry._fast:
                    m = _FAST_LINE_MATCH(buf, start)
                    if m is not None and m.end() - 2 - start <= self.max_line_bytes:
                        # the line ends at m.end(): no need to remember a search
                        self._scanned = 0
                        event = _FAST_BUILD[m.lastindex](self, m)  # type: ignore[index]
                        if event is not None:
                            return event
                    else:
                        extension = self._fast_extension(buf, start)
                        if extension is not None:
                            return extension
                # _step_line and _handle_line inlined
                end = buf.find(b"\n", start + self._scanned)
                if end == -1:
                    self._scanned = len(buf) - start
                    if self._scanned > self.max_line_bytes + 1:
                        return self._fatal(LINE_TOO_LONG)
                    self._compact()
                    return None
                self._scanned = 0
                if end == start or buf[end - 1] != 0x0D:
                    return self._fatal(INVALID_LINE_END)
                if end - 1 - start > self.max_line_bytes:
                    return self._fatal(LINE_TOO_LONG)
                line = buf[start : end - 1].decode("latin-1")
                self._pos = end + 1
                event = self._handle_tokens(line.split(" "))
                if event is not None:
                    return event
                continue
            if state is _State.DATA:
                result = self._step_data()
            elif state is _State.DISCARD:
                result = self._step_discard()
            elif state is _State.TRAILER:
                result = self._step_trailer()
            elif state is _State.RESYNC:
                result = self._step_resync()
            else:
                return None
            if isinstance(result, _NeedMore):
                self._compact()
                return None
            if result is not None:
                return result

    # -- steps: each returns an event, _NEED_MORE, or None (state changed, go on) --------

    def _available(self) -> int:
        return len(self._buf) - self._pos

    def _compact(self) -> None:
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0

    def _fatal(self, text: str) -> ProtocolError:
        self._state = _State.CLOSED
        self._buf = bytearray()
        self._pos = 0
        self._pending = None
        return ProtocolError(CLIENT_ERROR, text, fatal=True)

    def _step_line(self) -> Event | _NeedMore | None:
        start = self._pos
        end = self._buf.find(b"\n", start + self._scanned)
        if end == -1:
            self._scanned = self._available()
            if self._scanned > self.max_line_bytes + 1:
                return self._fatal(LINE_TOO_LONG)
            return _NEED_MORE
        self._scanned = 0
        if end == start or self._buf[end - 1] != 0x0D:
            return self._fatal(INVALID_LINE_END)
        if end - 1 - start > self.max_line_bytes:
            return self._fatal(LINE_TOO_LONG)
        line = self._buf[start : end - 1].decode("latin-1")
        self._pos = end + 1
        return self._handle_line(line)

    def _handle_line(self, line: str) -> Event | None:
        return self._handle_tokens(line.split(" "))

    def _handle_tokens(self, tokens: list[str]) -> Event | None:
        args: list[str] = []
        flags: dict[str, str] = {}
        flags_ok = True
        for token in tokens[1:]:
            if not token:
                continue  # workq skips empty words (double spaces)
            if token[0] != "-" or "=" not in token:
                args.append(token)
                continue
            key, _, value = token[1:].partition("=")
            if not key or not value or key in flags:
                flags_ok = False
                continue
            flags[key] = value
        spec = self._registry.get(tokens[0])
        if spec is None:
            return ProtocolError(
                CLIENT_ERROR, UNKNOWN_COMMAND if flags_ok else INVALID_COMMAND_FLAGS
            )
        arg_tuple = tuple(args)
        if spec.data_args is None:
            if not flags_ok:
                return ProtocolError(CLIENT_ERROR, INVALID_COMMAND_FLAGS)
            return self._build(spec, arg_tuple, flags, None)

        # A data command: find the block's size even if the line is wrong, so the block
        # can be skipped. Clients put the size last, so a wrong arity still finds it.
        size = _data_size(args[-1]) if args else None
        line_error: str | None = None
        if not flags_ok:
            line_error = INVALID_COMMAND_FLAGS
        elif len(args) != spec.data_args:
            line_error = INVALID_COMMAND_ARGS
        if size is None:
            return ProtocolError(CLIENT_ERROR, line_error or spec.data_error)
        if size > max(self.max_discard_bytes, spec.max_data_bytes or 0):
            return self._fatal(line_error or spec.data_error)
        limit = spec.max_data_bytes or self.max_data_bytes
        if line_error is not None or size > limit:
            self._state = _State.DISCARD
            self._left = size
            return ProtocolError(CLIENT_ERROR, line_error or spec.data_error)
        self._state = _State.DATA
        self._left = size
        self._pending = (spec, arg_tuple, flags)
        return None

    def _fast_extension(self, buf: bytearray, start: int) -> Extension | None:
        """An extension command whose line and whole body are buffered, in one match;
        None (consuming nothing) for anything else, which the general path then reads."""
        m = _EXTENSION_LINE_MATCH(buf, start)
        if m is None:
            return None
        word = m.group(1).decode("ascii")
        spec = self._registry.get(word)
        if spec is None or not getattr(spec.parse, "jobq_extension", False):
            return None
        size = int(m.group(2))
        if size > (spec.max_data_bytes or self.max_data_bytes):
            return None
        line_end = m.end()
        stop = line_end + size
        if len(buf) < stop + 2 or buf[stop] != 0x0D or buf[stop + 1] != 0x0A:
            return None
        self._scanned = 0
        self._pos = stop + 2
        return Extension(word, bytes(buf[line_end:stop]))

    def _take_block(self, line_end: int, size: int) -> bytes | None:
        """For the fast path: the data block at ``line_end``, consumed with its line.

        None, consuming nothing, unless the block and its CRLF are all buffered and the
        size is within max_data_bytes.
        """
        if size > self.max_data_bytes:
            return None
        buf = self._buf
        stop = line_end + size
        if len(buf) < stop + 2 or buf[stop] != 0x0D or buf[stop + 1] != 0x0A:
            return None
        self._pos = stop + 2
        return bytes(buf[line_end:stop])

    def _build(
        self,
        spec: CommandSpec,
        args: tuple[str, ...],
        flags: Mapping[str, str],
        data: bytes | None,
    ) -> Event:
        try:
            return spec.parse(args, flags, data)
        except ClientError as error:
            return ProtocolError(CLIENT_ERROR, error.text)

    def _step_data(self) -> Event | _NeedMore | None:
        size = self._left
        if self._available() < size + 2:
            return _NEED_MORE
        assert self._pending is not None
        spec, args, flags = self._pending
        self._pending = None
        start = self._pos
        if self._buf[start + size : start + size + 2] != CRLF:
            self._pos = start + size
            self._state = _State.RESYNC
            self._resync_dropped = 0
            return ProtocolError(CLIENT_ERROR, spec.data_error)
        data = bytes(self._buf[start : start + size])
        self._pos = start + size + 2
        self._state = _State.LINE
        return self._build(spec, args, flags, data)

    def _step_discard(self) -> _NeedMore | None:
        drop = min(self._left, self._available())
        self._pos += drop
        self._left -= drop
        if self._left:
            return _NEED_MORE
        self._state = _State.TRAILER
        return None

    def _step_trailer(self) -> _NeedMore | None:
        if self._available() < 2:
            return _NEED_MORE
        if self._buf[self._pos : self._pos + 2] == CRLF:
            self._pos += 2
            self._state = _State.LINE
        else:
            self._state = _State.RESYNC
            self._resync_dropped = 0
        return None

    def _step_resync(self) -> Event | _NeedMore | None:
        start = self._pos
        end = self._buf.find(CRLF, start)
        if end != -1:
            self._resync_dropped += end - start
            if self._resync_dropped > self.max_line_bytes:
                return self._fatal(LINE_TOO_LONG)
            self._pos = end + 2
            self._state = _State.LINE
            return None
        # keep a trailing CR: it may be the first half of the CRLF
        keep = 1 if self._buf.endswith(b"\r") else 0
        drop = self._available() - keep
        self._pos += drop
        self._resync_dropped += drop
        if self._resync_dropped > self.max_line_bytes:
            return self._fatal(LINE_TOO_LONG)
        return _NEED_MORE


# ---------------------------------------------------------------------------------------
# Replies: encoders (server side)
# ---------------------------------------------------------------------------------------

FieldValue: TypeAlias = str | int | bytes


def ok() -> bytes:
    """``+OK``: add, schedule, complete, fail, delete."""
    return b"+OK\r\n"


def job_reply(job_id: bytes, name: str, ttr_ms: int, payload: bytes) -> bytes:
    """A leased job: ``+OK 1``, ``<id> <name> <ttr> <payload-size>``, the payload."""
    head = f"+OK 1\r\n{format_id(job_id)} {name} {ttr_ms} {len(payload)}\r\n"
    return head.encode("latin-1") + payload + CRLF


def result_reply(job_id: bytes, success: bool, result: bytes) -> bytes:
    """A job's result (run, result): ``+OK 1``, ``<id> <0|1> <result-size>``, the result."""
    head = f"+OK 1\r\n{format_id(job_id)} {int(success)} {len(result)}\r\n"
    return head.encode("latin-1") + result + CRLF


def records_reply(records: Sequence[tuple[str, Sequence[tuple[str, FieldValue]]]]) -> bytes:
    """``+OK <n>`` then per record ``<name> <k>`` and its k ``<key> <value>`` lines.

    ``bytes`` values are written raw (the inspect ``payload``).
    """
    out = bytearray(f"+OK {len(records)}\r\n".encode())
    for name, fields in records:
        out += f"{name} {len(fields)}\r\n".encode("latin-1")
        for key, value in fields:
            if isinstance(value, bytes):
                out += key.encode("latin-1") + b" " + value + CRLF
            else:
                out += f"{key} {value}\r\n".encode("latin-1")
    return bytes(out)


def error_reply(kind: str, text: str = "") -> bytes:
    """``-<kind> <text>`` (or ``-<kind>`` without a text).

    A text may echo client input (an unknown JSON key, a schedule name, a cron spec), so it
    is kept on one line, in latin-1 and short: CR and LF become ``\\r`` and ``\\n``, other
    characters ``\\uXXXX`` escapes (found by fuzzing: they split the reply or dropped the
    connection), and a text longer than :data:`MAX_ERROR_TEXT_BYTES` is cut and ends in
    ``...`` (a 100 KB cron spec echoed whole made a reply line jobq's own client refuses).
    """
    if not text:
        return f"-{kind}\r\n".encode("latin-1")
    return b"-%s %s\r\n" % (kind.encode("latin-1"), error_text_bytes(text))


def error_text_bytes(text: str) -> bytes:
    """``text`` as one latin-1 line of at most :data:`MAX_ERROR_TEXT_BYTES` bytes (see
    :func:`error_reply`); an escape is never cut in two."""
    # every character takes a byte or more: the first MAX + 1 decide whether to cut
    head = text[: MAX_ERROR_TEXT_BYTES + 1]
    data = head.translate(_LINE_BREAK_ESCAPES).encode("latin-1", "backslashreplace")
    if len(data) <= MAX_ERROR_TEXT_BYTES:
        return data
    out = bytearray()
    room = MAX_ERROR_TEXT_BYTES - len(ELLIPSIS)
    for char in head:
        piece = char.translate(_LINE_BREAK_ESCAPES).encode("latin-1", "backslashreplace")
        if len(out) + len(piece) > room:
            break
        out += piece
    return bytes(out) + ELLIPSIS


_LINE_BREAK_ESCAPES = str.maketrans({"\r": "\\r", "\n": "\\n"})


def client_error(text: str) -> bytes:
    """``-CLIENT-ERROR <text>``."""
    return error_reply(CLIENT_ERROR, text)


def server_error(text: str) -> bytes:
    """``-SERVER-ERROR <text>``."""
    return error_reply(SERVER_ERROR, text)


def timeout() -> bytes:
    """``-TIMEOUT``: nothing within the wait-timeout."""
    return b"-TIMEOUT\r\n"


def not_found() -> bytes:
    """``-NOT-FOUND``: no such job (or queue, for inspect)."""
    return b"-NOT-FOUND\r\n"


def _field_str(fields: Mapping[str, str | bytes], key: str) -> str:
    value = fields.get(key)
    if not isinstance(value, str):
        raise MalformedReplyError(f"record has no {key!r} field")
    return value


def _field_int(fields: Mapping[str, str | bytes], key: str) -> int:
    value = _number(_field_str(fields, key), _INT_RE)
    if value is None:
        raise MalformedReplyError(f"record field {key!r} is not a number")
    return value


def _field_time(fields: Mapping[str, str | bytes], key: str) -> int:
    try:
        return parse_time(_field_str(fields, key))
    except ClientError:
        raise MalformedReplyError(f"record field {key!r} is not a time") from None


class ServerInfo(msgspec.Struct, frozen=True):
    """``inspect server``: clients connected now, jobs evicted by TTL, start time (Unix ns)."""

    active_clients: int
    evicted_jobs: int
    started_ns: int

    def record(self) -> tuple[str, list[tuple[str, FieldValue]]]:
        return (
            "server",
            [
                ("active-clients", self.active_clients),
                ("evicted-jobs", self.evicted_jobs),
                ("started", format_time(self.started_ns)),
            ],
        )

    @classmethod
    def from_record(cls, record: Record) -> ServerInfo:
        f = record.fields
        return cls(
            _field_int(f, "active-clients"),
            _field_int(f, "evicted-jobs"),
            _field_time(f, "started"),
        )


class QueueInfo(msgspec.Struct, frozen=True):
    """One queue for ``inspect queue(s)``: jobs ready to lease, jobs waiting for their time."""

    name: str
    ready_len: int
    scheduled_len: int

    def record(self) -> tuple[str, list[tuple[str, FieldValue]]]:
        return (self.name, [("ready-len", self.ready_len), ("scheduled-len", self.scheduled_len)])

    @classmethod
    def from_record(cls, record: Record) -> QueueInfo:
        f = record.fields
        return cls(record.name, _field_int(f, "ready-len"), _field_int(f, "scheduled-len"))


class JobInfo(msgspec.Struct, frozen=True):
    """One job for ``inspect job(s)``; times are Unix ns, ``time_ns`` only for scheduled jobs.

    ``state``: 0 new, 1 completed, 2 failed, 3 pending, 4 leased.
    """

    id: bytes
    name: str
    ttr_ms: int
    ttl_ms: int
    payload: bytes
    max_attempts: int
    attempts: int
    max_fails: int
    fails: int
    priority: int
    state: int
    created_ns: int
    time_ns: int | None = None

    def record(self) -> tuple[str, list[tuple[str, FieldValue]]]:
        fields: list[tuple[str, FieldValue]] = [
            ("name", self.name),
            ("ttr", self.ttr_ms),
            ("ttl", self.ttl_ms),
            ("payload-size", len(self.payload)),
            ("payload", self.payload),
            ("max-attempts", self.max_attempts),
            ("attempts", self.attempts),
            ("max-fails", self.max_fails),
            ("fails", self.fails),
            ("priority", self.priority),
            ("state", self.state),
            ("created", format_time(self.created_ns)),
        ]
        if self.time_ns is not None:
            fields.append(("time", format_time(self.time_ns)))
        return format_id(self.id), fields

    @classmethod
    def from_record(cls, record: Record) -> JobInfo:
        f = record.fields
        try:
            job_id = parse_id(record.name)
        except ClientError:
            raise MalformedReplyError("record name is not a job id") from None
        payload = f.get("payload", b"")
        if not isinstance(payload, bytes):
            raise MalformedReplyError("payload is not raw bytes")
        return cls(
            id=job_id,
            name=_field_str(f, "name"),
            ttr_ms=_field_int(f, "ttr"),
            ttl_ms=_field_int(f, "ttl"),
            payload=payload,
            max_attempts=_field_int(f, "max-attempts"),
            attempts=_field_int(f, "attempts"),
            max_fails=_field_int(f, "max-fails"),
            fails=_field_int(f, "fails"),
            priority=_field_int(f, "priority"),
            state=_field_int(f, "state"),
            created_ns=_field_time(f, "created"),
            time_ns=_field_time(f, "time") if "time" in f else None,
        )


def inspect_server_reply(info: ServerInfo) -> bytes:
    """``+OK 1``, ``server 3``, ``active-clients``, ``evicted-jobs``, ``started``."""
    return records_reply([info.record()])


def inspect_queues_reply(queues: Sequence[QueueInfo]) -> bytes:
    """``+OK <n>`` and a record per queue (the caller sorts by name and pages)."""
    return records_reply([q.record() for q in queues])


def inspect_queue_reply(queue: QueueInfo) -> bytes:
    """``+OK 1`` and the queue's record."""
    return records_reply([queue.record()])


def inspect_jobs_reply(jobs: Sequence[JobInfo]) -> bytes:
    """``+OK <n>`` and a record per job (inspect jobs / scheduled-jobs)."""
    return records_reply([j.record() for j in jobs])


def inspect_job_reply(job: JobInfo) -> bytes:
    """``+OK 1`` and the job's record."""
    return records_reply([job.record()])


# ---------------------------------------------------------------------------------------
# ReplyParser: the client side
# ---------------------------------------------------------------------------------------


class MalformedReplyError(ValueError):
    """The server's reply breaks the protocol; the connection cannot be trusted."""


class Ok(msgspec.Struct, frozen=True):
    """``+OK``."""


class JobReply(msgspec.Struct, frozen=True):
    """A leased job."""

    id: bytes
    name: str
    ttr_ms: int
    payload: bytes


class ResultReply(msgspec.Struct, frozen=True):
    """A finished job's result (run, result)."""

    id: bytes
    success: bool
    result: bytes


class Record(NamedTuple):
    """One inspect record: its name (server, queue name, job id) and key/value fields."""

    name: str
    fields: dict[str, str | bytes]


class RecordsReply(msgspec.Struct, frozen=True):
    """An inspect reply."""

    records: tuple[Record, ...]


class DataReply(msgspec.Struct, frozen=True):
    """The body of an extension command's reply (JSON)."""

    body: bytes


class Error(msgspec.Struct, frozen=True):
    """An error reply; ``kind``: ``CLIENT-ERROR``, ``SERVER-ERROR``, ``TIMEOUT``, ``NOT-FOUND``."""

    kind: str
    text: str = ""


Reply: TypeAlias = Ok | JobReply | ResultReply | RecordsReply | DataReply | Error

#: a reply reader's request for input: _READ_LINE, or a data block's size
_READ_LINE = -1
_ReplyReader: TypeAlias = Generator[int, bytes, Reply]
_PAYLOAD_KEY = b"payload "


def _reply_int(raw: bytes, what: str) -> int:
    value = _number(raw.decode("latin-1"), _UINT_RE)
    if value is None:
        raise MalformedReplyError(f"bad {what}: {raw!r}")
    return value


def _reply_id(raw: bytes) -> bytes:
    try:
        return parse_id(raw.decode("latin-1"))
    except ClientError:
        raise MalformedReplyError(f"bad job id: {raw!r}") from None


def _read_reply(shape: ReplyShape, max_data_bytes: int) -> _ReplyReader:
    """Reads one reply: yields what it needs next, receives it, returns the reply."""
    line = yield _READ_LINE
    if line.startswith(b"-"):
        kind, _, text = line[1:].decode("latin-1").partition(" ")
        if not kind:
            raise MalformedReplyError(f"bad error reply: {line!r}")
        return Error(kind, text)
    if shape is ReplyShape.OK:
        if line != b"+OK":
            raise MalformedReplyError(f"expected +OK, got {line!r}")
        return Ok()
    if not line.startswith(b"+OK "):
        raise MalformedReplyError(f"expected +OK <count>, got {line!r}")
    count = _reply_int(line[4:], "reply count")

    def block_size(raw: bytes, limit: int = max_data_bytes) -> int:
        size = _reply_int(raw, "data size")
        if size > limit:
            raise MalformedReplyError(f"data block of {size} bytes is too large")
        return size

    if shape is ReplyShape.DATA:
        body = yield block_size(line[4:], max(max_data_bytes, MAX_EXTENSION_BODY_BYTES))
        return DataReply(body)

    if shape is ReplyShape.JOB or shape is ReplyShape.RESULT:
        if count != 1:
            raise MalformedReplyError(f"expected one reply, got {count}")
        parts = (yield _READ_LINE).split(b" ")
        if shape is ReplyShape.JOB:
            if len(parts) != 4:
                raise MalformedReplyError("leased job line needs 4 words")
            job_id, name = _reply_id(parts[0]), parts[1].decode("latin-1")
            ttr_ms = _reply_int(parts[2], "ttr")
            payload = yield block_size(parts[3])
            return JobReply(job_id, name, ttr_ms, payload)
        if len(parts) != 3 or parts[1] not in (b"0", b"1"):
            raise MalformedReplyError("result line needs <id> <0|1> <size>")
        job_id = _reply_id(parts[0])
        result = yield block_size(parts[2])
        return ResultReply(job_id, parts[1] == b"1", result)

    records: list[Record] = []
    for _ in range(count):
        head = (yield _READ_LINE).split(b" ")
        if len(head) != 2:
            raise MalformedReplyError("record line needs <name> <key-count>")
        key_count = _reply_int(head[1], "key count")
        fields: dict[str, str | bytes] = {}
        index = 0
        while index < key_count:
            key, sep, value = (yield _READ_LINE).partition(b" ")
            if not sep:
                raise MalformedReplyError(f"field line without a value: {key!r}")
            fields[key.decode("latin-1")] = value.decode("latin-1")
            index += 1
            if key == b"payload-size" and index < key_count:
                # the payload is raw and may hold CRLF: read it by size, as the Go client
                raw = yield len(_PAYLOAD_KEY) + block_size(value)
                if not raw.startswith(_PAYLOAD_KEY):
                    raise MalformedReplyError("payload must follow payload-size")
                fields["payload"] = raw[len(_PAYLOAD_KEY) :]
                index += 1
        records.append(Record(head[0].decode("latin-1"), fields))
    return RecordsReply(tuple(records))


class ReplyParser:
    """Bytes from the server in, one typed reply per expected reply out (see module doc).

    :param max_line_bytes: longest reply line, without CRLF (default 65536)
    :param max_data_bytes: largest data block in a reply (default 1 MiB)
    :param registry: maps command words to reply shapes (default ``DEFAULT_REGISTRY``)
    """

    def __init__(
        self,
        *,
        max_line_bytes: int = DEFAULT_MAX_REPLY_LINE_BYTES,
        max_data_bytes: int = MAX_DATA_BYTES,
        registry: CommandRegistry | None = None,
    ) -> None:
        self.max_line_bytes = max_line_bytes
        self.max_data_bytes = max_data_bytes
        self._registry = registry if registry is not None else DEFAULT_REGISTRY
        self._expected: deque[ReplyShape] = deque()
        self._reader: _ReplyReader | None = None
        self._need = _READ_LINE
        self._buf = bytearray()
        self._pos = 0
        self._scanned = 0
        self._broken: MalformedReplyError | None = None

    def expect(self, what: ReplyShape | Request | str) -> None:
        """Queue the shape of the next reply: a shape, the request sent, or its command word."""
        if isinstance(what, ReplyShape):
            shape = what
        elif isinstance(what, Request):
            shape = self._registry.reply_shape(what.reply_word())
        else:
            shape = self._registry.reply_shape(what.split(" ", 1)[0])
        self._expected.append(shape)

    @property
    def pending(self) -> int:
        """Replies expected and not yet returned."""
        return len(self._expected) + (self._reader is not None)

    def feed(self, data: bytes) -> None:
        """Add bytes received from the server."""
        self._buf += data

    def next_reply(self) -> Reply | None:
        """The next whole reply, or None until more bytes are fed."""
        if self._broken is not None:
            raise self._broken
        try:
            return self._next_reply()
        except MalformedReplyError as error:
            self._broken = error
            self._reader = None
            raise

    def _next_reply(self) -> Reply | None:
        if self._reader is None:
            if not self._expected:
                if len(self._buf) > self._pos:
                    raise RuntimeError("reply bytes arrived but no reply was expected")
                return None
            self._reader = _read_reply(self._expected.popleft(), self.max_data_bytes)
            self._need = next(self._reader)
        while True:
            value = self._take(self._need)
            if value is None:
                self._compact()
                return None
            try:
                self._need = self._reader.send(value)
            except StopIteration as done:
                self._reader = None
                reply: Reply = done.value
                return reply

    def _compact(self) -> None:
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0

    def _take(self, need: int) -> bytes | None:
        start = self._pos
        if need == _READ_LINE:
            end = self._buf.find(b"\n", start + self._scanned)
            if end == -1:
                self._scanned = len(self._buf) - start
                if self._scanned > self.max_line_bytes + 1:
                    raise MalformedReplyError("reply line too long")
                return None
            self._scanned = 0
            if end == start or self._buf[end - 1] != 0x0D:
                raise MalformedReplyError("reply line does not end in CRLF")
            if end - 1 - start > self.max_line_bytes:
                raise MalformedReplyError("reply line too long")
            self._pos = end + 1
            return bytes(self._buf[start : end - 1])
        if len(self._buf) - start < need + 2:
            return None
        if self._buf[start + need : start + need + 2] != CRLF:
            raise MalformedReplyError("data block not followed by CRLF")
        self._pos = start + need + 2
        return bytes(self._buf[start : start + need])
