"""``/metrics`` in Prometheus' text format (docs/http.md lists them).

Gauges are read from the engine, the core and the command log when Prometheus scrapes (a
custom collector, on the event loop, so the reads see a consistent state); nothing is added
to the engine's hot paths. Counters of leases, adoptions, heartbeats and lease timeouts are
counted from the commands each batch logs (one pass over a batch's commands), and so are
the job duration and queue wait histograms (``job_metrics.py``); the fsync latency
histogram times the log's fsync calls in the log's own thread. Per-schedule gauges carry
the schedule's name: one series (five for the last run's status) per schedule.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from jobq import __version__
from jobq.engine.ceiling import UNLIMITED
from jobq.engine.commands import StartAttempt, TimeoutAttempt
from jobq.engine.extensions import Heartbeat, LeaseBy
from jobq.engine.job import Status
from jobq.http.job_metrics import JobTimings
from jobq.server.core import Core
from jobq.server.workers import MAX_WORKERS

if TYPE_CHECKING:
    from jobq.server.replication.sync_gate import SyncGate

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: most jobs the per-name breakdown walks per scrape; above this only per-queue counts
#: (pending and running) are given by name
MAX_JOBS_BY_NAME = 200_000
#: most timed-out jobs remembered for counting adoptions
_MAX_TIMED_OUT = 100_000

FSYNC_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class CommandCounts:
    """Counts of lease, heartbeat and timeout commands the core logs.

    Installed as one of the core's ``command_observers``: the core calls it with each
    batch's commands once the log holds them, and this counts them by type. An adoption is
    a lease of a job whose previous attempt timed out (its worker died or stalled).
    """

    def __init__(self) -> None:
        self.leases = 0
        self.heartbeats = 0
        self.checkpoints = 0
        self.timeouts = 0
        self.adoptions = 0
        self._timed_out: dict[bytes, None] = {}

    def observe(self, commands: Iterable[object]) -> None:
        for command in commands:
            kind = type(command)
            if kind is Heartbeat:
                self.heartbeats += 1
                if command.checkpoint is not None:  # type: ignore[attr-defined]
                    self.checkpoints += 1
            elif kind is LeaseBy or kind is StartAttempt:
                self.leases += 1
                job_id = command.id  # type: ignore[attr-defined]
                if job_id in self._timed_out:
                    del self._timed_out[job_id]
                    self.adoptions += 1
            elif kind is TimeoutAttempt:
                self.timeouts += 1
                self._timed_out[command.id] = None  # type: ignore[attr-defined]
                if len(self._timed_out) > _MAX_TIMED_OUT:
                    self._timed_out.pop(next(iter(self._timed_out)))


def install_command_counts(core: Core) -> CommandCounts:
    """Count the commands ``core`` logs (idempotent per core)."""
    existing = core.command_counts
    if isinstance(existing, CommandCounts):
        return existing
    counts = CommandCounts()
    core.command_observers.append(counts.observe)
    core.command_counts = counts
    return counts


def instrument_fsync(core: Core, histogram: Histogram) -> bool:
    """Time every fsync of the core's command log into ``histogram``; False without a log."""
    log = core.log
    appender = getattr(log, "appender", None)
    fsync = getattr(appender, "_fsync", None)
    if appender is None or fsync is None or getattr(fsync, "_jobq_timed", False):
        return False

    def timed_fsync(fd: int) -> None:
        start = time.perf_counter()
        try:
            fsync(fd)
        finally:
            histogram.observe(time.perf_counter() - start)

    timed_fsync._jobq_timed = True  # type: ignore[attr-defined]
    appender._fsync = timed_fsync
    return True


