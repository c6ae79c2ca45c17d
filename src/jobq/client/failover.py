"""Following the primary across several addresses: which server a client tries next, how
long it keeps trying, which requests it may send again, and what a reply to a request sent
again means.

A client given two or more addresses (``Client(["a:9922", "b:9922"])``) keeps one
connection, to one of them. It moves on when it must (``docs/client.md``, "Several
servers"):

- **A connection that cannot be made** moves on to the next address; after a whole pass
  through the list it waits (0.05 s, doubling to 1 s, with jitter) and tries again, until
  the call's deadline (``failover_s`` from the call's start, 15 s by default). Nothing was
  sent, so every request may go on this way.
- **A change refused with** ``-READONLY <host:port>`` (a standby) is sent to the primary it
  names: it was not applied. ``-SERVER-ERROR Not the primary`` (a deposed primary that
  knows no successor) sends it to the next address. At most :data:`MAX_HOPS` redirects
  follow each other; then (a standby naming a primary that is down, two standbys naming
  each other) the client waits as above and starts again from the list, until the
  deadline. ``-SERVER-ERROR`` :data:`~jobq.server.protocol.FENCED_IN_FLIGHT` (a change a
  deposed primary had taken before it was fenced: it may be in its log and its
  successor's) counts as a broken connection, below.
- **A connection that breaks after a request was sent**: the request may or may not have
  run. It is sent again (to the next address) only if sending it twice cannot do twice
  what once does (:func:`resend_rule`); otherwise :class:`~jobq.client.errors.OutcomeUnknown`
  is raised and nothing is sent again.

What is safe to send again:

- reads (whatever a viewer's token may run: ``inspect``, ``jobs``, ``job``, ``history``...),
  ``result`` (a wait for a result), and a worker's ``heartbeat`` (it extends the same lease
  again), ``whello``, ``wbeat`` and ``wbye``: :attr:`Resend.SAFE`;
- the commands that carry the job's id, chosen by the client before the first try
  (``add``, ``schedule``, ``submit``, ``rerun``'s ``new_id``): the id is the request's
  idempotency key, and the server refuses a second job with it. A resend answered
  ``Duplicate job`` means the first try made the job, and returns its id as the first try
  would have: :attr:`Resend.BY_JOB_ID`;
- ``xcomplete`` (by the worker holding the lease): it applies once, since a completed job
  is final and its lease no longer held. A resend answered ``Lease not held`` raises
  :class:`~jobq.client.errors.LeaseLost` saying that the first try may have been applied:
  :attr:`Resend.BY_LEASE`.

Everything else is not sent again: ``lease``/``xlease`` (a second lease would take a
second job while the first stays leased until its TTR), ``xfail`` and ``release`` (they
may put the job back in its queue, and a lease is named by the job and the worker only:
the same worker, another of its slots, may lease it again before the resend, which would
then fail or release that later attempt), ``run``, workq's ``complete``, ``fail`` and
``delete`` (by any client, not by a lease), ``pause``, ``resume``, ``cancel``, ``bulk``,
the schedules' changes and ``logappend`` (its lines would be logged twice).
"""

from __future__ import annotations

import enum
import random
import ssl
import time
from collections.abc import Iterator, Sequence
from typing import Any

import msgspec

from jobq.client.arguments import parse_address
from jobq.client.calls import Call
from jobq.client.errors import (
    LEASE_NOT_HELD,
    ClientError,
    ConnectionLost,
    LeaseLost,
    NoPrimary,
    NotPrimary,
    OutcomeUnknown,
    ReadOnly,
)
from jobq.server import protocol as p
from jobq.server.access import Role, needed_role

#: how long one call may look for a server that answers it, unless told otherwise
DEFAULT_FAILOVER_S = 15.0
#: the most ``-READONLY`` redirects followed in a row before waiting and starting again
MAX_HOPS = 3
#: the wait after a whole pass through the addresses found none, doubling up to the most
FIRST_BACKOFF_S = 0.05
MAX_BACKOFF_S = 1.0
#: the shortest wait to connect to one address, even when the deadline is nearer
MIN_CONNECT_S = 0.5
#: the engine's text for a job id that exists (``DuplicateJob``)
DUPLICATE_JOB = "Duplicate job"

