"""A standby's start, before it serves: a log that cannot go on from where it ends (the
primary's cleaner removed or rewrote what it needs) is moved aside, and an empty log is
filled from the primary's engine snapshot: the snapshot file, and the primary's segment
bytes from the start of the snapshot's segment up to its place (docs/ha.md, "Catching
up"). The start then restores that snapshot and replays the records after it, as any start
does, and follows the primary from the log's end. A primary without a snapshot streams its
whole log instead (from its first segment: what its cleaner dropped before it changes
nothing in a replay).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable

from jobq.cmdlog.errors import CmdlogError
from jobq.cmdlog.log import CommandLog
from jobq.cmdlog.record import HEADER_LEN, decode_payloads
from jobq.cmdlog.segment import create_segment, list_segments
from jobq.server.replication import wire
from jobq.server.replication.follower import (
    CONNECT_TIMEOUT_S,
    PrimaryRefused,
    connect_primary,
    explain_refusal,
    last_place,
    read_line,
    replicate_line,
)
from jobq.server.replication.state import Replication
from jobq.server.snapshot import place_from_primary, position_at

logger = logging.getLogger("jobq.server")


async def catch_up(
    replication: Replication,
    address: tuple[str, int],
    token: str | None,
    log_dir: str,
    log_settings: tuple[int, int],
    open_log: Callable[[], CommandLog],
) -> None:
    """Make ``log_dir`` a log the primary can stream to (see the module's docstring)."""
    host, port = address
    where = f"{host}:{port}"
    if os.path.isdir(log_dir) and list_segments(log_dir):
        log = open_log()
        try:
            place = last_place(log)
        finally:
            log.close()
        reader, writer = await connect_primary(host, port, token)
        try:
            writer.write(replicate_line(replication, log_settings, place))
            answer = await read_line(reader, where)
        finally:
            writer.close()
        if answer.startswith("+STREAM"):
            return
        if wire.CATCH_UP not in answer:
            raise explain_refusal(where, answer)
        aside = f"{log_dir}.replaced-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
        logger.warning(
            "the primary at %s cannot stream from this log's end (%s): moved it to %s, "
            "catching up anew", where, answer.lstrip("-"), aside,
        )
        os.rename(log_dir, aside)
    fetched = await _fetch_snapshot(replication, address, token, log_settings)
    if fetched is None:
        return  # streamed whole from the primary's first segment
    data, sequence, offset = fetched
    os.makedirs(log_dir, exist_ok=True)
    create_segment(log_dir, sequence, log_settings[1])
    log = open_log()
    try:
        await _copy_until(log, replication, address, token, log_settings, (sequence, offset))
        place_from_primary(log_dir, data, position_at(log_dir, sequence, offset, sync=True))
    finally:
        log.close()
    logger.info(
        "caught up from the primary's engine snapshot (segment %d offset %d)", sequence, offset
    )


async def _fetch_snapshot(
    replication: Replication,
    address: tuple[str, int],
    token: str | None,
    log_settings: tuple[int, int],
) -> tuple[bytes, int, int] | None:
    host, port = address
    reader, writer = await connect_primary(host, port, token)
    try:
        request = wire.ReplicateSnapshot(replication.server_id, *log_settings)
        writer.write(request.to_bytes())
        answer = await read_line(reader, f"{host}:{port}")
        if not answer.startswith("+SNAPSHOT"):
            return None
        _word, sequence, offset, length = answer.split()
        data = await asyncio.wait_for(reader.readexactly(int(length)), CONNECT_TIMEOUT_S * 60)
        return data, int(sequence), int(offset)
    finally:
        writer.close()


async def _copy_until(
    log: CommandLog,
    replication: Replication,
    address: tuple[str, int],
    token: str | None,
    log_settings: tuple[int, int],
    place: tuple[int, int],
) -> None:
    """Copy the primary's records into ``log`` from the start of segment ``place[0]``
    until ``log`` reaches ``place`` (checked, not applied: the snapshot holds them)."""
    host, port = address
    where = f"{host}:{port}"
    reader, writer = await connect_primary(host, port, token)
    try:
        writer.write(replicate_line(replication, log_settings, (place[0], HEADER_LEN, None)))
        answer = await read_line(reader, where)
        if not answer.startswith("+STREAM"):
            raise explain_refusal(where, answer)
        while log.position() < place:
            head = await reader.readline()
            parts = head.split()
            if not parts:
                raise PrimaryRefused(f"the stream from {where} ended", misuse=False)
            if parts[0] != b"D" or len(parts) != 5:
                continue  # a heartbeat
            sequence, offset, _count, length = map(int, parts[1:])
            data = await reader.readexactly(length)
            try:
                for _ in decode_payloads(data, where, 0):
                    pass
                log.write_at(sequence, offset, data)
            except (CmdlogError, ValueError) as exc:
                raise PrimaryRefused(f"cannot catch up from {where}: {exc}") from exc
        log.sync()
    finally:
        writer.close()
