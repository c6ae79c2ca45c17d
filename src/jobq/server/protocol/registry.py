"""The command registry: which command words (and ``inspect`` objects) the server knows, how
each is parsed into a request, and the shape of its reply. Holds the parse functions of
workq's commands and of jobq's extension commands."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeAlias

import msgspec

from jobq.server.protocol.errors import (
    INVALID_COMMAND_ARGS,
    INVALID_CURSOR_OFFSET,
    INVALID_LIMIT,
    INVALID_MAX_ATTEMPTS,
    INVALID_MAX_FAILS,
    INVALID_PAYLOAD,
    INVALID_PRIORITY,
    INVALID_RESULT,
    INVALID_TTL,
    INVALID_TTR,
    INVALID_WAIT_TIMEOUT,
    UNKNOWN_COMMAND,
    ClientError,
)
from jobq.server.protocol.requests import (
    Add,
    Complete,
    Delete,
    Extension,
    Fail,
    InspectJob,
    InspectJobs,
    InspectQueue,
    InspectQueues,
    InspectScheduledJobs,
    InspectServer,
    Lease,
    ReplyShape,
    Request,
    Result,
    Run,
    Schedule,
)
from jobq.server.protocol.values import (
    MAX_ATTEMPTS,
    MAX_CURSOR_OFFSET,
    MAX_EXTENSION_BODY_BYTES,
    MAX_FAILS,
    MAX_INSPECT_LIMIT,
    MAX_LEASE_NAMES,
    MAX_PRIORITY,
    MAX_TTL_MS,
    MAX_TTR_MS,
    MAX_WAIT_TIMEOUT_MS,
    MIN_PRIORITY,
    parse_id,
    parse_name,
    parse_number,
    parse_time,
)

__all__ = [
    "DEFAULT_REGISTRY",
    "EXTENSION_COMMANDS",
    "CommandRegistry",
    "CommandSpec",
    "ParseFn",
    "default_registry",
    "register_command",
    "register_extensions",
    "register_inspect_object",
    "workq_registry",
]

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
    return parse_number(text, 1, MAX_TTR_MS, INVALID_TTR)


def _wait_timeout(text: str) -> int:
    return parse_number(text, 0, MAX_WAIT_TIMEOUT_MS, INVALID_WAIT_TIMEOUT)


def _priority(flags: Mapping[str, str]) -> int:
    text = flags.get("priority")
    if text is None:
        return 0
    return parse_number(text, MIN_PRIORITY, MAX_PRIORITY, INVALID_PRIORITY, True)


def _job_flags(flags: Mapping[str, str]) -> tuple[int, int, int]:
    """(max_attempts, max_fails, priority), checked in workq's order."""
    attempts = flags.get("max-attempts")
    fails = flags.get("max-fails")
    max_attempts = (
        0 if attempts is None else parse_number(attempts, 0, MAX_ATTEMPTS, INVALID_MAX_ATTEMPTS)
    )
    max_fails = 0 if fails is None else parse_number(fails, 0, MAX_FAILS, INVALID_MAX_FAILS)
    return max_attempts, max_fails, _priority(flags)


def _ttl(text: str) -> int:
    return parse_number(text, 1, MAX_TTL_MS, INVALID_TTL)


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
    return parse_number(text, 0, MAX_CURSOR_OFFSET, INVALID_CURSOR_OFFSET)


def _limit(text: str) -> int:
    return parse_number(text, 1, MAX_INSPECT_LIMIT, INVALID_LIMIT)


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


def _job_page(page: type[InspectJobs | InspectScheduledJobs]) -> ParseFn:
    """The parse function of ``inspect <object> <name> <cursor-offset> <limit>``."""

    def parse(args: tuple[str, ...], flags: Mapping[str, str], data: bytes | None) -> Request:
        _arity(args, 3)
        _no_flags(flags)
        return page(parse_name(args[0]), _offset(args[1]), _limit(args[2]))

    return parse


def _inspect_job(args: tuple[str, ...], flags: Mapping[str, str], data: bytes | None) -> Request:
    _arity(args, 1)
    _no_flags(flags)
    return InspectJob(parse_id(args[0]))


def workq_registry() -> CommandRegistry:
    """A new registry of workq's commands alone."""
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
    registry.register_inspect("jobs", _job_page(InspectJobs))
    registry.register_inspect("scheduled-jobs", _job_page(InspectScheduledJobs))
    registry.register_inspect("job", _inspect_job)
    return registry


# -- jobq's extension commands (docs/extensions.md): ``<word> <size>`` and a JSON body

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
    "rerun",
    "screate",
    "slist",
    "sshow",
    "spause",
    "sresume",
    "salter",
    "strigger",
    "sbackfill",
    "shistory",
    "sruns",
    "sdrop",
    "audit",
    "whello",
    "wbeat",
    "wbye",
    "wlist",
    "wshow",
    "limits",
    "bulk",
    "logappend",
    "logs",
    "logstate",
    "replication",
    "promote",
)


def _parse_extension(word: str) -> ParseFn:
    def parse(args: tuple[str, ...], flags: Mapping[str, str], data: bytes | None) -> Request:
        _no_flags(flags)
        return Extension(word, _data(data))

    parse.jobq_extension = True  # type: ignore[attr-defined]  # the parser's fast path
    return parse


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
    return register_extensions(workq_registry())


#: the registry parsers use unless given another: workq's commands, jobq's extensions and
#: the commands registered since
DEFAULT_REGISTRY = default_registry()


#: add a command word to ``DEFAULT_REGISTRY`` (:meth:`CommandRegistry.register`)
register_command = DEFAULT_REGISTRY.register
#: add ``inspect <obj> ...`` to ``DEFAULT_REGISTRY`` (:meth:`CommandRegistry.register_inspect`)
register_inspect_object = DEFAULT_REGISTRY.register_inspect
