"""A server's id is kept in its data directory: the same after a restart, another for a
copy of the directory, and a damaged file costs a new id, never the start."""

from __future__ import annotations

import shutil
from pathlib import Path

from jobq.server.replication.identity import ID_FILE, ServerIdentity


def test_a_restart_keeps_the_id_and_a_copy_of_the_directory_gets_its_own(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    first = ServerIdentity(data)
    assert not (data / ID_FILE).exists()  # nothing written before the server started
    first.keep()
    assert ServerIdentity(data).server_id == first.server_id
    copy = tmp_path / "copy"
    shutil.copytree(data, copy)
    copied = ServerIdentity(copy)
    assert copied.server_id != first.server_id
    copied.keep()
    assert ServerIdentity(copy).server_id == copied.server_id
    assert ServerIdentity(data).server_id == first.server_id


def test_a_damaged_id_file_gives_a_new_id_and_is_replaced(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for damaged in (b"", b"{not json", b'{"id": "x", "host": "h", "device": 1, "inode": 2}'):
        (data / ID_FILE).write_bytes(damaged)
        identity = ServerIdentity(data)
        assert len(identity.server_id) == 16
        identity.keep()
        assert ServerIdentity(data).server_id == identity.server_id
