"""A scripted fake workq server for the client tests: each accepted connection runs the
next script (read requests, send chosen replies, close), for the failures a real server
does not produce on demand."""

from __future__ import annotations

import select
import socket
import threading
from collections.abc import Callable

from jobq.server import protocol as p


def start_thread(target: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def socket_readable(fileno: int) -> bool:
    return bool(select.select([fileno], [], [], 0)[0])


# ---------------------------------------------------------------------------------------
# A scripted fake server: each accepted connection runs the next script
# ---------------------------------------------------------------------------------------

Script = Callable[[socket.socket, "FakeServer"], None]


class FakeServer:
    def __init__(self, *scripts: Script) -> None:
        self.scripts = list(scripts)
        self.requests: list[p.Request] = []
        self.connections = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.1)
        self.port = self.listener.getsockname()[1]
        self.closed = threading.Event()
        self._thread = start_thread(self._accept)

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(5)
            self.connections += 1
            script = self.scripts.pop(0) if self.scripts else close_now
            threading.Thread(target=self._serve, args=(conn, script), daemon=True).start()

    def _serve(self, conn: socket.socket, script: Script) -> None:
        try:
            script(conn, self)
        except (EOFError, OSError):
            pass
        finally:
            conn.close()

    def read(self, conn: socket.socket, parser: p.RequestParser) -> p.Request:
        """The next whole request on ``conn`` (EOFError when the client closes)."""
        while True:
            event = parser.next_event()
            if isinstance(event, p.Request):
                self.requests.append(event)
                return event
            if event is not None:
                raise AssertionError(f"client sent a bad request: {event}")
            chunk = conn.recv(65536)
            if not chunk:
                raise EOFError
            parser.feed(chunk)

    def close(self) -> None:
        self.closed.set()
        self.listener.close()
        self._thread.join(5)


def close_now(conn: socket.socket, fake: FakeServer) -> None:
    pass


def answer(*replies: bytes) -> Script:
    """Read a request line and send a reply, for each reply; then wait for EOF."""

    def script(conn: socket.socket, fake: FakeServer) -> None:
        parser = p.RequestParser()
        for reply in replies:
            fake.read(conn, parser)
            conn.sendall(reply)
        while conn.recv(1024):
            pass

    return script


def read_then_close(conn: socket.socket, fake: FakeServer) -> None:
    fake.read(conn, p.RequestParser())


def silent(conn: socket.socket, fake: FakeServer) -> None:
    fake.read(conn, p.RequestParser())
    while conn.recv(1024):  # until the client gives up and closes
        pass


SERVER_REPLY = p.inspect_server_reply(p.ServerInfo(1, 0, 1_700_000_000 * 1_000_000_000))