Address = tuple[str, int]
#: a refusal of a change for not being sent to the primary
Refusal = ReadOnly | NotPrimary


def parse_addresses(text: str) -> list[Address]:
    """``HOST:PORT[,HOST:PORT...]`` as addresses, in order, each once. An empty one
    (``a,,b``, ``,``) or one :func:`parse_address` refuses raises ``ValueError``."""
    parts = [part.strip() for part in text.split(",")]
    if not all(parts):
        raise ValueError(f"an empty address in {text!r} (HOST:PORT,HOST:PORT...)")
    return unique([parse_address(part) for part in parts])


def addresses_of(given: Sequence[str | Address]) -> list[Address]:
    """The addresses of a list of ``"host:port"`` texts or ``(host, port)`` pairs."""
    if isinstance(given, str | bytes):
        raise TypeError("give several addresses as a list, not one text")
    found: list[Address] = []
    for item in given:
        if isinstance(item, str):
            found.extend(parse_addresses(item))
        elif isinstance(item, tuple) and len(item) == 2:
            host, port = item
            if not isinstance(host, str) or not isinstance(port, int) or not 0 < port < 65536:
                raise ValueError(f"not an address (host, port): {item!r}")
            found.append((host, port))
        else:
            raise TypeError(f"an address is 'host:port' or (host, port), not {item!r}")
    if not found:
        raise ValueError("no address given")
    return unique(found)


def unique(addresses: Sequence[Address]) -> list[Address]:
    return list(dict.fromkeys(addresses))


def shown(address: Address) -> str:
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class Resend(enum.Enum):
    """Whether a request whose connection broke after it was sent may be sent again."""

    NEVER = "never"
    SAFE = "safe"
    BY_JOB_ID = "by job id"
    BY_LEASE = "by lease"


_SAFE_WORDS = frozenset({"heartbeat", "whello", "wbeat", "wbye"})
#: ``xfail`` and ``release`` are not: they may requeue the job, which the same worker may
#: lease again before a resend (the module's doc)
_BY_LEASE_WORDS = frozenset({"xcomplete"})
_BY_JOB_ID_WORDS = frozenset({"submit", "rerun"})


def resend_rule(request: p.Request) -> Resend:
    """The rule for ``request`` (the module's doc says why)."""
    if isinstance(request, p.Extension):
        word = request.word
        if word in _SAFE_WORDS:
            return Resend.SAFE
        if word in _BY_LEASE_WORDS:
            return Resend.BY_LEASE
        if word in _BY_JOB_ID_WORDS:
            return Resend.BY_JOB_ID
    elif isinstance(request, p.Add | p.Schedule):
        return Resend.BY_JOB_ID
    elif isinstance(request, p.Result):
        return Resend.SAFE
    return Resend.SAFE if needed_role(request) <= Role.VIEWER else Resend.NEVER


def command_word(request: p.Request) -> str:
    return request.reply_word() or type(request).__name__


def created_reply(request: p.Request) -> p.Reply | None:
    """The reply the first try of a job-creating request got, when a resend is answered
    ``Duplicate job``: the first try made that job (None: not such a request)."""
    if isinstance(request, p.Add | p.Schedule):
        return p.Ok()
    if isinstance(request, p.Extension) and request.word in _BY_JOB_ID_WORDS:
        body: Any = msgspec.json.decode(request.body)
        job_id = body.get("new_id" if request.word == "rerun" else "id")
        return p.DataReply(msgspec.json.encode({"id": job_id}))
    return None


class Rotation:
    """A client's addresses, and the one it is at (its connection's, or the next to try).

    A redirect may name a server that is not in the list; it is tried first, then the
    list from the top (it is remembered only while it answers)."""

    def __init__(self, addresses: Sequence[Address]) -> None:
        self.addresses = list(addresses)
        self.current: Address = self.addresses[0]

    def order(self) -> Iterator[Address]:
        """Each address once: the current one first, then those after it, wrapping."""
        if self.current not in self.addresses:
            yield self.current
            yield from self.addresses
            return
        start = self.addresses.index(self.current)
        yield from self.addresses[start:] + self.addresses[:start]

    def move_on(self) -> None:
        """Make the address after the current one the next to try (the current one broke
        or did not answer in time)."""
        if self.current in self.addresses:
            index = self.addresses.index(self.current) + 1
            self.current = self.addresses[index % len(self.addresses)]
        else:
            self.current = self.addresses[0]

    def names(self) -> str:
        return ", ".join(shown(a) for a in self.addresses)


