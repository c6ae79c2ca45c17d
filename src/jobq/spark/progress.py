"""The progress bridge: a job's fraction and status from Spark's own progress and the
pipeline's units of work, recorded with ``job.progress()``; a pause or cancel cancels the
running unit's Spark jobs (``docs/spark.md``, "Progress"). With a classic session it also
logs the unit's Spark jobs and stages into the attempt's log (``job_events.py``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import uuid
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from jobq.spark.job_events import SparkEvents

if TYPE_CHECKING:
    from jobq.worker.context import JobContext

__all__ = ["DEFAULT_POLL_INTERVAL_S", "ProgressBridge"]

log = logging.getLogger("jobq.spark")

#: how often Spark's progress is polled, in seconds
DEFAULT_POLL_INTERVAL_S = 0.5
#: the running unit's fraction stays below this until the unit is done
_UNIT_CAP = 0.99

_current = threading.local()


class _ConnectProgress:
    """A Spark Connect progress handler that hands stage counts to the bridge of the thread
    that runs the query (handlers are called in that thread)."""

    def __call__(
        self, stages: Iterable[Any] | None, inflight_tasks: int, operation_id: Any, done: bool
    ) -> None:
        bridge = getattr(_current, "bridge", None)
        if bridge is None or stages is None:
            return
        total = completed = 0
        for stage in stages:
            total += int(stage.num_tasks)
            completed += int(stage.num_completed_tasks)
        bridge._observe(completed, total)


class ProgressBridge:
    """Spark progress -> ``job.progress()`` for one job.

    :param spark: the session (classic or Spark Connect)
    :param job: the job's context
    :param units_total: the units of work of the whole job (at least 1)
    :param units_done: units done before (from the checkpoint)
    :param poll_interval_s: how often Spark's progress is polled
    """

    def __init__(
        self,
        spark: Any,
        job: JobContext,
        units_total: int,
        units_done: int = 0,
        poll_interval_s: float = DEFAULT_POLL_INTERVAL_S,
    ) -> None:
        self.spark = spark
        self.job = job
        self.units_total = max(1, units_total)
        self.units_done = units_done
        self.poll_interval_s = poll_interval_s
        self.remote = not hasattr(spark, "sparkContext") or _is_connect(spark)
        self._label = ""
        self._group: str | None = None
        self._unit_fraction = 0.0
        self._tasks = (0, 0)
        self._sent: tuple[float, str] | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._interrupted: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._events = SparkEvents()
        #: one poll of Spark's tracker at a time (the poll thread's, and a unit's last)
        self._poll_lock = threading.Lock()

    # -- lifecycle ------------------------------------------------------------------------
    def __enter__(self) -> ProgressBridge:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        if self.remote:
            _register_connect_handler(self.spark)
        _current.bridge = self
        self._thread = threading.Thread(
            target=self._poll, name=f"jobq-spark-progress-{self.job.id[:8]}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if getattr(_current, "bridge", None) is self:
            _current.bridge = None
        if self._thread is not None:
            self._thread.join(5)

    # -- units ----------------------------------------------------------------------------
    @property
    def fraction(self) -> float:
        with self._lock:
            return min(1.0, (self.units_done + self._unit_fraction) / self.units_total)

    @contextlib.contextmanager
    def unit(self, label: str) -> Iterator[None]:
        """Run one unit of work: Spark jobs started inside count towards it."""
        self.job.check()
        group = f"jobq-{self.job.id}-{uuid.uuid4().hex[:8]}"
        with self._lock:
            self._label = label
            self._unit_fraction = 0.0
            self._tasks = (0, 0)
            self._group = group
        self._set_group(group, label)
        try:
            yield
        finally:
            self._last_poll(group)
            self._clear_group(group)
            with self._lock:
                self._group = None
        if self._interrupted is not None:
            self.job.check()  # raises Paused / Canceled / LeaseLost

    def unit_done(self, checkpoint: Any, status: str | None = None) -> None:
        """A unit finished: record it with the checkpoint (sent before this returns); a
        checkpoint that is not bytes or text is saved as JSON."""
        if checkpoint is not None and not isinstance(checkpoint, bytes | str):
            checkpoint = json.dumps(checkpoint, separators=(",", ":"))
        with self._lock:
            self.units_done += 1
            self._unit_fraction = 0.0
            fraction = min(1.0, self.units_done / self.units_total)
            text = status or f"{self.units_done}/{self.units_total} done"
            self._sent = (fraction, text)
        self.job.progress(fraction, text[:255], checkpoint=checkpoint)

    def status(self, text: str) -> None:
        """Record a status text for the running unit (no checkpoint)."""
        with self._lock:
            self._label = text
        self._send()

    # -- Spark's side -----------------------------------------------------------------------
    def _set_group(self, group: str, label: str) -> None:
        description = f"jobq job {self.job.id}: {label}"[:200]
        try:
            if self.remote:
                self.spark.addTag(group)
            else:
                self.spark.sparkContext.setJobGroup(group, description, interruptOnCancel=True)
        except Exception:  # progress is best effort
            log.debug("cannot set the Spark job group", exc_info=True)

    def _clear_group(self, group: str) -> None:
        """End the unit's group: back to the job's own (``isolation.py``), if it has one."""
        from jobq.spark.isolation import current_group

        try:
            if self.remote:
                self.spark.removeTag(group)
                return
            outer = current_group()
            if outer is not None:
                self.spark.sparkContext.setJobGroup(*outer, interruptOnCancel=True)
            else:
                self.spark.sparkContext.clearJobGroup()
        except Exception:
            log.debug("cannot clear the Spark job group", exc_info=True)

    def _cancel_group(self, group: str) -> None:
        try:
            if self.remote:
                self.spark.interruptTag(group)
            else:
                self.spark.sparkContext.cancelJobGroup(group)
        except Exception:
            log.debug("cannot cancel the Spark jobs of %s", group, exc_info=True)

    def _observe(self, completed: int, total: int) -> None:
        with self._lock:
            self._tasks = (completed, total)
            if total > 0:
                self._unit_fraction = max(self._unit_fraction, min(_UNIT_CAP, completed / total))

    def _poll_tracker(self, group: str) -> None:
        with self._poll_lock:
            tracker = self.spark.sparkContext.statusTracker()
            total = completed = 0
            for job_id in sorted(tracker.getJobIdsForGroup(group)):
                info = tracker.getJobInfo(job_id)
                if info is None:
                    continue
                stages = [tracker.getStageInfo(stage_id) for stage_id in info.stageIds]
                for stage in stages:
                    if stage is not None:
                        total += stage.numTasks
                        completed += stage.numCompletedTasks
                self._events.observe(job_id, info.status, stages, self._label)
            self._observe(completed, total)

    def _last_poll(self, group: str) -> None:
        """The unit's Spark jobs as they ended (the poll thread may not see it again)."""
        if self.remote:
            return
        try:
            self._poll_tracker(group)
        except Exception:
            log.debug("polling Spark's status failed", exc_info=True)

    def _poll(self) -> None:
        capture = getattr(self.job, "capture", None)  # the attempt's log gets its lines
        with capture() if capture is not None else contextlib.nullcontext():
            self._poll_loop()

    def _poll_loop(self) -> None:
        while not self._stop.wait(self.poll_interval_s):
            group = self._group
            if group is None:
                continue
            try:
                if not self.remote:
                    self._poll_tracker(group)
            except Exception:
                log.debug("polling Spark's status failed", exc_info=True)
            try:
                self._send()
            except BaseException as exc:  # Paused, Canceled, LeaseLost: stop the unit's jobs
                self._interrupted = exc
                self._cancel_group(group)
                return

    def _send(self) -> None:
        with self._lock:
            fraction = min(1.0, (self.units_done + self._unit_fraction) / self.units_total)
            completed, total = self._tasks
            text = self._label
            if total:
                text = f"{text} (tasks {completed}/{total})"
            value = (round(fraction, 4), text[:255])
            if value == self._sent:
                return
            self._sent = value
        self.job.progress(value[0], value[1])


def _is_connect(spark: Any) -> bool:
    return type(spark).__module__.startswith("pyspark.sql.connect")


def _register_connect_handler(spark: Any) -> None:
    if getattr(spark, "_jobq_progress_handler", None) is not None:
        return
    handler = _ConnectProgress()
    try:
        spark.registerProgressHandler(handler)
        spark._jobq_progress_handler = handler
    except Exception:
        log.debug("cannot register a Spark Connect progress handler", exc_info=True)
