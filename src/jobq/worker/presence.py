"""A worker's presence on its server: it announces itself (``whello``: its id, host, pid,
the names it serves, its concurrency, version and start time), heartbeats (``wbeat``, with
its counts of outcomes) and says goodbye on a clean stop (``wbye``), all from the runtime's
heartbeat thread (``docs/worker.md``, "Workers in view").

A new connection announces again, and so does a heartbeat the server answers with "not
known" (it expired the worker, or it restarted). A server without these commands (workq's,
an older jobq) is not asked again; the worker works on without being listed.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import socket
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from jobq import __version__
from jobq.client import AccessRefused, Client, ClientError, JobqError

log = logging.getLogger("jobq.worker")

#: how often a worker heartbeats to stay in the server's worker list, in seconds (the
#: server drops it after a few intervals without a sign of life)
DEFAULT_HEARTBEAT_S = 5.0
#: after a failed announcement or heartbeat (the server unreachable), try again this soon
RETRY_S = 1.0


class Presence:
    """What the heartbeat thread sends to keep the worker listed.

    Parameters:
        worker_id (str): the id its leases are held under.
        names (list[str]): the job names it serves.
        concurrency (int): handlers it runs at once.
        heartbeat_s (float): how often it heartbeats (announced to the server, which
            expires it after a few of these).
        outcomes (callable): its counts of outcomes so far, sent with each heartbeat.
        refused (callable): told when the server refuses the token or its role.
    """

    def __init__(
        self,
        worker_id: str,
        names: Sequence[str],
        concurrency: int,
        *,
        heartbeat_s: float = DEFAULT_HEARTBEAT_S,
        outcomes: Callable[[], dict[str, int]],
        refused: Callable[[AccessRefused], None],
    ) -> None:
        self.worker_id = worker_id
        self.names = list(names)
        self.concurrency = concurrency
        self.heartbeat_s = heartbeat_s
        self._outcomes = outcomes
        self._refused = refused
        self.started = datetime.now(UTC)
        #: the server knows the worker (on the connection now open)
        self.announced = False
        #: False once a server showed it has no such commands, or refused the announcement
        self.enabled = True
        self._next_s = -math.inf

    def next_at(self) -> float:
        """When :meth:`tick` has something to send next (monotonic seconds)."""
        return self._next_s if self.enabled else math.inf

    def tick(self, client: Client, now_s: float) -> None:
        """Announce or heartbeat if it is time (the heartbeat thread's call, each time it
        wakes). ``client`` has just opened a new connection if it was not connected: then
        the caller set :attr:`announced` to False."""
        if not self.enabled or now_s < self._next_s:
            return
        self._next_s = now_s + self.heartbeat_s
        try:
            if not self.announced:
                self._announce(client)
            elif not client.wbeat(self.worker_id, self._outcomes()):
                self._announce(client)  # the server forgot it: expired, or restarted
        except AccessRefused as exc:
            self.enabled = False
            self._refused(exc)
        except ClientError as exc:  # a server without the commands, or a refused value
            self.enabled = False
            log.warning(
                "worker %s: the server does not list workers (%s); working on unlisted",
                self.worker_id, exc.text,
            )
        except JobqError as exc:  # unreachable, or failing: announce again when back
            self.announced = False
            self._next_s = now_s + min(RETRY_S, self.heartbeat_s)
            log.debug("worker %s: heartbeat failed: %s", self.worker_id, exc)

    def _announce(self, client: Client) -> None:
        client.whello(
            self.worker_id,
            self.names,
            host=socket.gethostname(),
            pid=os.getpid(),
            concurrency=self.concurrency,
            version=__version__,
            started=self.started,
            heartbeat_ms=max(1, round(self.heartbeat_s * 1000)),
        )
        self.announced = True

    def goodbye(self, client: Client) -> None:
        """Leave the server's worker list (a clean stop), on the connection already open:
        a server that cannot be reached expires the worker by itself."""
        if self.enabled and self.announced and client.connected:
            with contextlib.suppress(JobqError):
                client.wbye(self.worker_id)
            self.announced = False
