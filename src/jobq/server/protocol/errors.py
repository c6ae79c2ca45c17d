"""The protocol's errors: workq's error texts, the exceptions the codec raises, and the error
replies, each an :class:`ErrorReply` that carries the kind of refusal it is.

Every error reply a front end sends is made by :func:`client_error`, :func:`server_error`,
:func:`timeout` or :func:`not_found`, so that the HTTP front end can answer by kind and never
reads a reply's text.
"""

from __future__ import annotations

import msgspec

from jobq.engine.errors import ErrorKind

__all__ = [
    "CLIENT_ERROR",
    "CRLF",
    "DUPLICATE_JOB",
    "DUPLICATE_RESULT",
    "ELLIPSIS",
    "FENCED_IN_FLIGHT",
    "INVALID_COMMAND_ARGS",
    "INVALID_COMMAND_FLAGS",
    "INVALID_CURSOR_OFFSET",
    "INVALID_ID",
    "INVALID_LIMIT",
    "INVALID_LINE_END",
    "INVALID_MAX_ATTEMPTS",
    "INVALID_MAX_FAILS",
    "INVALID_NAME",
    "INVALID_PAYLOAD",
    "INVALID_PRIORITY",
    "INVALID_RESULT",
    "INVALID_TIME",
    "INVALID_TIMEOUT",
    "INVALID_TTL",
    "INVALID_TTR",
    "INVALID_WAIT_TIMEOUT",
    "LINE_TOO_LONG",
    "MAX_ERROR_TEXT_BYTES",
    "NOT_FOUND",
    "SERVER_ERROR",
    "TIMEOUT",
    "UNKNOWN_COMMAND",
    "ClientError",
    "ErrorReply",
    "MalformedReplyError",
    "ProtocolError",
    "client_error",
    "error_text_bytes",
    "not_found",
    "read_only",
    "server_error",
    "timeout",
]

CRLF = b"\r\n"
#: longest error text in a reply line, in bytes; a longer one is cut and ends in ``...``
MAX_ERROR_TEXT_BYTES = 512
ELLIPSIS = b"..."

# -- error reply words, and texts (workq's, byte for byte, unless marked jobq)

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


class MalformedReplyError(ValueError):
    """The server's reply breaks the protocol; the connection cannot be trusted."""


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
        return client_error(self.text)


class ErrorReply(bytes):
    """An error reply's bytes, and :attr:`kind`, the kind of refusal it is.

    A ``bytes`` subclass: the TCP front end writes it as it is, and success replies stay
    plain ``bytes``; the HTTP front end answers with the status for its kind.
    """

    kind: ErrorKind

    def __new__(cls, data: bytes, kind: ErrorKind) -> ErrorReply:
        reply = super().__new__(cls, data)
        reply.kind = kind
        return reply


def client_error(text: str, kind: ErrorKind = ErrorKind.INVALID) -> ErrorReply:
    """``-CLIENT-ERROR <text>``: a refused command; ``kind`` says why (a conflict, ...)."""
    return ErrorReply(_error_line(CLIENT_ERROR, text), kind)


def read_only(primary: str) -> ErrorReply:
    """``-READONLY <host:port>``: a standby refuses a change; it goes to that primary."""
    return ErrorReply(f"-READONLY {primary}\r\n".encode(), ErrorKind.READONLY)


#: a deposed (fenced) primary's answer to a change it had taken before it was fenced: the
#: change may be in its log, and in a standby's that became the primary; unlike
#: ``-READONLY``, which says a change was not applied, it leaves the outcome unknown
FENCED_IN_FLIGHT = (
    "Not the primary: fenced with this change in flight, which may or may not have been applied"
)


def server_error(text: str, kind: ErrorKind = ErrorKind.UNAVAILABLE) -> ErrorReply:
    """``-SERVER-ERROR <text>``: the server cannot do it now; ``kind`` says why (its log
    cannot be written, it is full, ...)."""
    return ErrorReply(_error_line(SERVER_ERROR, text), kind)


_TIMEOUT = ErrorReply(b"-TIMEOUT\r\n", ErrorKind.TIMEOUT)
_NOT_FOUND = ErrorReply(b"-NOT-FOUND\r\n", ErrorKind.NOT_FOUND)


def timeout() -> ErrorReply:
    """``-TIMEOUT``: nothing within the wait-timeout."""
    return _TIMEOUT


def not_found() -> ErrorReply:
    """``-NOT-FOUND``: no such job (or queue, for inspect)."""
    return _NOT_FOUND


def _error_line(word: str, text: str) -> bytes:
    """``-<word> <text>`` (or ``-<word>`` without a text).

    A text may echo client input (an unknown JSON key, a schedule name, a cron spec), so it
    is kept on one line, in latin-1 and short: CR and LF become ``\\r`` and ``\\n``, other
    characters ``\\uXXXX`` escapes (else they split the reply or dropped the connection),
    and a text longer than :data:`MAX_ERROR_TEXT_BYTES` is cut and ends in ``...`` (a long
    cron spec echoed whole made a reply line jobq's own client refuses).
    """
    if not text:
        return f"-{word}\r\n".encode("latin-1")
    return b"-%s %s\r\n" % (word.encode("latin-1"), error_text_bytes(text))


def error_text_bytes(text: str) -> bytes:
    """``text`` as one latin-1 line of at most :data:`MAX_ERROR_TEXT_BYTES` bytes (see
    :func:`_error_line`); an escape is never cut in two."""
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
