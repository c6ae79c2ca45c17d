"""The ``jobq`` command's first step: the server runs on the C library's allocator.

``jobq server`` and ``jobq up`` hold every job in memory, and a job count that swings (a
million jobs in, done, deleted) must give its memory back. CPython's small-object allocator
(pymalloc) returns a 1 MiB arena to the OS only once every object in it is gone, so a few
small objects made while jobs came and went keep hundreds of MiB resident after the jobs
are deleted. With ``PYTHONMALLOC=malloc`` every object comes from glibc's heap, whose free
pages the server's housekeeping hands back (``server/memory.py``); docs/server.md, "Memory",
has the measurements.

The allocator is fixed when the interpreter starts, so these two commands re-execute the
process once, same pid and same command line, with ``PYTHONMALLOC=malloc`` set (a second
interpreter start, before anything else is imported; docs/server.md, "Start-up"). A
``PYTHONMALLOC`` already set is left alone, and ``JOBQ_ALLOCATOR=pymalloc`` keeps CPython's
allocator. Every other command starts directly.

Unless ``GLIBC_TUNABLES`` is already set, the re-execution also fixes two of glibc's
thresholds (:data:`GLIBC_TUNABLES`): ``free`` then never trims the heap top on its own (the
server's housekeeping calls ``malloc_trim`` when many jobs are gone), and blocks below 4 MiB
come from the heap rather than from a fresh ``mmap`` each (glibc's default threshold moves
with the sizes it sees). Both spare system calls and page faults on the request path.
"""

from __future__ import annotations

import os
import sys

#: the commands that hold jobs in memory
SERVER_COMMANDS = frozenset({"server", "up"})
ALLOCATOR_ENV = "JOBQ_ALLOCATOR"
#: glibc's malloc settings for the server (see above); other C libraries ignore the variable
GLIBC_TUNABLES = "glibc.malloc.trim_threshold=268435456:glibc.malloc.mmap_threshold=4194304"


def wants_system_allocator(argv: list[str], environ: dict[str, str] | os._Environ[str]) -> bool:
    """Whether this process should re-execute itself with ``PYTHONMALLOC=malloc``."""
    if len(argv) < 2 or argv[1] not in SERVER_COMMANDS:
        return False
    if "PYTHONMALLOC" in environ:
        return False
    return environ.get(ALLOCATOR_ENV, "system") != "pymalloc"


def main() -> None:
    """The console script: re-execute a server command on the system allocator, else (and
    then) run the command line."""
    if sys.executable and sys.orig_argv and wants_system_allocator(sys.argv, os.environ):
        environ = {"GLIBC_TUNABLES": GLIBC_TUNABLES, **os.environ, "PYTHONMALLOC": "malloc"}
        os.execve(sys.executable, sys.orig_argv, environ)  # does not return
    from jobq.cli import main as cli_main

    cli_main()
