"""Replaying a run of ``add`` records at once: the bulk of a log of pending jobs.

A producer's adds share their name, TTR, TTL, priority and attempts, byte for byte, and
often their payload's size: records of one length that differ only in the id, the
payload and the times. :func:`decode_add_run` reads such a run with C loops (one unpack of
the joined payloads) into the jobs ``commands.decode_add_as_job`` makes one by one, and
:func:`replay_add_run` enters them as ``replay.replay_new_job`` would, one after another.
Either answers ``None`` where it would differ from the record-by-record path (a record of
another kind or layout, a duplicate id, an expired TTL, a time out of range, an open undo
journal): the caller then replays the run record by record, which also raises the error a
bad record gets. ``tests/engine/test_add_runs.py`` checks both against each other.
"""

from __future__ import annotations

import operator
import struct
from collections import deque
from collections.abc import Iterable
from itertools import repeat
from typing import TYPE_CHECKING

from jobq.cmdlog.gotime import GO_UNIX_OFFSET_S, TIME_LEN
from jobq.engine.commands import ID_LEN, AddJob, CommandDecodeError, decode_add_as_job
from jobq.engine.job import Job
from jobq.engine.limits import MAX_TIME_NS, MIN_TIME_NS

if TYPE_CHECKING:
    from jobq.engine.machine import Engine

_NS_PER_S = 1_000_000_000
_NS_PER_MS = 1_000_000
_GO_OFFSET_NS = GO_UNIX_OFFSET_S * _NS_PER_S
#: the fewest records worth the set-up
MIN_RUN = 4
_ADD = AddJob.TYPE
#: (where the payload starts, its length) -> the layout of the fields that differ
_LAYOUTS: dict[tuple[int, int], struct.Struct] = {}
_LAYOUTS_LIMIT = 256
_TTL = operator.attrgetter("ttl_ms")
_CREATED = operator.attrgetter("created_ns")


def decode_add_run(payloads: list[bytes]) -> tuple[list[bytes], list[Job]] | None:
    """The ids and the jobs of ``payloads`` if they are add records of one length and one
    layout (each name, TTR, TTL, priority and attempts block, of which a few may alternate,
    leaves its payload at the same place); ``None`` if not, or if a record would not decode
    as ``commands.decode_add_as_job`` decodes it alone."""
    count = len(payloads)
    first = payloads[0]
    try:
        template = decode_add_as_job(first)
    except CommandDecodeError:
        return None
    if template is None:
        return None
    size = len(first)
    joined = b"".join(payloads)
    if len(joined) != size * count or joined[::size].count(_ADD) != count:
        return None
    # NAME_LEN, NAME, the five varints and PAYLOAD_LEN: the "middle", before the payload
    payload_at = size - 2 * TIME_LEN - len(template.payload)
    layout = _LAYOUTS.get((payload_at, size))
    if layout is None:
        layout = struct.Struct(
            f">x{ID_LEN}s{payload_at - 1 - ID_LEN}s{size - payload_at - 2 * TIME_LEN}s"
            "BqiHBqiH"
        )
        if len(_LAYOUTS) < _LAYOUTS_LIMIT:
            _LAYOUTS[payload_at, size] = layout
    ids, middles, job_payloads, v1, _, time_n, _, v2, created_s, created_n, _ = zip(
        *layout.iter_unpack(joined), strict=True
    )
    if (
        v1.count(1) != count
        or v2.count(1) != count
        or min(time_n) < 0
        or max(time_n) >= _NS_PER_S
        or min(created_n) < 0
        or max(created_n) >= _NS_PER_S
    ):
        return None  # decoding them one by one raises for the first
    offset_ns = _GO_OFFSET_NS
    created = [s * _NS_PER_S + n - offset_ns for s, n in zip(created_s, created_n, strict=True)]
    if min(created) < MIN_TIME_NS or max(created) > MAX_TIME_NS:
        return None  # clamped one by one (or Go's zero time, kept)
    distinct = set(middles)
    if len(distinct) == 1:
        columns: tuple[Iterable[object], ...] = tuple(map(repeat, _fields(template)))
    else:
        fields = {}
        for middle in distinct:
            payload = payloads[middles.index(middle)]
            try:
                job = decode_add_as_job(payload)
            except CommandDecodeError:
                return None
            if job is None or len(payload) - 2 * TIME_LEN - len(job.payload) != payload_at:
                return None
            fields[middle] = _fields(job)
        columns = tuple(zip(*map(fields.__getitem__, middles), strict=True))
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
    deque(map(setattr, jobs, repeat("modified_ns"), created), maxlen=0)
    return list(ids), jobs


def _fields(job: Job) -> tuple[str, int, int, int, int, int]:
    """What a record's middle says: the name, priority, TTR, TTL and attempts."""
    return job.name, job.priority, job.ttr_ms, job.ttl_ms, job.max_attempts, job.max_fails


def replay_add_run(engine: Engine, payloads: list[bytes], now_ns: int) -> bool:
    """Replay ``payloads``, a run of add records, at once, as ``replay.replay_new_job``
    replays each (between ``begin_replay`` and ``end_replay``); whether it did. It does
    not (and changes nothing) if the run does not decode at once (:func:`decode_add_run`),
    an id is in the engine or twice in the run, a TTL has passed by ``now_ns``, or an undo
    journal is open: the caller replays the records one by one."""
    if len(payloads) < MIN_RUN or not engine._replaying or engine._journal is not None:
        return False
    decoded = decode_add_run(payloads)
    if decoded is None:
        return False
    ids, jobs = decoded
    ttls = set(map(_TTL, jobs))
    if len(ttls) == 1:
        (ttl_ms,) = ttls
        if ttl_ms and min(map(_CREATED, jobs)) + ttl_ms * _NS_PER_MS <= now_ns:
            return False
    elif any(job.ttl_ms and job.created_ns + job.ttl_ms * _NS_PER_MS <= now_ns for job in jobs):
        return False
    new = dict(zip(ids, jobs, strict=True))
    table = engine.jobs
    if len(new) != len(jobs) or not table.keys().isdisjoint(new):
        return False
    table.update(new)
    return True
