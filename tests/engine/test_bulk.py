"""Bulk actions in the engine: which jobs a selection's action changes, one record for the
whole action, applied the same way in replay, and all or nothing."""

from __future__ import annotations

from typing import Any

import pytest

from jobq.engine.commands import decode_command, encode_command
from jobq.engine.errors import InvalidArgument, TooManyJobs
from jobq.engine.extensions import BulkJobs, CancelJob, ExtensionDecodeError, decode_extension
from jobq.engine.job import Status
from jobq.engine.joblist import JobFilter
from jobq.engine.limits import MAX_BULK_JOBS
from jobq.engine.machine import Engine

from .helpers import MS, T0, jid
from .test_replay_property import snapshot

ETL = JobFilter(name="etl.*")


def world() -> Engine:
    """etl.a: 0 pending, 1 running (worker w), 2 paused, 3 succeeded; etl.b: 4 pending with
    a description; other: 5 pending."""
    engine = Engine()
    for n, name in enumerate(["etl.a"] * 4 + ["etl.b", "other"]):
        engine.submit(id=jid(n), name=name, description=f"disk {n}", now_ns=T0 + n * MS)
    engine.lease(["etl.a"], wait_timeout_ms=0, token=None, now_ns=T0 + 10 * MS, worker="w")
    assert engine.jobs[jid(0)].status is Status.RUNNING  # the oldest ready job
    engine.pause(jid(2), now_ns=T0 + 11 * MS)
    engine.complete(jid(3), b"", now_ns=T0 + 12 * MS)
    engine.drain()
    return engine


def test_cancel_changes_the_jobs_it_may_and_asks_running_ones() -> None:
    engine = world()
    outcome = engine.bulk("cancel", ETL, reason="bad", actor="ann", now_ns=T0 + 20 * MS)
    # selected: 0 (running), 1 and 4 (pending), 2 (paused), 3 (succeeded: cannot be canceled)
    assert (outcome.matched, outcome.count, outcome.requested) == (5, 4, 1)
    assert outcome.ids == [jid(0), jid(4), jid(1), jid(2)]  # the job list's order
    commands, _ = engine.drain()
    assert commands == [
        BulkJobs(action="cancel", ids=outcome.ids, reason="bad", actor="ann")
    ]
    statuses = {n: engine.jobs[jid(n)].status for n in range(6)}
    assert statuses == {
        0: Status.RUNNING, 1: Status.CANCELED, 2: Status.CANCELED, 3: Status.SUCCEEDED,
        4: Status.CANCELED, 5: Status.PENDING,
    }
    meta = engine.jobs[jid(0)].meta
    assert meta is not None and meta.cancel_requested and meta.reason == "bad"
    # again: only the running job's request stands, and it is not asked twice
    again = engine.bulk("cancel", ETL, now_ns=T0 + 21 * MS)
    assert (again.count, again.requested) == (0, 0)
    assert engine.drain()[0] == []


def test_pause_resume_delete_and_selection_constraints() -> None:
    engine = world()
    paused = engine.bulk("pause", JobFilter(text="DISK 4"), now_ns=T0 + 20 * MS)
    assert paused.ids == [jid(4)] and engine.jobs[jid(4)].status is Status.PAUSED
    by_worker = engine.bulk("pause", JobFilter(worker="w"), now_ns=T0 + 21 * MS)
    assert (by_worker.ids, by_worker.requested) == ([jid(0)], 1)
    resumed = engine.bulk("resume", JobFilter(name_prefix="etl."), now_ns=T0 + 22 * MS)
    # 2 and 4 paused: pending again; 0 running: its pause request withdrawn
    assert set(resumed.ids) == {jid(0), jid(2), jid(4)} and resumed.requested == 0
    meta = engine.jobs[jid(0)].meta
    assert meta is not None and not meta.pause_requested
    deleted = engine.bulk(
        "delete", JobFilter(ids=frozenset({jid(3), jid(5), jid(99)})), now_ns=T0 + 23 * MS
    )
    assert deleted.ids == [jid(5), jid(3)] and jid(3) not in engine.jobs
    assert jid(5) not in engine.jobs
    none = engine.bulk("delete", JobFilter(name="nothing.*"), now_ns=T0 + 24 * MS)
    assert (none.matched, none.count, none.ids) == (0, 0, [])
    with pytest.raises(InvalidArgument, match="Invalid action"):
        engine.bulk("explode", ETL, now_ns=T0)


