"""Replaying a run of ``add`` records at once: the bulk of a log of pending jobs.

A producer's adds share their name, TTR, TTL, priority and attempts, byte for byte, and
often their payload's size: records of one length that differ only in the id, the
payload and the times. :func:`decode_add_run` reads such a run with C loops (one unpack of
the records where they lie in the log's bytes) into the jobs ``commands.decode_add_as_job``
makes one by one, and :func:`replay_add_run` enters them as ``replay.replay_new_job``
would, one after another. Either declines (``None``, ``False``) where it would differ
from the record-by-record path (a record of another kind or layout, a duplicate id, an
expired TTL, a time out of range, an open undo journal): the caller then replays the run
record by record, which also raises the error a bad record gets.
``tests/engine/test_add_runs.py`` checks both against each other.
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Sequence
from itertools import chain, repeat
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from jobq.cmdlog.gotime import GO_UNIX_OFFSET_S, TIME_LEN
from jobq.engine.commands import ID_LEN, AddJob, CommandDecodeError, decode_add_as_job
from jobq.engine.job import Job
from jobq.engine.limits import MAX_TIME_NS, MIN_TIME_NS

if TYPE_CHECKING:
    from jobq.engine.machine import Engine
    from jobq.engine.rebuild import ReadyJobs


class PayloadRun(Protocol):
    """What the log reader hands over for a run (``cmdlog.record.PayloadRun``): payload
    ``i`` of the run is ``data[start + i * stride : start + i * stride + size]``, each
    record whole (its TIME and SIZE before it, its CRC after it) and checked."""

    data: bytes
    start: int
    stride: int
    size: int
    count: int

_NS_PER_S = 1_000_000_000
_NS_PER_MS = 1_000_000
#: a record's CRC, after its payload
_CRC_LEN = 4
#: the fewest records worth the set-up
MIN_RUN = 4
_ADD = AddJob.TYPE
#: (a record's length, where a field is in it, the field's struct code) -> the layout that
#: reads that field alone
_COLUMNS: dict[tuple[int, int, str], struct.Struct] = {}
_LAYOUTS_LIMIT = 256


def decode_add_run(run: PayloadRun) -> tuple[list[bytes], list[Job]] | None:
    """The ids and the jobs of ``run``'s payloads if they are add records of one layout
    (each name, TTR, TTL, priority and attempts block, of which a few may alternate,
    leaves its payload at the same place), read in place from the log's bytes; ``None``
    if not, or if a record would not decode as ``commands.decode_add_as_job`` decodes it
    alone."""
    decoded = _decode(run)
    return None if decoded is None else (decoded.ids, decoded.jobs)


class _Decoded(NamedTuple):
    """A run decoded (:func:`_decode`): the ids, the jobs, their creation times (and the
    earliest), names, TTLs and the priorities among them."""

    ids: list[bytes]
    jobs: list[Job]
    created: list[int]
    earliest_ns: int
    names: list[str]
    ttls: list[int]
    priorities: set[int]


def _decode(run: PayloadRun) -> _Decoded | None:
    """:func:`decode_add_run`, with what :func:`replay_add_run` asks of the jobs."""
    count, size, stride, data = run.count, run.size, run.stride, run.data
    start = run.start
    first = data[start : start + size]
    try:
        template = decode_add_as_job(first)
    except CommandDecodeError:
        return None
    if template is None:
        return None
    end = start + count * stride
    # NAME_LEN, NAME, the five varints and PAYLOAD_LEN: the "middle", before the payload
    payload_at = size - 2 * TIME_LEN - len(template.payload)
    time_at, created_at = size - 2 * TIME_LEN, size - TIME_LEN
    if (
        data[start:end:stride].count(_ADD) != count
        or data[start + time_at : end : stride].count(1) != count
        or data[start + created_at : end : stride].count(1) != count
        # the time's nanoseconds (an add's time is none: zero): surely below 10**9
        or max(data[start + time_at + 9 : end : stride]) >= 0x3B
    ):
        return None  # decoding them one by one decides
    # the middle's bytes that differ between the records (a name's last letter, mostly)
    varying = [
        k
        for k in range(1 + ID_LEN, payload_at)
        if (column := data[start + k : end : stride]).count(column[:1]) != count
    ]
    # each record whole (TIME and SIZE before the payload, the CRC after it): one stride,
    # read a field at a time (no tuple a record, nothing made that the jobs do not keep)
    head = stride - size - _CRC_LEN
    with memoryview(data) as whole, whole[start - head : end - head] as view:
        ids = _column(view, stride, head + 1, f"{ID_LEN}s")
        job_payloads = _column(view, stride, head + payload_at, f"{time_at - payload_at}s")
        created_n = _column(view, stride, head + created_at + 9, "i")
        seconds_at = start + created_at + 1
        one_second = all(
            column.count(column[:1]) == count
            for column in (data[seconds_at + k : end : stride] for k in range(8))
        )
        created_s = (
            [int.from_bytes(data[seconds_at : seconds_at + 8], "big", signed=True)]
            if one_second
            else _column(view, stride, head + created_at + 1, "q")
        )
        middles = (
            _column(view, stride, head + 1 + ID_LEN, f"{payload_at - 1 - ID_LEN}s")
            if len(varying) > 1
            else []
        )
    if min(created_n) < 0 or max(created_n) >= _NS_PER_S:
        return None  # decoding them one by one raises for the first
    # Go's seconds since year 1 to Unix nanoseconds, once for each second
    bases = {s: (s - GO_UNIX_OFFSET_S) * _NS_PER_S for s in set(created_s)}
    created = list(
        map(
            operator.add,
            repeat(bases[created_s[0]]) if one_second else map(bases.__getitem__, created_s),
            created_n,
        )
    )
    earliest_ns = min(created)
    if earliest_ns < MIN_TIME_NS or max(created) > MAX_TIME_NS:
        return None  # clamped one by one (or Go's zero time, kept)
    columns: list[Sequence[object]]
    if not varying:
        columns = [[value] * count for value in _fields(template)]
    else:
        # each middle's fields (one varying byte: the middles keyed by it)
        keys: Sequence[object] = middles or data[start + varying[0] : end : stride]
        by_key = {}
        for key in set(keys):
            at = start + keys.index(key) * stride
            middle = data[at + 1 + ID_LEN : at + payload_at]
            found = _middle_fields(middle, data, at, size)
            if found is None:
                return None
            by_key[key] = found
        columns = []
        for field, values in enumerate(zip(*by_key.values(), strict=True)):
            if len(set(values)) == 1:  # the same in every middle (all but the name, mostly)
                columns.append([values[0]] * count)
            else:
                value_of = {key: found[field] for key, found in by_key.items()}
                columns.append(list(map(value_of.__getitem__, keys)))
    name, priority, ttr_ms, ttl_ms, max_attempts, max_fails = columns
    jobs = list(
        map(
            Job,
            ids,
            name,
            job_payloads,
            priority,
            ttr_ms,
            ttl_ms,
            max_attempts,
            max_fails,
            repeat(None),
            created,
        )
    )
    return _Decoded(
        list(ids), jobs, created, earliest_ns, name, ttl_ms, set(priority)  # type: ignore[arg-type]
    )


def _middle_fields(middle: bytes, data: bytes, at: int, size: int) -> _Fields | None:
    """What the record at ``at`` (of ``size`` bytes, with this ``middle``) says (as
    :func:`_fields`), if it decodes with its payload where the middle ends; the same for
    every record of that size with that middle (kept for the next runs)."""
    key = (middle, size)
    found = _MIDDLES.get(key, _UNKNOWN)
    if found is not _UNKNOWN:
        return found  # type: ignore[return-value]
    try:
        job = decode_add_as_job(data[at : at + size])
    except CommandDecodeError:
        return None  # (not kept: the record's other bytes may be what is wrong)
    if job is None:
        return None
    fields = _fields(job) if size - 2 * TIME_LEN - len(job.payload) == 1 + ID_LEN + len(
        middle
    ) else None
    if len(_MIDDLES) >= _MIDDLES_LIMIT:
        _MIDDLES.clear()
    _MIDDLES[key] = fields
    return fields


def _column(view: memoryview, stride: int, at: int, code: str) -> list[Any]:
    """The field at ``at`` of each record of ``view`` (records of ``stride`` bytes), as
    ``struct`` reads ``code`` (big-endian): one C-level pass."""
    key = (stride, at, code)
    layout = _COLUMNS.get(key)
    if layout is None:
        layout = struct.Struct(f">{at}x{code}{stride - at - struct.calcsize('>' + code)}x")
        if len(_COLUMNS) >= _LAYOUTS_LIMIT:
            _COLUMNS.clear()
        _COLUMNS[key] = layout
    return list(chain.from_iterable(layout.iter_unpack(view)))


_Fields = tuple[str, int, int, int, int, int]
#: where ``_fields`` puts the TTL
_TTL_FIELD = 3
#: (a middle, the record's size) -> what it says (``_middle_fields``), across runs
_MIDDLES: dict[tuple[bytes, int], _Fields | None] = {}
_MIDDLES_LIMIT = 4096
_UNKNOWN = object()


def _fields(job: Job) -> _Fields:
    """What a record's middle says: the name, priority, TTR, TTL and attempts."""
    return job.name, job.priority, job.ttr_ms, job.ttl_ms, job.max_attempts, job.max_fails


