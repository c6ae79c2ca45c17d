"""The ``bulk`` command of jobq's protocol extensions (docs/extensions.md): pause, resume,
cancel, delete or rerun every job of a selection at once, or, as a dry run, say which."""

from __future__ import annotations

import uuid

import msgspec

from jobq.engine.limits import MAX_BULK_JOBS
from jobq.server.extensions.base import ExtensionsBase
from jobq.server.extensions.bodies import (
    BadRequest,
    Deferred,
    Reasoned,
    body,
    data_reply,
    reason_actor,
    register,
)
from jobq.server.extensions.selection import Selection, describe, is_empty, job_filter

#: the jobs a bulk action's reply names (the first, in the order applied)
REPLY_IDS = 10
#: the limit a bulk action has unless its body gives one (null: none)
DEFAULT_LIMIT = 1000


class Bulk(Reasoned, forbid_unknown_fields=True):
    action: str
    selection: Selection = msgspec.field(default_factory=Selection)
    dry_run: bool = False
    limit: int | None = DEFAULT_LIMIT


register(Bulk)


class BulkCommands(ExtensionsBase):
    """The bulk command, a part of :class:`~jobq.server.extensions.Extensions`."""

    def bulk(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        """``{"action", "dry_run", "matched", "count", "requested", "ids"}``: the selection
        held ``matched`` jobs; the action changed (or, dry run, would change) ``count`` of
        them, of which ``requested`` were running and only asked to stop; ``ids`` are the
        first of those; a rerun adds ``new_ids``, the first of the jobs it made (in the same
        order)."""
        r: Bulk = body(Bulk, data)
        reason, actor = reason_actor(r, self.caller)
        if is_empty(r.selection):
            raise BadRequest("Give a selection: at least one constraint (status, name, ...)")
        if r.limit is not None and not 1 <= r.limit <= MAX_BULK_JOBS:
            raise BadRequest(f"Invalid limit: 1 to {MAX_BULK_JOBS}, or null")
        outcome = self.engine.bulk(
            r.action, job_filter(self.engine, r.selection), reason=reason, actor=actor,
            limit=r.limit, dry_run=r.dry_run, now_ns=now_ns,
            new_ids=lambda count: [uuid.uuid4().bytes for _ in range(count)],
        )
        if not r.dry_run and outcome.count:
            self._audit(
                actor, r.action, f"{outcome.count} jobs ({describe(r.selection)})", reason
            )
        reply: dict[str, object] = {
            "action": r.action,
            "dry_run": r.dry_run,
            "matched": outcome.matched,
            "count": outcome.count,
            "requested": outcome.requested,
            "ids": [str(uuid.UUID(bytes=i)) for i in outcome.ids[:REPLY_IDS]],
        }
        if outcome.new_ids:
            reply["new_ids"] = [str(uuid.UUID(bytes=i)) for i in outcome.new_ids[:REPLY_IDS]]
        return data_reply(reply)
