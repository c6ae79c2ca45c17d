"""Coverage-guided fuzzing (atheris) of the request path: bytes -> parser -> dispatcher -> engine.

    make fuzz                         # FUZZ_SECONDS=120 by default
    python -m tests.fuzz.atheris_dispatch -max_total_time=60 [corpus dir]

Each input is fed to a ``RequestParser``; every request it yields (workq's commands and the
extension commands with JSON bodies) is dispatched against one engine, in a transaction as
the server's core does. A finding is an exception escaping the dispatcher (the server would
answer ``-SERVER-ERROR Internal error``), a parser that does not terminate, or a rejected
request (an error reply) that emitted a command to log: "rejected changes nothing".
Not part of ``make test``: it needs the ``fuzz`` extra (``pip install -e '.[fuzz]'``).
"""

from __future__ import annotations

import json
import sys
import uuid

import atheris

with atheris.instrument_imports(include=["jobq"]):
    from jobq.engine.machine import Engine
    from jobq.server import protocol as p
    from jobq.server.dispatch import Dispatcher
    from jobq.server.extensions import Deferred

NOW_NS = 1_800_000_000 * 10**9
ENGINE = Engine(started_ns=NOW_NS)
DISPATCHER = Dispatcher(ENGINE, lambda: p.ServerInfo(0, 0, NOW_NS))
_TOKENS = iter(range(1 << 62))


def one_input(data: bytes) -> None:
    parser = p.RequestParser(max_line_bytes=512, max_data_bytes=4096, max_discard_bytes=8192)
    parser.feed(data)
    for _ in range(len(data) + 2):  # every event consumes at least a CRLF
        event = parser.next_event()
        if event is None:
            break
        if isinstance(event, p.ProtocolError):
            continue
        ENGINE.begin()
        reply = DISPATCHER.handle(event, next(_TOKENS), NOW_NS)
        if isinstance(reply, Deferred):
            reply = reply.work()
        commands, _wakeups = ENGINE.drain()
        ENGINE.commit()
        if isinstance(reply, bytes) and reply.startswith(b"-") and commands:
            raise AssertionError(f"{event!r} was rejected ({reply!r}) yet logged {commands!r}")
    else:
        raise AssertionError("the parser never asked for more bytes")


def seeds() -> list[bytes]:
    """Valid requests of every kind, as a starting corpus."""
    from tests.server.test_extension_fuzz import VALID

    job = uuid.UUID(int=1).bytes
    out = [
        p.Add(job, "q", 1000, 60000, b"x").to_bytes(),
        p.Lease(("q",), 0).to_bytes(),
        p.Complete(job, b"ok").to_bytes(),
        p.InspectJobs("q", 0, 10).to_bytes(),
    ]
    for word, body in VALID.items():
        raw = json.dumps(body).encode()
        out.append(b"%s %d\r\n%s\r\n" % (word.encode(), len(raw), raw))
    return out


def main() -> None:
    args = sys.argv[1:]
    corpus = [a for a in args if not a.startswith("-")]
    if corpus:
        from pathlib import Path

        for n, seed in enumerate(seeds()):
            path = Path(corpus[0]) / f"seed-{n}"
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(seed)
    atheris.Setup([sys.argv[0], *args], one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
