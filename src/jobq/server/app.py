"""``jobq server``: open and replay the log, serve the workq protocol (over TLS when the server
has a certificate; ``listeners.py``), clean the log, stop cleanly on SIGTERM or SIGINT, reload
the tokens on SIGHUP. A server whose log a new primary cannot build on restarts in its
process as that primary's standby (``replication/roles.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable

import msgspec

from jobq.cmdlog.log import CommandLog
from jobq.cmdlog.record import VERSION_2, Record
from jobq.cmdlog.scrub import Damage
from jobq.cmdlog.segment import list_segments
from jobq.config import AUTO_MAX_MEMORY, ConfigError, ServerConfig, exposure_error
from jobq.engine.ceiling import UNLIMITED
from jobq.engine.commands import ID_LEN, CommandDecodeError, decode_command
from jobq.engine.machine import Engine, SchedulerOptions
from jobq.engine.schedules import register_job_type_validator
from jobq.engine.specs import prepare_cron
from jobq.server.attempt_logs import AttemptLogs
from jobq.server.ceiling import MemoryCeiling, default_max_memory_bytes, limits_command, mib
from jobq.server.core import Core, WallClock
from jobq.server.gate import Gate
from jobq.server.history import read_history
from jobq.server.listeners import open_listeners
from jobq.server.memory import release_free_memory
from jobq.server.replay import ReplayStats, restore
from jobq.server.replication.catch_up import start_anew, stream_possible
from jobq.server.replication.elected import ElectedRoles, make_elector, refuse_manual_promote
from jobq.server.replication.election import Elector
from jobq.server.replication.etcd_kv import EtcdUnavailable, check_reachable
from jobq.server.replication.follower import PrimaryRefused, check_primary
from jobq.server.replication.identity import ServerIdentity
from jobq.server.replication.promote import promote_command
from jobq.server.replication.roles import Roles
from jobq.server.replication.state import Replication
from jobq.server.replication.sync_gate import install_sync_gate
from jobq.server.scrubbing import LogScrub, log_state_command
from jobq.server.snapshot import position_at, remove_snapshot, vouched_place, write_snapshot
from jobq.server.snapshotter import Snapshotter
from jobq.server.tcp import Connection
from jobq.server.tokens import Access

logger = logging.getLogger("jobq.server")

#: workq command types whose payload starts with the job id
_WORKQ_TYPES = range(1, 9)
#: the GIL switch interval under ``sync=always`` (see ``serve``)
SYNC_ALWAYS_SWITCH_INTERVAL_S = 0.0005
#: how long a start waits for the log directory's lock: the last server's snapshot child
#: holds it with that server and dies with it, but a SIGKILL waits for its fsync to end
LOCK_WAIT_S = 5.0
#: with ``--ha-etcd``: the pause before a server whose restart as a standby failed starts
#: again fenced
RESTART_PAUSE_S = 0.5


def _validate_spark_job(name: str, payload: bytes) -> str | None:
    """Arguments of a scheduled Spark job (imports the schemas on first use, not pyspark)."""
    from jobq.spark.args import JOB_TYPES, validate

    if name not in JOB_TYPES:
        return f"unknown Spark job type {name!r} (known: {', '.join(sorted(JOB_TYPES))})"
    return validate(name, payload)


register_job_type_validator("spark.", _validate_spark_job)


def configure_logging(level: int = logging.INFO) -> None:
    """One line per event on stderr."""
    logging.basicConfig(
        level=level,
        format="%(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s",
        datefmt="%Y-%m-%dT%H:%M:%S",
    )


def _liveness(
    engine: Engine,
) -> tuple[
    Callable[[Record], bool],
    Callable[[Record], int | None],
    Callable[[Record], tuple[bytes | int, ...]],
]:
    """The cleaner's questions, answered by the engine: whether replay still needs a record
    (``Engine.record_is_live``), when it stops, and what it is about (``Engine.command_keys``:
    the cleaner keeps the later records of a job or schedule whose dead record stays)."""

    def keep(record: Record) -> bool:
        payload = record.payload
        if payload and payload[0] in _WORKQ_TYPES:
            return engine.record_is_live(payload[1 : 1 + ID_LEN], record.time_ns)
        try:
            command = decode_command(payload)
        except CommandDecodeError:
            return True  # never drop what we cannot read
        return engine.command_is_live(command, record.time_ns)

    def expires_at(record: Record) -> int | None:
        payload = record.payload
        # extension payloads are MessagePack: their id is not at a fixed place
        if len(payload) > ID_LEN and payload[0] in _WORKQ_TYPES:
            return engine.record_expires_ns(payload[1 : 1 + ID_LEN])
        return None

    def keys(record: Record) -> tuple[bytes | int, ...]:
        payload = record.payload
        if payload and payload[0] in _WORKQ_TYPES:
            return (payload[1 : 1 + ID_LEN],)
        try:
            return engine.command_keys(decode_command(payload))
        except CommandDecodeError:
            return ()  # kept anyway (keep)

    return keep, expires_at, keys


async def _clean_periodically(core: Core, log: CommandLog, interval_ms: int) -> None:
    keep, expires_at, keys = _liveness(core.engine)
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(interval_ms / 1000)
        try:
            stats = await loop.run_in_executor(
                None,
                lambda: log.clean(keep, expires_at=expires_at, keys=keys, now_ns=core.clock()),
            )
        except Exception as exc:
            logger.error("cleaning the command log failed: %s", exc)
            continue
        if stats.segments_rewritten or stats.segments_deleted:
            logger.info(
                "cleaned the command log: %d segments rewritten, %d records dropped, %d bytes",
                stats.segments_rewritten,
                stats.records_dropped,
                stats.bytes_reclaimed,
            )
            # a rewrite reads and writes whole segments in this worker thread: hand what it
            # freed back to the OS too (memory.py), not only after the engine shrank
            await loop.run_in_executor(None, release_free_memory)


def _has_segments(log_dir: str) -> bool:
    return os.path.isdir(log_dir) and bool(list_segments(log_dir))


def _address(place: tuple[str, int]) -> str:
    host, port = place
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _save_snapshot(log_dir: str, engine: Engine, end: tuple[int, int]) -> None:
    """Leave the engine's state beside the closed log, at its ``end``, for a fast next start
    (``snapshot.py``)."""
    try:
        saved = write_snapshot(log_dir, engine, position_at(log_dir, *end))
    except (OSError, ValueError, ArithmeticError) as exc:
        logger.warning("cannot write the engine snapshot: %s", exc)
        return
    logger.info("wrote the engine snapshot: %d jobs", saved)


def _start_scrub(
    log: CommandLog,
    config: ServerConfig,
    snapshotter: Snapshotter | None,
    loop: asyncio.AbstractEventLoop,
) -> LogScrub:
    """Start the scrub's thread (``scrubbing.py``); damage it finds is logged on the loop,
    and engine snapshots stop, so that the next start replays the damaged records and
    refuses them rather than start from a snapshot that hides them."""

    def found(damage: Damage) -> None:
        logger.error(
            "the scrub found damage in the command log: %s/%s (jobq log verify %s; the "
            "next start will refuse it until it is repaired)",
            log.path,
            damage,
            log.path,
        )
        if snapshotter is not None:
            snapshotter.hold(f"the log is damaged ({damage.segment})")

    def on_damage(damage: Damage) -> None:  # in the scrub's thread
        loop.call_soon_threadsafe(found, damage)

    scrub = LogScrub(
        log,
        rate_bytes_per_s=config.scrub_rate_bytes,
        interval_s=config.scrub_interval_ms / 1000,
        on_damage=on_damage,
    )
    scrub.start()
    return scrub


def _keep_damage_visible(log_dir: str, scrub: LogScrub) -> None:
    """At a stop after the scrub found damage: write no engine snapshot, and remove the one
    on disk, so that the next start reads the damaged segment and refuses it."""
    names = ", ".join(sorted(scrub.damaged))
    try:
        remove_snapshot(log_dir)
    except OSError as exc:
        logger.error("cannot remove the engine snapshot (the log is damaged: %s): %s", names, exc)
        return
    logger.error(
        "no engine snapshot at this stop: the scrub found damage in %s (the next start "
        "replays the whole log and refuses it; see jobq log verify and jobq log repair)",
        names,
    )

def _ceiling(config: ServerConfig, engine: Engine) -> MemoryCeiling:
    """Set the engine's job ceiling, and make the memory ceiling (read once now, so that a
    start over it refuses adds from the first); say both."""
    engine.ceiling.max_jobs = config.max_jobs if config.max_jobs is not None else UNLIMITED
    max_bytes = config.max_memory_bytes
    if max_bytes == AUTO_MAX_MEMORY:
        max_bytes = default_max_memory_bytes()
    memory = MemoryCeiling(engine.ceiling, max_bytes)
    memory.refresh()
    jobs = len(engine.jobs)
    logger.info(
        "ceiling: %s jobs (%d held), %s of memory (%s resident)",
        "no limit of" if config.max_jobs is None else f"at most {config.max_jobs}", jobs,
        "no limit" if memory.max_bytes is None else f"at most {mib(memory.max_bytes)}",
        mib(memory.rss_bytes),
    )
    if config.max_jobs is not None and jobs >= config.max_jobs:
        logger.warning(
            "the log holds %d jobs, --max-jobs is %d: adds are refused until jobs go",
            jobs, config.max_jobs,
        )
    return memory


def _with_election(
    replication: Replication, elector: Elector
) -> Callable[[], dict[str, object]]:
    """The replication status with the election's (``--ha-etcd``) beside it."""
    return lambda: {**replication.status(), "election": elector.status()}


