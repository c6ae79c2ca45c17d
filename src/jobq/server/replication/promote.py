"""The ``promote`` command (``jobq promote``, ``POST /api/server/promote``): make this
standby the primary (``roles.py``). An admin's; a standby runs it although it refuses other
changes. Its reply goes out once the epoch record is in the log, as any change's."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from jobq.engine.errors import InvalidStatus
from jobq.engine.limits import MAX_EPOCH
from jobq.server.extensions.bodies import BadRequest, body, data_reply, register
from jobq.server.replication.roles import RoleRefused

if TYPE_CHECKING:
    from collections.abc import Callable

    from jobq.server.replication.roles import Roles


class PromoteBody(msgspec.Struct, forbid_unknown_fields=True):
    #: the epoch to start (None: one more than any this server saw)
    epoch: int | None = None


register(PromoteBody)


def promote_command(roles: Roles) -> Callable[[bytes, object, int], bytes]:
    """The handler of ``promote``: ``{"epoch": N}`` (optional); answers ``{"role":
    "primary", "epoch": N, "was": "standby of HOST:PORT" | "fenced"}``."""

    def promote(data: bytes, token: object, now_ns: int) -> bytes:
        request = body(PromoteBody, data or b"{}")
        if request.epoch is not None and not 1 <= request.epoch <= MAX_EPOCH:
            raise BadRequest(f"epoch: must be 1 to {MAX_EPOCH}")
        was = roles.role if roles.primary is None else f"standby of {roles.primary}"
        try:
            epoch = roles.promote_watched(request.epoch, by="promote")
        except RoleRefused as exc:
            raise InvalidStatus(str(exc)) from exc
        return data_reply({"role": "primary", "epoch": epoch, "was": was})

    return promote