def test_dry_run_and_limit_change_nothing() -> None:
    engine = world()
    before = snapshot(engine)
    dry = engine.bulk("cancel", ETL, dry_run=True, limit=1, now_ns=T0 + 20 * MS)
    assert (dry.count, dry.requested) == (4, 1)  # a dry run says, and is never refused
    with pytest.raises(TooManyJobs, match="cancel 4 jobs, more than the limit of 3"):
        engine.bulk("cancel", ETL, limit=3, now_ns=T0 + 20 * MS)
    assert engine.drain()[0] == [] and snapshot(engine) == before
    assert engine.bulk("cancel", ETL, limit=4, now_ns=T0 + 20 * MS).count == 4


def test_more_than_the_most_at_once_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import jobq.engine.bulk

    monkeypatch.setattr(jobq.engine.bulk, "MAX_BULK_JOBS", 3)
    engine = world()
    with pytest.raises(TooManyJobs, match="more than 3 at once"):
        engine.bulk("cancel", ETL, now_ns=T0 + 20 * MS)
    assert engine.drain()[0] == []
    assert MAX_BULK_JOBS == 100_000


def _replay(log: list[tuple[Any, int]], now_ns: int) -> Engine:
    engine = Engine()
    engine.begin_replay()
    for command, logged_ns in log:
        engine.replay(command, logged_ns=logged_ns, now_ns=now_ns)
    engine.end_replay()
    return engine


def test_the_record_replays_to_the_same_state() -> None:
    live = Engine()
    log: list[tuple[Any, int]] = []
    now = T0
    for n in range(8):
        live.submit(id=jid(n), name=f"etl.{n % 2}", description="x", now_ns=now + n * MS)
    live.lease(["etl.0"], wait_timeout_ms=0, token=None, now_ns=now + 9 * MS, worker="w")
    log += [(c, now + 9 * MS) for c in live.drain()[0]]
    steps = [
        ("pause", JobFilter(name="etl.0")),
        ("cancel", JobFilter(statuses=frozenset({Status.PAUSED}))),
        ("delete", JobFilter(name_prefix="etl.1", statuses=frozenset({Status.PENDING}))),
    ]
    for step, (action, selection) in enumerate(steps):
        at = now + (20 + step) * MS
        live.bulk(action, selection, reason=f"step {step}", actor="ann", now_ns=at)
        commands = live.drain()[0]
        assert [type(c) for c in commands] == [BulkJobs]
        # through the log's bytes, as replay reads them
        log += [(decode_command(encode_command(c)), at) for c in commands]
    replayed = _replay(log, now + 30 * MS)
    assert snapshot(replayed) == snapshot(live)
    assert [j.id for j in replayed.by_status.jobs(Status.CANCELED)] == [
        jid(2), jid(4), jid(6)
    ]


def test_replay_skips_jobs_gone_or_changed_since() -> None:
    engine = Engine()
    for n in range(3):
        engine.submit(id=jid(n), name="q", now_ns=T0)
    engine.drain()
    engine.begin_replay()
    engine.replay(
        BulkJobs(action="cancel", ids=[jid(0), jid(7), jid(1)]), logged_ns=T0, now_ns=T0
    )
    engine.replay(BulkJobs(action="cancel", ids=[jid(1), jid(2)]), logged_ns=T0, now_ns=T0)
    engine.replay(BulkJobs(action="rerun-maybe-later", ids=[jid(2)]), logged_ns=T0, now_ns=T0)
    engine.end_replay()
    assert [engine.jobs[jid(n)].status for n in range(3)] == [Status.CANCELED] * 3


def test_a_failed_write_rolls_the_whole_action_back() -> None:
    engine = world()
    before = snapshot(engine)
    engine.begin()
    engine.bulk("cancel", ETL, now_ns=T0 + 20 * MS)
    engine.bulk("delete", JobFilter(name="other"), now_ns=T0 + 20 * MS)
    assert engine.jobs[jid(1)].status is Status.CANCELED and jid(5) not in engine.jobs
    engine.rollback()
    assert snapshot(engine) == before
    assert engine.drain()[0] == []
    # and the indexes are whole: the same action again changes the same jobs
    assert engine.bulk("cancel", ETL, now_ns=T0 + 21 * MS).count == 4


def test_by_creator_is_one_record() -> None:
    engine = Engine()
    for n in range(4):
        engine.submit(
            id=jid(n), name="s", created_by=("schedule", "1") if n < 3 else None, now_ns=T0
        )
    engine.drain()
    assert engine.apply_to_created_by(
        "pause", ("schedule", "1"), reason="r", actor="a", now_ns=T0 + MS
    ) == 3
    commands = engine.drain()[0]
    assert len(commands) == 1 and isinstance(commands[0], BulkJobs)
    assert sorted(commands[0].ids) == [jid(0), jid(1), jid(2)]