class _Restart:
    """Set when the server must start again in its process as a standby of ``address``
    (``Roles``: a log the new primary cannot build on)."""

    def __init__(self) -> None:
        self.address: tuple[str, int] | None = None
        self.event = asyncio.Event()
        #: where the last run listened (the next listens there again)
        self.listening: tuple[str, int] | None = None

    def __call__(self, address: tuple[str, int]) -> None:
        self.address = address
        self.event.set()


async def serve(
    config: ServerConfig,
    *,
    on_listening: Callable[[str, int], None] | None = None,
    stop: asyncio.Event | None = None,
    on_core: Callable[[Core], None] | None = None,
) -> int:
    """Run a server until ``stop`` is set or a signal arrives; return the exit status.

    ``on_listening`` learns the address; ``on_core`` (for tests and embedding) the core,
    again after a restart in this process (``replication/roles.py``), which listens on the
    same addresses. A setting it cannot start with (a tokens file that does not parse, a
    non-loopback address without a token) is a :class:`ConfigError`, raised before
    anything is opened.
    """
    stop_event = stop or asyncio.Event()
    while True:
        restart = _Restart()
        try:
            status = await _serve_once(config, on_listening, stop_event, on_core, restart)
        except PrimaryRefused as exc:
            if config.ha_etcd is None or config.replica_of is None or stop_event.is_set():
                raise
            # a restart as the standby of a primary that went meanwhile (or was deposed):
            # start again fenced, and the election says whom to follow
            logger.error("%s: starting again fenced, to follow the primary the etcd "
                         "election names", exc)
            config = msgspec.structs.replace(config, replica_of=None)
            await asyncio.sleep(RESTART_PAUSE_S)
            continue
        if restart.address is None or stop_event.is_set():
            return status
        logger.warning("starting again in this process as a standby of %s",
                       _address(restart.address))
        changes: dict[str, object] = {"replica_of": restart.address}
        if restart.listening is not None:
            changes["host"], changes["port"] = restart.listening
        config = msgspec.structs.replace(config, **changes)


