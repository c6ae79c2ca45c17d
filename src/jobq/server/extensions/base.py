"""What every part of the extension commands shares: the engine, whom the running request
acts for, the audit trail, and the lookup of a job's id."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from jobq.engine.machine import Engine
from jobq.server import protocol as p
from jobq.server.extensions.bodies import BadRequest, Deferred

if TYPE_CHECKING:
    from jobq.server.access import Principal
    from jobq.server.audit import AuditTrail
    from jobq.server.workers import WorkerRegistry

#: a command's handler: its body, the connection's token (for a reply that waits), now
Handler = Callable[[bytes, object, int], "bytes | Deferred | None"]


class ExtensionsBase:
    """The state of the extension commands of one server."""

    def __init__(
        self,
        engine: Engine,
        history: Callable[[bytes, int], list[dict[str, object]]],
        audit: AuditTrail | None = None,
    ) -> None:
        self.engine = engine
        self._history = history
        #: where admin actions are recorded (None: nowhere)
        self.audit = audit
        #: whom the running request acts for (set by the dispatcher before each; None on a
        #: server without authentication)
        self.caller: Principal | None = None
        #: the live workers, told of signs of life and asked whether a name is served (set
        #: by the dispatcher; None: no registry, nothing is told or warned of)
        self.workers: WorkerRegistry | None = None

    def _who(self) -> str:
        """Who runs the request, for the audit trail (``client`` without authentication)."""
        return self.caller.name if self.caller is not None else "client"

    def _id(self, text: str) -> bytes:
        return self.engine.resolve_id(text)

    @staticmethod
    def _full_id(text: str) -> bytes:
        try:
            return p.parse_id(text)
        except p.ClientError as exc:
            raise BadRequest(p.INVALID_ID) from exc

    def _audit(self, who: str, action: str, target: str, reason: str = "") -> None:
        if self.audit is not None:
            self.audit.action(who, action, target, reason)
