"""The replication stream's wire: the ``replicate`` request a standby sends on the workq
port, and the frames that follow it on that connection (docs/ha.md, "The stream").

``replicate <server-id> <segment-size> <version> <sequence> <offset> <crc>`` asks for the
records after ``(sequence, offset)`` of the standby's log; ``crc`` is the CRC of the record
that ends there (hex), ``-`` at the start of a segment, so that a primary whose cleaner
rewrote that segment is not asked for bytes at a place that now means something else.
``sequence`` 0 only checks (the standby's start, before it writes anything): ``+OK <id>``.
A standby whose log holds an epoch (docs/ha.md, "Promotion and epochs") adds three numbers:
its newest epoch and where its log ended before that epoch began (sequence, offset); one
without sends the six words servers before epochs send and read. The answer is
``+STREAM <id> <epoch>`` (the primary's newest epoch; a primary before epochs leaves it
out: 0), followed by ``sync`` from a primary under ``--sync-replicas`` (acknowledge a frame
only once it is fsynced), then frames from the primary::

    D <sequence> <offset> <records> <length>\\r\\n<length bytes of whole records>
    H <sequence> <offset> <now-ns> <records-behind>\\r\\n     (the primary's end; -1: unknown)

and from the standby ``A <sequence> <offset> <records>\\r\\n`` once it holds a frame's
records (the place after them, and the records of this stream it holds);
``A <sequence> <offset> <records> synced\\r\\n`` once they are fsynced too (a standby under
``--cmdlog-sync always``, or on a ``sync`` stream, which first acknowledges the place it
started from so). Only a ``synced`` acknowledgement counts for ``--sync-replicas``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Final

from jobq.cmdlog.gotime import TIME_LEN
from jobq.cmdlog.record import CRC_LEN
from jobq.cmdlog.varint import VarintError, decode_uvarint
from jobq.server import protocol as p

#: the most record bytes one data frame carries (a larger record goes alone)
CHUNK_BYTES: Final = 256 * 1024
#: a heartbeat at least this often, also when nothing is written, in seconds
HEARTBEAT_S: Final = 1.0
#: ``sequence`` of a ``replicate`` that only checks
CHECK_ONLY: Final = 0
#: the word of an acknowledgement whose records are fsynced
SYNCED: Final = b"synced"
#: the word after ``+STREAM <id>`` that asks the standby to fsync before it acknowledges
SYNC_STREAM: Final = "sync"


class Replicate(p.Request, frozen=True):
    """``replicate <server-id> <segment-size> <version> <sequence> <offset> <crc>``"""

    command: ClassVar[str] = "replicate"
    server_id: str
    segment_size_bytes: int
    version: int
    sequence: int
    offset: int
    #: the CRC of the record ending at ``offset`` (None at a segment's start)
    crc: int | None
    #: the newest epoch of the standby's log (0: none), and where its log ended before it
    epoch: int = 0
    epoch_sequence: int = 0
    epoch_offset: int = 0

    def to_bytes(self) -> bytes:
        crc = "-" if self.crc is None else f"{self.crc:08x}"
        epoch = (
            f" {self.epoch} {self.epoch_sequence} {self.epoch_offset}" if self.epoch else ""
        )
        return (
            f"replicate {self.server_id} {self.segment_size_bytes} {self.version} "
            f"{self.sequence} {self.offset} {crc}{epoch}"
        ).encode() + p.CRLF


class ReplicateSnapshot(p.Request, frozen=True):
    """``rsnapshot <server-id> <segment-size> <version>``: the primary's engine snapshot,
    answered ``+SNAPSHOT <sequence> <offset> <length>`` and the file's bytes, for a standby
    that catches up (then it streams from the start of that segment)."""

    command: ClassVar[str] = "rsnapshot"
    server_id: str
    segment_size_bytes: int
    version: int

    def to_bytes(self) -> bytes:
        return (
            f"rsnapshot {self.server_id} {self.segment_size_bytes} {self.version}"
        ).encode() + p.CRLF


#: what the primary's refusal of a place says when the standby must catch up anew
CATCH_UP: Final = "catch up anew"


def _parse_snapshot(
    args: tuple[str, ...], flags: Mapping[str, str], data: bytes | None
) -> p.Request:
    if flags or len(args) != 3 or not args[1].isdigit() or not args[2].isdigit():
        raise p.ClientError(p.INVALID_COMMAND_ARGS)
    return ReplicateSnapshot(args[0], int(args[1]), int(args[2]))


def _parse(args: tuple[str, ...], flags: Mapping[str, str], data: bytes | None) -> p.Request:
    if flags or len(args) not in (6, 9):
        raise p.ClientError(p.INVALID_COMMAND_ARGS)
    try:
        numbers = [int(text) for text in (*args[1:5], *args[6:])]
        crc = None if args[5] == "-" else int(args[5], 16)
    except ValueError:
        raise p.ClientError(p.INVALID_COMMAND_ARGS) from None
    if min(numbers) < 0:
        raise p.ClientError(p.INVALID_COMMAND_ARGS)
    segment_size, version, sequence, offset, *epoch = numbers
    return Replicate(args[0], segment_size, version, sequence, offset, crc, *epoch)


def stream_line(server_id: str, epoch: int, sync: bool = False) -> bytes:
    """The primary's answer that starts a stream (``sync``: under ``--sync-replicas``)."""
    return f"+STREAM {server_id} {epoch}{' ' + SYNC_STREAM if sync else ''}\r\n".encode()


