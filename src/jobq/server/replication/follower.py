"""The standby's side of a replication stream: connect to the primary, ask for the records
after this log's end, write each frame's records to this log at the same place (the same
segment bytes) and apply them to the engine with replay's own code, then say so.

Before a standby writes anything, :func:`check_primary` asks the primary whether it would
stream to this server (``replicate`` with sequence 0): a wrong token, a standby instead of a
primary, itself, or a log of another segment size or format is one line and no file. A
stream that breaks (the network, a primary restarting) is opened again from this log's end,
which is a record's end: the primary sends what follows it, so nothing is missed or applied
twice. A refusal of the place itself (the primary's cleaner removed what this standby
needs, or this log holds records the primary never had: ``lineage.py``) calls
``on_catch_up`` (``roles.py`` restarts the server in its process, to catch up anew), or
without it stops the server with that line. A primary of an older epoch than this log's is
refused, and so is a record of an older epoch.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from jobq.cmdlog.errors import CmdlogError
from jobq.cmdlog.record import CRC_LEN, HEADER_LEN, decode_payloads
from jobq.cmdlog.segment import segment_name
from jobq.engine.commands import CommandDecodeError, decode_command
from jobq.engine.extensions import Epoch
from jobq.server.replication import wire
from jobq.server.replication.lineage import older_primary
from jobq.server.replication.sync_ack import SyncAcker

if TYPE_CHECKING:
    from jobq.cmdlog.log import CommandLog
    from jobq.engine.machine import Command
    from jobq.server.core import Core
    from jobq.server.replication.state import Replication

logger = logging.getLogger("jobq.server")

#: how long connecting and the handshake may take, in seconds
CONNECT_TIMEOUT_S: Final = 5.0
#: waits between attempts to reach the primary again, in seconds (doubling up to the last)
RETRY_FIRST_S: Final = 0.1
RETRY_MAX_S: Final = 2.0


class PrimaryRefused(Exception):
    """The primary cannot be followed; one line says why. ``misuse``: trying again would
    not help (the settings are wrong: exit 2 at a start), not the network (exit 1)."""

    def __init__(self, text: str, *, misuse: bool = True) -> None:
        super().__init__(text)
        self.misuse = misuse


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9922``) of ``--replica-of``; ValueError if it is not one."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"not HOST:PORT: {text!r}")
    return host.strip("[]"), int(port)


def explain_refusal(address: str, reply: str) -> PrimaryRefused:
    """The line for a refusal the primary answered ``replicate`` (or ``auth``) with."""
    if reply.startswith("-READONLY"):
        primary = reply.partition(" ")[2]
        return PrimaryRefused(
            f"{address} is a standby (of {primary}), not a primary: point --replica-of at "
            "the primary"
        )
    if "Invalid token" in reply or "Authentication required" in reply:
        return PrimaryRefused(
            f"the primary at {address} refused the token (give its token with "
            "--replica-token or $JOBQ_REPLICA_TOKEN)"
        )
    text = reply.lstrip("-").partition(" ")[2].removeprefix("replicate: ")
    return PrimaryRefused(f"the primary at {address} refused to stream: {text}")


async def connect_primary(
    host: str, port: int, token: str | None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    address = f"{host}:{port}"
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port), CONNECT_TIMEOUT_S
        )
    except (OSError, TimeoutError) as exc:
        raise PrimaryRefused(
            f"cannot reach the primary at {address}: {getattr(exc, 'strerror', None) or exc}",
            misuse=False,
        ) from exc
    if token:
        writer.write(f"auth {token}\r\n".encode())
        line = await read_line(reader, address)
        if line != "+OK":
            writer.close()
            raise explain_refusal(address, line)
    return reader, writer


async def read_line(reader: asyncio.StreamReader, address: str) -> str:
    try:
        raw = await asyncio.wait_for(reader.readline(), CONNECT_TIMEOUT_S * 4)
    except (OSError, TimeoutError) as exc:
        raise PrimaryRefused(f"the primary at {address} did not answer", misuse=False) from exc
    if not raw:
        raise PrimaryRefused(f"the primary at {address} closed the connection", misuse=False)
    return raw.decode("utf-8", "replace").rstrip("\r\n")


def replicate_line(
    replication: Replication, log_settings: tuple[int, int], place: tuple[int, int, int | None]
) -> bytes:
    segment_size, version = log_settings
    sequence, offset, crc = place
    epochs = replication.epochs() if sequence != wire.CHECK_ONLY else []
    epoch = epochs[-1] if epochs else (0, 0, 0)
    return wire.Replicate(
        replication.server_id, segment_size, version, sequence, offset, crc, *epoch
    ).to_bytes()


def check_stream_epoch(replication: Replication, address: str, line: str) -> None:
    """Refuse a ``+STREAM`` from a primary of an older epoch than this log's (or than the
    one it was said to have); note its epoch."""
    primary_epoch = wire.stream_epoch(line)
    why = older_primary(primary_epoch, replication.epoch, replication.least_primary_epoch)
    if why is not None:
        raise PrimaryRefused(f"refusing the primary at {address}: {why}", misuse=False)
    replication.primary_epoch = primary_epoch


async def check_primary(
    replication: Replication,
    host: str,
    port: int,
    token: str | None,
    log_settings: tuple[int, int],
) -> None:
    """Ask the primary whether it streams to this server; :class:`PrimaryRefused` if not."""
    reader, writer = await connect_primary(host, port, token)
    try:
        writer.write(replicate_line(replication, log_settings, (wire.CHECK_ONLY, 0, None)))
        line = await read_line(reader, f"{host}:{port}")
        if not line.startswith("+OK"):
            raise explain_refusal(f"{host}:{port}", line)
    finally:
        writer.close()


def last_place(log: CommandLog) -> tuple[int, int, int | None]:
    """Where this log ends, and the CRC of the record that ends there (None at the start
    of a segment)."""
    sequence, offset = log.position()
    if offset <= HEADER_LEN:
        return sequence, offset, None
    with open(os.path.join(log.path, segment_name(sequence)), "rb") as file:
        file.seek(offset - CRC_LEN)
        return sequence, offset, int.from_bytes(file.read(CRC_LEN), "big")


class Follower:
    """Follows the primary at ``host:port`` until stopped (:meth:`run` as a task)."""

    def __init__(
        self,
        core: Core,
        log: CommandLog,
        replication: Replication,
        address: tuple[str, int],
        token: str | None,
        *,
        sync_always: bool,
        on_fatal: Callable[[PrimaryRefused], None],
        on_catch_up: Callable[[], None] | None = None,
        on_redirect: Callable[[str], None] | None = None,
    ) -> None:
        self.core = core
        self.log = log
        self.replication = replication
        self.host, self.port = address
        self.token = token
        self.sync_always = sync_always
        self.on_fatal = on_fatal
        self.on_catch_up = on_catch_up
        self.on_redirect = on_redirect
        appender = log.appender
        self.log_settings = (appender.segment_size_bytes, appender.write_version)
        #: how many streams were opened (tests: a reconnection)
        self.streams = 0
        #: the open stream's writer (tests cut it)
        self.writer: asyncio.StreamWriter | None = None
        #: acknowledges fsynced frames on a sync stream or under ``always`` (``sync_ack.py``)
        self.acker: SyncAcker | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def run(self) -> None:
        wait_s = RETRY_FIRST_S
        state = self.replication
        while True:
            try:
                await self._stream()
            except PrimaryRefused as exc:
                state.last_error = str(exc)
                if exc.misuse:
                    logger.critical("%s; stopping", exc)
                    self.on_fatal(exc)
                    return
                logger.warning("%s; trying again", exc)
            except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
                state.last_error = f"the stream from {self.address} broke: {exc}"
                logger.warning("%s; reconnecting", state.last_error)
            else:
                wait_s = RETRY_FIRST_S
            finally:
                state.connected = False
                if self.acker is not None:
                    self.acker.close()
                    self.acker = None
                if self.writer is not None:
                    self.writer.close()
                    self.writer = None
            await asyncio.sleep(wait_s)
            wait_s = min(wait_s * 2, RETRY_MAX_S)

    async def _stream(self) -> None:
        reader, writer = await connect_primary(self.host, self.port, self.token)
        self.writer = writer
        place = last_place(self.log)
        writer.write(replicate_line(self.replication, self.log_settings, place))
        line = await read_line(reader, self.address)
        if wire.CATCH_UP in line and self.on_catch_up is not None:
            logger.warning("the primary at %s: %s", self.address, line.lstrip("-"))
            self.on_catch_up()
            await asyncio.Event().wait()  # cancelled by the restart
        if wire.CATCH_UP in line:
            raise PrimaryRefused(
                f"the primary at {self.address} cannot stream from this log's end "
                f"({line.partition('replicate: ')[2]}): restart this standby, which then "
                "catches up from the primary's engine snapshot"
            )
        if line.startswith("-READONLY ") and self.on_redirect is not None:
            self.on_redirect(line.partition(" ")[2])  # deposed: it names its primary
        if not line.startswith("+STREAM"):
            refused = explain_refusal(self.address, line)
            # a primary deposed meanwhile (it follows another now), or one of an older
            # epoch: not a setting to fix; try again (a role change redirects this stream)
            refused.misuse = refused.misuse and not (
                line.startswith("-READONLY") or "not the primary any more" in line
            )
            raise refused
        check_stream_epoch(self.replication, self.address, line)
        state = self.replication
        state.connected = True
        state.last_error = None
        state.position = place[:2]
        self.streams += 1
        state.streams_opened += 1
        logger.info(
            "following the primary at %s from segment %d offset %d", self.address, *place[:2]
        )
        received = 0
        if self.sync_always or wire.is_sync_stream(line):
            self.acker = SyncAcker(
                self.log, writer, lambda text: self.on_fatal(PrimaryRefused(text))
            )
            self.acker.applied(*place[:2], 0)  # what it holds already counts, once fsynced
        while True:
            head = await reader.readline()
            if not head:
                raise asyncio.IncompleteReadError(b"", None)
            parts = head.split()
            if parts and parts[0] == b"H" and len(parts) == 5:
                sequence, offset, now_ns, behind = map(int, parts[1:])
                state.primary_end = (sequence, offset)
                state.primary_now_ns = now_ns
                state.records_behind = None if behind < 0 else behind
                continue
            if not parts or parts[0] != b"D" or len(parts) != 5:
                raise ValueError(f"not a replication frame: {head[:80]!r}")
            sequence, offset, count, length = map(int, parts[1:])
            data = await reader.readexactly(length)
            self._apply(sequence, offset, data)
            received += count
            if self.acker is not None:
                self.acker.applied(*state.position, received)
            else:
                writer.write(wire.ack_frame(*state.position, received))

    def _apply(self, sequence: int, offset: int, data: bytes) -> None:
        """Check every record of ``data`` (CRC, command), write them to this log at
        ``(sequence, offset)``, and apply them to the engine as replay does."""
        where = f"{self.address} segment {sequence} offset {offset}"
        try:
            records = list(decode_payloads(data, where, 0))
            commands: list[Command] = [decode_command(payload) for _, payload in records]
        except (CmdlogError, CommandDecodeError) as exc:
            raise ValueError(f"a bad record from {where}: {exc}") from exc
        epoch = self.core.engine.epoch
        for command in commands:
            if type(command) is Epoch:
                if command.epoch <= epoch:
                    raise PrimaryRefused(
                        f"refusing the primary at {self.address}: it sent a record of epoch "
                        f"{command.epoch}, not newer than epoch {epoch} of this log",
                        misuse=False,
                    )
                epoch = command.epoch
        try:
            self.log.write_at(sequence, offset, data)
        except (ValueError, CmdlogError) as exc:
            raise PrimaryRefused(f"cannot follow the primary at {self.address}: {exc}") from exc
        core = self.core
        engine = core.engine
        now_ns = core.clock()
        for (logged_ns, _payload), command in zip(records, commands, strict=True):
            engine.replay(command, logged_ns=logged_ns, now_ns=now_ns)
        engine.commit()
        engine.begin()
        state = self.replication
        state.position = (sequence, offset + len(data))
        if records:
            state.applied_ns = records[-1][0]
        state.records_applied += len(records)
        for observe in core.command_observers:
            observe(commands)
