"""The server's scrub: at start and then every ``--scrub-interval``, a thread re-reads the
command log's segments and checks every record (``jobq.cmdlog.scrub``), at
``--scrub-rate`` bytes a second, off the event loop.

A start from an engine snapshot skips the records before the snapshot's place; the scrub
is what finds damage there. Damage found is kept in :attr:`LogScrub.damaged` (shown by
``jobq status``, ``/api/server`` and ``jobq_cmdlog_damaged_segments``) and handed to
``on_damage`` (the app logs it and stops engine snapshots, so that the next start replays
the whole log and refuses the damage: ``docs/server.md``, "Scrub").
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from jobq.cmdlog.errors import CmdlogError
from jobq.cmdlog.scrub import Damage, Pacer, PassResult, Scrubber
from jobq.server.extensions import BadRequest, data_reply

if TYPE_CHECKING:
    from jobq.cmdlog.log import CommandLog

logger = logging.getLogger("jobq.server")


class LogScrub:
    """Scrub passes over ``log`` in a thread of its own (:meth:`start`, :meth:`close`).

    ``monotonic_s`` and ``sleep_s`` pace it (tests drive a pass with a fake clock through
    :meth:`run_pass`); by default the pacing waits on the stop event, so that
    :meth:`close` ends a pass at once.
    """

    def __init__(
        self,
        log: CommandLog,
        *,
        rate_bytes_per_s: int,
        interval_s: float,
        on_damage: Callable[[Damage], None] = lambda damage: None,
        monotonic_s: Callable[[], float] = time.monotonic,
        sleep_s: Callable[[float], object] | None = None,
    ) -> None:
        self.log = log
        self.interval_s = interval_s
        self._on_damage = on_damage
        self._monotonic_s = monotonic_s
        self._stop = threading.Event()
        self.pacer = Pacer(
            rate_bytes_per_s, monotonic_s=monotonic_s, sleep_s=sleep_s or self._stop.wait
        )
        self.scrubber = Scrubber(log.path, self.pacer, stop=self._stop)
        #: damage found, by segment name (replaced whole, never changed in place: the loop
        #: reads it while the thread adds)
        self.damaged: dict[str, Damage] = {}
        #: passes run to their end
        self.passes = 0
        #: what the last pass to its end found
        self.last_pass: PassResult | None = None
        self._thread: threading.Thread | None = None

    def run_pass(self) -> PassResult:
        """One pass over what the log holds now; new damage goes to ``on_damage``."""
        result = self.scrubber.scrub(self.log.position())
        for damage in result.damaged:
            if damage.segment not in self.damaged:
                self.damaged = {**self.damaged, damage.segment: damage}
                self._on_damage(damage)
        if not result.stopped:
            self.passes += 1
            self.last_pass = result
        return result

    def start(self) -> None:
        """Run a pass now and then one every ``interval_s`` (from start to start)."""
        self._thread = threading.Thread(target=self._run, name="jobq-scrub", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            began_s = self._monotonic_s()
            try:
                result = self.run_pass()
            except (OSError, CmdlogError) as exc:
                logger.error("scrubbing the command log failed: %s", exc)
            else:
                if not result.stopped:
                    logger.info(
                        "scrubbed the command log: %d segments, %d bytes, %d damaged",
                        result.segments,
                        result.bytes_checked,
                        len(result.damaged),
                    )
            self._stop.wait(max(0.0, self.interval_s - (self._monotonic_s() - began_s)))

    def close(self) -> None:
        """Stop (a pass under way ends at its next chunk) and wait for the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def summary(self) -> dict[str, object]:
        """What ``/api/server`` and ``jobq status`` show of the scrub."""
        return {
            "damaged": [
                {"segment": d.segment, "offset": d.offset, "reason": d.reason}
                for d in self.damaged.values()
            ],
            "passes": self.passes,
            "bytes_checked": self.scrubber.bytes_checked,
            "rate_bytes_per_s": self.pacer.rate_bytes_per_s,
        }


def log_state_command(
    scrub_of: Callable[[], LogScrub | None],
) -> Callable[[bytes, object, int], bytes]:
    """The ``logstate`` extension (``{}`` → ``{"scrub": ...}``, :meth:`LogScrub.summary`,
    null without a scrub): what ``jobq status`` shows of the log's health."""

    def command(data: bytes, token: object, now_ns: int) -> bytes:
        if data.strip() not in (b"", b"{}"):
            raise BadRequest("Invalid body: logstate takes no fields")
        scrub = scrub_of()
        return data_reply({"scrub": None if scrub is None else scrub.summary()})

    return command
