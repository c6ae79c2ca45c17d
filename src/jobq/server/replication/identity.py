"""A server's id in replication, kept in its data directory (``server-id``).

A restarted standby must be the same standby to its primary: synchronous replication
counts a standby once however many streams it has open, and the primary may not yet have
noticed the old stream of a standby whose machine lost power (docs/ha.md, "How a standby
counts"). So the id outlives the process. A copy of the directory (another directory, or
another host) is another server and gets an id of its own: the file names the host and
the directory's device and inode it was made for, and is made anew where they differ.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
from pathlib import Path
from typing import Final

import msgspec

from jobq.cmdlog.segment import fsync_directory

logger = logging.getLogger("jobq.server")

#: the file in the data directory
ID_FILE: Final = "server-id"


class _Stored(msgspec.Struct, forbid_unknown_fields=True):
    id: str
    host: str
    device: int
    inode: int


def new_server_id() -> str:
    """A random id (a server that keeps no directory: ``--in-memory``)."""
    return secrets.token_hex(8)


def _here(data_dir: Path) -> tuple[str, int, int]:
    found = data_dir.stat()
    return socket.gethostname(), found.st_dev, found.st_ino


class ServerIdentity:
    """The id a data directory's server goes by: the one kept there, or a new one that
    :meth:`keep` writes once the server has started (a refused start writes nothing)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.kept = False
        self.server_id = new_server_id()
        try:
            stored = msgspec.json.decode((data_dir / ID_FILE).read_bytes(), type=_Stored)
            here = _here(data_dir)
        except FileNotFoundError:
            return
        except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
            logger.warning("%s: %s; this server takes a new id", data_dir / ID_FILE, exc)
            return
        if (stored.host, stored.device, stored.inode) == here and _valid(stored.id):
            self.server_id = stored.id
            self.kept = True

    def keep(self) -> None:
        """Write the id into the data directory (new file, fsynced, then renamed in)."""
        if self.kept:
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        host, device, inode = _here(self.data_dir)
        body = msgspec.json.encode(_Stored(self.server_id, host, device, inode))
        path = self.data_dir / ID_FILE
        partial = path.with_name(ID_FILE + ".new")
        try:
            with open(partial, "wb") as out:
                out.write(body + b"\n")
                out.flush()
                os.fsync(out.fileno())
            os.replace(partial, path)
            fsync_directory(str(self.data_dir))
        except OSError as exc:  # the id then lasts this process only, as before
            logger.warning("cannot keep this server's id in %s: %s", path, exc)
            return
        self.kept = True


def _valid(server_id: str) -> bool:
    """An id as :func:`new_server_id` makes them (the wire's lines carry it as a word)."""
    return len(server_id) == 16 and all(c in "0123456789abcdef" for c in server_id)
