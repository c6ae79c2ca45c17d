"""Cleaning the command log never changes what a full replay gives: the cleaner drops only
records replay no longer needs, judged by the engine as it is now, segment by segment (and
a segment not worth rewriting keeps its dead records, so a later record that undoes one of
them must stay too: ``cleaner.py``)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobq.cmdlog.log import CommandLog
from jobq.engine.commands import encode_command
from jobq.engine.machine import Engine
from jobq.server.app import _liveness
from jobq.server.replay import replay
from tests.engine.helpers import MS, T0
from tests.engine.test_replay_property import (
    ONE_JOB,
    OPTIONS,
    REPLAYED_OPTIONS,
    op,
    perform,
    snapshot,
)

S = 1000 * MS


def _jid(n: int) -> bytes:
    return uuid.UUID(int=n).bytes


def _replayed(directory: str, now_ns: int) -> dict[str, Any]:
    """The state a start at ``now_ns`` replays from ``directory``, after the start's tick
    (a job scheduled for then becomes ready): whatever else came due was logged before."""
    engine = Engine(scheduler=REPLAYED_OPTIONS, started_ns=T0)
    with CommandLog.open(directory, sync="os") as log:
        replay(log, engine, now_ns)
    engine.tick(now_ns)
    assert engine.drain()[0] == []
    return snapshot(engine)


def test_a_deleted_job_stays_deleted_when_its_add_stays_in_a_segment_not_rewritten(
    tmp_path: Path,
) -> None:
    # segment 1: ten adds, one of them (job 0) deleted later: one dead record of ten, not
    # worth a rewrite; segment 2: that delete, then jobs added and deleted (all dead: worth
    # a rewrite). Dropping the delete there would bring job 0 back in a full replay.
    directory = str(tmp_path / "cmdlog")
    engine = Engine()
    now_ns = T0
    with CommandLog.open(directory, sync="os", segment_size_bytes=878) as log:

        def commit() -> None:
            log.write([encode_command(c) for c in engine.drain()[0]], now_ns)

        for n in range(10):
            engine.add(
                id=_jid(n), name="q", ttr_ms=60_000, ttl_ms=0, payload=b"x" * 10, now_ns=now_ns
            )
            commit()
        assert log.position()[0] == 2  # the tenth add filled segment 1
        now_ns += S
        engine.delete(_jid(0), now_ns=now_ns)
        commit()
        n = 100
        while log.position()[0] == 2:
            engine.add(
                id=_jid(n), name="q", ttr_ms=60_000, ttl_ms=0, payload=b"x" * 10, now_ns=now_ns
            )
            commit()
            engine.delete(_jid(n), now_ns=now_ns)
            commit()
            n += 1
        # job 0's id used again (later: records logged before a job was created are not
        # its own): the new job must survive, and be the only one
        now_ns += S
        engine.add(id=_jid(0), name="q", ttr_ms=60_000, ttl_ms=0, payload=b"new", now_ns=now_ns)
        commit()
        keep, expires_at, keys = _liveness(engine)
        stats = log.clean(keep, expires_at=expires_at, keys=keys, now_ns=now_ns)
    assert (stats.segments_skipped, stats.segments_rewritten) == (1, 1)
    replayed = _replayed(directory, now_ns)
    assert replayed["jobs"][_jid(0)][8] == b"new"  # the payload: the new job, not the old
    assert replayed == snapshot(engine)


def test_a_record_kept_for_one_key_keeps_the_later_records_of_its_others(
    tmp_path: Path,
) -> None:
    # segment 1 keeps a dead schedule creation (not worth a rewrite), so the dead firing
    # in segment 2 stays for the schedule's number; the firing created a job, canceled and
    # deleted in segment 3: dropping those brought the job back in a full replay
    directory = str(tmp_path / "cmdlog")
    live = Engine(scheduler=OPTIONS, started_ns=T0)
    now_ns = T0
    keep, expires_at, keys = _liveness(live)
    with CommandLog.open(directory, sync="os", segment_size_bytes=150) as log:
        for operation in [
            ("schedule", 0, "a", 0),
            ("pause", 0),
            ("screate", "s1", ("every", 200), "wait", "retry_sched", ONE_JOB),
            ("advance", 200),  # the firing: its job, in segment 2
            ("complete", 0),
            ("sdrop", "s1"),
            ("by_creator", "cancel"),
            ("sdelete", False),
        ]:
            now_ns = perform(live, now_ns, operation)
            log.write([encode_command(c) for c in live.drain()[0]], now_ns)
        assert log.position()[0] == 4
        log.clean(keep, expires_at=expires_at, keys=keys, now_ns=now_ns)
    assert live.by_created_by == {}
    replayed = _replayed(directory, now_ns)
    replayed.pop("schedule_counters")
    expected = snapshot(live)
    expected.pop("schedule_counters")
    assert replayed == expected


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(st.tuples(st.lists(op, max_size=8), st.booleans()), max_size=10),
    st.sampled_from([150, 400, 1200]),
)
def test_cleaning_at_any_point_leaves_the_state_a_full_replay_gives(
    tmp_path_factory: Any, rounds: list[tuple[list[Any], bool]], segment_size_bytes: int
) -> None:
    # random jobs and schedules (ids used again, deletions, heartbeats, schedules dropped),
    # logged into small segments, with a cleaner pass now and then; then a full replay
    directory = str(tmp_path_factory.mktemp("clean") / "cmdlog")
    live = Engine(scheduler=OPTIONS, started_ns=T0)
    now_ns = T0
    keep, expires_at, keys = _liveness(live)
    with CommandLog.open(directory, sync="os", segment_size_bytes=segment_size_bytes) as log:
        for operations, clean in rounds:
            for operation in operations:
                now_ns = perform(live, now_ns, operation)
                commands = live.drain()[0]
                if commands:
                    log.write([encode_command(c) for c in commands], now_ns)
            if clean:
                log.clean(keep, expires_at=expires_at, keys=keys, now_ns=now_ns)
    expected = snapshot(live)
    got = _replayed(directory, now_ns)
    # the counts of runs started, skipped and missed over all schedules are statistics,
    # replayed from the records of runs: a dropped schedule's records go, and their counts
    # with them
    counters = got.pop("schedule_counters")
    assert all(a <= b for a, b in zip(counters, expected.pop("schedule_counters"), strict=True))
    assert got == expected
