"""The ``jobq`` console script (also ``python -m jobq``): ``jobq server`` and ``jobq up``
first re-execute themselves on the C library's allocator, then the command line runs.

They hold every job in memory, and a swinging job count must give its memory back, which
glibc's heap does and CPython's small-object allocator does not (docs/server.md, "Memory").
The allocator is fixed when the interpreter starts, hence one re-execution, same pid and
command line, with ``PYTHONMALLOC=malloc``; one already set is left alone, and
``JOBQ_ALLOCATOR=pymalloc`` keeps CPython's allocator. Other commands start directly.
"""

from __future__ import annotations

import os
import sys

#: the commands that hold jobs in memory
SERVER_COMMANDS = frozenset({"server", "up"})
ALLOCATOR_ENV = "JOBQ_ALLOCATOR"
#: glibc's malloc settings for the server, set on re-execution unless GLIBC_TUNABLES is set
#: (other C libraries ignore it): ``free`` never trims the heap top on its own (housekeeping
#: calls ``malloc_trim`` when many jobs are gone), and blocks below 4 MiB come from the heap
#: rather than from a fresh ``mmap`` each (glibc's default threshold moves with the sizes
#: it sees). Both spare system calls and page faults on the request path.
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
