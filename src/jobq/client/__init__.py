"""The jobq client library: workq's TCP line protocol from Python, blocking or asyncio.

::

    from jobq.client import Client

    with Client("127.0.0.1", 9922) as c:
        job_id = c.add("thumbnails", b'{"path": "a.png"}', ttr_ms=30_000, ttl_ms=3_600_000)
        job = c.lease("thumbnails", wait_timeout_ms=10_000)
        c.complete(job.id, b"done")
        print(c.result(job_id).result)

``AsyncClient`` has the same methods as coroutines. ``docs/client.md`` has more examples.

Authentication and TLS
----------------------
``Client(host, port, token="...")`` sends ``auth <token>`` first on each new connection, in
the same write as the connection's first requests; a server that refuses it raises
:class:`AuthenticationFailed`. ``tls=True`` connects with TLS trusting the system's CAs,
``tls_ca="ca.pem"`` trusting that file's certificates, ``tls=context`` with an
``ssl.SSLContext`` of your own. ``connect()`` opens (and authenticates) the connection
before the first request, to learn at once that an address or token is wrong.

Several servers
---------------
``Client(["10.0.0.1:9922", "10.0.0.2:9922"])`` (or ``Client.from_address("a:9922,b:9922")``)
follows the primary across a primary and its standbys: a change a standby refuses
(``-READONLY <primary>``) goes to the primary it names, a server that cannot be reached
makes the client try the next, for up to ``failover_s`` seconds per call, and a request
whose connection broke after it was sent is sent again only when that is safe (reads,
heartbeats, ``add``/``submit`` by their job id, finishing a lease); otherwise it raises
:class:`OutcomeUnknown`. :mod:`~jobq.client.failover` has the rules. With one address a
client talks to that server only, as before (a standby's refusal raises :class:`ReadOnly`).

Connections
-----------
A client holds one connection, opened at the first request and kept for the next ones. If
the server closed it while it was idle, the next request notices before sending and opens a
new one, once. A connection that breaks after a request was sent is never retried (the
request may have run): the request raises :class:`ConnectionLost` and the next request
connects again. ``close()`` closes the connection; a closed client reconnects if used again.

One request runs at a time per client: ``Client`` takes a lock around each request, so
threads may share one (a blocking ``lease`` holds it while it waits; give each worker
thread its own client), and ``AsyncClient`` takes an ``asyncio.Lock``.

Timeouts
--------
``timeout_s`` bounds connecting and waiting for each reply. For the blocking commands the
reply wait is extended by the command's own wait: ``lease`` and ``result`` by their
``wait_timeout_ms``, ``run`` by ``wait_timeout_ms + ttr_ms`` (a worker may lease the job at
the end of the wait and then use its whole TTR). A reply that does not come in time raises
:class:`ReplyTimeout` and closes the connection. The server's own ``-TIMEOUT`` (nothing
within the wait-timeout) raises :class:`JobTimeout`.

Errors
------
Each error reply has its class: ``-CLIENT-ERROR`` :class:`ClientError` (a refused token
:class:`AuthenticationFailed`, a lost lease :class:`LeaseLost`), ``-SERVER-ERROR``
:class:`ServerError`, ``-TIMEOUT`` :class:`JobTimeout`, ``-NOT-FOUND`` :class:`NotFound`;
all are :class:`JobqError`, with the reply's ``kind`` and ``text``. A dropped connection,
a failed connect or a reply that breaks the protocol raises :class:`ConnectionLost`.
Arguments that cannot be sent (a bad name or id, a time with a fraction of a second, a
payload that is neither ``bytes`` nor ``str``) raise ``ValueError``/``TypeError`` before
anything is sent; values the server judges (TTR, TTL, priority ranges...) are left to it.

The wire format comes from :mod:`jobq.server.protocol`: requests encode themselves and
``ReplyParser`` reads the replies.

Modules
-------
:mod:`~jobq.client.operations` describes every operation once (its request, how its reply
converts); :mod:`~jobq.client.sync` (``Client``) and :mod:`~jobq.client.aio`
(``AsyncClient``) run them, on what :mod:`~jobq.client.base` gives both.
:mod:`~jobq.client.calls` holds what a call is, :mod:`~jobq.client.arguments` the checking
of arguments, :mod:`~jobq.client.models` the result types, :mod:`~jobq.client.errors`
the exceptions, :mod:`~jobq.client.tls` the TLS context and :mod:`~jobq.client.failover`
what a client of several servers does. Import from ``jobq.client``.
"""

from jobq.client.aio import AsyncClient
from jobq.client.arguments import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    CreatedBy,
    Data,
    ExtTime,
    JobId,
    When,
    check_name,
    parse_address,
    rfc3339,
)
from jobq.client.base import DEFAULT_TIMEOUT_S
from jobq.client.errors import (
    LEASE_NOT_HELD,
    AccessRefused,
    AuthenticationFailed,
    ClientError,
    ConnectionLost,
    Forbidden,
    JobqError,
    JobTimeout,
    LeaseLost,
    NoPrimary,
    NotFound,
    NotPrimary,
    OutcomeUnknown,
    ReadOnly,
    ReplyTimeout,
    ServerError,
)
from jobq.client.failover import DEFAULT_FAILOVER_S, parse_addresses
from jobq.client.logs import LogLines, LogPage
from jobq.client.models import (
    BulkResult,
    Heartbeat,
    HeartbeatReply,
    JobInfo,
    JobPage,
    JobResult,
    JobsChanged,
    JobState,
    LeasedJob,
    QueueInfo,
    RetryBackoff,
    ServerInfo,
    Submitted,
    WorkerLease,
)
from jobq.client.operations import DEFAULT_LEASE_WAIT_MS, DEFAULT_TTL_MS, DEFAULT_TTR_MS
from jobq.client.sync import Client

#: jobq.worker.registry checks handler names with it
_name = check_name

__all__ = [
    "DEFAULT_FAILOVER_S",
    "DEFAULT_HOST",
    "DEFAULT_LEASE_WAIT_MS",
    "DEFAULT_PORT",
    "DEFAULT_TIMEOUT_S",
    "DEFAULT_TTL_MS",
    "DEFAULT_TTR_MS",
    "LEASE_NOT_HELD",
    "AccessRefused",
    "AsyncClient",
    "AuthenticationFailed",
    "BulkResult",
    "Client",
    "ClientError",
    "ConnectionLost",
    "CreatedBy",
    "Data",
    "ExtTime",
    "Forbidden",
    "Heartbeat",
    "HeartbeatReply",
    "JobId",
    "JobInfo",
    "JobPage",
    "JobResult",
    "JobState",
    "JobTimeout",
    "JobqError",
    "JobsChanged",
    "LeaseLost",
    "LeasedJob",
    "LogLines",
    "LogPage",
    "NoPrimary",
    "NotFound",
    "NotPrimary",
    "OutcomeUnknown",
    "QueueInfo",
    "ReadOnly",
    "ReplyTimeout",
    "RetryBackoff",
    "ServerError",
    "ServerInfo",
    "Submitted",
    "When",
    "WorkerLease",
    "parse_address",
    "parse_addresses",
    "rfc3339",
]
