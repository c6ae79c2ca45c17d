"""The limits of a job's fields, in one place for every way a job is made: the workq protocol
and the extension commands (``jobq.server``), the HTTP API, and the jobs a schedule's
executor creates (checked when the schedule is created and again at each run).

The command log records times as Unix nanoseconds in a signed 64-bit integer, so no time a
schedule logs may lie outside ``MIN_TIME_NS .. MAX_TIME_NS`` (1677-09-21 to 2262-04-11).
"""

from __future__ import annotations

import re
from typing import Final

#: largest payload or result, in bytes (workq's MaxPayload / MaxResult)
MAX_DATA_BYTES: Final = 1_048_576
#: longest job or queue name, in characters
MAX_NAME_LEN: Final = 255
#: a job or queue name: 1-255 of ``A-Z a-z 0-9 _ - .``
NAME_RE: Final = re.compile(r"[A-Za-z0-9_.\-]{1,255}")
#: largest time to run, in milliseconds (24 h)
MAX_TTR_MS: Final = 86_400_000
#: largest time to live, in milliseconds (uint64)
MAX_TTL_MS: Final = 2**64 - 1
#: largest -max-attempts and -max-fails
MAX_ATTEMPTS: Final = 255
MAX_FAILS: Final = 255
#: -priority range (signed 32-bit)
MIN_PRIORITY: Final = -(2**31)
MAX_PRIORITY: Final = 2**31 - 1
#: longest job description, in characters
MAX_DESCRIPTION: Final = 4096
#: most names one lease request (``lease``, ``xlease``) may list: a waiting lease holds a
#: place in each name's queue until it is over
MAX_LEASE_NAMES: Final = 1000
#: the engine's text for a lease that lists more (the workq ``lease`` is refused before, by
#: its parser, with workq's ``Invalid command args``)
TOO_MANY_NAMES: Final = f"Too many names (at most {MAX_LEASE_NAMES})"
#: most jobs one bulk action may change (one command-log record of ~18 bytes a job, applied
#: in one turn of the server)
MAX_BULK_JOBS: Final = 100_000
#: most jobs one job may depend on (``after``), and most later jobs a schedule's run may
#: chain after its first (``then``)
MAX_AFTER: Final = 1000
MAX_CHAIN: Final = 20
#: most schedules one server holds (the scheduler's benchmarks go this far: bench_schedules)
MAX_SCHEDULES: Final = 100_000
#: the range of times the command log can hold (Unix ns, signed 64-bit)
MIN_TIME_NS: Final = -(2**63)
MAX_TIME_NS: Final = 2**63 - 1
#: the largest epoch a promotion may start (signed 64-bit, as etcd's revisions; a larger one
#: does not fit the log's record: docs/ha.md, "Promotion and epochs")
MAX_EPOCH: Final = 2**63 - 1


def clamp_time_ns(time_ns: int) -> int:
    """``time_ns`` moved into ``MIN_TIME_NS .. MAX_TIME_NS``. workq takes any RFC 3339 time
    (years 1-9999) for a job, and its log holds Go times that far: a job's time is clamped
    where it comes in (a ``schedule`` command, a workq record), so that the engine's times
    fit the 64-bit integers of its snapshots. A job due in 9999 is then due in 2262, one in
    year 1 in 1677: neither is distinguishable in practice."""
    return MIN_TIME_NS if time_ns < MIN_TIME_NS else min(time_ns, MAX_TIME_NS)
