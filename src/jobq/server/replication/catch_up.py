"""A standby's start, before it serves: a log that cannot go on from where it ends (the
primary's cleaner removed or rewrote what it needs, or it holds records the primary never
had: a deposed primary's, ``lineage.py``) is moved aside, and an empty log is
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
    check_stream_epoch,
    connect_primary,
    explain_refusal,
    last_place,
    read_line,
    replicate_line,
)
from jobq.server.replication.state import Replication
from jobq.server.snapshot import place_from_primary, position_at, snapshot_epochs

logger = logging.getLogger("jobq.server")


async def stream_possible(
    replication: Replication,
    address: tuple[str, int],
    token: str | None,
    log: CommandLog,
    log_settings: tuple[int, int],
) -> bool:
    """Whether the primary streams from the end of ``log`` (open, replayed: the epochs it
    sends are the engine's, ``replication.epochs``); False if it must catch up anew
    (:func:`start_anew`); :class:`PrimaryRefused` if the primary refuses otherwise."""
    host, port = address
    where = f"{host}:{port}"
    reader, writer = await connect_primary(host, port, token)
    try:
        writer.write(replicate_line(replication, log_settings, last_place(log)))
        answer = await read_line(reader, where)
    finally:
        writer.close()
    if answer.startswith("+STREAM"):
        check_stream_epoch(replication, where, answer)
        return True
    if wire.CATCH_UP not in answer:
        raise explain_refusal(where, answer)
    logger.warning("the primary at %s cannot stream from this log's end (%s)", where,
                   answer.lstrip("-"))
    return False


def move_aside(log_dir: str) -> str | None:
    """Move the log in ``log_dir`` (if it has segments) to ``<log_dir>.replaced-<UTC
    time>``; where it went."""
    if not (os.path.isdir(log_dir) and list_segments(log_dir)):
        return None
    aside = f"{log_dir}.replaced-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    suffix = 1
    while os.path.exists(aside):
        suffix += 1
        aside = f"{log_dir}.replaced-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.{suffix}"
    os.rename(log_dir, aside)
    logger.warning("moved the log %s aside to %s (nothing deleted): catching up anew",
                   log_dir, aside)
    return aside


async def start_anew(
    replication: Replication,
    address: tuple[str, int],
    token: str | None,
    log_dir: str,
    log_settings: tuple[int, int],
    open_log: Callable[[], CommandLog],
) -> None:
    """Move the log in ``log_dir`` aside (if there is one) and fill an empty one from the
    primary's engine snapshot (see the module's docstring)."""
    move_aside(log_dir)
    replication.epochs = list  # an empty log holds none
    fetched = await _fetch_snapshot(replication, address, token, log_settings)
    if fetched is None:
        return  # streamed whole from the primary's first segment
    data, sequence, offset = fetched
    epochs = snapshot_epochs(data)
    replication.epochs = lambda: epochs  # what the copy up to the snapshot's place holds
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
