"""The server side of the codec: :class:`RequestParser` turns the bytes a client sends into
requests, one event (a ``Request`` or a ``ProtocolError``) per command, with a fast path for
workq's hot commands and jobq's extension commands."""

from __future__ import annotations

import binascii
import re
from collections.abc import Callable, Mapping
from enum import Enum
from typing import TypeAlias

from jobq.server.protocol.errors import (
    CLIENT_ERROR,
    CRLF,
    INVALID_COMMAND_ARGS,
    INVALID_COMMAND_FLAGS,
    INVALID_LINE_END,
    INVALID_TTL,
    INVALID_TTR,
    INVALID_WAIT_TIMEOUT,
    LINE_TOO_LONG,
    UNKNOWN_COMMAND,
    ClientError,
    ProtocolError,
)
from jobq.server.protocol.registry import DEFAULT_REGISTRY, CommandRegistry, CommandSpec
from jobq.server.protocol.requests import (
    Add,
    Complete,
    Delete,
    Extension,
    Fail,
    InspectJob,
    Lease,
    Request,
    Result,
)
from jobq.server.protocol.values import (
    DEFAULT_MAX_DISCARD_BYTES,
    DEFAULT_MAX_LINE_BYTES,
    MAX_DATA_BYTES,
    MAX_LEASE_NAMES,
    MAX_TTL_MS,
    MAX_TTR_MS,
    MAX_WAIT_TIMEOUT_MS,
    data_size,
)

__all__ = [
    "Event",
    "RequestParser",
]

Event: TypeAlias = Request | ProtocolError

# -- the fast path: a whole hot command, in its plain form, already buffered -----------
#
# RequestParser.next_event() first tries _FAST_LINE_RE on the buffer: workq's hot
# commands, with exactly their arguments, single spaces, no flags, ids, names and numbers
# of the form parse_id, parse_name and parse_number accept (numbers of at most 24
# digits), and the CRLF. The regex has validated everything but number ranges, so a
# builder only converts; its event is the one the general path (_handle_tokens,
# _step_data and the registry's parse functions) gives for the same bytes. A builder
# returns None, consuming nothing, when it cannot finish (a data block not all buffered
# yet, or over max_data_bytes); then the general path takes the line. Used only while
# the registry has these commands as workq has them (CommandRegistry._fast).

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
_FAST_LINE_MATCH = _FAST_LINE_RE.match
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


#: an extension command's line: ``<word> <size>``
_EXTENSION_LINE_MATCH = re.compile(rb"([a-z]{2,16}) ([0-9]{1,8})\r\n").match


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


class _NeedMore:
    """A step's answer when the buffer does not hold enough bytes yet."""


_NEED_MORE = _NeedMore()


class RequestParser:
    """Bytes from one client connection in, one event per command out::

        parser = RequestParser()
        parser.feed(chunk)                # any split: a byte at a time or many commands
        while (event := parser.next_event()) is not None:
            if isinstance(event, ProtocolError):
                send(event.to_bytes())    # -CLIENT-ERROR <text>
                if event.fatal:           # framing lost: close the connection
                    close()
            else:
                handle(event)             # an Add, Lease, InspectJob, ... (a Request)

    Every command yields exactly one event, in order; ``next_event()`` returns None when it
    needs more bytes, and never raises. A rejected command's data block is still consumed,
    so data is never read as a command. Drain ``next_event()`` until None before the next
    ``feed()``: the parser then holds at most ``max_line_bytes`` + ``max_data_bytes`` + 2
    bytes plus one feed; oversize data blocks are counted off without being buffered.

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
                # the general path: the line, found and checked here (not in a step) as
                # most commands take it
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
        size = data_size(args[-1]) if args else None
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
