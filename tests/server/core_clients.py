"""A connection as the server's core sees it, for the tests that drive the core directly:
it collects the replies it is given, in order, and adds jobs."""

from __future__ import annotations

import uuid

from jobq.server import protocol as p
from jobq.server.core import Core, Slot


class CoreClient:
    """Collects its replies; :meth:`add` sends an ``add`` of ``payload`` to ``queue``."""

    def __init__(self, queue: str = "q", payload: bytes = b"payload") -> None:
        self.queue = queue
        self.payload = payload
        self.replies: list[bytes] = []
        self.slots: list[Slot] = []

    def slot_ready(self) -> None:
        while self.slots and self.slots[0].data is not None:
            data = self.slots.pop(0).data
            assert data is not None
            self.replies.append(data)

    def unblock(self) -> None:
        pass

    def add(self, core: Core) -> None:
        slot = Slot(self)
        self.slots.append(slot)
        request = p.Add(uuid.uuid4().bytes, self.queue, 60_000, 3_600_000, self.payload)
        core.execute(self, request, slot)
