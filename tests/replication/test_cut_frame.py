"""A frame cut in the middle is never written: a scripted primary on loopback sends a whole
frame and then half of the next one and closes; the standby holds the first frame's
records only and asks the next stream for what follows them."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

from jobq.cmdlog.record import HEADER_LEN, encode_records
from jobq.engine.commands import encode_command
from jobq.engine.extensions import SubmitJob
from tests.harness import RunningServer, wait_for


def _records(count: int, start: int) -> bytes:
    commands = [
        SubmitJob(
            id=(start + i).to_bytes(16, "big"), name="q", payload=b"x", created_ns=1_000 + i,
        )
        for i in range(count)
    ]
    return encode_records([encode_command(c) for c in commands], 2_000_000_000)


class ScriptedPrimary:
    """Answers the check, then for each stream: what the standby asked for, and a script."""

    def __init__(self, first: bytes, second: bytes) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.asked: list[tuple[int, int]] = []
        self.first, self.second = first, second
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            conn, _ = self.listener.accept()
            with conn:
                line = conn.makefile("rb").readline().split()
                if line[0] == b"rsnapshot":
                    conn.sendall(b"-CLIENT-ERROR rsnapshot: no engine snapshot\r\n")
                    continue
                sequence, offset = int(line[4]), int(line[5])
                if sequence == 0:
                    conn.sendall(b"+OK primary-id\r\n")
                    continue
                self.asked.append((sequence, offset))
                conn.sendall(b"+STREAM primary-id\r\n")
                if len(self.asked) == 1:
                    frame = b"D 1 8 3 %d\r\n" % len(self.first) + self.first
                    cut = b"D 1 %d 3 %d\r\n" % (8 + len(self.first), len(self.second))
                    conn.sendall(frame + cut + self.second[: len(self.second) // 2])
                    continue  # closed mid-frame
                if len(self.asked) == 2:
                    frame = b"D 1 %d 3 %d\r\n" % (offset, len(self.second)) + self.second
                    end = offset + len(self.second)
                    conn.sendall(frame + b"H 1 %d 1 0\r\n" % end)
                    conn.makefile("rb").readline()  # the ack, then the end
                    threading.Event().wait(30)


def test_a_frame_cut_in_the_middle_is_not_written(tmp_path: Path) -> None:
    first, second = _records(3, 0), _records(3, 100)
    primary = ScriptedPrimary(first, second)
    standby = RunningServer(
        tmp_path / "standby", replica_of=("127.0.0.1", primary.port), segment_size_bytes=4096
    )
    try:
        assert standby.core is not None and standby.core.replication is not None
        replication = standby.core.replication
        wait_for(lambda: len(primary.asked) >= 2, 10.0, "a second stream")
        assert primary.asked == [(1, HEADER_LEN), (1, HEADER_LEN + len(first))]
        end = (1, HEADER_LEN + len(first) + len(second))
        wait_for(lambda: standby.in_loop(lambda: replication.position) == end, 10.0)
        assert len(standby.in_loop(lambda: standby.core.engine.jobs)) == 6
    finally:
        standby.stop()
    segment = (tmp_path / "standby" / "cmdlog" / "000000001.log").read_bytes()
    assert segment[HEADER_LEN:] == first + second