class JobqCollector(Collector):
    """Reads the server's state at scrape time."""

    def __init__(self, core: Core, counts: CommandCounts) -> None:
        self.core = core
        self.counts = counts

    def collect(self) -> Iterable[Metric]:
        core = self.core
        engine = core.engine
        info = GaugeMetricFamily("jobq_info", "The jobq server", labels=["version"])
        info.add_metric([__version__], 1)
        yield info
        yield GaugeMetricFamily(
            "jobq_start_time_seconds", "When the server started (Unix time)",
            value=core.started_ns / 1e9,
        )
        yield GaugeMetricFamily(
            "jobq_connections", "Open TCP client connections", value=len(core.connections)
        )
        yield GaugeMetricFamily(
            "jobq_connections_pending", "TCP connections waiting to authenticate",
            value=len(core.gate.pending) if core.gate is not None else 0,
        )
        yield CounterMetricFamily(
            "jobq_auth_failures", "Failed authentications (wrong tokens, TCP and HTTP; TCP "
            "connections that sent none in time)", value=core.audit.failures_total,
        )

        by_status = GaugeMetricFamily("jobq_jobs", "Jobs by status", labels=["status"])
        for status in Status:
            by_status.add_metric([status.value], engine.by_status.count(status))
        yield by_status
        yield from self._jobs_by_name()

        yield GaugeMetricFamily(
            "jobq_leases_active", "Jobs leased to a worker now",
            value=engine.by_status.count(Status.RUNNING),
        )
        counts = self.counts
        yield CounterMetricFamily("jobq_leases_granted", "Leases granted", value=counts.leases)
        yield CounterMetricFamily(
            "jobq_adoptions", "Leases of jobs whose previous attempt timed out",
            value=counts.adoptions,
        )
        yield CounterMetricFamily(
            "jobq_lease_timeouts", "Attempts whose lease ran out", value=counts.timeouts
        )
        yield CounterMetricFamily("jobq_heartbeats", "Heartbeats", value=counts.heartbeats)
        yield CounterMetricFamily(
            "jobq_checkpoints", "Heartbeats carrying a checkpoint", value=counts.checkpoints
        )
        yield CounterMetricFamily(
            "jobq_evicted_jobs", "Incomplete jobs evicted by TTL", value=engine.evicted_jobs
        )
        yield from self._workers()
        yield from self._schedules()
        yield from self._log()
        yield from self._limits()
        yield from self._replication()

    def _replication(self) -> Iterable[Metric]:
        """Lag on either side (docs/ha.md): a standby's behind its primary, a primary's
        standbys' behind it."""
        replication = self.core.replication
        if replication is None:
            return
        yield GaugeMetricFamily(
            "jobq_replication_standby", "1 on a standby, 0 on a primary",
            value=1 if replication.standby else 0,
        )
        yield GaugeMetricFamily(
            "jobq_replication_epoch", "The newest epoch in this server's log (0: none)",
            value=replication.epoch,
        )
        yield GaugeMetricFamily(
            "jobq_replication_fenced", "1 on a deposed primary that acknowledges nothing",
            value=1 if replication.fenced and not replication.standby else 0,
        )
        if replication.standby:
            yield GaugeMetricFamily(
                "jobq_replication_connected", "1 while the stream from the primary is open",
                value=1 if replication.connected else 0,
            )
            if replication.records_behind is not None:
                yield GaugeMetricFamily(
                    "jobq_replication_records_behind",
                    "Records the primary logged that this standby does not hold yet",
                    value=replication.records_behind,
                )
            yield GaugeMetricFamily(
                "jobq_replication_seconds_behind",
                "How far this standby's newest record is behind the primary's clock",
                value=replication.standby_seconds_behind(),
            )
            yield CounterMetricFamily(
                "jobq_replication_records_applied", "Records received from the primary",
                value=replication.records_applied,
            )
            return
        feeds = [feed.status() for feed in replication.feeds]
        yield GaugeMetricFamily(
            "jobq_replication_standbys", "Standbys streaming from this primary", value=len(feeds)
        )
        records = GaugeMetricFamily(
            "jobq_replication_standby_records_behind",
            "Records a standby has not acknowledged yet", labels=["standby"],
        )
        seconds = GaugeMetricFamily(
            "jobq_replication_standby_seconds_behind",
            "Age of the oldest record a standby has not acknowledged", labels=["standby"],
        )
        for feed in feeds:
            label = str(feed["address"])
            if isinstance(feed["records_behind"], int):
                records.add_metric([label], feed["records_behind"])
            if isinstance(feed["seconds_behind"], float):
                seconds.add_metric([label], feed["seconds_behind"])
        yield records
        yield seconds
        yield from self._sync_gate(replication.sync_gate)

    @staticmethod
    def _sync_gate(gate: SyncGate | None) -> Iterable[Metric]:
        """``--sync-replicas``: what waits for the standbys, and since when."""
        if gate is None:
            return
        batches, replies, oldest_s = gate.waiting()
        yield GaugeMetricFamily(
            "jobq_replication_sync_required", "Standbys that must hold a change (--sync-replicas)",
            value=gate.required,
        )
        yield GaugeMetricFamily(
            "jobq_replication_sync_standbys", "Standbys acknowledging fsynced records now",
            value=gate.standbys_synced(),
        )
        yield GaugeMetricFamily(
            "jobq_replication_sync_waiting_batches",
            "Batches whose replies wait for the standbys", value=batches,
        )
        yield GaugeMetricFamily(
            "jobq_replication_sync_waiting_replies",
            "Replies and woken waits held until the standbys hold their changes", value=replies,
        )
        yield GaugeMetricFamily(
            "jobq_replication_sync_oldest_wait_seconds",
            "How long the oldest held batch has waited for the standbys", value=oldest_s,
        )
        yield CounterMetricFamily(
            "jobq_replication_sync_wait_seconds",
            "Time batches waited for the standbys, summed", value=gate.wait_seconds_total,
        )
        yield CounterMetricFamily(
            "jobq_replication_sync_batches_waited", "Batches that waited for the standbys",
            value=gate.batches_waited,
        )

    def _jobs_by_name(self) -> Iterable[Metric]:
        engine = self.core.engine
        family = GaugeMetricFamily(
            "jobq_jobs_by_name", "Jobs by name and status", labels=["name", "status"]
        )
        if len(engine.jobs) <= MAX_JOBS_BY_NAME:
            tally: Counter[tuple[str, str]] = Counter(
                (job.name, job.status.value) for job in engine.jobs.values()
            )
            for (name, status), n in sorted(tally.items()):
                family.add_metric([name, status], n)
        else:
            for name, queue in sorted(engine.queues.items()):
                family.add_metric([name, "pending"], queue.ready_len + len(queue.scheduled))
                family.add_metric([name, "running"], len(queue.running))
        yield family

    def _workers(self) -> Iterable[Metric]:
        """Live workers, and by job name served: a name of a queue (jobs pending or running,
        a lease waiting) that no live worker serves shows 0, for an alert to match."""
        registry = self.core.workers
        served = registry.served_names()
        yield GaugeMetricFamily(
            "jobq_workers_live", "Live workers (announced, heartbeating)",
            value=len(registry.live()),
        )
        family = GaugeMetricFamily(
            "jobq_workers", "Live workers by job name served", labels=["name"]
        )
        for name in sorted({*served, *self.core.engine.queues}):
            family.add_metric([name], served.get(name, 0))
        yield family
        yield CounterMetricFamily(
            "jobq_workers_expired", "Workers dropped after missing their heartbeats",
            value=registry.expired_total,
        )

    def _schedules(self) -> Iterable[Metric]:
        engine = self.core.engine
        schedules = getattr(engine, "schedules", None)
        if schedules is None:
            return
        paused = sum(1 for s in schedules.values() if getattr(s, "paused", False))
        family = GaugeMetricFamily("jobq_schedules", "Schedules by state", labels=["state"])
        family.add_metric(["active"], len(schedules) - paused)
        family.add_metric(["paused"], paused)
        yield family
        for attribute, name, text in (
            ("schedule_jobs_started", "jobq_schedule_jobs_started", "Jobs started by schedules"),
            ("schedule_runs_skipped", "jobq_schedule_runs_skipped",
             "Schedule runs skipped by the wait policy"),
            ("schedule_runs_missed", "jobq_schedule_runs_missed",
             "Schedule runs missed while the server was down"),
        ):
            value = getattr(engine, attribute, None)
            if isinstance(value, int):
                yield CounterMetricFamily(name, text, value=value)
        yield from schedule_families(schedules.values())

    def _log(self) -> Iterable[Metric]:
        core = self.core
        log = core.log
        yield GaugeMetricFamily(
            "jobq_cmdlog_writable", "1 if the command log accepts writes",
            value=0 if core.log_error else 1,
        )
        replay = getattr(core, "replay_seconds", None)
        if isinstance(replay, int | float):
            yield GaugeMetricFamily(
                "jobq_replay_seconds", "How long replaying the command log took at start-up",
                value=float(replay),
            )
        snapshotter = getattr(core, "snapshotter", None)
        if snapshotter is not None:
            yield CounterMetricFamily(
                "jobq_engine_snapshots_written", "Engine snapshots written while running",
                value=snapshotter.written_count,
            )
            yield CounterMetricFamily(
                "jobq_engine_snapshots_failed", "Engine snapshots that failed while running",
                value=snapshotter.failed_count,
            )
            yield GaugeMetricFamily(
                "jobq_engine_snapshot_records_behind",
                "Records logged since the engine snapshot on disk (a start replays them)",
                value=snapshotter.records_since,
            )
        if log is None:
            return
        scrub = getattr(core, "scrub", None)
        yield GaugeMetricFamily(
            "jobq_cmdlog_damaged_segments",
            "Segments of the command log the scrub found damaged (0: none, or no scrub)",
            value=len(scrub.damaged) if scrub is not None else 0,
        )
        if scrub is not None:
            yield CounterMetricFamily(
                "jobq_cmdlog_scrub_passes", "Scrub passes run to their end",
                value=scrub.passes,
            )
            yield CounterMetricFamily(
                "jobq_cmdlog_scrub_bytes", "Bytes of the command log the scrub checked",
                value=scrub.scrubber.bytes_checked,
            )
        try:
            size = log.size_bytes
            segments = log.segment_count
        except OSError:
            return
        yield GaugeMetricFamily("jobq_cmdlog_bytes", "Size of the command log", value=size)
        yield GaugeMetricFamily(
            "jobq_cmdlog_segments", "Segment files of the command log", value=segments
        )
        yield CounterMetricFamily(
            "jobq_cmdlog_fsyncs", "Fsyncs of the command log", value=log.fsync_count
        )


    def _limits(self) -> Iterable[Metric]:
        """Each limit of docs/server.md's table that the server can count against (+Inf:
        none), what it holds of it now, and the operations its ceiling refused."""
        core = self.core
        engine = core.engine
        ceiling = engine.ceiling
        memory = core.memory_ceiling
        gate = core.gate
        inf = float("inf")
        rows: list[tuple[str, float, float]] = [
            ("jobs", inf if ceiling.max_jobs == UNLIMITED else ceiling.max_jobs, len(engine.jobs)),
            ("schedules", ceiling.max_schedules, len(engine.schedules)),
            ("workers", MAX_WORKERS, len(core.workers.live())),
        ]
        if memory is not None:
            limit = memory.max_bytes
            rows.append(("memory_bytes", inf if limit is None else limit, memory.rss_bytes))
        if gate is not None:  # a waiting request holds its connection: one each at most
            rows.append(("connections", gate.max_connections, len(core.connections)))
            rows.append(("waiting_requests", gate.max_connections, engine.waiting))
        limit_family = GaugeMetricFamily(
            "jobq_limit", "A limit of the server (+Inf: none)", labels=["resource"]
        )
        usage = GaugeMetricFamily(
            "jobq_usage", "What the server holds of a limited resource now", labels=["resource"]
        )
        for resource, most, held in rows:
            limit_family.add_metric([resource], most)
            usage.add_metric([resource], held)
        yield limit_family
        yield usage
        refused = CounterMetricFamily(
            "jobq_ceiling_refusals", "New jobs and schedules refused at the ceiling, by limit",
            labels=["limit"],
        )
        for name, count in ceiling.refused.items():
            refused.add_metric([name], count)
        yield refused


