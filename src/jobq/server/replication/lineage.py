"""Whether a standby's log can go on as a copy of the primary's, by their epochs (docs/ha.md,
"Promotion and epochs").

Each primary starts its epoch with a record that says where the log ended before it
(``engine/epochs.py``). A standby says in ``replicate`` which epoch its log holds last and
where that epoch began. The primary then knows, without reading the standby's log:

* a standby whose epoch is newer than the primary's is following a deposed primary
  (refused; the standby keeps its log);
* a standby whose newest epoch the primary does not hold (at that place) has records the
  primary never had, and so has one whose log goes on past the place where a newer epoch
  began: a deposed primary's tail, or what it streamed before it was deposed. It must
  catch up anew (``wire.CATCH_UP``: its log is moved aside, nothing deleted);
* otherwise its log is a prefix of the primary's, up to the CRC check of its last record
  (``feed.resolve_start``), which also finds a segment the primary's cleaner rewrote.
"""

from __future__ import annotations

from jobq.server.replication.wire import CATCH_UP, Replicate


def lineage_refusal(primary_epochs: list[tuple[int, int, int]], request: Replicate) -> str | None:
    """Why the primary (whose log holds ``primary_epochs``) cannot stream to the standby
    of ``request`` (:data:`~jobq.server.replication.wire.CATCH_UP` in it if the standby
    must catch up anew); None if its epochs do not stand in the way."""
    own = primary_epochs[-1][0] if primary_epochs else 0
    if request.epoch > own:
        return (
            f"the standby's log holds epoch {request.epoch}, newer than this server's "
            f"epoch {own}: this server is not the primary any more"
        )
    if request.epoch:
        began = {epoch: (sequence, offset) for epoch, sequence, offset in primary_epochs}
        if began.get(request.epoch) != (request.epoch_sequence, request.epoch_offset):
            return (
                f"the standby's log holds epoch {request.epoch}, which this primary's log "
                f"does not: it holds records this primary never had: {CATCH_UP}"
            )
    for epoch, sequence, offset in primary_epochs:
        if epoch > request.epoch:
            if (request.sequence, request.offset) > (sequence, offset):
                return (
                    f"the standby's log goes on past where epoch {epoch} began (segment "
                    f"{sequence} offset {offset}): it holds records this primary never "
                    f"had: {CATCH_UP}"
                )
            break
    return None


def older_primary(primary_epoch: int, own_epoch: int, least_epoch: int = 0) -> str | None:
    """Why a standby whose log holds ``own_epoch`` refuses a primary of ``primary_epoch``
    (``least_epoch``: the least it was told that primary has); None if it does not."""
    if primary_epoch < own_epoch:
        return (
            f"its epoch {primary_epoch} is older than epoch {own_epoch}, the newest in this "
            "server's log: it is not the primary any more"
        )
    if primary_epoch < least_epoch:
        return f"its epoch {primary_epoch} is older than epoch {least_epoch}, which it should have"
    return None
