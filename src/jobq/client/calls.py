"""A call: one request, how long its reply may take, and how the reply becomes the result.

:class:`Operation` makes one description of a call (a function from a method's arguments to
its :class:`Call`) serve as the method of both clients: a ``Client`` method returning the
result, an ``AsyncClient`` coroutine method. Also the steps of the request cycle that both
clients share: what the reply parser expects, and sorting replies into values and errors.
"""

from __future__ import annotations

import base64
import binascii
import inspect
import select
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar, get_args, overload

import msgspec

from jobq.client.errors import ConnectionLost, JobqError, error_from_reply, malformed
from jobq.client.models import (
    HeartbeatReply,
    JobInfo,
    JobPage,
    JobResult,
    LeasedJob,
    QueueInfo,
    ServerInfo,
    WorkerLease,
    job_info,
    queue_info,
    server_info,
)
from jobq.server import protocol as p

if TYPE_CHECKING:
    from jobq.client.aio import AsyncClient
    from jobq.client.sync import Client

P = ParamSpec("P")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    request: p.Request
    #: seconds the server may legitimately take before replying, beyond ``timeout_s``
    wait_s: float
    convert: Callable[[p.Reply], T]


def ms(value: int) -> float:
    """A wait-timeout in milliseconds as the seconds a reply may take."""
    return max(value, 0) / 1000


# ---------------------------------------------------------------------------------------
# Replies of the workq commands
# ---------------------------------------------------------------------------------------


def ok(value: T) -> Callable[[p.Reply], T]:
    """The conversion of a ``+OK`` reply: ``value``."""

    def convert(reply: p.Reply) -> T:
        if not isinstance(reply, p.Ok):
            raise malformed(reply)
        return value

    return convert


def to_job(reply: p.Reply) -> LeasedJob:
    if not isinstance(reply, p.JobReply):
        raise malformed(reply)
    return LeasedJob(p.format_id(reply.id), reply.name, reply.ttr_ms, reply.payload)


def to_result(reply: p.Reply) -> JobResult:
    if not isinstance(reply, p.ResultReply):
        raise malformed(reply)
    return JobResult(p.format_id(reply.id), reply.success, reply.result)


def _records(reply: p.Reply) -> tuple[p.Record, ...]:
    if not isinstance(reply, p.RecordsReply):
        raise malformed(reply)
    return reply.records


def _one(reply: p.Reply) -> p.Record:
    records = _records(reply)
    if len(records) != 1:
        raise ConnectionLost(f"expected one record, got {len(records)}")
    return records[0]


def to_server(reply: p.Reply) -> ServerInfo:
    return server_info(p.ServerInfo.from_record(_one(reply)))


def to_queue(reply: p.Reply) -> QueueInfo:
    return queue_info(p.QueueInfo.from_record(_one(reply)))


def to_queues(reply: p.Reply) -> list[QueueInfo]:
    return [queue_info(p.QueueInfo.from_record(r)) for r in _records(reply)]


def to_job_info(reply: p.Reply) -> JobInfo:
    return job_info(p.JobInfo.from_record(_one(reply)))


def to_job_infos(reply: p.Reply) -> list[JobInfo]:
    return [job_info(p.JobInfo.from_record(r)) for r in _records(reply)]


# ---------------------------------------------------------------------------------------
# Replies of the extension commands: a JSON object
# ---------------------------------------------------------------------------------------

_json_encode = msgspec.json.Encoder().encode
_json_decode = msgspec.json.Decoder().decode

Body = dict[str, Any]


def _body(reply: p.Reply) -> Body:
    """The JSON object of an extension command's ``+OK <size>`` reply."""
    if not isinstance(reply, p.DataReply):
        raise malformed(reply)
    try:
        body = _json_decode(reply.body)
    except msgspec.DecodeError as exc:
        raise ConnectionLost(f"malformed reply: {exc}") from exc
    if not isinstance(body, dict):
        raise ConnectionLost("malformed reply: the body is not a JSON object")
    return body