def replay_add_run(
    engine: Engine, run: PayloadRun, now_ns: int, ready: ReadyJobs | None = None
) -> bool:
    """Replay ``run``, a run of add records, at once, as ``replay.replay_new_job``
    replays each (between ``begin_replay`` and ``end_replay``); whether it did. It does
    not (and changes nothing) if the run does not decode at once (:func:`decode_add_run`),
    an id is in the engine or twice in the run, a TTL has passed by ``now_ns``, or an undo
    journal is open: the caller replays the records one by one. The jobs entered are
    noted in ``ready``."""
    if run.count < MIN_RUN or not engine._replaying or engine._journal is not None:
        return False
    decoded = _decode(run)
    if decoded is None:
        return False
    ids, jobs, created, earliest_ns, names, ttl_column, priorities = decoded
    ttls = set(ttl_column)
    if len(ttls) == 1:
        (ttl_ms,) = ttls
        if ttl_ms and earliest_ns + ttl_ms * _NS_PER_MS <= now_ns:
            return False
    elif any(job.ttl_ms and job.created_ns + job.ttl_ms * _NS_PER_MS <= now_ns for job in jobs):
        return False
    table = engine.jobs
    if not table.keys().isdisjoint(ids):
        return False
    before = len(table)
    table.update(zip(ids, jobs, strict=True))
    if len(table) - before != len(ids):  # an id twice in the run: undone, one by one then
        for job_id in ids:
            table.pop(job_id, None)
        return False
    if ready is not None:
        ready.add_run(jobs, names, ttl_column, priorities, created)
    return True
