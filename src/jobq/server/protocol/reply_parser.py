"""The client side of the codec: :class:`ReplyParser` reads the server's replies, one typed
reply (:data:`Reply`) per request sent, told what each request expects."""

from __future__ import annotations

from collections import deque
from collections.abc import Generator
from typing import TypeAlias

import msgspec

from jobq.server.protocol.errors import CRLF, ClientError, MalformedReplyError
from jobq.server.protocol.registry import DEFAULT_REGISTRY, CommandRegistry
from jobq.server.protocol.replies import Record
from jobq.server.protocol.requests import ReplyShape, Request
from jobq.server.protocol.values import (
    DEFAULT_MAX_REPLY_LINE_BYTES,
    MAX_DATA_BYTES,
    MAX_EXTENSION_REPLY_BYTES,
    decimal,
    parse_id,
)

__all__ = [
    "DataReply",
    "Error",
    "JobReply",
    "Ok",
    "RecordsReply",
    "Reply",
    "ReplyParser",
    "ResultReply",
]


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
    value = decimal(raw.decode("latin-1"), False)
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
        body = yield block_size(line[4:], max(max_data_bytes, MAX_EXTENSION_REPLY_BYTES))
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
    """Bytes from the server in, one typed reply per expected reply out.

    A reply's shape depends on its command, so tell the parser what each pipelined request
    expects, in order::

        replies = ReplyParser()
        sock.send(request.to_bytes())
        replies.expect(request)           # or a command word ("lease"), or a ReplyShape
        replies.feed(sock.recv(65536))    # as often as needed
        reply = replies.next_reply()      # None until the whole reply has arrived

    ``next_reply()`` gives ``Ok()`` (add, schedule, complete, fail, delete), ``JobReply``
    (lease), ``ResultReply`` (run, result), ``RecordsReply`` (every inspect), ``DataReply``
    (an extension command) or ``Error(kind, text)`` for any error reply. A reply that
    breaks the protocol raises ``MalformedReplyError`` (then and on every later call):
    close the connection. Bytes buffered with nothing expected raise ``RuntimeError``.

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
