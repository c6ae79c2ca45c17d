"""The primary's side of a replication stream: one :class:`Feed` per standby connection.

A standby's ``replicate`` turns its workq connection into a stream (``wire.py``). The feed
reads the primary's segments from the standby's place on, in chunks of at most
``CHUNK_BYTES`` cut at a record's end, each read in the loop's executor (never on the event
loop), and writes them as data frames; once it has sent everything written, it waits for the
next batch the core writes (a command observer wakes it) or a heartbeat's time. It waits for
the transport to drain whenever the socket's buffer is over its mark, so a slow standby
holds one chunk of the primary's memory, not its log. An older segment is read through one
descriptor opened when the feed reaches it: a cleaner rewrite renamed over it meanwhile
does not change the bytes under the feed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import TYPE_CHECKING

from jobq.cmdlog.record import CRC_LEN, HEADER_LEN
from jobq.cmdlog.segment import list_segments, segment_name
from jobq.server import protocol as p
from jobq.server.access import Role
from jobq.server.replication import wire
from jobq.server.replication.lineage import lineage_refusal
from jobq.server.snapshot import read_for_standby

if TYPE_CHECKING:
    from jobq.cmdlog.log import CommandLog
    from jobq.server.replication.state import Replication
    from jobq.server.tokens import Access

logger = logging.getLogger("jobq.server")


class StreamRefused(Exception):
    """The standby's place cannot be streamed from; the text says why."""


def check_request(
    replication: Replication,
    log: CommandLog | None,
    request: wire.Replicate | wire.ReplicateSnapshot,
) -> bytes | None:
    """The refusal of a ``replicate`` that cannot be served at all, else None."""
    if request.server_id == replication.server_id:
        return p.client_error("replicate: this is the standby itself")
    if replication.primary is not None:
        return p.read_only(replication.primary)
    if replication.fenced:
        return p.client_error("replicate: this server is not the primary any more (fenced)")
    if log is None:
        return p.client_error("replicate: this server keeps no command log (--in-memory)")
    appender = log.appender
    if request.segment_size_bytes != appender.segment_size_bytes:
        return p.client_error(
            f"replicate: segment size {appender.segment_size_bytes} on the primary, "
            f"{request.segment_size_bytes} on the standby (--cmdlog-seg-size)"
        )
    if request.version != appender.write_version:
        return p.client_error(
            f"replicate: log format version {appender.write_version} on the primary, "
            f"{request.version} on the standby"
        )
    return None


def resolve_start(
    directory: str, end: tuple[int, int], sequence: int, offset: int, crc: int | None
) -> tuple[int, int]:
    """Where to stream from for a standby whose log ends at ``(sequence, offset)`` (a
    thread's work: it reads the directory). A segment's start that the cleaner deleted
    (all its records were dead) moves to the next segment there is; a place inside a
    segment must hold the record the standby holds there (its CRC), else the cleaner
    rewrote that segment or the logs differ: :class:`StreamRefused`."""
    if (sequence, offset) > end:
        raise StreamRefused(
            f"the standby's log (segment {sequence} offset {offset}) is ahead of the "
            f"primary's (segment {end[0]} offset {end[1]}): not the same log"
        )
    present = [number for number, _ in list_segments(directory)]
    if offset <= HEADER_LEN:
        later = [number for number in present if number >= sequence]
        if not later:
            raise StreamRefused(f"segment {sequence} is not on the primary")
        return later[0], HEADER_LEN
    if sequence not in present:
        raise StreamRefused(
            f"segment {sequence} was removed by the primary's cleaner: {wire.CATCH_UP}"
        )
    path = os.path.join(directory, segment_name(sequence))
    with open(path, "rb") as file:
        file.seek(offset - CRC_LEN)
        stored = file.read(CRC_LEN)
    if len(stored) < CRC_LEN or crc is None or int.from_bytes(stored, "big") != crc:
        raise StreamRefused(
            f"segment {sequence} offset {offset} does not hold the standby's last record "
            f"(the primary's cleaner rewrote that segment, or the logs differ): {wire.CATCH_UP}"
        )
    return sequence, offset


