"""The ``rerun`` command of jobq's protocol extensions (docs/extensions.md): a new job with a
finished job's name, payload and options, linked both ways (``rerun_of``, ``reruns``)."""

from __future__ import annotations

import uuid

import msgspec

from jobq.server.extensions.base import ExtensionsBase
from jobq.server.extensions.bodies import Deferred, body, data_reply, register


class Rerun(msgspec.Struct, forbid_unknown_fields=True):
    #: the job to rerun: its id or a unique prefix
    id: str
    #: the new job's id (a UUID): chosen by the client, a retry after a lost connection is
    #: refused as a duplicate instead of running the job twice; generated when omitted
    new_id: str | None = None


register(Rerun)


class RerunCommands(ExtensionsBase):
    """The rerun command, a part of :class:`~jobq.server.extensions.Extensions`."""

    def rerun(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        r: Rerun = body(Rerun, data)
        original_id = self._id(r.id)
        new_id = self._full_id(r.new_id) if r.new_id is not None else uuid.uuid4().bytes
        job = self.engine.rerun(original_id, new_id=new_id, now_ns=now_ns)
        new_text = str(uuid.UUID(bytes=job.id))
        self._audit(self._who(), "rerun", f"job {uuid.UUID(bytes=original_id)}", f"as {new_text}")
        return data_reply({"id": new_text, "rerun_of": str(uuid.UUID(bytes=original_id))})
