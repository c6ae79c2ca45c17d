"""Stateful property: random operations, clock advances and failed log writes, then a crash
at a random point and a replay. The replayed state equals the state the acknowledged
(logged) commands produced."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from jobq.engine.backoff import Backoff
from jobq.engine.errors import EngineError
from jobq.engine.job import Job, JobMeta, Status
from jobq.engine.joblist import JobFilter
from jobq.engine.machine import Engine, SchedulerOptions

from .helpers import T0, jid

N_IDS = 6
#: a short pace and a small cap, so waits and passes happen within a test's time
OPTIONS = SchedulerOptions(pace_ms=150, max_per_pass=2)
#: a replayed engine's scheduler: the live one's, but it fires nothing at the start's tick.
#: The live scheduler looks at a schedule waiting for its previous run every ``pace_ms``:
#: one that came due just before the crash may not have been looked at yet, and would fire
#: at the start (once: the replayed state, compared below, says where each schedule is)
REPLAYED_OPTIONS = SchedulerOptions(pace_ms=150, max_per_pass=2, initial_delay_ms=10**9)
NAMES = ("a", "b")
ONE_JOB = b'{"name":"a","ttr_ms":100}'
CHAIN = (
    b'{"name":"a","ttr_ms":100,"then":[{"name":"b","ttr_ms":100},'
    b'{"name":"a","ttr_ms":100,"after_any":true}]}'
)

AFTER = st.tuples(
    st.just("after"),
    st.integers(0, N_IDS - 1),
    st.sampled_from(NAMES),
    st.lists(st.integers(0, N_IDS - 1), min_size=1, max_size=3),
    st.booleans(),
    st.sampled_from([0, 700]),
)

op = st.one_of(
    st.tuples(
        st.just("add"),
        st.integers(0, N_IDS - 1),
        st.sampled_from(NAMES),
        st.integers(-2, 2),
        st.integers(0, 3),
        st.integers(0, 3),
        st.sampled_from([50, 200, 1000]),
        st.sampled_from([100, 500, 3000]),
    ),
    st.tuples(
        st.just("schedule"), st.integers(0, N_IDS - 1), st.sampled_from(NAMES), st.integers(0, 400)
    ),
    st.tuples(st.just("lease"), st.sampled_from([("a",), ("b",), ("a", "b")])),
    st.tuples(st.just("complete"), st.integers(0, N_IDS - 1)),
    st.tuples(st.just("fail"), st.integers(0, N_IDS - 1)),
    st.tuples(st.just("delete"), st.integers(0, N_IDS - 1)),
    st.tuples(st.just("advance"), st.integers(0, 400)),
    st.tuples(
        st.just("submit"),
        st.integers(0, N_IDS - 1),
        st.sampled_from(NAMES),
        st.sampled_from([0, 3000]),
        st.sampled_from([None, ("schedule", "1")]),
        # retries: at once, or waiting a backoff (with jitter) after a fail or a timeout
        st.sampled_from([None, Backoff(100, 2.0, 400), Backoff(0, 1.0, 0)]),
        st.integers(0, 2),
    ),
    st.tuples(st.just("rerun"), st.integers(0, N_IDS - 1), st.integers(0, N_IDS - 1)),
    # a job after others (dependencies): waits, released, canceled, or after any outcome
    # (three times as likely as the others: most draws name a job that does not exist)
    *[AFTER] * 3,
    st.tuples(st.just("xlease"), st.sampled_from(["w1", "w2"]), st.sampled_from(NAMES)),
    st.tuples(
        st.just("heartbeat"),
        st.integers(0, N_IDS - 1),
        st.sampled_from(["w1", "w2"]),
        st.sampled_from([None, b"ck"]),
    ),
    st.tuples(st.just("release"), st.integers(0, N_IDS - 1), st.sampled_from(["w1", "w2"])),
    st.tuples(st.sampled_from(["pause", "resume", "cancel"]), st.integers(0, N_IDS - 1)),
    st.tuples(st.just("by_creator"), st.sampled_from(["pause", "resume", "cancel"])),
    # a bulk action: one record for every job of a selection
    st.tuples(
        st.just("bulk"),
        st.sampled_from(["pause", "resume", "cancel", "delete"]),
        st.sampled_from(
            [
                JobFilter(name="a"),
                JobFilter(name="*"),
                JobFilter(statuses=frozenset({Status.PENDING, Status.RUNNING})),
                JobFilter(name_prefix="b", statuses=frozenset({Status.PAUSED})),
                JobFilter(text="D"),
                JobFilter(worker="w1"),
                JobFilter(ids=frozenset({jid(0), jid(1), jid(2)})),
                JobFilter(created_by=("schedule", "1")),
            ]
        ),
    ),
    # schedules: created, paused, resumed, triggered, dropped; their jobs end
    st.tuples(
        st.just("screate"),
        st.sampled_from(["s1", "s2"]),
        st.sampled_from([("every", 200), ("every", 700), ("cron", "* * * * * *"), ("at", 300)]),
        st.sampled_from(["wait", "no_wait", "skip", "buffer_one"]),
        st.sampled_from(["retry_sched", "retry_soon", "pause_sched"]),
        # one job a run, or a chain of three (the last after any outcome)
        st.sampled_from([ONE_JOB, CHAIN]),
    ),
    st.tuples(
        st.sampled_from(["spause", "sresume", "strigger", "sdrop"]), st.sampled_from(["s1", "s2"])
    ),
    st.tuples(st.just("sbackfill"), st.sampled_from(["s1", "s2"]), st.integers(0, 1500)),
    # a run ends (True: succeeds) or, False for "sdelete", an ended run is deleted
    st.tuples(st.sampled_from(["sjob", "sdelete"]), st.booleans()),
)

batch = st.tuples(st.lists(op, max_size=5), st.booleans())


def snapshot(engine: Engine) -> dict[str, Any]:
    jobs = {
        job_id: (
            job.name,
            job.status,
            job.attempts,
            job.fails,
            job.result,
            job.priority,
            job.lease_expires_ns,
            job.waiting_for_time,
            job.payload,
            job.created_ns,
            job.max_attempts,
            job.max_fails,
            job.ttr_ms,
            job.ttl_ms,
            job.time_ns,
            _meta(job),
        )
        for job_id, job in engine.jobs.items()
    }
    order = {name: [j.id for j in queue.ready_jobs(100)] for name, queue in engine.queues.items()}
    by_status = {status.value: [j.id for j in engine.by_status.jobs(status)] for status in Status}
    counts = {
        name: (queue.ready_len, len(queue.scheduled), len(queue.running))
        for name, queue in engine.queues.items()
    }
    # evicted-jobs is a counter since start (as in workq), not replayed state
    return {
        "by_status": by_status,
        "by_created_by": {k: set(v) for k, v in engine.by_created_by.items()},
        "by_name": {name: [j.id for j in engine.by_name.jobs(name)] for name in engine.by_name},
        "dependents": {k: set(v) for k, v in engine.dependents.items()},
        "jobs": jobs,
        "order": {k: v for k, v in order.items() if v},
        "counts": {k: v for k, v in counts.items() if v != (0, 0, 0)},
        # a queue exists while it holds a job or a waiting lease, live and replayed alike
        "queues": sorted(engine.queues),
        "schedules": {
            sid: (
                sc.name,
                sc.next_run_ns,
                sc.paused,
                sc.wait,
                sc.on_error,
                sc.fire_seq,
                sc.jobs_started,
                sc.skipped,
                sc.missed,
                sc.last_run_ns,
                sc.last_job_id,
                sc.last_outcome,
                sc.consecutive_failures,
                sorted(sc.running),
                sc.pending_buffered,
                list(sc.changes),
                sc.one_off_by,
                sc.next_run_by,
                sc.pending_buffered_by,
                sc.outcome_by,
            )
            for sid, sc in engine.schedules.items()
        },
        "next_schedule_id": engine.next_schedule_id,
        "schedule_counters": (
            engine.schedule_jobs_started,
            engine.schedule_runs_skipped,
            engine.schedule_runs_missed,
        ),
    }


def _meta(job: Job) -> tuple[object, ...] | None:
    meta = job.meta
    if meta is None:
        return None
    return tuple(getattr(meta, slot) for slot in JobMeta.__slots__)


def _schedule_runs(engine: Engine, *, finished: bool) -> list[bytes]:
    """The jobs schedules made, finished or not, in id order."""
    return sorted(
        job_id
        for key, ids in engine.by_created_by.items()
        if key[0] == "schedule"
        for job_id in ids
        if engine.jobs[job_id].status.finished is finished
    )


def perform(engine: Engine, now_ns: int, operation: tuple[Any, ...]) -> int:
    kind = operation[0]
    try:
        if kind == "add":
            _, n, name, prio, max_att, max_fails, ttr, ttl = operation
            engine.add(
                id=jid(n),
                name=name,
                ttr_ms=ttr,
                ttl_ms=ttl,
                payload=b"%d" % n,
                priority=prio,
                max_attempts=max_att,
                max_fails=max_fails,
                now_ns=now_ns,
            )
        elif kind == "schedule":
            _, n, name, delay = operation
            engine.schedule(
                id=jid(n),
                name=name,
                ttr_ms=100,
                ttl_ms=1000,
                time_ns=now_ns + delay * 1_000_000,
                payload=b"",
                now_ns=now_ns,
            )
        elif kind == "lease":
            engine.lease(operation[1], wait_timeout_ms=0, token=None, now_ns=now_ns)
        elif kind == "complete":
            engine.complete(jid(operation[1]), b"ok", now_ns=now_ns)
        elif kind == "fail":
            engine.fail(jid(operation[1]), b"no", now_ns=now_ns)
        elif kind == "delete":
            engine.delete(jid(operation[1]), now_ns=now_ns)
        elif kind == "advance":
            now_ns += operation[1] * 1_000_000
        elif kind == "submit":
            _, n, name, ttl, created_by, retry_backoff, max_fails = operation
            engine.submit(
                id=jid(n),
                name=name,
                ttr_ms=100,
                ttl_ms=ttl,
                payload=b"s",
                description="d",
                created_by=created_by,
                max_fails=max_fails,
                retry_backoff=retry_backoff,
                now_ns=now_ns,
            )
        elif kind == "after":
            _, n, name, deps, after_any, ttl = operation
            engine.submit(
                id=jid(n),
                name=name,
                ttr_ms=100,
                ttl_ms=ttl,
                payload=b"d",
                after=[jid(d) for d in deps],
                after_any=after_any,
                now_ns=now_ns,
            )
        elif kind == "rerun":
            engine.rerun(jid(operation[1]), new_id=jid(operation[2]), now_ns=now_ns)
        elif kind == "xlease":
            engine.lease(
                [operation[2]], wait_timeout_ms=0, token=None, now_ns=now_ns, worker=operation[1]
            )
        elif kind == "heartbeat":
            _, n, worker, checkpoint = operation
            engine.heartbeat(
                jid(n), worker=worker, fraction_completed=0.5, checkpoint=checkpoint, now_ns=now_ns
            )
        elif kind == "release":
            engine.release(jid(operation[1]), worker=operation[2], now_ns=now_ns)
        elif kind in ("pause", "resume", "cancel"):
            getattr(engine, kind)(jid(operation[1]), reason="r", now_ns=now_ns)
        elif kind == "screate":
            _, name, (spec_kind, value), wait, on_error, args = operation
            spec: dict[str, Any] = {
                "every": {"every_ms": value},
                "cron": {"cron": value},
                "at": {"at_ns": now_ns + value * 1_000_000 if spec_kind == "at" else 0},
            }[spec_kind]
            engine.create_schedule(
                name=name,
                args=args,
                wait=wait,
                on_error=on_error,
                now_ns=now_ns,
                **spec,
            )
        elif kind == "spause":
            engine.pause_schedule(operation[1], reason="r", now_ns=now_ns)
        elif kind == "sresume":
            engine.resume_schedule(operation[1], reason="r", now_ns=now_ns)
        elif kind == "strigger":
            engine.trigger_schedule(operation[1], now_ns=now_ns)
        elif kind == "sdrop":
            engine.drop_schedule(operation[1], now_ns=now_ns)
        elif kind == "sbackfill":
            engine.backfill_schedule(
                operation[1], from_ns=now_ns - operation[2] * 1_000_000, to_ns=now_ns, now_ns=now_ns
            )
        elif kind == "sdelete":
            ended = _schedule_runs(engine, finished=True)
            if ended:
                engine.delete(ended[0] if operation[1] else ended[-1], now_ns=now_ns)
        elif kind == "sjob":
            made = _schedule_runs(engine, finished=False)
            if made:
                if operation[1]:
                    engine.complete(made[0], b"ok", now_ns=now_ns)
                else:
                    engine.fail(made[0], b"no", now_ns=now_ns)
        elif kind == "bulk":
            engine.bulk(operation[1], operation[2], reason="r", actor="x", now_ns=now_ns)
        elif kind == "by_creator":
            engine.apply_to_created_by(
                operation[1], ("schedule", "1"), reason="", actor="", now_ns=now_ns
            )
    except EngineError:
        pass
    engine.tick(now_ns)
    return now_ns


@settings(max_examples=300, deadline=None)
@given(st.lists(batch, max_size=12), st.data())
def test_replay_after_crash_equals_acknowledged_state(batches, data) -> None:
    engine = Engine(scheduler=OPTIONS, started_ns=T0)
    now_ns = T0
    log: list[tuple[Any, int]] = []
    snapshots = [(0, now_ns, snapshot(engine))]
    for operations, write_fails in batches:
        batch_start = len(log)
        engine.begin()
        for operation in operations:
            now_ns = perform(engine, now_ns, operation)
            # each command is logged at the time it was made
            for command in engine.drain()[0]:
                log.append((command, now_ns))
        if write_fails:
            # the write failed: nothing of this batch was acknowledged
            del log[batch_start:]
            engine.rollback()
            engine.tick(now_ns)
            for command in engine.drain()[0]:
                log.append((command, now_ns))
        else:
            engine.commit()
        snapshots.append((len(log), now_ns, snapshot(engine)))

    crash_at = data.draw(st.integers(0, len(snapshots) - 1))
    n_logged, crash_ns, expected = snapshots[crash_at]
    replayed = Engine(scheduler=REPLAYED_OPTIONS, started_ns=T0)
    replayed.begin_replay()
    for command, logged_ns in log[:n_logged]:
        replayed.replay(command, logged_ns=logged_ns, now_ns=crash_ns)
    replayed.end_replay()
    # the server ticks once after replay; whatever was due was logged before the crash
    replayed.tick(crash_ns)
    assert replayed.drain()[0] == []
    assert snapshot(replayed) == expected
