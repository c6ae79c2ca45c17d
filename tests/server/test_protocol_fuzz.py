"""Fuzzing the workq codec: no input makes it raise, hang, lose sync or hold unbounded memory."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobq.server import protocol as p
from jobq.server.protocol import (
    Add,
    Complete,
    Delete,
    Event,
    Fail,
    InspectJob,
    InspectJobs,
    InspectQueue,
    InspectQueues,
    InspectScheduledJobs,
    InspectServer,
    JobInfo,
    Lease,
    MalformedReplyError,
    ProtocolError,
    QueueInfo,
    ReplyParser,
    ReplyShape,
    Request,
    RequestParser,
    Result,
    Run,
    Schedule,
    ServerInfo,
)

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
#: small limits so that fuzzing reaches them
SMALL_LINE_BYTES, SMALL_DATA_BYTES, SMALL_DISCARD_BYTES = 96, 32, 200
#: the whole Unix seconds whose nanoseconds fit a signed 64-bit integer (1677-09-21 to
#: 2262-04-11): jobq clamps a time outside them (``limits.clamp_time_ns``)
FIRST_SECOND, LAST_SECOND = -9_223_372_036, 9_223_372_035

ids = st.binary(min_size=16, max_size=16)
names = st.from_regex(r"[A-Za-z0-9_.\-]{1,24}", fullmatch=True)
data_blocks = st.one_of(
    st.binary(max_size=40),
    st.lists(
        st.sampled_from([b"\r\n", b"\r", b"\n", b"a", b" ", b"\x00", b"add "]), max_size=12
    ).map(b"".join),
)
ttrs = st.integers(1, p.MAX_TTR_MS)
ttls = st.integers(1, p.MAX_TTL_MS)
waits = st.integers(0, p.MAX_WAIT_TIMEOUT_MS)
priorities = st.integers(p.MIN_PRIORITY, p.MAX_PRIORITY)
counts = st.integers(0, 255)
times = st.builds(
    lambda s, ns: s * 1_000_000_000 + ns,
    st.integers(FIRST_SECOND, LAST_SECOND),
    st.integers(0, 999_999_999),
)
offsets = st.integers(0, p.MAX_CURSOR_OFFSET)
limits = st.integers(1, p.MAX_INSPECT_LIMIT)

requests: st.SearchStrategy[Request] = st.one_of(
    st.builds(Add, ids, names, ttrs, ttls, data_blocks, priorities, counts, counts),
    st.builds(Schedule, ids, names, ttrs, ttls, data_blocks, times, priorities, counts, counts),
    st.builds(Run, ids, names, ttrs, waits, data_blocks, priorities),
    st.builds(Result, ids, waits),
    st.builds(Lease, st.lists(names, min_size=1, max_size=4).map(tuple), waits),
    st.builds(Complete, ids, data_blocks),
    st.builds(Fail, ids, data_blocks),
    st.builds(Delete, ids),
    st.builds(InspectServer),
    st.builds(InspectQueues, offsets, limits),
    st.builds(InspectQueue, names),
    st.builds(InspectJobs, names, offsets, limits),
    st.builds(InspectScheduledJobs, names, offsets, limits),
    st.builds(InspectJob, ids),
)

#: pieces of commands, so random streams reach deep parser states
FRAGMENTS = [
    b"add ",
    b"schedule ",
    b"run ",
    b"complete ",
    b"fail ",
    b"lease ",
    b"inspect ",
    b"jobs ",
    b"delete ",
    b"6ba7b810-9dad-11d1-80b4-00c04fd430c4 ",
    b"q ",
    b"1 ",
    b"0 ",
    b"4",
    b"40",
    b"99999999999",
    b"2016-06-14T06:46:46Z ",
    b"-priority=1 ",
    b"-x=",
    b"\r\n",
    b"\r",
    b"\n",
    b" ",
    b"pong",
    b"x" * 50,
]
fragment_streams = st.lists(st.sampled_from(FRAGMENTS), max_size=60).map(b"".join)


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


def run_parser(chunks: list[bytes], small: bool = False) -> list[Event]:
    """Feed the chunks, draining after each; check termination and the memory bound."""
    parser = (
        RequestParser(
            max_line_bytes=SMALL_LINE_BYTES,
            max_data_bytes=SMALL_DATA_BYTES,
            max_discard_bytes=SMALL_DISCARD_BYTES,
        )
        if small
        else RequestParser()
    )
    bound = max(parser.max_line_bytes, parser.max_data_bytes) + 2
    events: list[Event] = []
    total = 0
    for chunk in chunks:
        parser.feed(chunk)
        total += len(chunk)
        # every event consumes at least a CRLF, so more calls than bytes means a loop
        for _ in range(total + 2):
            event = parser.next_event()
            if event is None:
                break
            assert isinstance(event, Request | ProtocolError)
            events.append(event)
        else:
            raise AssertionError("next_event() never asked for more bytes")
        assert parser.buffered_bytes <= bound
    fatal = [e for e in events if isinstance(e, ProtocolError) and e.fatal]
    if fatal:
        assert events[-1] is fatal[0] and parser.closed
    return events


@FUZZ
@given(st.binary(max_size=3000), st.lists(st.integers(0, 3000), max_size=8))
def test_random_bytes_never_raise_hang_or_grow_the_buffer(data: bytes, cuts: list[int]) -> None:
    run_parser(split(data, cuts))
    run_parser(split(data, cuts), small=True)


@FUZZ
@given(fragment_streams, st.lists(st.integers(0, 3000), max_size=8))
def test_streams_of_command_fragments_never_raise_hang_or_grow_the_buffer(
    data: bytes, cuts: list[int]
) -> None:
    run_parser(split(data, cuts))
    run_parser(split(data, cuts), small=True)


@FUZZ
@given(st.lists(requests, min_size=1, max_size=6), st.lists(st.integers(0, 5000), max_size=10))
def test_valid_requests_round_trip_at_any_split(reqs: list[Request], cuts: list[int]) -> None:
    wire = b"".join(r.to_bytes() for r in reqs)
    assert run_parser(split(wire, cuts)) == reqs


@FUZZ
@given(
    st.lists(requests, min_size=1, max_size=5),
    st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 2), st.binary(max_size=3)), max_size=4),
    st.lists(st.integers(0, 5000), max_size=6),
)
def test_mutated_valid_commands_never_raise_hang_or_grow_the_buffer(
    reqs: list[Request], mutations: list[tuple[int, int, bytes]], cuts: list[int]
) -> None:
    wire = bytearray(b"".join(r.to_bytes() for r in reqs))
    for position, operation, blob in mutations:
        at = position % (len(wire) + 1)
        if operation == 0:
            wire[at:at] = blob  # insert
        elif operation == 1:
            del wire[at : at + len(blob) + 1]  # delete
        else:
            wire[at : at + len(blob)] = blob  # overwrite
    run_parser(split(bytes(wire), cuts))
    run_parser(split(bytes(wire), cuts), small=True)


@FUZZ
@given(requests, st.binary(max_size=200).filter(lambda b: b"\n" not in b))
def test_a_rejected_line_never_desyncs_the_next_command(request: Request, junk: bytes) -> None:
    # any line of junk that is no command costs one error, and the next command still parses
    events = run_parser([b"#" + junk + b"\r\n" + request.to_bytes()])
    assert len(events) == 2 and isinstance(events[0], ProtocolError)
    assert not events[0].fatal
    assert events[1] == request


@FUZZ
@given(requests, data_blocks, ids)
def test_rejected_data_commands_never_leak_their_data_as_commands(
    request: Request, payload: bytes, job_id: bytes
) -> None:
    # the payload is itself a valid command, yet only the command after it runs
    inner = request.to_bytes()
    bad = f"add {p.format_id(job_id)} bad! 1 1 {len(inner)}\r\n".encode() + inner + b"\r\n"
    assert run_parser([bad + request.to_bytes()]) == [
        ProtocolError(p.CLIENT_ERROR, p.INVALID_NAME),
        request,
    ]


# --------------------------------------------------------------------------------------
# The fast path (whole hot commands matched at once) gives what the general path gives
# --------------------------------------------------------------------------------------

#: hot commands in their plain and not-so-plain forms: near the fast path's edges
HOT_FRAGMENTS = [
    b"add ",
    b"complete ",
    b"fail ",
    b"lease ",
    b"delete ",
    b"result ",
    b"inspect job ",
    b"inspect jobs ",
    b"6ba7b810-9dad-11d1-80b4-00c04fd430c4",
    b"6BA7B810-9DAD-11D1-80B4-00C04FD430C4",
    b"6ba7b810-9dad-11d1-80b4-00c04fd430c",
    b"6ba7b8109dad11d180b400c04fd430c4",
    b"q",
    b"-q",
    b"x" * 20,
    b"0",
    b"1",
    b"2",
    b"86400000",
    b"86400001",
    b"000000000000000000000000001",
    b"18446744073709551616",
    b"+1",
    b"-1",
    b"-priority=1",
    b" ",
    b"  ",
    b"\r\n",
    b"\r",
    b"\n",
    b"ok",
]
hot_streams = st.lists(st.sampled_from(HOT_FRAGMENTS), max_size=40).map(b"".join)


def slow_parser(**limits: int) -> RequestParser:
    """A parser that never takes the fast path: the reference for the fast one.

    Its commands are DEFAULT_REGISTRY's as they are now (other tests may have added some,
    e.g. ``auth``), so that the two parsers differ only in the path they take."""
    registry = p.CommandRegistry()
    registry._commands = dict(p.DEFAULT_REGISTRY._commands)
    registry._inspect = dict(p.DEFAULT_REGISTRY._inspect)
    registry._fast = False
    return RequestParser(registry=registry, **limits)


def events_of(parser: RequestParser, chunks: list[bytes]) -> list[Event]:
    events: list[Event] = []
    for chunk in chunks:
        parser.feed(chunk)
        while (event := parser.next_event()) is not None:
            events.append(event)
    return events


def assert_fast_path_changes_nothing(chunks: list[bytes]) -> None:
    assert p.DEFAULT_REGISTRY._fast
    for limits in ({}, {"max_line_bytes": 48, "max_data_bytes": 3, "max_discard_bytes": 8}):
        fast = events_of(RequestParser(**limits), chunks)
        slow = events_of(slow_parser(**limits), chunks)
        assert fast == slow
        assert [type(e) for e in fast] == [type(e) for e in slow]


@FUZZ
@given(st.lists(requests, min_size=1, max_size=6), st.lists(st.integers(0, 5000), max_size=4))
def test_fast_path_gives_the_general_paths_events_for_valid_requests(
    reqs: list[Request], cuts: list[int]
) -> None:
    wire = b"".join(r.to_bytes() for r in reqs)
    assert_fast_path_changes_nothing([wire])
    assert_fast_path_changes_nothing(split(wire, cuts))


@FUZZ
@given(hot_streams, st.lists(st.integers(0, 3000), max_size=4))
def test_fast_path_gives_the_general_paths_events_for_hot_fragments(
    data: bytes, cuts: list[int]
) -> None:
    assert_fast_path_changes_nothing([data])
    assert_fast_path_changes_nothing(split(data, cuts))


@FUZZ
@given(fragment_streams, st.binary(max_size=300))
def test_fast_path_gives_the_general_paths_events_for_fragments_and_bytes(
    data: bytes, junk: bytes
) -> None:
    assert_fast_path_changes_nothing([data])
    assert_fast_path_changes_nothing([junk])


# --------------------------------------------------------------------------------------
# Replies
# --------------------------------------------------------------------------------------

job_infos = st.builds(
    JobInfo,
    id=ids,
    name=names,
    ttr_ms=ttrs,
    ttl_ms=ttls,
    payload=data_blocks,
    max_attempts=counts,
    attempts=counts,
    max_fails=counts,
    fails=counts,
    priority=priorities,
    state=st.integers(0, 4),
    created_ns=st.integers(FIRST_SECOND, LAST_SECOND).map(lambda s: s * 1_000_000_000),
    time_ns=st.none() | st.integers(FIRST_SECOND, LAST_SECOND).map(lambda s: s * 1_000_000_000),
)
queue_infos = st.builds(QueueInfo, names, st.integers(0, 2**40), st.integers(0, 2**40))
reply_cases = st.one_of(
    st.builds(lambda: (p.ok(), "add", None)),
    st.builds(
        lambda i, n, t, d: (p.job_reply(i, n, t, d), "lease", None), ids, names, ttrs, data_blocks
    ),
    st.builds(
        lambda i, s, d: (p.result_reply(i, s, d), "run", None), ids, st.booleans(), data_blocks
    ),
    st.builds(
        lambda jobs: (p.inspect_jobs_reply(jobs), "inspect", jobs), st.lists(job_infos, max_size=3)
    ),
    st.builds(
        lambda qs: (p.inspect_queues_reply(qs), "inspect", qs), st.lists(queue_infos, max_size=3)
    ),
    st.builds(
        lambda a, e, s: (p.inspect_server_reply(ServerInfo(a, e, s * 10**9)), "inspect", None),
        st.integers(0, 2**32),
        st.integers(0, 2**32),
        st.integers(0, LAST_SECOND),
    ),
    st.sampled_from(
        [
            (p.timeout(), "lease", None),
            (p.not_found(), "result", None),
            (p.client_error("Invalid ID"), "add", None),
        ]
    ),
)


@FUZZ
@given(st.lists(reply_cases, min_size=1, max_size=5), st.lists(st.integers(0, 20000), max_size=8))
def test_encoded_replies_parse_back_at_any_split(
    cases: list[tuple[bytes, str, list[JobInfo] | list[QueueInfo] | None]], cuts: list[int]
) -> None:
    wire = b"".join(w for w, _, _ in cases)
    parser = ReplyParser()
    for _, expect, _ in cases:
        parser.expect(expect)
    replies: list[p.Reply] = []
    for chunk in split(wire, cuts):
        parser.feed(chunk)
        while (reply := parser.next_reply()) is not None:
            replies.append(reply)
    assert len(replies) == len(cases) and parser.pending == 0
    for (_, _, infos), reply in zip(cases, replies, strict=True):
        if infos is None:
            continue
        assert isinstance(reply, p.RecordsReply)
        kind = type(infos[0]) if infos else JobInfo
        assert [kind.from_record(r) for r in reply.records] == infos


@FUZZ
@given(
    st.one_of(st.binary(max_size=400), fragment_streams.map(lambda b: b"+OK 1\r\n" + b)),
    st.lists(st.sampled_from(list(ReplyShape)), min_size=1, max_size=4),
)
def test_reply_parser_on_garbage_only_returns_replies_or_raises_malformed(
    data: bytes, shapes: list[ReplyShape]
) -> None:
    parser = ReplyParser(max_line_bytes=128, max_data_bytes=64)
    for shape in shapes:
        parser.expect(shape)
    parser.feed(data)
    try:
        for _ in range(len(shapes) + 1):
            if parser.next_reply() is None:
                break
    except (MalformedReplyError, RuntimeError):
        pass


extension_wire = st.builds(
    lambda word, body, tail: p.Extension(word, body).to_bytes()[: len(word) + 1]
    + tail
    + p.Extension(word, body).to_bytes()[len(word) + 1 :],
    st.sampled_from([*p.EXTENSION_COMMANDS, "nosuch"]),
    st.binary(max_size=40),
    st.sampled_from([b"", b"x", b"1"]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(extension_wire, min_size=1, max_size=4), st.lists(st.integers(0, 400)))
def test_fast_path_gives_the_general_paths_events_for_extension_commands(
    wires: list[bytes], cuts: list[int]
) -> None:
    data = b"".join(wires)
    assert_fast_path_changes_nothing([data])
    assert_fast_path_changes_nothing(split(data, cuts))