def ext(
    command: str, body: Mapping[str, Any], wait_s: float, convert: Callable[[Body], T]
) -> Call[T]:
    """The call of an extension command: its JSON body out, the reply's through ``convert``."""
    request = p.Extension(command, _json_encode(body))

    def finish(reply: p.Reply) -> T:
        return convert(_body(reply))

    return Call(request, wait_s, finish)


def unb64(value: object, what: str) -> bytes:
    """A base64 field of a reply (ConnectionLost if it is not one)."""
    if not isinstance(value, str):
        raise ConnectionLost(f"malformed reply: {what} is not a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ConnectionLost(f"malformed reply: {what} is not base64") from exc


def to_worker_lease(body: Body) -> WorkerLease:
    try:
        checkpoint = body.get("checkpoint")
        return WorkerLease(
            id=str(body["id"]),
            name=str(body["name"]),
            ttr_ms=int(body["ttr_ms"]),
            payload=unb64(body.get("payload") or "", "payload"),
            attempt=int(body.get("attempt") or 0),
            checkpoint=None if checkpoint is None else unb64(checkpoint, "checkpoint"),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ConnectionLost(f"malformed xlease reply: {exc!r}") from exc


def to_heartbeat(body: Body) -> HeartbeatReply:
    action = body.get("action")
    if not isinstance(action, str):
        raise ConnectionLost("malformed heartbeat reply: no action")
    return HeartbeatReply(action, str(body.get("reason") or ""))


def to_count(body: Body) -> int:
    count = body.get("count")
    if not isinstance(count, int):
        raise ConnectionLost("malformed reply: no count")
    return count


def to_page(body: Body) -> JobPage:
    jobs = body.get("jobs")
    if not isinstance(jobs, list):
        raise ConnectionLost("malformed jobs reply: no job list")
    cursor = body.get("next_cursor")
    return JobPage(jobs, None if cursor is None else str(cursor))


def to_events(body: Body) -> list[Body]:
    events = body.get("events")
    if not isinstance(events, list):
        raise ConnectionLost("malformed history reply: no event list")
    return events


def key(name: str) -> Callable[[Body], str]:
    """The conversion to the body's text field ``name``."""

    def convert(body: Body) -> str:
        value = body.get(name)
        if not isinstance(value, str):
            raise ConnectionLost(f"malformed reply: no {name}")
        return value

    return convert


def items(name: str) -> Callable[[Body], list[Any]]:
    """The conversion to the body's list ``name`` (empty if it is missing)."""

    def convert(body: Body) -> list[Any]:
        return list(body.get(name) or [])

    return convert


def nothing(body: Body) -> None:
    return None


def same(body: Body) -> Body:
    return body


# ---------------------------------------------------------------------------------------
# Operations: one description, a method of each client
# ---------------------------------------------------------------------------------------

#: makes a client's method from an operation's ``build``: build the call, run it
MethodMaker = Callable[[Callable[..., Call[Any]]], Callable[..., Any]]


class Operation(Generic[P, T]):
    """One client operation: ``build`` checks the method's arguments and returns its call.

    Written once in :class:`~jobq.client.operations.Operations`; each client class installs
    its own plain function for it (see ``Operations.__init_subclass__``), so a method call
    costs no more than a hand-written one. To the type checker the attribute reads as
    ``Callable[P, T]`` on a :class:`Client` and as a coroutine method on an
    :class:`AsyncClient`; ``help()`` and ``inspect.signature`` show ``build``'s parameters
    and docstring.
    """

    def __init__(self, build: Callable[P, Call[T]]) -> None:
        self.build = build
        self.name = build.__name__
        self.signature: inspect.Signature | None = None
        self.__doc__ = build.__doc__  # what inspect.getdoc finds when a method has none

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> Operation[P, T]: ...
    @overload
    def __get__(self, obj: Client, owner: type[Any] | None = None) -> Callable[P, T]: ...
    @overload
    def __get__(
        self, obj: AsyncClient, owner: type[Any] | None = None
    ) -> Callable[P, Coroutine[Any, Any, T]]: ...
    def __get__(self, obj: object, owner: type[Any] | None = None) -> Any:
        if obj is None:
            return self
        # only a class that did not install its methods gets here
        raise TypeError(f"{type(obj).__name__} runs no operations")

    def method(self, owner: type[Any], make_method: MethodMaker) -> Callable[..., Any]:
        """``owner``'s method for this operation, made by ``make_method``, with the name,
        signature (``self`` first) and docstring of ``build``."""
        method = make_method(self.build)
        method.__name__ = self.name
        method.__qualname__ = f"{owner.__qualname__}.{self.name}"
        method.__module__ = owner.__module__
        method.__doc__ = self.build.__doc__
        if self.signature is None:
            built = inspect.signature(self.build)
            this = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
            self.signature = built.replace(
                parameters=[this, *built.parameters.values()],
                return_annotation=_result_annotation(built.return_annotation),
            )
        method.__signature__ = self.signature  # type: ignore[attr-defined]
        # typing.get_type_hints resolves these names where build was written
        method.__annotations__ = {
            **self.build.__annotations__,
            "return": self.signature.return_annotation,
        }
        method.__wrapped__ = self.build  # type: ignore[attr-defined]
        return method


def operation(build: Callable[P, Call[T]]) -> Operation[P, T]:
    """Decorator: ``build`` becomes an operation of both clients."""
    return Operation(build)


def _result_annotation(annotation: Any) -> Any:
    """``Call[X]`` -> ``X``: a method returns what its call's reply converts to."""
    if isinstance(annotation, str):
        return annotation.removeprefix("Call[").removesuffix("]")
    return get_args(annotation)[0]


# ---------------------------------------------------------------------------------------
# The request cycle's shared steps
# ---------------------------------------------------------------------------------------


def request_bytes(calls: Sequence[Call[Any]]) -> bytes:
    """The requests of ``calls``, for one write."""
    if len(calls) == 1:
        return calls[0].request.to_bytes()
    return b"".join(call.request.to_bytes() for call in calls)


def expect_replies(parser: p.ReplyParser, calls: Sequence[Call[Any]]) -> float:
    """Tell ``parser`` what the replies of ``calls`` look like; returns the longest extra
    wait (seconds) any of them may take."""
    for call in calls:
        # extension requests carry their command word per instance: their shape is given
        parser.expect(p.ReplyShape.DATA if isinstance(call.request, p.Extension) else call.request)
    return max(call.wait_s for call in calls)


def _finish(call: Call[T], reply: p.Reply) -> T:
    """The call's value, or the error reply raised as its exception."""
    if isinstance(reply, p.Error):
        raise error_from_reply(reply)
    return call.convert(reply)


def outcomes(calls: Sequence[Call[Any]], replies: Sequence[p.Reply]) -> list[Any]:
    """Each call's value, or the error its reply carries as an exception object (for
    pipelined calls, where one error must not hide the other replies)."""
    results: list[Any] = []
    for call, reply in zip(calls, replies, strict=True):
        try:
            results.append(_finish(call, reply))
        except JobqError as exc:
            results.append(exc)
    return results


def out_of_step(outcomes: list[Any]) -> bool:
    """Whether a reply was not of the shape its request expects (its conversion raised
    ConnectionLost): the connection can then carry no further request."""
    return any(isinstance(outcome, ConnectionLost) for outcome in outcomes)


def readable_now(fileno: int) -> bool:
    """True if the socket has bytes or an EOF/error waiting (never blocks)."""
    try:
        if hasattr(select, "poll"):  # any fd number, unlike select()
            poller = select.poll()
            poller.register(fileno, select.POLLIN | select.POLLPRI)
            return bool(poller.poll(0))  # POLLHUP and POLLERR are always reported
        readable, _, errored = select.select([fileno], [], [fileno], 0)
    except (OSError, ValueError):
        return True
    return bool(readable or errored)
