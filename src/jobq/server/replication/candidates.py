"""Who may take the lease when the primary is gone (docs/ha.md, "Who may win"): the member
keys the servers publish, and Raft's "most up-to-date log" rule over them.

A candidate must not lose an acknowledged record. With ``--sync-replicas N`` such a record
is on the primary and on at least N standbys, not on every one, so the winner must be a
server with the longest log among the live ones. Logs are compared as Raft compares them:
the epoch of the last record first (an older primary's unacknowledged tail may run past
the log of a newer one), then the place in the log; ties go to the smaller server id.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from jobq.server.replication.etcd_kv import KeyValue

#: a log position as the server compares them: (epoch of its last record, segment, offset)
Position = tuple[int, ...]
#: a member's state, in its key: it follows a primary, or leads, and the position in its
#: key may be old; or it saw no primary and published its position as of then
FOLLOWING, LEADING, CANDIDATE = "following", "leading", "candidate"


@dataclass(frozen=True)
class Member:
    """A live server, as its member key says."""

    server_id: str
    address: str
    position: Position
    state: str


def member_value(server_id: str, address: str, state: str, position: Position) -> str:
    """A member key's value (JSON)."""
    return json.dumps(
        {"id": server_id, "address": address, "state": state, "position": list(position)}
    )


def parse_member(item: KeyValue) -> Member | None:
    """The member a key describes; None for a value that is not one (ignored)."""
    try:
        data = json.loads(item.value)
        position = tuple(int(p) for p in data["position"])
        return Member(str(data["id"]), str(data["address"]), position, str(data["state"]))
    except (ValueError, KeyError, TypeError):
        return None


def outranked(members: list[Member], server_id: str, position: Position) -> Member | None:
    """A live member that should win before the server ``server_id`` at ``position``: a
    longer log, or as long a one and a smaller server id; None if it may take the lease."""
    for member in members:
        if member.server_id == server_id:
            continue
        if member.position > position or (
            member.position == position and member.server_id < server_id
        ):
            return member
    return None
