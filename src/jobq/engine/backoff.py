"""How long a job waits before its retry (``retry_backoff``): the backoff's values, their
limits, and the wait of each attempt, with its jitter (docs/jobs.md, "Retries").

The n-th attempt's failure or timeout waits ``initial_ms * multiplier**(n-1)``, at most
``max_ms``, less a jitter of up to half of it: the wait is in [step/2, step]. The jitter is
a hash of the job's id and the attempt number, not a random draw, so that replaying the
log computes the same wait: the retry is due at the time of the record that ended the
attempt plus that wait. Only multiplication is used on floats (IEEE 754 rounds it the same
everywhere; ``pow`` is the C library's), the rest is integer arithmetic.
"""

from __future__ import annotations

import hashlib
import math
from typing import Final

import msgspec

from jobq.engine.errors import InvalidArgument

_NS_PER_MS = 1_000_000
#: the longest initial and maximal wait, in ms (a day, as the longest TTR)
MAX_BACKOFF_MS: Final = 86_400_000
#: the largest multiplier
MAX_MULTIPLIER: Final = 100.0


class Backoff(msgspec.Struct, array_like=True, frozen=True):
    """A job's ``retry_backoff``: the first wait, the factor for each attempt after, the
    longest wait. ``initial_ms`` 0: retried at once (workq's way)."""

    initial_ms: int
    multiplier: float
    max_ms: int

    def as_dict(self) -> dict[str, object]:
        """As the JSON of a job, a submit and a schedule's arguments spell it."""
        return {"initial_ms": self.initial_ms, "multiplier": self.multiplier,
                "max_ms": self.max_ms}


#: what a job submitted through jobq's API (``submit``, HTTP, a schedule's run) waits,
#: unless it says otherwise: 1 s, times 2 each attempt, up to 5 min. workq's ``add`` and
#: ``schedule`` have none: their retries come at once, as in workq.
DEFAULT_RETRY_BACKOFF: Final = Backoff(1000, 2.0, 300_000)
#: no wait: retried at once
NO_BACKOFF: Final = Backoff(0, 1.0, 0)


def checked_backoff(
    initial_ms: object = DEFAULT_RETRY_BACKOFF.initial_ms,
    multiplier: object = DEFAULT_RETRY_BACKOFF.multiplier,
    max_ms: object = None,
) -> Backoff:
    """A :class:`Backoff` of these values, or :class:`InvalidArgument` with one line saying
    what is wrong. ``max_ms`` None: the default's, or ``initial_ms`` if that is larger."""
    if type(initial_ms) is not int or not 0 <= initial_ms <= MAX_BACKOFF_MS:
        raise InvalidArgument(
            f"Invalid retry_backoff: initial_ms must be an integer from 0 to {MAX_BACKOFF_MS}"
        )
    if (
        type(multiplier) not in (int, float)
        or not math.isfinite(multiplier)  # type: ignore[arg-type]
        or not 1 <= multiplier <= MAX_MULTIPLIER  # type: ignore[operator]
    ):
        raise InvalidArgument(
            f"Invalid retry_backoff: multiplier must be a number from 1 to {MAX_MULTIPLIER:g}"
        )
    if max_ms is None:
        max_ms = max(initial_ms, DEFAULT_RETRY_BACKOFF.max_ms)
    if type(max_ms) is not int or not 0 <= max_ms <= MAX_BACKOFF_MS:
        raise InvalidArgument(
            f"Invalid retry_backoff: max_ms must be an integer from 0 to {MAX_BACKOFF_MS}"
        )
    if max_ms < initial_ms:
        raise InvalidArgument("Invalid retry_backoff: max_ms must be at least initial_ms")
    return Backoff(initial_ms, float(multiplier), max_ms)  # type: ignore[arg-type]


def backoff_of(value: object) -> Backoff:
    """A backoff from its JSON form (``{"initial_ms", "multiplier", "max_ms"}``, each
    optional) or a :class:`Backoff`, checked; :class:`InvalidArgument` otherwise."""
    if isinstance(value, Backoff):
        return checked_backoff(value.initial_ms, value.multiplier, value.max_ms)
    if not isinstance(value, dict):
        raise InvalidArgument(
            "Invalid retry_backoff: an object {initial_ms, multiplier, max_ms}"
        )
    unknown = sorted(set(value) - {"initial_ms", "multiplier", "max_ms"})
    if unknown:
        raise InvalidArgument(f"Invalid retry_backoff: unknown field {str(unknown[0])[:80]!r}")
    return checked_backoff(
        value.get("initial_ms", DEFAULT_RETRY_BACKOFF.initial_ms),
        value.get("multiplier", DEFAULT_RETRY_BACKOFF.multiplier),
        value.get("max_ms"),
    )


def step_ms(backoff: Backoff, attempt: int) -> int:
    """The wait after attempt ``attempt`` (1 for the first) before jitter, in ms:
    ``initial_ms * multiplier**(attempt-1)``, at most ``max_ms``."""
    initial_ms = backoff.initial_ms
    if initial_ms == 0:
        return 0
    # exponentiation by squaring: multiplications only (a float overflows to inf, and
    # stops growing once past max_ms)
    factor, base, exponent = 1.0, backoff.multiplier, max(attempt, 1) - 1
    limit = backoff.max_ms / initial_ms
    while exponent and factor < limit:
        if exponent & 1:
            factor *= base
        base *= base
        exponent >>= 1
    if factor >= limit:
        return backoff.max_ms
    return min(backoff.max_ms, int(initial_ms * factor))


def jitter(job_id: bytes, attempt: int) -> int:
    """The jitter of attempt ``attempt`` of job ``job_id``: a 64-bit number from a hash of
    the two (the same in replay), spread evenly."""
    digest = hashlib.blake2b(
        job_id + attempt.to_bytes(8, "big", signed=True), digest_size=8, person=b"jobq-retry"
    ).digest()
    return int.from_bytes(digest, "big")


def wait_ns(backoff: Backoff, job_id: bytes, attempt: int) -> int:
    """How long the retry after attempt ``attempt`` waits, in ns: the step
    (:func:`step_ms`) less up to half of it, by the attempt's :func:`jitter`."""
    step_ns = step_ms(backoff, attempt) * _NS_PER_MS
    if step_ns == 0:
        return 0
    return step_ns - ((step_ns * jitter(job_id, attempt)) >> 65)
