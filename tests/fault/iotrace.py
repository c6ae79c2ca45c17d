"""The I/O recorder of the crash-state suite: every change a process makes to the files of
one directory, and every fsync, as JSON lines, so that ``crashstates.py`` can rebuild what a
power cut may leave at any moment (the CrashMonkey / ALICE method).

Installed by the fault injector (``JOBQ_FAULT_IO_TRACE=PATH``, ``JOBQ_FAULT_IO_DIR=DIR``).
It wraps the ``os`` functions the log, the cleaner and the snapshot writer call, so it sees
every kind of file in the directory without knowing its kind: segments, the cleaner's
``.rw`` rewrites, snapshots, and any file added later (a manifest) need no code here. A
file written through Python's buffered ``open()`` (the snapshot) is caught up at its fsync:
the bytes beyond what the recorder saw are recorded as one write just before the fsync.

Events, one JSON object a line, in the order they happened (a forked snapshotter child
appends to the same file, so its events interleave in time order), each with ``t``, the
``time.monotonic()`` when it was recorded (after the operation; an fsync's end: after it
returned):

``{"op": "create", "name", "ino"}``
    a directory entry ``name`` for a new inode (recorded right after the create)
``{"op": "write", "ino", "off", "data"}``
    bytes (base64) written at ``off`` of inode ``ino``
``{"op": "trunc", "ino", "size"}``
``{"op": "rename", "src", "dst"}`` / ``{"op": "unlink", "name"}``
``{"op": "fsync_begin", "ino", "who"}`` ... ``{"op": "fsync", "ino", "who"}``
    an fsync of a file by thread ``who`` (``pid:thread``): what was recorded before the
    begin is durable once the end is recorded
``{"op": "dirsync_begin"}`` ... ``{"op": "dirsync"}``
    the same for the directory: its entries (creates, renames, unlinks) before the begin
``{"op": "mkdir"}``, ``{"op": "parentsync_begin"}`` ... ``{"op": "parentsync"}``
    the directory itself was made, and its parent fsynced (which makes that durable)
"""

from __future__ import annotations

import base64
import json
import os
import stat
import threading
import time
from typing import Any

_original = {
    name: getattr(os, name)
    for name in (
        "open", "write", "pwrite", "ftruncate", "fsync", "replace", "rename", "unlink", "mkdir"
    )
}


