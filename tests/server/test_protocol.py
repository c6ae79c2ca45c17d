"""The workq wire protocol codec: requests, errors, framing, limits, replies."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import pytest
from msgspec.structs import replace

from jobq.server import protocol as p
from jobq.server.protocol import (
    Add,
    ClientError,
    Complete,
    Delete,
    Error,
    Event,
    Fail,
    InspectJob,
    InspectJobs,
    InspectQueue,
    InspectQueues,
    InspectScheduledJobs,
    InspectServer,
    JobInfo,
    JobReply,
    Lease,
    MalformedReplyError,
    Ok,
    ProtocolError,
    QueueInfo,
    Record,
    RecordsReply,
    ReplyParser,
    ReplyShape,
    Request,
    RequestParser,
    Result,
    ResultReply,
    Run,
    Schedule,
    ServerInfo,
)

ID_TEXT = "6ba7b810-9dad-11d1-80b4-00c04fd430c4"
ID = bytes.fromhex("6ba7b8109dad11d180b400c04fd430c4")
OTHER_ID_TEXT = "6ba7b810-9dad-11d1-80b4-00c04fd430c7"
OTHER_ID = bytes.fromhex("6ba7b8109dad11d180b400c04fd430c7")
#: 2016-06-14T06:46:46Z
TIME_NS = 1_465_886_806 * 1_000_000_000


def parse_all(
    data: bytes,
    max_line_bytes: int = p.DEFAULT_MAX_LINE_BYTES,
    max_data_bytes: int = p.MAX_DATA_BYTES,
    max_discard_bytes: int = p.DEFAULT_MAX_DISCARD_BYTES,
) -> list[Event]:
    parser = RequestParser(
        max_line_bytes=max_line_bytes,
        max_data_bytes=max_data_bytes,
        max_discard_bytes=max_discard_bytes,
    )
    parser.feed(data)
    return drain(parser)


def drain(parser: RequestParser) -> list[Event]:
    events: list[Event] = []
    while (event := parser.next_event()) is not None:
        events.append(event)
    return events


def parse_one(data: bytes) -> Event:
    events = parse_all(data)
    assert len(events) == 1, events
    return events[0]


def client_error(text: str, fatal: bool = False) -> ProtocolError:
    return ProtocolError(p.CLIENT_ERROR, text, fatal)


# --------------------------------------------------------------------------------------
# Every command, with and without flags
# --------------------------------------------------------------------------------------

COMMANDS: list[tuple[bytes, Request]] = [
    (
        f"add {ID_TEXT} ping 1000 60000 4\r\npong\r\n".encode(),
        Add(ID, "ping", 1000, 60000, b"pong"),
    ),
    (
        f"add {ID_TEXT} ping 1000 60000 4 -priority=10 -max-attempts=3 -max-fails=1\r\n"
        "pong\r\n".encode(),
        Add(ID, "ping", 1000, 60000, b"pong", priority=10, max_attempts=3, max_fails=1),
    ),
    (
        f"schedule {OTHER_ID_TEXT} ping 1000 2000 2016-06-14T06:46:46Z 4\r\npong\r\n".encode(),
        Schedule(OTHER_ID, "ping", 1000, 2000, b"pong", TIME_NS),
    ),
    (
        f"schedule {OTHER_ID_TEXT} ping 1000 2000 2016-06-14T06:46:46Z 4 -max-fails=2 "
        "-priority=-7 -max-attempts=255\r\npong\r\n".encode(),
        Schedule(
            OTHER_ID,
            "ping",
            1000,
            2000,
            b"pong",
            TIME_NS,
            priority=-7,
            max_attempts=255,
            max_fails=2,
        ),
    ),
    (
        f"run {ID_TEXT} ping 1000 60000 4\r\nping\r\n".encode(),
        Run(ID, "ping", 1000, 60000, b"ping"),
    ),
    (
        f"run {ID_TEXT} ping 1000 60000 4 -priority=2147483647\r\nping\r\n".encode(),
        Run(ID, "ping", 1000, 60000, b"ping", priority=2**31 - 1),
    ),
    (f"result {ID_TEXT} 60000\r\n".encode(), Result(ID, 60000)),
    (b"lease ping 60000\r\n", Lease(("ping",), 60000)),
    (b"lease ping1 ping2 ping3 0\r\n", Lease(("ping1", "ping2", "ping3"), 0)),
    (f"complete {ID_TEXT} 4\r\npong\r\n".encode(), Complete(ID, b"pong")),
    (f"complete {ID_TEXT} 0\r\n\r\n".encode(), Complete(ID, b"")),
    (f"fail {ID_TEXT} 4\r\noops\r\n".encode(), Fail(ID, b"oops")),
    (f"delete {ID_TEXT}\r\n".encode(), Delete(ID)),
    (b"inspect server\r\n", InspectServer()),
    (b"inspect queues 0 10\r\n", InspectQueues(0, 10)),
    (b"inspect queue ping\r\n", InspectQueue("ping")),
    (b"inspect jobs ping 0 10\r\n", InspectJobs("ping", 0, 10)),
    (b"inspect scheduled-jobs ping 5 100\r\n", InspectScheduledJobs("ping", 5, 100)),
    (f"inspect job {ID_TEXT}\r\n".encode(), InspectJob(ID)),
]


@pytest.mark.parametrize(("wire", "request_"), COMMANDS)
def test_every_command_parses_into_its_typed_request(wire: bytes, request_: Request) -> None:
    assert parse_one(wire) == request_


@pytest.mark.parametrize(("wire", "request_"), COMMANDS)
def test_every_request_encodes_to_bytes_that_parse_back_to_it(
    wire: bytes, request_: Request
) -> None:
    assert parse_one(request_.to_bytes()) == request_


def test_requests_encode_flags_only_when_not_default() -> None:
    assert Add(ID, "ping", 1000, 60000, b"pong").to_bytes() == (
        f"add {ID_TEXT} ping 1000 60000 4\r\npong\r\n".encode()
    )
    assert Run(ID, "ping", 1, 2, b"", priority=-3).to_bytes() == (
        f"run {ID_TEXT} ping 1 2 0 -priority=-3\r\n\r\n".encode()
    )


def test_data_may_hold_crlf_and_any_byte() -> None:
    payload = b"a\r\nb\r\n\r\n\x00\xff-priority=1\r\n"
    wire = f"add {ID_TEXT} q 1 1 {len(payload)}\r\n".encode() + payload + b"\r\n"
    assert parse_one(wire) == Add(ID, "q", 1, 1, payload)


def test_pipelined_commands_come_out_in_order() -> None:
    wire = b"".join(w for w, _ in COMMANDS)
    assert parse_all(wire) == [r for _, r in COMMANDS]


def test_uppercase_id_is_accepted_like_workq() -> None:
    assert parse_one(f"delete {ID_TEXT.upper()}\r\n".encode()) == Delete(ID)


def test_double_spaces_between_words_are_skipped_like_workq() -> None:
    assert parse_one(b"lease  a   b 10\r\n") == Lease(("a", "b"), 10)


def test_unknown_flags_are_ignored_within_the_flag_count_like_workq() -> None:
    wire = f"add {ID_TEXT} q 1 1 0 -color=red\r\n\r\n".encode()
    assert parse_one(wire) == Add(ID, "q", 1, 1, b"")


def test_flags_may_sit_between_positional_arguments_like_workq() -> None:
    wire = f"run {ID_TEXT} -priority=3 q 1 1 0\r\n\r\n".encode()
    assert parse_one(wire) == Run(ID, "q", 1, 1, b"", priority=3)


def test_boundary_values_are_accepted() -> None:
    name = "a" * 255
    wire = (
        f"add {ID_TEXT} {name} 86400000 18446744073709551615 0 -priority=-2147483648 "
        "-max-attempts=0 -max-fails=255\r\n\r\n"
    ).encode()
    assert parse_one(wire) == Add(
        ID, name, 86_400_000, 2**64 - 1, b"", priority=-(2**31), max_attempts=0, max_fails=255
    )
    assert parse_one(b"lease A-z_0.9 86400000\r\n") == Lease(("A-z_0.9",), 86_400_000)
    assert parse_one(b"inspect queues 4294967295 1\r\n") == InspectQueues(2**32 - 1, 1)
    assert parse_one(b"inspect queues 007 010\r\n") == InspectQueues(7, 10)


def test_priority_and_sizes_take_a_sign_as_go_strconv_does() -> None:
    wire = f"add {ID_TEXT} q 1 1 +4 -priority=+5\r\npong\r\n".encode()
    assert parse_one(wire) == Add(ID, "q", 1, 1, b"pong", priority=5)


def test_schedule_time_takes_go_parse_leniencies() -> None:
    def schedule_time(text: str) -> int:
        event = parse_one(f"schedule {ID_TEXT} q 1 1 {text} 0\r\n\r\n".encode())
        assert isinstance(event, Schedule), event
        return event.time_ns

    assert schedule_time("2016-06-14T06:46:46Z") == TIME_NS
    assert schedule_time("2016-06-14T6:46:46Z") == TIME_NS
    assert schedule_time("2016-06-14T06:46:46.5Z") == TIME_NS + 500_000_000
    assert schedule_time("2016-06-14T06:46:46.1234567891Z") == TIME_NS + 123_456_789
    assert schedule_time("1960-01-01T00:00:00Z") < 0


# --------------------------------------------------------------------------------------
# Error texts
# --------------------------------------------------------------------------------------

ADD = f"add {ID_TEXT} q 1000 60000"
BAD_LINES: list[tuple[str, str]] = [
    # command word and argument counts
    ("", p.UNKNOWN_COMMAND),
    ("nope", p.UNKNOWN_COMMAND),
    ("ADD", p.UNKNOWN_COMMAND),
    (" lease q 1", p.UNKNOWN_COMMAND),
    ("inspect nope", p.UNKNOWN_COMMAND),
    ("inspect", p.INVALID_COMMAND_ARGS),
    ("inspect server extra", p.INVALID_COMMAND_ARGS),
    ("inspect queues 0", p.INVALID_COMMAND_ARGS),
    ("inspect queue", p.INVALID_COMMAND_ARGS),
    ("inspect jobs q 0", p.INVALID_COMMAND_ARGS),
    ("inspect scheduled-jobs q 0 1 2", p.INVALID_COMMAND_ARGS),
    ("inspect job", p.INVALID_COMMAND_ARGS),
    ("lease", p.INVALID_COMMAND_ARGS),
    ("lease q", p.INVALID_COMMAND_ARGS),
    ("delete", p.INVALID_COMMAND_ARGS),
    (f"delete {ID_TEXT} x", p.INVALID_COMMAND_ARGS),
    (f"result {ID_TEXT}", p.INVALID_COMMAND_ARGS),
    (f"result {ID_TEXT} 1 2", p.INVALID_COMMAND_ARGS),
    # flags
    ("lease q 1 -priority=1", p.INVALID_COMMAND_ARGS),
    (f"delete {ID_TEXT} -x=1", p.INVALID_COMMAND_ARGS),
    (f"result {ID_TEXT} 1 -x=1", p.INVALID_COMMAND_ARGS),
    ("inspect server -x=1", p.INVALID_COMMAND_ARGS),
    ("lease q 1 -=1", p.INVALID_COMMAND_FLAGS),
    ("lease q 1 -x=", p.INVALID_COMMAND_FLAGS),
    ("lease q 1 -x=1 -x=2", p.INVALID_COMMAND_FLAGS),
    ("nope -=1", p.INVALID_COMMAND_FLAGS),
    # ids
    ("delete 6ba7b810-9dad-11d1-80b4-00c04fd430c", p.INVALID_ID),
    ("delete 6ba7b8109dad11d180b400c04fd430c4", p.INVALID_ID),
    ("delete {6ba7b810-9dad-11d1-80b4-00c04fd430c4}", p.INVALID_ID),
    ("delete urn:uuid:6ba7b810-9dad-11d1-80b4-00c04fd430c4", p.INVALID_ID),
    ("delete 6ba7b810-9dad-11d1-80b4-00c04fd430cg", p.INVALID_ID),
    ("delete 6ba7b810+9dad-11d1-80b4-00c04fd430c4", p.INVALID_ID),
    (f"result {ID_TEXT}0 1", p.INVALID_ID),
    ("inspect job nope", p.INVALID_ID),
    # names
    ("lease bad/name 1", p.INVALID_NAME),
    ("lease ok bad\tname 1", p.INVALID_NAME),
    ("lease " + "a" * 256 + " 1", p.INVALID_NAME),
    ("lease caf\u00e9 1", p.INVALID_NAME),
    ("inspect queue a*b", p.INVALID_NAME),
    ("inspect jobs a:b 0 1", p.INVALID_NAME),
    ("inspect scheduled-jobs a:b 0 1", p.INVALID_NAME),
    # wait-timeouts
    ("lease q -1", p.INVALID_WAIT_TIMEOUT),
    ("lease q 86400001", p.INVALID_WAIT_TIMEOUT),
    ("lease q 1_000", p.INVALID_WAIT_TIMEOUT),
    ("lease q +1", p.INVALID_WAIT_TIMEOUT),
    ("lease q 1.5", p.INVALID_WAIT_TIMEOUT),
    ("lease q \u00b2", p.INVALID_WAIT_TIMEOUT),
    ("lease q 1" + "0" * 5000, p.INVALID_WAIT_TIMEOUT),
    (f"result {ID_TEXT} x", p.INVALID_WAIT_TIMEOUT),
    # more names than one lease may list: the fast path (single spaces) and the general one
    ("lease " + "a " * (p.MAX_LEASE_NAMES + 1) + "1", p.INVALID_COMMAND_ARGS),
    ("lease  " + "a  " * (p.MAX_LEASE_NAMES + 1) + "1", p.INVALID_COMMAND_ARGS),
    ("lease " + "a " * (p.MAX_LEASE_NAMES + 1) + "86400001", p.INVALID_COMMAND_ARGS),
    ("lease  " + "a  " * (p.MAX_LEASE_NAMES + 1) + "x", p.INVALID_COMMAND_ARGS),
    # cursor offsets and limits
    ("inspect queues -1 1", p.INVALID_CURSOR_OFFSET),
    ("inspect queues 4294967296 1", p.INVALID_CURSOR_OFFSET),
    ("inspect jobs q x 1", p.INVALID_CURSOR_OFFSET),
    ("inspect scheduled-jobs q 1e3 1", p.INVALID_CURSOR_OFFSET),
    ("inspect queues 0 0", p.INVALID_LIMIT),
    ("inspect queues 0 101", p.INVALID_LIMIT),
    ("inspect jobs q 0 65536", p.INVALID_LIMIT),
    ("inspect scheduled-jobs q 0 x", p.INVALID_LIMIT),
]

#: lines of data commands, each followed by a 4-byte payload "pong"
BAD_DATA_LINES: list[tuple[str, str]] = [
    # argument counts (the size is still found, last, so the payload is skipped)
    (f"add {ID_TEXT} q 1000 4", p.INVALID_COMMAND_ARGS),
    (f"add {ID_TEXT} q 1000 60000 x 4", p.INVALID_COMMAND_ARGS),
    (f"schedule {ID_TEXT} q 1000 60000 4", p.INVALID_COMMAND_ARGS),
    (f"run {ID_TEXT} q 1000 4", p.INVALID_COMMAND_ARGS),
    ("complete 4", p.INVALID_COMMAND_ARGS),
    (f"fail {ID_TEXT} x 4", p.INVALID_COMMAND_ARGS),
    # flag counts and flags
    (f"{ADD} 4 -a=1 -b=2 -c=3 -d=4", p.INVALID_COMMAND_ARGS),
    (f"run {ID_TEXT} q 1 1 4 -priority=1 -x=2", p.INVALID_COMMAND_ARGS),
    (f"complete {ID_TEXT} 4 -x=1", p.INVALID_COMMAND_ARGS),
    (f"fail {ID_TEXT} 4 -x=1", p.INVALID_COMMAND_ARGS),
    (f"{ADD} 4 -priority=1 -priority=2", p.INVALID_COMMAND_FLAGS),
    (f"{ADD} 4 -priority=", p.INVALID_COMMAND_FLAGS),
    # fields
    ("add nope q 1000 60000 4", p.INVALID_ID),
    (f"complete {ID_TEXT[:-1]} 4", p.INVALID_ID),
    ("fail x 4", p.INVALID_ID),
    (f"add {ID_TEXT} q! 1000 60000 4", p.INVALID_NAME),
    (f"run {ID_TEXT} {'n' * 256} 1 1 4", p.INVALID_NAME),
    (f"add {ID_TEXT} q 0 60000 4", p.INVALID_TTR),
    (f"add {ID_TEXT} q 86400001 60000 4", p.INVALID_TTR),
    (f"add {ID_TEXT} q -1 60000 4", p.INVALID_TTR),
    (f"run {ID_TEXT} q 1_0 1 4", p.INVALID_TTR),
    (f"schedule {ID_TEXT} q x 1 2016-06-14T06:46:46Z 4", p.INVALID_TTR),
    (f"add {ID_TEXT} q 1 0 4", p.INVALID_TTL),
    (f"add {ID_TEXT} q 1 18446744073709551616 4", p.INVALID_TTL),
    (f"schedule {ID_TEXT} q 1 ttl 2016-06-14T06:46:46Z 4", p.INVALID_TTL),
    (f"schedule {ID_TEXT} q 1 1 2016-06-14 4", p.INVALID_TIME),
    (f"schedule {ID_TEXT} q 1 1 2016-06-14T06:46:46 4", p.INVALID_TIME),
    (f"schedule {ID_TEXT} q 1 1 2016-06-14T06:46:46+00:00 4", p.INVALID_TIME),
    (f"schedule {ID_TEXT} q 1 1 2016-06-14t06:46:46z 4", p.INVALID_TIME),
    (f"schedule {ID_TEXT} q 1 1 2016-02-30T06:46:46Z 4", p.INVALID_TIME),
    (f"schedule {ID_TEXT} q 1 1 2016-06-14T24:00:00Z 4", p.INVALID_TIME),
    (f"schedule {ID_TEXT} q 1 1 2016-06-14T06:46:60Z 4", p.INVALID_TIME),
    (f"schedule {ID_TEXT} q 1 1 0000-01-01T00:00:00Z 4", p.INVALID_TIME),
    (f"run {ID_TEXT} q 1 86400001 4", p.INVALID_WAIT_TIMEOUT),
    (f"run {ID_TEXT} q 1 -5 4", p.INVALID_WAIT_TIMEOUT),
    (f"{ADD} 4 -max-attempts=256", p.INVALID_MAX_ATTEMPTS),
    (f"{ADD} 4 -max-attempts=-1", p.INVALID_MAX_ATTEMPTS),
    (f"{ADD} 4 -max-attempts=x", p.INVALID_MAX_ATTEMPTS),
    (f"{ADD} 4 -max-fails=256", p.INVALID_MAX_FAILS),
    (f"{ADD} 4 -max-fails=1_0", p.INVALID_MAX_FAILS),
    (f"{ADD} 4 -priority=2147483648", p.INVALID_PRIORITY),
    (f"{ADD} 4 -priority=-2147483649", p.INVALID_PRIORITY),
    (f"{ADD} 4 -priority=1.0", p.INVALID_PRIORITY),
    (f"run {ID_TEXT} q 1 1 4 -priority=ten", p.INVALID_PRIORITY),
    (f"schedule {ID_TEXT} q 1 1 2016-06-14T06:46:46Z 4 -priority=--1", p.INVALID_PRIORITY),
]


@pytest.mark.parametrize(("line", "text"), BAD_LINES)
def test_invalid_command_gets_workqs_error_text(line: str, text: str) -> None:
    wire = line.encode("utf-8") + b"\r\n"
    assert parse_one(wire) == client_error(text)


@pytest.mark.parametrize("sep", [" ", "  "])  # the fast path, the general one
def test_a_lease_may_list_max_lease_names(sep: str) -> None:
    names = tuple(f"n{i}" for i in range(p.MAX_LEASE_NAMES))
    wire = f"lease{sep}{sep.join(names)}{sep}10\r\n".encode()
    assert parse_one(wire) == Lease(names, 10)


@pytest.mark.parametrize(("line", "text"), BAD_DATA_LINES)
def test_invalid_data_command_gets_workqs_error_text_and_its_payload_is_skipped(
    line: str, text: str
) -> None:
    wire = line.encode() + b"\r\npong\r\n" + f"delete {ID_TEXT}\r\n".encode()
    assert parse_all(wire) == [client_error(text), Delete(ID)]


@pytest.mark.parametrize(
    ("line", "text"),
    [
        (f"{ADD} x", p.INVALID_PAYLOAD),
        (f"{ADD} -1", p.INVALID_PAYLOAD),
        (f"{ADD} 1_0", p.INVALID_PAYLOAD),
        (f"run {ID_TEXT} q 1 1 4x", p.INVALID_PAYLOAD),
        (f"complete {ID_TEXT} x", p.INVALID_RESULT),
        (f"fail {ID_TEXT} 0x10", p.INVALID_RESULT),
        ("add", p.INVALID_COMMAND_ARGS),
    ],
)
def test_unreadable_data_size_is_rejected_without_skipping(line: str, text: str) -> None:
    wire = line.encode() + b"\r\n" + f"delete {ID_TEXT}\r\n".encode()
    assert parse_all(wire) == [client_error(text), Delete(ID)]


@pytest.mark.parametrize(
    ("line", "text"),
    [
        (f"{ADD} 3", p.INVALID_PAYLOAD),  # shorter than the data sent
        (f"schedule {ID_TEXT} q 1 1 2016-06-14T06:46:46Z 2", p.INVALID_PAYLOAD),
        (f"run {ID_TEXT} q 1 1 0", p.INVALID_PAYLOAD),
        (f"complete {ID_TEXT} 1", p.INVALID_RESULT),
        (f"fail {ID_TEXT} 3", p.INVALID_RESULT),
        # rejected on the line: the block is discarded by size, and still resyncs
        (f"add {ID_TEXT} q 1 3", p.INVALID_COMMAND_ARGS),
        (f"complete {ID_TEXT} 3 -x=1 -x=2", p.INVALID_COMMAND_FLAGS),
        (f"run {ID_TEXT} q 1 2", p.INVALID_COMMAND_ARGS),
    ],
)
def test_data_not_followed_by_crlf_is_rejected_and_the_stream_resyncs(line: str, text: str) -> None:
    wire = line.encode() + b"\r\npong\r\n" + f"delete {ID_TEXT}\r\n".encode()
    assert parse_all(wire) == [client_error(text), Delete(ID)]


def test_error_texts_encode_as_workq_replies() -> None:
    assert client_error(p.INVALID_ID).to_bytes() == b"-CLIENT-ERROR Invalid ID\r\n"


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("x" * p.MAX_ERROR_TEXT_BYTES, b"x" * p.MAX_ERROR_TEXT_BYTES),
        ("x" * (p.MAX_ERROR_TEXT_BYTES + 1), b"x" * (p.MAX_ERROR_TEXT_BYTES - 3) + b"..."),
        ("Invalid cron spec '" + "x" * 100_000, b"Invalid cron spec '" + b"x" * 490 + b"..."),
        # a line break stays escaped and an escape is never cut in two
        ("a\r\n" * 1000, b"a\\r\\n" * 101 + b"a\\r..."),
        ("\u20ac" * 1000, b"\\u20ac" * 84 + b"..."),
    ],
)
def test_error_replies_are_one_short_line(text: str, line: bytes) -> None:
    # a reply echoing a 100 KB cron spec was longer than jobq's client reads (64 KiB)
    reply = p.client_error(text)
    assert reply == b"-CLIENT-ERROR " + line + b"\r\n"
    assert len(reply) <= len(b"-CLIENT-ERROR \r\n") + p.MAX_ERROR_TEXT_BYTES
    parser = ReplyParser()
    parser.expect(ReplyShape.OK)
    parser.feed(reply)
    assert parser.next_reply() == Error(p.CLIENT_ERROR, line.decode("latin-1"))


# --------------------------------------------------------------------------------------
# Framing, splits and limits
# --------------------------------------------------------------------------------------

MIXED_STREAM = b"".join(
    [
        COMMANDS[1][0],
        f"{ADD} 6\r\na\r\nb\r\n\r\n".encode(),  # valid, data holds CRLF
        b"add nope q 1 1 7\r\nadd x\r\n\r\n",  # rejected, data looks like a command
        f"{ADD} 2\r\nabc\r\n".encode(),  # data too long: resync
        b"bogus words here\r\n",
        # wrong arity: the block (itself a command) is discarded by size, unbuffered
        f"add {ID_TEXT} q 1 45\r\ndelete {ID_TEXT}\r\n\r\n".encode(),
        # wrong arity and a block longer than declared: discarded, then resync
        f"add {ID_TEXT} q 1 3\r\npong\r\n".encode(),
        b"\r\n",
        COMMANDS[8][0],
        f"fail {ID_TEXT} 0 -x=1\r\n\r\n".encode(),
        COMMANDS[-1][0],
    ]
)
MIXED_EVENTS: list[Event] = [
    COMMANDS[1][1],
    Add(ID, "q", 1000, 60000, b"a\r\nb\r\n"),
    client_error(p.INVALID_ID),
    client_error(p.INVALID_PAYLOAD),
    client_error(p.UNKNOWN_COMMAND),
    client_error(p.INVALID_COMMAND_ARGS),
    client_error(p.INVALID_COMMAND_ARGS),
    client_error(p.UNKNOWN_COMMAND),
    COMMANDS[8][1],
    client_error(p.INVALID_COMMAND_ARGS),
    COMMANDS[-1][1],
]


def test_mixed_stream_gives_one_event_per_command() -> None:
    assert parse_all(MIXED_STREAM) == MIXED_EVENTS


def test_split_feeds_at_every_byte_boundary_give_the_same_events() -> None:
    for cut in range(len(MIXED_STREAM) + 1):
        parser = RequestParser()
        parser.feed(MIXED_STREAM[:cut])
        events = drain(parser)
        parser.feed(MIXED_STREAM[cut:])
        events += drain(parser)
        assert events == MIXED_EVENTS, cut


def test_feeding_one_byte_at_a_time_gives_the_same_events() -> None:
    parser = RequestParser()
    events: list[Event] = []
    for i in range(len(MIXED_STREAM)):
        parser.feed(MIXED_STREAM[i : i + 1])
        events += drain(parser)
    assert events == MIXED_EVENTS


def test_next_event_returns_none_until_the_command_is_complete() -> None:
    parser = RequestParser()
    parser.feed(f"complete {ID_TEXT} 4\r\npo".encode())
    assert parser.next_event() is None
    parser.feed(b"ng\r")
    assert parser.next_event() is None
    parser.feed(b"\n")
    assert parser.next_event() == Complete(ID, b"pong")
    assert parser.next_event() is None


def test_rejected_payload_that_looks_like_commands_is_never_parsed() -> None:
    payload = f"delete {OTHER_ID_TEXT}\r\nlease q 1\r\n".encode()
    wire = (
        f"add {ID_TEXT} bad! 1 1 {len(payload)}\r\n".encode()
        + payload
        + b"\r\n"
        + f"delete {ID_TEXT}\r\n".encode()
    )
    assert parse_all(wire) == [client_error(p.INVALID_NAME), Delete(ID)]


def test_line_over_the_limit_is_fatal_and_closes_the_parser() -> None:
    parser = RequestParser(max_line_bytes=64)
    parser.feed(b"lease " + b"a" * 100)
    assert parser.next_event() == client_error(p.LINE_TOO_LONG, fatal=True)
    assert parser.closed
    parser.feed(b" 1\r\nlease q 1\r\n")
    assert parser.next_event() is None
    assert parser.buffered_bytes == 0


def test_terminated_line_over_the_limit_is_fatal() -> None:
    assert parse_all(b"lease " + b"a" * 60 + b" 1\r\n", max_line_bytes=64) == [
        client_error(p.LINE_TOO_LONG, fatal=True)
    ]


def test_line_at_the_limit_is_accepted() -> None:
    line = b"lease " + b"a" * 56 + b" 1"
    assert len(line) == 64
    assert parse_all(line + b"\r\n", max_line_bytes=64) == [Lease(("a" * 56,), 1)]


def test_line_waiting_for_its_lf_at_the_limit_is_not_yet_fatal() -> None:
    parser = RequestParser(max_line_bytes=8)
    parser.feed(b"lease q1\r")
    assert parser.next_event() is None
    parser.feed(b"\n")
    assert parser.next_event() == client_error(p.INVALID_COMMAND_ARGS)


def test_bare_lf_line_end_is_fatal_like_workq_closing_the_connection() -> None:
    assert parse_all(b"lease q 1\nlease q 1\r\n") == [client_error(p.INVALID_LINE_END, fatal=True)]


def test_oversize_payload_is_rejected_and_skipped_without_buffering() -> None:
    size = p.MAX_DATA_BYTES + 1
    parser = RequestParser()
    parser.feed(f"{ADD} {size}\r\n".encode())
    assert parser.next_event() == client_error(p.INVALID_PAYLOAD)
    chunk = b"x" * 65_536
    sent = 0
    while sent < size:
        piece = chunk[: size - sent]
        parser.feed(piece)
        sent += len(piece)
        assert parser.next_event() is None
        assert parser.buffered_bytes == 0
    parser.feed(f"\r\ndelete {ID_TEXT}\r\n".encode())
    assert drain(parser) == [Delete(ID)]


def test_oversize_result_is_rejected_as_invalid_result() -> None:
    events = parse_all(f"complete {ID_TEXT} 9\r\n123456789\r\n".encode(), max_data_bytes=8)
    assert events == [client_error(p.INVALID_RESULT)]


def test_payload_at_the_limit_is_accepted() -> None:
    events = parse_all(f"complete {ID_TEXT} 8\r\n12345678\r\n".encode(), max_data_bytes=8)
    assert events == [Complete(ID, b"12345678")]


def test_declared_size_past_the_discard_limit_is_fatal() -> None:
    events = parse_all(f"{ADD} 1000\r\n".encode(), max_data_bytes=10, max_discard_bytes=100)
    assert events == [client_error(p.INVALID_PAYLOAD, fatal=True)]


def test_garbage_after_data_without_crlf_past_the_line_limit_is_fatal() -> None:
    parser = RequestParser(max_line_bytes=48)
    parser.feed(f"complete {ID_TEXT} 1\r\nxyz".encode())
    assert parser.next_event() == client_error(p.INVALID_RESULT)
    parser.feed(b"z" * 60)
    assert parser.next_event() == client_error(p.LINE_TOO_LONG, fatal=True)


def test_resync_finds_a_crlf_split_across_feeds() -> None:
    parser = RequestParser()
    parser.feed(f"complete {ID_TEXT} 1\r\nxyz\r".encode())
    assert drain(parser) == [client_error(p.INVALID_RESULT)]
    parser.feed(f"\ndelete {ID_TEXT}\r\n".encode())
    assert drain(parser) == [Delete(ID)]


# --------------------------------------------------------------------------------------
# Extension commands
# --------------------------------------------------------------------------------------


def test_registered_command_with_data_parses_and_keeps_sync() -> None:
    class Echo(Request):
        command: ClassVar[str] = "echo"
        tag: str
        body: bytes

    def parse_echo(args: tuple[str, ...], flags: Mapping[str, str], data: bytes | None) -> Echo:
        if len(args) != 2 or data is None:
            raise ClientError(p.INVALID_COMMAND_ARGS)
        if args[0] == "bad":
            raise ClientError("Invalid tag")
        return Echo(args[0], data)

    registry = p.CommandRegistry()
    registry.register("echo", parse_echo, data_args=2, reply=ReplyShape.RESULT)
    registry.register_inspect("things", lambda args, flags, data: InspectServer())
    parser = RequestParser(registry=registry)
    parser.feed(b"echo hi 2\r\nyo\r\necho bad 2\r\nyo\r\ninspect things\r\nadd\r\n")
    assert drain(parser) == [
        Echo("hi", b"yo"),
        client_error("Invalid tag"),
        InspectServer(),
        client_error(p.UNKNOWN_COMMAND),
    ]
    replies = ReplyParser(registry=registry)
    replies.expect("echo")
    assert replies.pending == 1
    with pytest.raises(ValueError):
        registry.register("echo", parse_echo)
    with pytest.raises(ValueError):
        registry.register("-x", parse_echo)


def test_default_registry_knows_workq_commands() -> None:
    assert p.DEFAULT_REGISTRY.reply_shape("lease") is ReplyShape.JOB
    assert p.DEFAULT_REGISTRY.reply_shape("run") is ReplyShape.RESULT
    assert p.DEFAULT_REGISTRY.reply_shape("inspect") is ReplyShape.RECORDS
    assert p.DEFAULT_REGISTRY.reply_shape("add") is ReplyShape.OK


# --------------------------------------------------------------------------------------
# Reply encoders (byte for byte as workq) and the ReplyParser
# --------------------------------------------------------------------------------------

JOB = JobInfo(
    id=ID,
    name="ping",
    ttr_ms=1000,
    ttl_ms=600000,
    payload=b"ping",
    max_attempts=0,
    attempts=0,
    max_fails=0,
    fails=0,
    priority=0,
    state=0,
    created_ns=1_471_830_651 * 1_000_000_000 + 999_999_999,
)


def test_simple_replies_are_workqs_bytes() -> None:
    assert p.ok() == b"+OK\r\n"
    assert p.timeout() == b"-TIMEOUT\r\n"
    assert p.not_found() == b"-NOT-FOUND\r\n"
    assert p.client_error("Duplicate job") == b"-CLIENT-ERROR Duplicate job\r\n"
    assert p.server_error("disk full") == b"-SERVER-ERROR disk full\r\n"


def test_job_and_result_replies_are_workqs_bytes() -> None:
    assert p.job_reply(ID, "ping", 1000, b"a\r\nb") == (
        f"+OK 1\r\n{ID_TEXT} ping 1000 4\r\na\r\nb\r\n".encode()
    )
    assert p.result_reply(ID, True, b"pong") == f"+OK 1\r\n{ID_TEXT} 1 4\r\npong\r\n".encode()
    assert p.result_reply(ID, False, b"") == f"+OK 1\r\n{ID_TEXT} 0 0\r\n\r\n".encode()


def test_inspect_job_reply_matches_workqs_documented_example() -> None:
    assert (
        p.inspect_job_reply(JOB)
        == (
            f"+OK 1\r\n{ID_TEXT} 12\r\n"
            "name ping\r\nttr 1000\r\nttl 600000\r\npayload-size 4\r\npayload ping\r\n"
            "max-attempts 0\r\nattempts 0\r\nmax-fails 0\r\nfails 0\r\npriority 0\r\n"
            "state 0\r\ncreated 2016-08-22T01:50:51Z\r\n"
        ).encode()
    )


def test_inspect_scheduled_job_has_thirteen_keys_ending_with_time() -> None:
    scheduled = replace(JOB, time_ns=1_472_752_800 * 1_000_000_000)
    reply = p.inspect_jobs_reply([scheduled, JOB])
    assert reply.startswith(f"+OK 2\r\n{ID_TEXT} 13\r\n".encode())
    assert b"created 2016-08-22T01:50:51Z\r\ntime 2016-09-01T18:00:00Z\r\n" in reply


def test_inspect_queue_server_and_queues_replies_are_workqs_layout() -> None:
    assert p.inspect_queue_reply(QueueInfo("ping", 3, 0)) == (
        b"+OK 1\r\nping 2\r\nready-len 3\r\nscheduled-len 0\r\n"
    )
    assert p.inspect_queues_reply([QueueInfo("ping1", 3, 0), QueueInfo("ping2", 9, 1)]) == (
        b"+OK 2\r\nping1 2\r\nready-len 3\r\nscheduled-len 0\r\n"
        b"ping2 2\r\nready-len 9\r\nscheduled-len 1\r\n"
    )
    assert p.inspect_queues_reply([]) == b"+OK 0\r\n"
    started = 1_451_747_045 * 1_000_000_000
    assert p.inspect_server_reply(ServerInfo(32, 0, started)) == (
        b"+OK 1\r\nserver 3\r\nactive-clients 32\r\nevicted-jobs 0\r\n"
        b"started 2016-01-02T15:04:05Z\r\n"
    )


def test_format_time_pads_and_truncates_like_go() -> None:
    assert p.format_time(0) == "1970-01-01T00:00:00Z"
    assert p.format_time(-1) == "1969-12-31T23:59:59Z"
    assert p.format_time(TIME_NS + 999_999_999) == "2016-06-14T06:46:46Z"


def read_replies(wire: bytes, expects: list[ReplyShape | Request | str]) -> list[p.Reply]:
    parser = ReplyParser()
    for e in expects:
        parser.expect(e)
    parser.feed(wire)
    replies = []
    while (reply := parser.next_reply()) is not None:
        replies.append(reply)
    return replies


PAYLOAD = b"x\r\ny\r\n"
REPLY_CASES: list[tuple[bytes, ReplyShape | Request | str, p.Reply]] = [
    (p.ok(), "add", Ok()),
    (p.ok(), Delete(ID), Ok()),
    (p.job_reply(ID, "q", 5, PAYLOAD), "lease", JobReply(ID, "q", 5, PAYLOAD)),
    (p.result_reply(ID, True, PAYLOAD), "run", ResultReply(ID, True, PAYLOAD)),
    (p.result_reply(ID, False, b""), Result(ID, 1), ResultReply(ID, False, b"")),
    (p.timeout(), "lease", Error(p.TIMEOUT)),
    (p.not_found(), "result", Error(p.NOT_FOUND)),
    (p.client_error("Invalid ID"), "inspect", Error(p.CLIENT_ERROR, "Invalid ID")),
    (p.server_error("disk full"), ReplyShape.OK, Error(p.SERVER_ERROR, "disk full")),
    (
        p.inspect_queue_reply(QueueInfo("q", 1, 2)),
        InspectQueue("q"),
        RecordsReply((Record("q", {"ready-len": "1", "scheduled-len": "2"}),)),
    ),
    (p.inspect_jobs_reply([]), "inspect", RecordsReply(())),
]


@pytest.mark.parametrize(("wire", "expect", "reply"), REPLY_CASES)
def test_reply_parser_reads_each_reply_shape(
    wire: bytes, expect: ReplyShape | Request | str, reply: p.Reply
) -> None:
    assert read_replies(wire, [expect]) == [reply]


def test_reply_parser_reads_raw_payload_in_inspect_records_and_round_trips_job_info() -> None:
    job = replace(JOB, payload=PAYLOAD, created_ns=TIME_NS, time_ns=TIME_NS + 10**9, priority=-3)
    (reply,) = read_replies(p.inspect_jobs_reply([job, JOB]), ["inspect"])
    assert isinstance(reply, RecordsReply)
    assert reply.records[0].fields["payload"] == PAYLOAD
    assert [JobInfo.from_record(r) for r in reply.records] == [
        job,
        replace(JOB, created_ns=JOB.created_ns // 10**9 * 10**9),
    ]


def test_reply_parser_round_trips_server_and_queue_info() -> None:
    server = ServerInfo(3, 7, TIME_NS)
    queues = [QueueInfo("a", 1, 2), QueueInfo("b.c", 0, 0)]
    wire = p.inspect_server_reply(server) + p.inspect_queues_reply(queues)
    server_reply, queues_reply = read_replies(wire, ["inspect", "inspect"])
    assert isinstance(server_reply, RecordsReply) and isinstance(queues_reply, RecordsReply)
    assert ServerInfo.from_record(server_reply.records[0]) == server
    assert [QueueInfo.from_record(r) for r in queues_reply.records] == queues


def test_reply_parser_gives_the_same_replies_at_every_split() -> None:
    wire = b"".join(w for w, _, _ in REPLY_CASES) + p.inspect_job_reply(JOB)
    expects = [e for _, e, _ in REPLY_CASES] + ["inspect"]
    whole = read_replies(wire, expects)
    assert len(whole) == len(REPLY_CASES) + 1
    for cut in range(len(wire) + 1):
        parser = ReplyParser()
        for e in expects:
            parser.expect(e)
        got = []
        for piece in (wire[:cut], wire[cut:]):
            parser.feed(piece)
            while (reply := parser.next_reply()) is not None:
                got.append(reply)
        assert got == whole, cut


@pytest.mark.parametrize(
    ("wire", "expect"),
    [
        (b"+OK 1\r\n", "add"),
        (b"OK\r\n", "add"),
        (b"+OK\n", "add"),
        (b"+OK 2\r\n", "lease"),
        (b"+OK x\r\n", "inspect"),
        (f"+OK 1\r\n{ID_TEXT} q 4\r\npong\r\n".encode(), "lease"),
        (f"+OK 1\r\n{ID_TEXT} 2 4\r\npong\r\n".encode(), "result"),
        (f"+OK 1\r\n{ID_TEXT} 1 4\r\npongpong\r\n".encode(), "result"),
        (b"+OK 1\r\nnot-an-id 1 4\r\npong\r\n", "run"),
        (b"+OK 1\r\nq 1\r\npayload-size 4\r\nxpayload pong\r\n", "inspect"),
        (b"+OK 1\r\nq 2\r\npayload-size 4\r\nnot-payload pong\r\n", "inspect"),
        (b"+OK 1\r\nq\r\n", "inspect"),
        (b"-\r\n", "add"),
        (f"+OK 1\r\n{ID_TEXT} 1 99999999999\r\n".encode(), "result"),
    ],
)
def test_malformed_replies_raise_and_the_parser_stays_broken(wire: bytes, expect: str) -> None:
    parser = ReplyParser()
    parser.expect(expect)
    parser.expect("add")
    parser.feed(wire)
    with pytest.raises(MalformedReplyError):
        while parser.next_reply() is not None:
            pass
    with pytest.raises(MalformedReplyError):
        parser.next_reply()


def test_reply_line_over_the_limit_is_malformed() -> None:
    parser = ReplyParser(max_line_bytes=16)
    parser.expect("add")
    parser.feed(b"-CLIENT-ERROR " + b"x" * 20)
    with pytest.raises(MalformedReplyError):
        parser.next_reply()


def test_reply_bytes_without_an_expected_reply_are_a_caller_error() -> None:
    parser = ReplyParser()
    assert parser.next_reply() is None
    parser.feed(b"+OK\r\n")
    with pytest.raises(RuntimeError):
        parser.next_reply()


def test_replacing_a_hot_command_turns_the_fast_path_off_and_uses_the_new_parser() -> None:
    registry = p.workq_registry()
    assert registry._fast
    registry.register("delete", lambda args, flags, data: InspectServer(), replace=True)
    assert not registry._fast
    parser = RequestParser(registry=registry)
    parser.feed(b"delete 6ba7b810-9dad-11d1-80b4-00c04fd430c4\r\n")
    assert parser.next_event() == InspectServer()


def test_replacing_inspect_job_turns_the_fast_path_off() -> None:
    registry = p.workq_registry()
    registry.register_inspect("job", lambda args, flags, data: InspectServer(), replace=True)
    assert not registry._fast
    parser = RequestParser(registry=registry)
    parser.feed(b"inspect job 6ba7b810-9dad-11d1-80b4-00c04fd430c4\r\n")
    assert parser.next_event() == InspectServer()


def test_fast_path_leaves_out_of_range_numbers_and_partial_data_to_the_rules() -> None:
    job = "6ba7b810-9dad-11d1-80b4-00c04fd430c4"
    wire = (
        f"add {job} q 86400001 1 2\r\nab\r\n"
        f"add {job} q 1 0 2\r\nab\r\n"
        f"lease q 86400001\r\n"
        f"result {job} 86400001\r\n"
        f"add {job} q 0000000000000000000000000000001 1 2\r\nab\r\n"
        f"complete {job} 2\r\nabX\r\n"
    ).encode()
    parser = RequestParser()
    parser.feed(wire[:-9])  # the last data block arrives later
    events = []
    while (event := parser.next_event()) is not None:
        events.append(event)
    parser.feed(wire[-9:])
    while (event := parser.next_event()) is not None:
        events.append(event)
    job_id = p.parse_id(job)
    assert events == [
        ProtocolError(p.CLIENT_ERROR, p.INVALID_TTR),
        ProtocolError(p.CLIENT_ERROR, p.INVALID_TTL),
        ProtocolError(p.CLIENT_ERROR, p.INVALID_WAIT_TIMEOUT),
        ProtocolError(p.CLIENT_ERROR, p.INVALID_WAIT_TIMEOUT),
        Add(job_id, "q", 1, 1, b"ab"),
        ProtocolError(p.CLIENT_ERROR, p.INVALID_RESULT),
    ]
    assert parser.buffered_bytes == 0


def test_requests_made_by_the_parser_stay_frozen_and_hashable() -> None:
    parser = RequestParser()
    parser.feed(Add(b"\x01" * 16, "q", 1, 1, b"x").to_bytes())
    event = parser.next_event()
    assert event == Add(b"\x01" * 16, "q", 1, 1, b"x")
    assert hash(event) == hash(Add(b"\x01" * 16, "q", 1, 1, b"x"))
    with pytest.raises(AttributeError):
        event.name = "r"  # type: ignore[misc,union-attr]