def _restore_or_close(
    log: CommandLog, engine: Engine, now_ns: int, accept_gap: bool
) -> ReplayStats:
    """:func:`restore`; a start it refuses closes the log (its lock) before it says why."""
    try:
        return restore(log, engine, now_ns, accept_gap=accept_gap)
    except BaseException:
        log.close()
        raise


async def _serve_once(
    config: ServerConfig,
    on_listening: Callable[[str, int], None] | None,
    stop_event: asyncio.Event,
    on_core: Callable[[Core], None] | None,
    restart: _Restart,
) -> int:
    """One run of :func:`serve`, until ``stop_event`` or ``restart`` is set."""
    loop = asyncio.get_running_loop()
    refusal = exposure_error(
        (config.host, config.port), config.http, authenticates=config.authenticates,
        insecure=config.insecure_no_auth, listen_plain=config.listen_plain,
    )
    if refusal is not None:
        raise ConfigError(refusal)
    if config.ha_etcd is not None:  # before anything is written: one line, the URL
        try:
            await loop.run_in_executor(None, check_reachable, config.ha_etcd)
        except EtcdUnavailable as exc:
            raise ConfigError(str(exc)) from None
    access = (
        Access(
            token=config.auth_token, token_file=config.auth_token_file,
            auth_file=config.auth_file,
        )
        if config.authenticates
        else None
    )
    clock = WallClock()

    def new_engine() -> Engine:
        return Engine(
            retention_ms=config.retention_ms,
            scheduler=SchedulerOptions(
                enabled=config.scheduler,
                pace_ms=config.scheduler_pace_ms,
                initial_delay_ms=config.scheduler_initial_delay_ms,
                max_per_pass=config.scheduler_max_per_pass,
            ),
            started_ns=clock(),
        )

    engine = new_engine()
    replica_of = config.replica_of
    identity = None if config.in_memory else ServerIdentity(config.data_dir)
    replication = Replication(
        None if replica_of is None else _address(replica_of),
        None if identity is None else identity.server_id,
    )
    replica_token = config.replica_token or config.auth_token
    if replica_of is not None:
        # before anything is written: a primary that would not stream is one line, no file
        await check_primary(
            replication, *replica_of, replica_token, (config.segment_size_bytes, VERSION_2)
        )
    log: CommandLog | None = None

    def open_log() -> CommandLog:
        return CommandLog.open(
            str(config.log_dir),
            sync=config.sync,  # type: ignore[arg-type]
            sync_interval_ms=config.sync_interval_ms,
            segment_size_bytes=config.segment_size_bytes,
            # the records before an engine snapshot's place need no torn-tail check
            whole_until=vouched_place,
            lock_wait_s=LOCK_WAIT_S,
            accept_gap=config.accept_log_gap,
        )

    log_settings = (config.segment_size_bytes, VERSION_2)
    # a log just filled from the primary needs no asking whether it can go on
    fresh = replica_of is not None and not _has_segments(str(config.log_dir))
    if replica_of is not None and fresh:
        await start_anew(
            replication, replica_of, replica_token, str(config.log_dir), log_settings, open_log
        )
    if not config.in_memory:
        log = open_log()
        if identity is not None:
            identity.keep()
        stats = _restore_or_close(log, engine, clock(), config.accept_log_gap)
        if replica_of is not None and not fresh:
            # the engine's epochs tell the primary whether this log is a prefix of its own
            replication.epochs = lambda: engine.epochs
            if not await stream_possible(
                replication, replica_of, replica_token, log, log_settings
            ):
                log.close()
                await start_anew(
                    replication, replica_of, replica_token, str(config.log_dir),
                    log_settings, open_log,
                )
                engine = new_engine()
                log = open_log()
                stats = _restore_or_close(log, engine, clock(), config.accept_log_gap)
        logger.info(
            "replayed %d records from %s: %d jobs in %.3f s%s",
            stats.records,
            config.log_dir,
            stats.jobs,
            stats.seconds,
            ""
            if stats.snapshot is None
            else f" (after the engine snapshot at {stats.snapshot.segment} offset "
            f"{stats.snapshot.offset})",
        )
        prepare_cron(schedule.spec for schedule in engine.schedules.values())
        if stats.records or stats.jobs:
            # decoding the snapshot or the log freed its buffers and temporary objects: hand
            # those pages back before serving
            release_free_memory()
    history = None
    if log is not None:
        log_dir = str(config.log_dir)

        def history(job_id: bytes, created_ns: int) -> list[dict[str, object]]:
            return read_history(log_dir, job_id, created_ns)

    attempt_logs = (
        AttemptLogs.in_memory(engine, config.attempt_log_max_bytes)
        if config.in_memory
        else AttemptLogs.in_directory(
            engine, config.attempt_log_dir, config.attempt_log_max_bytes
        )
    )
    core = Core(
        engine, log, sync_always=config.sync == "always", clock=clock, history=history,
        attempt_logs=attempt_logs,
    )
    core.memory_ceiling = _ceiling(config, engine)
    core.dispatcher.extensions.handlers["limits"] = limits_command(core)
    core.set_access(access)
    roles: Roles | None = None
    if log is not None:
        core.replication = replication
        replication.epochs = lambda: engine.epochs
        core.dispatcher.replication_status = replication.status
        core.command_observers.append(lambda commands: replication.written(len(commands)))

        def refused(exc: PrimaryRefused) -> None:
            core.fatal_error = exc
            stop_event.set()

        roles = Roles(
            core, log, replication, token=replica_token, sync_always=config.sync == "always",
            restart=restart, on_fatal=refused,
        )
        core.roles = roles
        core.dispatcher.extensions.handlers["promote"] = promote_command(roles)
        if config.sync_replicas:
            install_sync_gate(core, replication, config.sync_replicas)
        if replica_of is not None:
            core.follows_primary = True
            core.dispatcher.read_only_primary = replication.primary
        if config.ha_etcd is not None:
            # the election decides: no write is acknowledged, no timer runs, until it won
            core.dispatcher.extensions.handlers["promote"] = refuse_manual_promote
            if replica_of is None:
                roles.fence()
    core.audit.first_failure_delay_s = config.auth_failure_delay_ms / 1000
    core.workers.missed_heartbeats = config.worker_missed_heartbeats
    core.replay_seconds = stats.seconds if log is not None else 0.0
    snapshotter = None
    if log is not None:
        snapshotter = Snapshotter(
            engine,
            log,
            min_records=config.snapshot_min_records,
            on_disk=stats.snapshot,
            records_since=stats.records,
            quiescent=core.holds_only_logged,
        )
        core.snapshotter = snapshotter
        core.command_observers.append(lambda commands: snapshotter.written(len(commands)))
    if log is not None and config.scrub_rate_bytes > 0:
        core.scrub = _start_scrub(log, config, snapshotter, loop)
    core.dispatcher.extensions.handlers["logstate"] = log_state_command(lambda: core.scrub)
    if on_core is not None:
        on_core(core)
    core.on_fatal = stop_event.set
    core.tick()  # deadlines that passed while the server was down
    core.start_housekeeping()
    core.workers.start_sweeping()
    attempt_logs.start()
    if snapshotter is not None:
        snapshotter.start_checking()
    gate = Gate(
        core,
        max_connections=config.max_connections,
        max_per_address=config.max_connections_per_address,
        auth_deadline_s=config.auth_deadline_ms / 1000,
        idle_timeout_s=config.idle_timeout_ms / 1000 or None,
    )
    core.gate = gate
    servers = await open_listeners(
        lambda: Connection(core, gate=gate),
        config,
    )
    host, port = servers[0].sockets[0].getsockname()[:2]
    for signum in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(signum, stop_event.set)
        except (NotImplementedError, RuntimeError, ValueError):
            pass  # not the main thread (tests): the caller sets ``stop``
    if access is not None:
        access.on_change.append(gate.tokens_changed)
        access.on_change.append(lambda: replication.tokens_changed(access))
        if config.auth_file is not None or config.auth_token_file is not None:
            try:
                loop.add_signal_handler(signal.SIGHUP, access.reload)
            except (NotImplementedError, RuntimeError, ValueError):
                pass  # not the main thread: the caller reloads ``core.access``
    cleaner = (
        asyncio.create_task(_clean_periodically(core, log, config.clean_interval_ms))
        if log is not None and config.clean_interval_ms > 0
        else None
    )
    where = "memory only" if log is None else f"log {config.log_dir} (sync {config.sync})"
    tls = " (TLS)" if config.tls_cert is not None else ""
    who = "no authentication" if access is None else f"{len(access)} tokens"
    logger.info("listening on %s:%d%s, %s, %s", host, port, tls, where, who)
    stop_http = None
    if config.http is not None:
        from jobq.http import start_http  # FastAPI is imported only when HTTP is on

        http_host, http_port = config.http
        stop_http = await start_http(
            core,
            host=http_host,
            port=http_port,
            tls_cert=config.tls_cert,
            tls_key=config.tls_key,
        )
    restart.listening = (host, port)
    if roles is not None and replica_of is not None:
        roles.start_following(replica_of)
    if on_listening is not None:
        on_listening(host, port)
    if snapshotter is not None:
        # a start that replayed many records snapshots at once, not at the first write or
        # quiet second: a crash soon after would replay them all again
        loop.call_soon(snapshotter.started)
    switch_interval_s = sys.getswitchinterval()
    if config.sync == "always" and log is not None:
        # fsyncs slower than a millisecond run in a thread (server/commit.py); when one
        # ends, that thread needs the GIL back to release the batch's replies, and a busy
        # event loop gives it up only every switch interval (5 ms by default), which would
        # add up to 5 ms to every group commit
        sys.setswitchinterval(SYNC_ALWAYS_SWITCH_INTERVAL_S)
    elector: Elector | None = None
    try:
        if config.ha_etcd is not None and roles is not None and log is not None:
            elected = ElectedRoles(core, roles, log, loop)
            elector = make_elector(config, replication.server_id, (host, port), elected)
            try:
                await loop.run_in_executor(None, elector.start)
            except EtcdUnavailable as exc:
                logger.error("%s", exc)
                core.fatal_error = exc
                elector = None
                return 1
            core.holds_lease = elector.holds_lease
            core.dispatcher.replication_status = _with_election(replication, elector)
        stopping = asyncio.ensure_future(stop_event.wait())
        restarting = asyncio.ensure_future(restart.event.wait())
        try:
            await asyncio.wait((stopping, restarting), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
            restarting.cancel()
    finally:
        if access is not None:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(signal.SIGHUP)
        sys.setswitchinterval(switch_interval_s)
        logger.info("stopping: no new connections, flushing the command log")
        if stop_http is not None:
            await stop_http()
        if roles is not None:
            roles.close()
        if core.sync_gate is None:
            replication.stop_feeds()
        for server in servers:
            server.close()
        gate.close()
        for conn in list(core.connections):
            if isinstance(conn, Connection):
                conn.closing = True  # no more requests run: the replies owed still go out
        core.flush()
        drained = await core.drain_pending()  # the standbys' acknowledgements too
        if elector is not None:  # fenced, its lease revoked: another takes over at once
            await loop.run_in_executor(None, elector.stop)
        replication.stop_feeds()
        attempt_logs.close()
        if cleaner is not None:
            cleaner.cancel()
        core.workers.close()
        if snapshotter is not None:
            snapshotter.close()
        if core.scrub is not None:
            core.scrub.close()
        core.close()
        core.memory_ceiling.close()
        for conn in list(core.connections):
            if isinstance(conn, Connection) and conn.transport is not None:
                conn.transport.close()
        if log is not None:
            end = log.position()
            try:
                log.close()
            except OSError as exc:
                # after a failed fsync the last one fails too; the log on disk is what
                # replay will find, so say so and stop without a snapshot
                logger.critical("closing the command log failed: %s", exc)
                if core.fatal_error is None:
                    core.fatal_error = exc
            if core.scrub is not None and core.scrub.damaged:
                _keep_damage_visible(str(config.log_dir), core.scrub)
            elif core.fatal_error is None:
                if drained and core.holds_only_logged():
                    _save_snapshot(str(config.log_dir), engine, end)
                else:
                    # the engine holds changes the log does not (their batch was still
                    # waiting for its write or fsync): a snapshot of it would be wrong
                    logger.warning(
                        "no engine snapshot at this stop: changes were still waiting for "
                        "the log (the next start replays it)"
                    )
        logger.info("stopped")
    return 1 if core.fatal_error is not None else 0