def stream_epoch(line: str) -> int:
    """The primary's epoch in its ``+STREAM`` line (0: a primary before epochs)."""
    words = line.split()
    return int(words[2]) if len(words) > 2 and words[2].isdigit() else 0


def register_replicate_command(registry: p.CommandRegistry | None = None) -> None:
    """Add ``replicate`` to ``registry`` (default: the protocol's). Idempotent."""
    target = registry if registry is not None else p.DEFAULT_REGISTRY
    spec = target.get("replicate")
    if spec is not None and spec.parse is _parse:
        return
    target.register("replicate", _parse, replace=True)
    target.register("rsnapshot", _parse_snapshot, replace=True)


def data_frame(sequence: int, offset: int, records: int, data: bytes) -> bytes:
    return f"D {sequence} {offset} {records} {len(data)}\r\n".encode() + data


def heartbeat_frame(sequence: int, offset: int, now_ns: int, records_behind: int | None) -> bytes:
    behind = -1 if records_behind is None else records_behind
    return f"H {sequence} {offset} {now_ns} {behind}\r\n".encode()


def ack_frame(sequence: int, offset: int, records: int, synced: bool = False) -> bytes:
    tail = " synced" if synced else ""
    return f"A {sequence} {offset} {records}{tail}\r\n".encode()




def is_sync_stream(line: str) -> bool:
    """Whether a ``+STREAM`` line asks the standby to fsync before it acknowledges."""
    return SYNC_STREAM in line.split()[2:]


def whole_records(data: bytes) -> tuple[int, int]:
    """``(end, count)``: where the last whole record of ``data`` (records from its start)
    ends, and how many whole records come before that. Only TIME and SIZE are read; the
    standby checks every CRC."""
    end = len(data)
    pos = 0
    count = 0
    while pos + TIME_LEN < end:
        size = data[pos + TIME_LEN]
        if size < 0x80:
            after = pos + TIME_LEN + 1 + size + CRC_LEN
        else:
            try:
                size, head_end = decode_uvarint(data, pos + TIME_LEN)
            except VarintError:
                break
            after = head_end + size + CRC_LEN
        if after > end:
            break
        pos = after
        count += 1
    return pos, count


def needed_bytes(data: bytes) -> int:
    """How many bytes the first record of ``data`` needs, at least (to read a record larger
    than a chunk whole)."""
    if len(data) <= TIME_LEN:
        return TIME_LEN + 1 + CRC_LEN
    try:
        size, head_end = decode_uvarint(data, TIME_LEN)
    except VarintError:
        return len(data) + 16
    return head_end + size + CRC_LEN
