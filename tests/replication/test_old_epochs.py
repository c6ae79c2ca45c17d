"""A standby refuses what belongs to an older epoch: a record of an epoch not newer than
its log's (none of that frame is written), and a primary whose ``+STREAM`` names an older
epoch than its log holds. A scripted primary on loopback sends them."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

from jobq.cmdlog.record import HEADER_LEN, encode_records
from jobq.engine.commands import encode_command
from jobq.engine.extensions import Epoch
from tests.harness import RunningServer, wait_for


def _epoch(epoch: int) -> bytes:
    record = Epoch(epoch=epoch, after_sequence=1, after_offset=HEADER_LEN, at_ns=2_000_000_000)
    return encode_records([encode_command(record)], 2_000_000_000)


class OldEpochPrimary:
    """First stream (as epoch 2): a frame of epoch 2's record, then one of epoch 1's. Then
    streams that say nothing of their epoch (a primary before epochs: 0)."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.streams = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            conn, _ = self.listener.accept()
            with conn:
                line = conn.makefile("rb").readline().split()
                if line[0] == b"rsnapshot":
                    conn.sendall(b"-CLIENT-ERROR rsnapshot: no engine snapshot\r\n")
                    continue
                if int(line[4]) == 0:
                    conn.sendall(b"+OK primary-id\r\n")
                    continue
                self.streams += 1
                if self.streams > 1:
                    conn.sendall(b"+STREAM primary-id\r\n")
                    threading.Event().wait(0.2)
                    continue
                newer, older = _epoch(2), _epoch(1)
                conn.sendall(
                    b"+STREAM primary-id 2\r\n"
                    + b"D 1 %d 1 %d\r\n" % (HEADER_LEN, len(newer)) + newer
                    + b"D 1 %d 1 %d\r\n" % (HEADER_LEN + len(newer), len(older)) + older
                )
                threading.Event().wait(1)


def test_records_and_primaries_of_older_epochs_are_refused(tmp_path: Path) -> None:
    primary = OldEpochPrimary()
    standby = RunningServer(
        tmp_path / "standby", replica_of=("127.0.0.1", primary.port), segment_size_bytes=4096
    )
    try:
        assert standby.core is not None and standby.core.replication is not None
        replication = standby.core.replication
        engine = standby.core.engine
        wait_for(lambda: "not newer than epoch 2" in (replication.last_error or ""), 10.0)
        assert engine.epoch == 2
        assert replication.position == (1, HEADER_LEN + len(_epoch(2)))  # epoch 1's: not kept
        wait_for(lambda: "its epoch 0 is older than epoch 2" in (replication.last_error or ""),
                 10.0)
        assert replication.position == (1, HEADER_LEN + len(_epoch(2)))
    finally:
        standby.stop()