def _read_chunk(fd: int, offset: int, limit: int | None) -> tuple[bytes, int]:
    """Whole records from ``offset`` of the open segment, up to ``limit`` (None: its end),
    at most ``CHUNK_BYTES`` unless one record is larger; and how many."""
    want = wire.CHUNK_BYTES if limit is None else min(wire.CHUNK_BYTES, limit - offset)
    while True:
        data = os.pread(fd, want, offset)
        end, count = wire.whole_records(data)
        if count or len(data) < want:
            return data[:end], count
        want = max(want * 2, wire.needed_bytes(data))


class Feed:
    """Streams the log to one standby over ``transport``, from ``(sequence, offset)``."""

    def __init__(
        self,
        replication: Replication,
        log: CommandLog,
        transport: asyncio.Transport,
        request: wire.Replicate | wire.ReplicateSnapshot,
        peer: str,
        token_digest: bytes | None = None,
    ) -> None:
        self.replication = replication
        #: the digest of the token the standby gave (None: a server without tokens); a
        #: reload that no longer makes it an admin's ends the stream (:meth:`tokens_changed`)
        self.token_digest = token_digest
        self.log = log
        self.transport = transport
        self.peer = peer
        #: the place to stream from (None: send the engine snapshot, then close)
        self.request = request if isinstance(request, wire.Replicate) else None
        self.sequence = 0 if self.request is None else self.request.sequence
        self.offset = 0 if self.request is None else self.request.offset
        #: records sent on this stream, and those the standby said it holds
        self.sent = 0
        self.acked = 0
        self.acked_place: tuple[int, int] = (self.sequence, self.offset)
        #: the standby's server id, and the place it last said it holds fsynced (None: not
        #: yet on this stream); what synchronous replication counts (``sync_gate.py``)
        self.standby_id = request.server_id
        self.synced_place: tuple[int, int] | None = None
        #: records_written - sent once the feed caught up (None: still catching up)
        self.base: int | None = None
        self._wake = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()
        self._stopped = False
        self._acks = b""
        self._fd: int | None = None
        self._fd_sequence = 0
        self.task: asyncio.Task[None] | None = None

    # -- from the connection and the core

    def start(self) -> None:
        self.replication.feeds.add(self)
        self.task = asyncio.get_running_loop().create_task(self._run())

    def written(self) -> None:
        """A batch was written: there is more to send."""
        self._wake.set()

    def writable(self, writable: bool) -> None:
        if writable:
            self._writable.set()
        else:
            self._writable.clear()

    def received(self, data: bytes) -> None:
        """Acknowledgements from the standby: ``A <sequence> <offset> <records>``."""
        self._acks += data
        *lines, self._acks = self._acks.split(b"\r\n")
        if len(self._acks) > 4096:
            self.stop()
            return
        synced = False
        for line in lines:
            parts = line.split()
            if len(parts) in (4, 5) and parts[0] == b"A":
                try:
                    sequence, offset, records = map(int, parts[1:4])
                except ValueError:
                    continue
                self.acked_place = (sequence, offset)
                self.acked = records
                if len(parts) == 5 and parts[4] == wire.SYNCED:
                    self.synced_place = (sequence, offset)
                    synced = True
        if synced and self.replication.sync_gate is not None:
            self.replication.sync_gate.acked()

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self.replication.feeds.discard(self)
        if self.synced_place is not None and self.replication.sync_gate is not None:
            self.replication.sync_gate.acked()  # it counts no more
        self._wake.set()
        self._writable.set()
        if self.task is not None:
            self.task.cancel()
        if not self.transport.is_closing():
            self.transport.close()

    def tokens_changed(self, access: Access) -> None:
        """The tokens were reloaded: a stream whose token is gone, or no longer an
        admin's, ends (a standby reconnects, and is refused, with that token)."""
        if self.token_digest is None:
            return
        principal = access.by_digest(self.token_digest)
        if principal is None or principal.role is not Role.ADMIN:
            logger.warning("the token of the standby at %s was revoked: stream ended", self.peer)
            self.stop()

    # -- lag

    def records_behind(self) -> int | None:
        if self.base is None:
            return None
        return max(0, self.replication.records_written - self.base - self.acked)

    def status(self) -> dict[str, object]:
        behind = self.records_behind()
        seconds = (
            None
            if self.base is None
            else self.replication.seconds_since_record(self.base + self.acked)
        )
        return {
            "address": self.peer,
            "state": "catching up" if self.base is None else "streaming",
            "acked": list(self.acked_place),
            "synced": None if self.synced_place is None else list(self.synced_place),
            "records_behind": behind,
            "seconds_behind": None if seconds is None else round(seconds, 3),
        }

    # -- the stream

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        directory = self.log.path
        try:
            if self.request is None:
                await self._send_snapshot(loop, directory)
                return
            refusal = lineage_refusal(self.replication.epochs(), self.request)
            if refusal is not None:
                self.transport.write(p.client_error(f"replicate: {refusal}"))
                logger.warning("refused a standby at %s: %s", self.peer, refusal)
                return
            try:
                start = await loop.run_in_executor(
                    None,
                    resolve_start,
                    directory,
                    self.log.appender.snapshot(),
                    self.sequence,
                    self.offset,
                    self.request.crc,
                )
            except (StreamRefused, OSError) as exc:
                self.transport.write(p.client_error(f"replicate: {exc}"))
                logger.warning("refused a standby at %s: %s", self.peer, exc)
                return
            self.sequence, self.offset = start
            replication = self.replication
            self.transport.write(
                wire.stream_line(
                    replication.server_id, replication.epoch, replication.sync_gate is not None
                )
            )
            logger.info(
                "streaming the command log to a standby at %s from segment %d offset %d",
                self.peer, self.sequence, self.offset,
            )
            await self._stream(loop, directory)
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # a segment that cannot be read: the standby reconnects
            logger.error("the stream to the standby at %s failed: %s", self.peer, exc)
        finally:
            self._close_fd()
            self.stop()

    async def _send_snapshot(self, loop: asyncio.AbstractEventLoop, directory: str) -> None:
        """``rsnapshot``: the engine snapshot file and its place, then the end."""
        found = await loop.run_in_executor(None, read_for_standby, directory)
        if found is None:
            self.transport.write(p.client_error("rsnapshot: no engine snapshot"))
            return
        data, sequence, offset = found
        self.transport.write(f"+SNAPSHOT {sequence} {offset} {len(data)}\r\n".encode())
        self.transport.write(data)
        logger.info(
            "sent the engine snapshot (segment %d offset %d, %d bytes) to a standby at %s",
            sequence, offset, len(data), self.peer,
        )
        while self.transport.get_write_buffer_size() and not self.transport.is_closing():
            await self._writable.wait()
            await asyncio.sleep(0.01)

    async def _stream(self, loop: asyncio.AbstractEventLoop, directory: str) -> None:
        appender = self.log.appender
        next_beat = 0.0
        while not self._stopped:
            end_sequence, end_offset = appender.snapshot()
            if self.sequence == end_sequence and self.offset >= end_offset:
                if self.base is None:
                    self.base = self.replication.records_written - self.sent
                if time.monotonic() >= next_beat:
                    next_beat = time.monotonic() + wire.HEARTBEAT_S
                    self._heartbeat()
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), wire.HEARTBEAT_S)
                except TimeoutError:
                    pass
                continue
            if self._fd is None or self._fd_sequence != self.sequence:
                self._close_fd()
                path = os.path.join(directory, segment_name(self.sequence))
                self._fd = await loop.run_in_executor(None, os.open, path, os.O_RDONLY)
                self._fd_sequence = self.sequence
            limit = end_offset if self.sequence == end_sequence else None
            data, count = await loop.run_in_executor(
                None, _read_chunk, self._fd, self.offset, limit
            )
            if not data:
                if limit is not None:
                    continue  # not reached: the newest segment's end is a record's end
                # the end of an older segment: on to the next one there is
                present = await loop.run_in_executor(None, list_segments, directory)
                later = [number for number, _ in present if number > self.sequence]
                self.sequence = later[0] if later else end_sequence
                self.offset = HEADER_LEN
                # an empty frame starts the segment on the standby too: its log ends where
                # the primary's does even before a record is written there
                self.transport.write(wire.data_frame(self.sequence, self.offset, 0, b""))
                continue
            self.transport.write(wire.data_frame(self.sequence, self.offset, count, data))
            self.sent += count
            self.offset += len(data)
            if time.monotonic() >= next_beat:
                next_beat = time.monotonic() + wire.HEARTBEAT_S
                self._heartbeat()
            await self._writable.wait()

    def _heartbeat(self) -> None:
        sequence, offset = self.log.appender.snapshot()
        self.transport.write(
            wire.heartbeat_frame(sequence, offset, time.time_ns(), self.records_behind())
        )

    def _close_fd(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