def test_codec_and_liveness() -> None:
    command = BulkJobs(action="cancel", ids=[jid(1), jid(2)], reason="r", actor="a")
    payload = encode_command(command)
    assert payload[0] == 30 and decode_command(payload) == command
    for bad in (BulkJobs(action="cancel", ids=[b"short"]), BulkJobs(id=jid(1), action="x", ids=[])):
        with pytest.raises(ExtensionDecodeError):
            decode_extension(encode_command(bad))
    engine = Engine()
    engine.submit(id=jid(2), name="q", now_ns=T0)
    assert engine.command_keys(command) == (jid(1), jid(2))
    assert engine.command_is_live(command, T0)  # job 2 is there
    assert not engine.command_is_live(command, T0 - 1)  # logged before job 2 was made
    engine.delete(jid(2), now_ns=T0 + 1)
    engine.drain()
    assert not engine.command_is_live(command, T0)
    assert not engine.command_is_live(CancelJob(id=jid(2)), T0)


def test_rerun_makes_a_new_job_of_each_finished_job_and_replays() -> None:
    live = world()  # 3 succeeded; cancel 4 and 5 to have more finished jobs
    live.cancel(jid(4), now_ns=T0 + 13 * MS)
    live.cancel(jid(5), now_ns=T0 + 14 * MS)
    log: list[tuple[Any, int]] = [(c, T0 + 15 * MS) for c in live.drain()[0]]
    with pytest.raises(InvalidArgument, match="needs ids"):
        live.bulk("rerun", JobFilter(), now_ns=T0 + 20 * MS)
    made = [jid(100 + n) for n in range(3)]
    dry = live.bulk("rerun", JobFilter(name="*"), dry_run=True, now_ns=T0 + 20 * MS,
                    new_ids=lambda n: made[:n])
    assert (dry.matched, dry.count, dry.new_ids) == (6, 3, [])
    assert live.drain()[0] == []
    outcome = live.bulk("rerun", JobFilter(name="*"), reason="again", actor="ann",
                        now_ns=T0 + 20 * MS, new_ids=lambda n: made[:n])
    assert (outcome.count, outcome.requested) == (3, 0)
    assert set(outcome.ids) == {jid(3), jid(4), jid(5)} and outcome.new_ids == made
    commands = live.drain()[0]
    assert [type(c).__name__ for c in commands] == ["SubmitJob"] * 3  # one batch of submits
    for original, new in zip(outcome.ids, made, strict=True):
        job, old = live.jobs[new], live.jobs[original]
        assert job.status is Status.PENDING and job.name == old.name
        assert job.meta is not None and job.meta.rerun_of == original
        assert old.meta is not None and new in old.meta.reruns
    # an id already taken, or too few ids, is refused and changes nothing
    with pytest.raises(InvalidArgument, match="Invalid new ids"):
        live.bulk("rerun", JobFilter(statuses=frozenset({Status.CANCELED})),
                  now_ns=T0 + 21 * MS, new_ids=lambda n: [jid(100)] * n)
    assert live.drain()[0] == []
    # replay of the submits alone reaches the same state (they stand on their own)
    replayed = Engine()
    replayed.begin_replay()
    for command, logged_ns in [
        *[(c, T0) for c in _world_log()], *log,
        *[(decode_command(encode_command(c)), T0 + 20 * MS) for c in commands],
    ]:
        replayed.replay(command, logged_ns=logged_ns, now_ns=T0 + 30 * MS)
    replayed.end_replay()
    for new in made:
        meta = replayed.jobs[new].meta
        assert meta is not None and meta.rerun_of == live.jobs[new].meta.rerun_of  # type: ignore[union-attr]
    assert {n: replayed.jobs[jid(n)].meta.reruns for n in (3, 4, 5)} == {  # type: ignore[union-attr]
        n: live.jobs[jid(n)].meta.reruns for n in (3, 4, 5)  # type: ignore[union-attr]
    }


def _world_log() -> list[Any]:
    """The commands :func:`world` logs, in order."""
    engine = Engine()
    for n, name in enumerate(["etl.a"] * 4 + ["etl.b", "other"]):
        engine.submit(id=jid(n), name=name, description=f"disk {n}", now_ns=T0 + n * MS)
    engine.lease(["etl.a"], wait_timeout_ms=0, token=None, now_ns=T0 + 10 * MS, worker="w")
    engine.pause(jid(2), now_ns=T0 + 11 * MS)
    engine.complete(jid(3), b"", now_ns=T0 + 12 * MS)
    return engine.drain()[0]
