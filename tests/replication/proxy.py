"""A TCP relay on loopback that a test can stop in the middle: a standby behind it receives
nothing of what its primary sends once :meth:`Relay.hold` is called (the bytes are read and
dropped), as if the network between them were cut while both still run."""

from __future__ import annotations

import socket
import threading


class Relay:
    """Forwards every connection made to :attr:`port` to ``127.0.0.1:target``."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.held = threading.Event()
        self.frozen = threading.Event()
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def hold(self) -> None:
        """From now on nothing reaches the connections' clients (the standby)."""
        self.held.set()

    def freeze(self) -> None:
        """From now on nothing is forwarded either way and nothing closed, as a network
        that went dark (a machine lost power): each end's connection stays open, unnoticed."""
        self.frozen.set()

    def cut(self) -> None:
        """Break every connection made so far, on both sides."""
        for sock in self.sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                client.close()
                continue
            self.sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, to_client: bool) -> None:
        try:
            while data := source.recv(65536):
                if self.frozen.is_set() or (to_client and self.held.is_set()):
                    continue  # cut: read and dropped
                sink.sendall(data)
        except OSError:
            pass
        if not self.frozen.is_set():  # a dark network closes nothing
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.cut()
        self.listener.close()