class Recorder:
    """Records the changes to the files directly in ``directory`` into ``trace_path``."""

    def __init__(self, trace_path: str, directory: str) -> None:
        self.trace_path = trace_path
        self.directory = os.path.realpath(directory)
        self._lock = threading.Lock()
        self._pid = -1
        self._fd = -1
        #: inode -> bytes the recorder knows the file to hold (its size as recorded)
        self._sizes: dict[int, int] = {}
        #: name -> inode of the directory's entries the recorder saw made
        self._names: dict[str, int] = {}
        self._dir_ino: int | None = None
        self._parent_ino: int | None = None

    # ------------------------------------------------------------------ plumbing

    def _emit(self, event: dict[str, Any]) -> None:
        """Append one event (the caller holds ``_lock``)."""
        if self._pid != os.getpid():  # first event, or a forked child: its own descriptor
            self._fd = _original["open"](
                self.trace_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644
            )
            self._pid = os.getpid()
        event["t"] = time.monotonic()
        _original["write"](self._fd, (json.dumps(event) + "\n").encode())

    def _after_fork(self) -> None:
        self._lock = threading.Lock()  # another thread may have held it at the fork

    def _ours(self, path: Any) -> str | None:
        """The name of ``path`` if it is directly in the directory, else None."""
        if isinstance(path, int):
            return None
        text = os.fsdecode(path)
        parent, name = os.path.split(os.path.abspath(text))
        if parent == self.directory or os.path.realpath(parent) == self.directory:
            return name
        return None

    def _inode(self, fd: int) -> int | None:
        """The inode of ``fd`` if it is a regular file of the directory, else None;
        recording the creation of one the recorder has not seen made.

        A file is known by inode *and* name: an inode number freed by one process (the
        cleaner's rename over a segment) can be handed out again for a file another makes
        (the snapshotter's child, forked with the recorder's tables as they were), and
        taking it for the old file would write the snapshot into that old segment."""
        try:
            st = os.fstat(fd)
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return None
        if path.endswith(" (deleted)"):
            return None  # unlinked: nothing written to it can matter any more
        name = self._ours(path)
        if name is None:
            return None
        if self._names.get(name) != st.st_ino or st.st_ino not in self._sizes:
            # made by open() (a snapshot), or by a process the recorder did not see
            self._created(name, st.st_ino)
        return st.st_ino

    def _created(self, name: str, ino: int) -> None:
        self._emit({"op": "create", "name": name, "ino": ino})
        self._sizes[ino] = 0
        self._names[name] = ino

    def _dropped(self, name: str) -> None:
        """``name`` no longer names its inode: forget the inode once nothing names it, so
        that its number, when the file system hands it out again, is a new file."""
        ino = self._names.pop(name, None)
        if ino is not None and ino not in self._names.values():
            self._sizes.pop(ino, None)

    def _catch_up(self, fd: int, ino: int) -> None:
        """Record bytes written without the recorder seeing them (buffered ``open()``)."""
        size = os.fstat(fd).st_size
        known = self._sizes[ino]
        if size > known:
            # the descriptor may be write-only: read through another
            reader = _original["open"](f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)
            try:
                data = os.pread(reader, size - known, known)
            finally:
                os.close(reader)
            self._emit(
                {"op": "write", "ino": ino, "off": known, "data": base64.b64encode(data).decode()}
            )
            self._sizes[ino] = size

    # ------------------------------------------------------------------ the wrappers

    def open(self, path: Any, flags: int, mode: int = 0o777, **kwargs: Any) -> int:
        name = self._ours(path)
        existed = name is not None and os.path.lexists(path)
        fd: int = _original["open"](path, flags, mode, **kwargs)
        if name is not None:
            with self._lock:
                st = os.fstat(fd)
                if stat.S_ISDIR(st.st_mode):
                    return fd
                if not existed:
                    self._created(name, st.st_ino)
                if flags & os.O_TRUNC and self._sizes.get(st.st_ino):
                    self._emit({"op": "trunc", "ino": st.st_ino, "size": 0})
                    self._sizes[st.st_ino] = 0
        return fd

    def pwrite(self, fd: int, data: Any, offset: int) -> int:
        with self._lock:
            done: int = _original["pwrite"](fd, data, offset)
            ino = self._inode(fd)
            if ino is not None and done:
                self._record_write(ino, offset, bytes(memoryview(data)[:done]))
        return done

    def write(self, fd: int, data: Any) -> int:
        with self._lock:
            ino = self._inode(fd)
            done: int = _original["write"](fd, data)
            if ino is not None and done:
                # where the bytes went, from the offset after the write: an O_APPEND fd
                # (the manifest's edits) writes at the end, not at its offset before
                offset = os.lseek(fd, 0, os.SEEK_CUR) - done
                self._record_write(ino, offset, bytes(memoryview(data)[:done]))
        return done

    def _record_write(self, ino: int, offset: int, data: bytes) -> None:
        self._emit(
            {"op": "write", "ino": ino, "off": offset, "data": base64.b64encode(data).decode()}
        )
        self._sizes[ino] = max(self._sizes[ino], offset + len(data))

    def ftruncate(self, fd: int, size: int) -> None:
        with self._lock:
            _original["ftruncate"](fd, size)
            ino = self._inode(fd)
            if ino is not None:
                self._emit({"op": "trunc", "ino": ino, "size": size})
                self._sizes[ino] = size

    def fsync(self, fd: int) -> None:
        # an fsync's begin and end name the thread that made it, so that two fsyncs of one
        # file running at once (a commit and the snapshotter's child) pair up right
        who = f"{os.getpid()}:{threading.get_ident()}"
        with self._lock:
            st = os.fstat(fd)
            kind = self._directory_kind(st) if stat.S_ISDIR(st.st_mode) else None
            ino = None if stat.S_ISDIR(st.st_mode) else self._inode(fd)
            if kind is not None:
                self._emit({"op": f"{kind}_begin", "who": who})
            elif ino is not None:
                self._catch_up(fd, ino)
                self._emit({"op": "fsync_begin", "ino": ino, "who": who})
        _original["fsync"](fd)
        if kind is not None or ino is not None:
            with self._lock:
                if kind is not None:
                    self._emit({"op": kind, "who": who})
                else:
                    self._emit({"op": "fsync", "ino": ino, "who": who})

    def _directory_kind(self, st: os.stat_result) -> str | None:
        """``dirsync`` for the directory, ``parentsync`` for its parent, else None."""
        if self._dir_ino is None:
            try:
                self._dir_ino = os.stat(self.directory).st_ino
                self._parent_ino = os.stat(os.path.dirname(self.directory)).st_ino
            except OSError:
                return None
        if st.st_ino == self._dir_ino:
            return "dirsync"
        return "parentsync" if st.st_ino == self._parent_ino else None

    def mkdir(self, path: Any, mode: int = 0o777, **kwargs: Any) -> None:
        with self._lock:
            _original["mkdir"](path, mode, **kwargs)
            if not isinstance(path, int) and os.path.abspath(os.fsdecode(path)) == self.directory:
                self._emit({"op": "mkdir"})

    def replace(self, src: Any, dst: Any, **kwargs: Any) -> None:
        self._rename("replace", src, dst, **kwargs)

    def rename(self, src: Any, dst: Any, **kwargs: Any) -> None:
        self._rename("rename", src, dst, **kwargs)

    def _rename(self, how: str, src: Any, dst: Any, **kwargs: Any) -> None:
        with self._lock:
            _original[how](src, dst, **kwargs)
            old, new = self._ours(src), self._ours(dst)
            if old is not None and new is not None:
                self._emit({"op": "rename", "src": old, "dst": new})
                self._dropped(new)
                if old in self._names:
                    self._names[new] = self._names.pop(old)

    def unlink(self, path: Any, **kwargs: Any) -> None:
        with self._lock:
            _original["unlink"](path, **kwargs)
            name = self._ours(path)
            if name is not None:
                self._emit({"op": "unlink", "name": name})
                self._dropped(name)


def _rebind_defaults(function: Any, recorder: Recorder) -> None:
    """Make ``function``'s parameters that default to ``os.fsync`` default to the
    recorder's (a default is bound when the function is defined, before the patch)."""
    keyword = function.__kwdefaults__ or {}
    for key, value in keyword.items():
        if value is _original["fsync"]:
            keyword[key] = recorder.fsync
    if function.__defaults__:
        function.__defaults__ = tuple(
            recorder.fsync if value is _original["fsync"] else value
            for value in function.__defaults__
        )


def install(trace_path: str, directory: str) -> Recorder:
    """Start recording the changes to ``directory``'s files into ``trace_path``."""
    from jobq.cmdlog import appender, cleaner, log, manifest

    recorder = Recorder(trace_path, directory)
    os.register_at_fork(after_in_child=recorder._after_fork)
    for name in _original:
        setattr(os, name, getattr(recorder, name))
    for function in (
        appender.Appender.__init__,
        cleaner.Cleaner.__init__,
        log.CommandLog.open.__func__,
        log.CommandLog.__init__,
        manifest.Manifest.__init__,
    ):
        _rebind_defaults(function, recorder)
    return recorder
