"""The Spark jobs and stages of a job's units as lines of its attempt log (``docs/spark.md``,
"Logs"): the progress bridge hands this what Spark's status tracker says of the unit's job
group at each poll (and once more as the unit ends), and a line is logged for each change a
person reading the log wants: a Spark job started, a stage done or losing tasks, a Spark job
ended. The lines go through ``logging`` (``jobq.spark.events``) from a thread captured for
the attempt, so they land in its log and on the worker's console alike.

The driver's own log4j lines are not captured: they are the JVM's, written to its stderr
with nothing that ties a line to a job group, so they stay on the worker's console.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

__all__ = ["SparkEvents"]

log = logging.getLogger("jobq.spark.events")


class SparkEvents:
    """What has been said of one bridge's Spark jobs and stages, so that each change is
    logged once."""

    def __init__(self) -> None:
        #: Spark job id -> its status as last logged
        self._jobs: dict[int, str] = {}
        #: stage id -> (tasks done, tasks failed) as last seen
        self._stages: dict[int, tuple[int, int]] = {}

    def observe(self, job_id: int, status: str, stages: Iterable[Any], label: str) -> None:
        """One Spark job of the unit ``label``, as the status tracker sees it now: its
        status (``RUNNING``, ``SUCCEEDED``, ``FAILED``...) and its stages' infos."""
        stages = [stage for stage in stages if stage is not None]
        status = str(status).upper()
        if job_id not in self._jobs:
            count = len(stages)
            log.info(
                "Spark job %d started (%s): %d stage%s",
                job_id,
                label or "unit",
                count,
                "" if count == 1 else "s",
            )
            self._jobs[job_id] = "RUNNING"
        for stage in stages:
            self._stage(job_id, stage)
        if status != self._jobs[job_id] and status in ("SUCCEEDED", "FAILED"):
            self._jobs[job_id] = status
            log.log(
                logging.INFO if status == "SUCCEEDED" else logging.WARNING,
                "Spark job %d %s",
                job_id,
                status.lower(),
            )

    def _stage(self, job_id: int, stage: Any) -> None:
        stage_id = int(stage.stageId)
        total, done, failed = (
            int(stage.numTasks),
            int(stage.numCompletedTasks),
            int(stage.numFailedTasks),
        )
        before_done, before_failed = self._stages.get(stage_id, (-1, 0))
        self._stages[stage_id] = (done, failed)
        if failed > before_failed:
            log.warning(
                "Spark job %d, stage %d (%s): %d task%s failed",
                job_id,
                stage_id,
                stage.name,
                failed,
                "" if failed == 1 else "s",
            )
        if total and done >= total > before_done:
            log.info(
                "Spark job %d, stage %d (%s) done: %d task%s",
                job_id,
                stage_id,
                stage.name,
                total,
                "" if total == 1 else "s",
            )
