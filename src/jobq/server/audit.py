"""The audit trail: authentication failures (address, time, count per address) and admin
actions (who, what, when), one line each in the server log (logger ``jobq.audit``) and the
last :data:`CAPACITY` entries in memory for the ``audit`` command, ``GET /api/audit`` and
``jobq audit``.

Failures also decide how long a wrong token waits for its answer (:meth:`AuditTrail.
auth_failed`): the more recent failures from an address, the longer, up to
:data:`MAX_FAILURE_DELAY_S`. Their log lines are rate-limited, per address and overall, so a
flood of wrong tokens costs a few lines. Nothing here ever sees a token.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

import msgspec

from jobq.server.extensions import BadRequest, Deferred, data_reply, format_time

logger = logging.getLogger("jobq.audit")

#: entries kept in memory (the oldest go first)
CAPACITY = 1000
#: addresses whose failures are counted (the least recently failing go first)
MAX_ADDRESSES = 10_000
#: the delay before the answer to a wrong token: this, doubled for each recent failure from
#: the same address, up to MAX_FAILURE_DELAY_S
FIRST_FAILURE_DELAY_S = 0.1
MAX_FAILURE_DELAY_S = 5.0
#: failures older than this no longer lengthen the delay
FAILURE_MEMORY_S = 600.0
#: one log line per address at most this often (the next says how many came meanwhile)
LOG_INTERVAL_S = 10.0
#: at most this many failure lines per LOG_INTERVAL_S over all addresses
MAX_LOG_LINES_PER_INTERVAL = 20
#: longest text (a reason, a schedule name) an entry keeps, in characters
MAX_TEXT_CHARS = 255


def clean(text: str) -> str:
    """``text`` safe for one log line: control characters escaped, clipped."""
    if len(text) > MAX_TEXT_CHARS:
        text = text[:MAX_TEXT_CHARS] + "..."
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class _Address:
    """Failures from one address."""

    __slots__ = ("last_logged_s", "last_ns", "last_s", "recent", "total", "unlogged")

    def __init__(self) -> None:
        self.total = 0
        #: failures not yet in a log line
        self.unlogged = 0
        #: failures since the address was last quiet for FAILURE_MEMORY_S
        self.recent = 0
        self.last_s = 0.0
        self.last_ns = 0
        self.last_logged_s = float("-inf")


class AuditTrail:
    """One server's audit trail.

    Parameters:
        capacity (int): entries kept in memory.
        first_failure_delay_s (float): the delay before answering an address's first wrong
            token (0: no delays).
        clock_ns (callable): Unix ns, for the entries' times.
        monotonic_s (callable): seconds, for delays and the log's rate limit.
    """

    def __init__(
        self,
        capacity: int = CAPACITY,
        *,
        first_failure_delay_s: float = FIRST_FAILURE_DELAY_S,
        clock_ns: Callable[[], int] = time.time_ns,
        monotonic_s: Callable[[], float] = time.monotonic,
    ) -> None:
        self.entries: deque[dict[str, Any]] = deque(maxlen=capacity)
        self.first_failure_delay_s = first_failure_delay_s
        #: failed authentications since the server started (for /metrics)
        self.failures_total = 0
        self._addresses: OrderedDict[str, _Address] = OrderedDict()
        self._clock_ns = clock_ns
        self._monotonic_s = monotonic_s
        self._window_start_s = float("-inf")
        self._window_lines = 0
        self._suppressed = 0

    # -- admin actions

    def action(self, who: str, action: str, target: str, detail: str = "") -> None:
        """``who`` did ``action`` to ``target`` (e.g. ``job <id>``, ``schedule <name>``)."""
        entry: dict[str, Any] = {
            "time": format_time(self._clock_ns()),
            "event": "action",
            "who": clean(who),
            "action": action,
            "target": clean(target),
        }
        if detail:
            entry["detail"] = clean(detail)
        self.entries.append(entry)
        logger.info(
            "%s %s %s%s", entry["who"], action, entry["target"],
            f" ({entry['detail']})" if detail else "",
        )

    # -- authentication failures

    def auth_failed(self, address: str, via: str, why: str) -> float:
        """Count a failed authentication from ``address`` (``via`` tcp or http; ``why``: no
        token, invalid token...); log it, rate-limited. Returns how long to wait before
        answering it, in seconds."""
        self.failures_total += 1
        now_s = self._monotonic_s()
        addresses = self._addresses
        state = addresses.get(address)
        if state is None:
            state = addresses[address] = _Address()
            if len(addresses) > MAX_ADDRESSES:
                addresses.popitem(last=False)
        else:
            addresses.move_to_end(address)
        if now_s - state.last_s > FAILURE_MEMORY_S:
            state.recent = 0
        state.total += 1
        state.recent += 1
        state.unlogged += 1
        state.last_s = now_s
        state.last_ns = self._clock_ns()
        if now_s - state.last_logged_s >= LOG_INTERVAL_S and self._may_log(now_s):
            self._log_failure(address, via, why, state)
            state.last_logged_s = now_s
        delay_s: float = self.first_failure_delay_s * 2 ** min(state.recent - 1, 16)
        return min(MAX_FAILURE_DELAY_S, delay_s)

    def _may_log(self, now_s: float) -> bool:
        if now_s - self._window_start_s >= LOG_INTERVAL_S:
            if self._suppressed:
                logger.warning(
                    "%d authentication failure lines were left out", self._suppressed
                )
            self._window_start_s = now_s
            self._window_lines = 0
            self._suppressed = 0
        if self._window_lines >= MAX_LOG_LINES_PER_INTERVAL:
            self._suppressed += 1
            return False
        self._window_lines += 1
        return True

    def _log_failure(self, address: str, via: str, why: str, state: _Address) -> None:
        entry = {
            "time": format_time(self._clock_ns()),
            "event": "auth_failure",
            "address": address,
            "via": via,
            "reason": why,
            "count": state.unlogged,
            "total": state.total,
        }
        self.entries.append(entry)
        logger.warning(
            "authentication failed from %s (%s): %s; %d since the last line, %d in all",
            address, via, why, state.unlogged, state.total,
        )
        state.unlogged = 0

    def failures(self, limit: int = CAPACITY) -> list[dict[str, Any]]:
        """Failures by address: the ``limit`` most recently failing, the most recent last."""
        addresses = list(self._addresses.items())[-limit:]
        return [
            {"address": address, "total": state.total, "last": format_time(state.last_ns)}
            for address, state in addresses
        ]

    # -- the ``audit`` command

    def recent(self, limit: int = CAPACITY) -> list[dict[str, Any]]:
        """The last ``limit`` entries, oldest first."""
        entries = list(self.entries)
        return entries[-limit:] if limit < len(entries) else entries

    def command(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        """``audit {"limit": N}``: the last N entries (1-1000, default all kept) and the
        failures by address."""
        try:
            body = _decoder.decode(data or b"{}")
        except (msgspec.DecodeError, UnicodeDecodeError) as exc:
            raise BadRequest(f"Invalid body: {exc}") from exc
        if not 1 <= body.limit <= CAPACITY:
            raise BadRequest(f"Invalid limit: 1 to {CAPACITY}")
        return data_reply(
            {"entries": self.recent(body.limit), "auth_failures": self.failures(body.limit)}
        )


class AuditQuery(msgspec.Struct, forbid_unknown_fields=True):
    limit: int = CAPACITY


_decoder = msgspec.json.Decoder(AuditQuery)