class Trip:
    """One call's way to a server that answers it: the deadline, the redirects followed,
    the waits between passes, the requests still to answer and the outcomes so far.

    The client runs ``trip.pending()`` on a connection, then hands the outcomes to
    :meth:`settle` (or the break to :meth:`broke`) until :meth:`done`."""

    __slots__ = (
        "_backoff_s", "calls", "closes", "deadline", "failover_s", "failures", "hops",
        "redirects", "resent", "results", "waiting",
    )

    def __init__(self, calls: Sequence[Call[Any]], failover_s: float) -> None:
        self.calls = calls
        self.failover_s = failover_s
        self.deadline = time.monotonic() + failover_s
        #: the outcomes, in the calls' order (complete once :meth:`done`)
        self.results: list[Any] = []
        #: indices of the calls not answered yet; None: all of them (the first try)
        self.waiting: list[int] | None = None
        #: indices of the calls sent on a connection that broke before their reply
        self.resent: set[int] = set()
        self.hops = 0
        #: the client's count of ``close()`` calls when the trip began: a close from
        #: another thread ends the trip (it does not send again or look further)
        self.closes = 0
        self._backoff_s = FIRST_BACKOFF_S
        #: what the redirects said, for the error if no primary answers
        self.redirects: list[str] = []
        #: why each address could not be reached, for the error if none can be
        self.failures: dict[Address, str] = {}

    def pending(self) -> Sequence[Call[Any]]:
        if self.waiting is None:
            return self.calls
        return [self.calls[i] for i in self.waiting]

    def done(self) -> bool:
        return self.waiting is not None and not self.waiting

    def _all_waiting(self) -> list[int]:
        if self.waiting is None:
            self.waiting = list(range(len(self.calls)))
            self.results = [None] * len(self.calls)
        return self.waiting

    def remaining_s(self) -> float:
        return self.deadline - time.monotonic()

    def connect_timeout_s(self, timeout_s: float) -> float:
        return min(timeout_s, max(self.remaining_s(), MIN_CONNECT_S))

    def backoff_s(self) -> float:
        """The wait before the next pass (with jitter: up to a quarter less), at most what
        is left of the deadline; the next one doubles."""
        wait = self._backoff_s * (1 - random.random() / 4)
        self._backoff_s = min(self._backoff_s * 2, MAX_BACKOFF_S)
        return max(0.0, min(wait, self.remaining_s()))

    def could_not_connect(self, address: Address, exc: ConnectionLost) -> None:
        """Note why ``address`` took no connection; a certificate that cannot be verified
        is raised at once (a setting to fix, not a server to wait for)."""
        cause = exc.__cause__
        if isinstance(cause, ssl.SSLCertVerificationError):
            raise exc
        if isinstance(cause, TimeoutError):
            self.failures[address] = "timed out"
        elif isinstance(cause, OSError) and cause.strerror:
            self.failures[address] = cause.strerror
        else:
            self.failures[address] = str(cause or exc)

    def unreachable(self, rotation: Rotation) -> ConnectionLost:
        """The error once no address could be reached before the deadline."""
        why = "; ".join(f"{shown(a)}: {text}" for a, text in self.failures.items())
        if self.redirects:
            return NoPrimary(
                f"no primary answered within {self.failover_s:g} s "
                f"({'; '.join(self.redirects)}; {why})"
            )
        return ConnectionLost(
            f"cannot reach any of {rotation.names()} within {self.failover_s:g} s ({why})"
        )

    def broke(self, exc: ConnectionLost, at: Address) -> None:
        """The connection to ``at`` broke (or timed out) after the pending calls were sent:
        returns if they may all be sent again, else raises :class:`OutcomeUnknown`."""
        for index in self._all_waiting():
            request = self.calls[index].request
            if resend_rule(request) is Resend.NEVER:
                raise OutcomeUnknown(
                    f"the connection to {shown(at)} broke after `{command_word(request)}` "
                    f"was sent ({exc}): it may or may not have been applied, and is not sent "
                    f"again"
                ) from exc
        self.resent.update(self._all_waiting())
        self.failures[at] = str(exc)

    def settle(self, outcomes: list[Any], at: Address) -> Refusal | None:
        """Keep the outcomes of the pending calls, except those refused for not being sent
        to the primary (``-READONLY``, ``Not the primary``): they stay pending, and the
        refusal is returned. A change a deposed primary had taken before it was fenced
        (``NotPrimary.in_flight``, docs/ha.md) may be in its log and its successor's: it
        is sent again only if :func:`resend_rule` allows (else the call's outcome is
        :class:`OutcomeUnknown`, and the refusal is returned all the same: the server is
        not the primary)."""
        if self.waiting is None:  # the first try: most often, every call answered
            for outcome in outcomes:
                if isinstance(outcome, ReadOnly | NotPrimary):
                    break
            else:
                self.results = outcomes
                self.waiting = []
                return None
        refusal: Refusal | None = None
        still: list[int] = []
        for index, outcome in zip(self._all_waiting(), outcomes, strict=True):
            if isinstance(outcome, ReadOnly | NotPrimary):
                request = self.calls[index].request
                rule = resend_rule(request)
                refusal = outcome
                in_flight = isinstance(outcome, NotPrimary) and outcome.in_flight
                if rule is Resend.NEVER and in_flight:
                    self.results[index] = OutcomeUnknown(
                        f"{shown(at)} stopped being the primary with `{command_word(request)}`"
                        f" in flight ({outcome}): it may or may not have been applied, and "
                        f"is not sent again"
                    )
                    continue
                if rule is not Resend.NEVER and in_flight:
                    self.resent.add(index)  # it may be in a deposed primary's log
                still.append(index)
                continue
            if index in self.resent:
                outcome = self._after_resend(index, outcome)
            self.results[index] = outcome
        self.waiting = still
        if refusal is None:
            self.hops = 0
        return refusal

    def redirect(self, refusal: Refusal, at: Address) -> Address | None:
        """The primary to try after ``at`` refused with ``refusal``, or None when it names
        none or the hops in a row are used up (the caller moves on to its next address,
        after :meth:`backoff_s`). Raises :class:`NoPrimary` once the deadline has passed."""
        if isinstance(refusal, ReadOnly):
            self.redirects.append(f"{shown(at)} is a standby of {refusal.primary}")
        else:
            self.redirects.append(f"{shown(at)}: {refusal.text}")
        del self.redirects[:-MAX_HOPS]
        if self.remaining_s() <= 0:
            raise NoPrimary(
                f"no primary answered within {self.failover_s:g} s "
                f"({'; '.join(self.redirects)})"
            )
        self.hops += 1
        if self.hops > MAX_HOPS:
            self.hops = 0
            return None
        primary = named(refusal)
        return None if primary == at else primary

    def _after_resend(self, index: int, outcome: Any) -> Any:
        """What a reply to a request sent again means (:class:`Resend`)."""
        call = self.calls[index]
        rule = resend_rule(call.request)
        if not isinstance(outcome, ClientError):
            return outcome
        text = outcome.text
        if rule is Resend.BY_JOB_ID and text == DUPLICATE_JOB:
            reply = created_reply(call.request)
            if reply is not None:
                try:
                    return call.convert(reply)
                except ConnectionLost as exc:  # a reply that does not convert
                    return exc
        if rule is Resend.BY_LEASE and isinstance(outcome, LeaseLost):
            return LeaseLost(
                f"{LEASE_NOT_HELD} (sent again after the connection broke: the first try "
                f"may have been applied)"
            )
        return outcome


def named(refusal: Refusal) -> Address | None:
    """The primary a refusal names, if it names one."""
    try:
        return parse_address(refusal.primary)
    except ValueError:  # none named ("-READONLY ", "Not the primary")
        return None
