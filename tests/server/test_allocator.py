"""``jobq server`` runs on the C library's allocator (``jobq.entry``): its process
re-executes itself once with ``PYTHONMALLOC=malloc``, same pid, unless told otherwise."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from jobq.entry import GLIBC_TUNABLES, wants_system_allocator
from tests.server.procs import ServerProcess

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")


@pytest.mark.parametrize(
    ("argv", "environ", "wanted"),
    [
        (["jobq", "server", "--in-memory"], {}, True),
        (["jobq", "up"], {}, True),
        (["jobq", "server"], {"JOBQ_ALLOCATOR": "system"}, True),
        (["jobq", "server"], {"JOBQ_ALLOCATOR": "pymalloc"}, False),
        (["jobq", "server"], {"PYTHONMALLOC": "pymalloc"}, False),  # already chosen (and set)
        (["jobq", "worker", "--import", "x"], {}, False),
        (["jobq", "log", "dump", "d"], {}, False),
        (["jobq", "--help"], {}, False),
        (["jobq"], {}, False),
    ],
)
def test_which_commands_re_execute(argv: list[str], environ: dict[str, str], wanted: bool) -> None:
    assert wants_system_allocator(argv, environ) is wanted


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    pairs = (item.decode(errors="replace").partition("=") for item in raw if item)
    return {name: value for name, _, value in pairs}


@pytest.mark.parametrize(
    ("env", "allocator"),
    [
        ({}, "malloc"),
        ({"JOBQ_ALLOCATOR": "pymalloc"}, None),
        ({"PYTHONMALLOC": "pymalloc"}, "pymalloc"),
    ],
)
def test_the_server_process_runs_on_the_allocator_chosen(
    tmp_path: Path, env: dict[str, str], allocator: str | None
) -> None:
    server = ServerProcess(tmp_path / "data", "--in-memory", env=env)
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(b"inspect server\r\n")
            assert sock.recv(100).startswith(b"+OK")  # the pid started answers: exec kept it
        environ = _environ(server.proc.pid)
        assert environ.get("PYTHONMALLOC") == allocator
        # glibc's thresholds come with the re-execution only (glibc, parsing the variable,
        # cuts the copy /proc shows at the first ':')
        assert ("GLIBC_TUNABLES" in environ) is (allocator == "malloc")
        assert GLIBC_TUNABLES.startswith(environ.get("GLIBC_TUNABLES", ""))
    finally:
        assert server.terminate() == 0
