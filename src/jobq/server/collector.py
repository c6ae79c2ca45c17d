"""Holding back the cyclic garbage collector's full collections while the scheduler fires a
burst (``Core.tick``): a burst of 100,000 schedules makes hundreds of thousands of objects
that stay (the runs' jobs) and next to no garbage, and each full collection on the way
rescanned all of them again (four collections took about 40 % of a burst's time). As replay
does for the same reason (``replay.py``), the collector's oldest generation waits until the
burst ended; the younger ones run as usual, and the full collection then comes once, at the
collector's own pace. A hold lasts at most ``MAX_HOLD_S``: under a burst that never ends,
collections resume.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

#: the longest a hold lasts, in seconds (then the thresholds are put back until the burst
#: ends and a later one begins)
MAX_HOLD_S = 10.0
#: the oldest generation's threshold while held: never reached in a burst
HELD_THRESHOLD = 1 << 30


class FullCollectionHold:
    """Holds full collections back (:meth:`hold`) until :meth:`release`.

    Parameters:
        clock_s (Callable[[], float], default time.monotonic): times the hold.
    """

    def __init__(self, clock_s: Callable[[], float] = time.monotonic) -> None:
        self._clock_s = clock_s
        #: the thresholds to put back while held (None: not held)
        self._saved: tuple[int, int, int] | None = None
        self._since_s = 0.0
        #: the hold ran out in the current burst: not again until it ended
        self._spent = False
        #: how many holds began (for tests)
        self.holds = 0

    @property
    def held(self) -> bool:
        return self._saved is not None

    def hold(self) -> None:
        """A burst goes on: hold full collections back (from now, at most ``MAX_HOLD_S``)."""
        if self._saved is None:
            if self._spent:
                return
            t0, t1, t2 = gc.get_threshold()
            if t2 >= HELD_THRESHOLD:  # held by someone else: leave it to them
                return
            self._saved = (t0, t1, t2)
            self._since_s = self._clock_s()
            self.holds += 1
            gc.set_threshold(t0, t1, HELD_THRESHOLD)
        elif self._clock_s() - self._since_s > MAX_HOLD_S:
            self._put_back()
            self._spent = True

    def release(self) -> None:
        """The burst ended: full collections come at the collector's own pace again."""
        self._spent = False
        if self._saved is not None:
            self._put_back()

    def _put_back(self) -> None:
        assert self._saved is not None
        t2 = self._saved[2]
        now0, now1, _ = gc.get_threshold()
        # the younger thresholds as they are now (someone may have changed them meanwhile)
        gc.set_threshold(now0, now1, t2)
        self._saved = None