#: the values of ``jobq_schedule_last_run_status``'s ``status`` label
RUN_STATUSES = ("running", "succeeded", "failed", "canceled", "deleted")


def schedule_families(schedules: Iterable[Any]) -> Iterable[Metric]:
    """Per schedule (label ``schedule``, its name): when its last run succeeded, how its last
    run stands (1 for that status, 0 for the others; none before the first run), how many
    runs in a row failed, and when its last run was scheduled for."""
    success = GaugeMetricFamily(
        "jobq_schedule_last_success_timestamp_seconds",
        "When the schedule's last successful run ended (Unix time)", labels=["schedule"],
    )
    status = GaugeMetricFamily(
        "jobq_schedule_last_run_status",
        "How the schedule's last run stands: 1 for its status, 0 for the others",
        labels=["schedule", "status"],
    )
    failures = GaugeMetricFamily(
        "jobq_schedule_consecutive_failures", "Runs of the schedule that failed in a row",
        labels=["schedule"],
    )
    last_run = GaugeMetricFamily(
        "jobq_schedule_last_run_timestamp_seconds",
        "The time the schedule's last run stands for (Unix time)", labels=["schedule"],
    )
    for schedule in sorted(schedules, key=lambda s: s.name):
        name = schedule.name
        if schedule.last_success_ns is not None:
            success.add_metric([name], schedule.last_success_ns / 1e9)
        if schedule.last_outcome:
            for value in RUN_STATUSES:
                status.add_metric([name, value], float(schedule.last_outcome == value))
        if schedule.last_run_ns is not None:
            last_run.add_metric([name], schedule.last_run_ns / 1e9)
        failures.add_metric([name], schedule.consecutive_failures)
    yield from (success, status, failures, last_run)


class Metrics:
    """A registry for one core: ``render()`` gives the text for ``/metrics``."""

    def __init__(self, core: Core) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.counts = install_command_counts(core)
        self.fsync_seconds = Histogram(
            "jobq_cmdlog_fsync_seconds",
            "Latency of command log fsyncs",
            buckets=FSYNC_BUCKETS,
            registry=self.registry,
        )
        instrument_fsync(core, self.fsync_seconds)
        self.timings = JobTimings(core.engine, core.clock, self.registry)
        core.command_observers.append(self.timings.observe)
        self.registry.register(JobqCollector(core, self.counts))

    def render(self) -> bytes:
        return generate_latest(self.registry)
