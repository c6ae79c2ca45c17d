"""``@jobq.pipeline(name)``: a function of (session, arguments, job) registered as the worker
handler of ``name``; the built-in job types are registered the same way.

::

    import jobq

    @jobq.pipeline("reports.daily", ttr="30m")
    def daily(spark, args, job):
        done = job.checkpoint or 0                       # JSON checkpoint of an earlier attempt
        with job.units(len(args["days"]), done) as units:
            for i in range(done, len(args["days"])):
                with units.unit(f"day {args['days'][i]}"):
                    spark.sql(...).write.mode("overwrite").save(...)
                units.unit_done(i + 1)
        return {"days": len(args["days"])}
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from jobq.spark.errors import SparkJobError, one_line

if TYPE_CHECKING:
    from jobq.spark.paths import Roots
    from jobq.spark.progress import ProgressBridge
    from jobq.spark.sandbox import Sandbox
    from jobq.worker.context import JobContext
    from jobq.worker.registry import Duration, Registry

__all__ = ["PipelineJob", "pipeline"]

log = logging.getLogger("jobq.spark")

#: a pipeline: (session, arguments, job) -> a JSON-able result, text, bytes or None
PipelineFn = Callable[[Any, Any, "PipelineJob"], Any]
F = TypeVar("F", bound=PipelineFn)

#: the TTR of the built-in job types unless a job has its own
DEFAULT_TTR = "10m"
#: a diagnostic: when set, every unit of work started is appended to this file
UNIT_LOG_ENV = "JOBQ_SPARK_UNIT_LOG"


class PipelineJob:
    """What a pipeline gets as ``job``: the job's context, the JSON checkpoint, progress.

    :ivar context: the worker's :class:`~jobq.JobContext`
    :ivar checkpoint: the checkpoint of an earlier attempt, decoded from JSON (None: start)
    :ivar roots: the paths the job may use (:class:`~jobq.spark.paths.Roots`)
    :ivar sandbox: checks SQL against the roots (:meth:`sql`)
    """

    def __init__(
        self, context: JobContext, spark: Any, roots: Roots, sandbox: Sandbox | None = None
    ) -> None:
        from jobq.spark.sandbox import Sandbox

        self.context = context
        self.spark = spark
        self.roots = roots
        self.sandbox = sandbox if sandbox is not None else Sandbox(roots)
        self.checkpoint: Any = None
        if context.checkpoint:
            try:
                self.checkpoint = json.loads(context.checkpoint)
            except ValueError:
                self.checkpoint = context.checkpoint

    @property
    def id(self) -> str:
        return self.context.id

    @property
    def attempt(self) -> int:
        return self.context.attempt

    def progress(
        self, fraction: float | None = None, status: str | None = None, checkpoint: Any = None
    ) -> None:
        """As ``JobContext.progress``; a checkpoint that is not bytes is saved as JSON."""
        if checkpoint is not None and not isinstance(checkpoint, bytes | bytearray):
            checkpoint = json.dumps(checkpoint, separators=(",", ":"))
        self.context.progress(fraction, status, checkpoint=checkpoint)

    def check(self) -> None:
        self.context.check()

    def sql(self, statement: str) -> Any:
        """``spark.sql(statement)`` once the sandbox checked it (SparkJobError, one line,
        if it reads or writes outside the roots)."""
        return self.sandbox.sql(self.spark, statement)

    def units(self, total: int, done: int = 0) -> ProgressBridge:
        """A progress bridge for ``total`` units of work, ``done`` of them done already."""
        from jobq.spark.progress import ProgressBridge

        return ProgressBridge(self.spark, self.context, total, done)

    def log_unit(self, unit: str) -> None:
        """Append ``unit`` to the unit log (:data:`UNIT_LOG_ENV`), when one is configured."""
        path = os.environ.get(UNIT_LOG_ENV)
        if path:
            with open(path, "a") as f:
                f.write(f"{self.id} {self.attempt} {unit}\n")
                f.flush()
                os.fsync(f.fileno())


def _result(value: Any) -> bytes | str | None:
    if value is None or isinstance(value, bytes | str):
        return value
    return json.dumps(value, separators=(",", ":"), default=str)


def _announce(context: JobContext, info: dict[str, str]) -> None:
    """The Spark application (and its UI) in the log and the job's first status."""
    text = f"Spark application {info.get('app_id', '?')}"
    if "ui_url" in info:
        text += f", UI {info['ui_url']}"
    log.info("job %s (%s): %s", context.id, context.name, text)
    context.progress(None, text[:255])


def pipeline(
    name: str,
    *,
    ttr: Duration | None = DEFAULT_TTR,
    stall_timeout: Duration | None = None,
    parse: Callable[[bytes], Any] | None = None,
    registry: Registry | None = None,
) -> Callable[[F], F]:
    """Register the decorated ``fn(spark, args, job)`` as the handler of jobs ``name``.

    :param ttr: the TTR its jobs are meant to have (see ``@jobq.handler``)
    :param stall_timeout: see ``@jobq.handler``
    :param parse: payload -> arguments; default: the payload decoded as JSON (None if empty)
    :param registry: default: the worker's default registry

    The function's exceptions fail the job with their message on one line (never a Java
    stack trace); a return value that is not bytes, text or None is sent as JSON.
    """
    from jobq.worker.registry import REGISTRY

    target = registry if registry is not None else REGISTRY

    def register(fn: F) -> F:
        def handler(context: JobContext) -> bytes | str | None:
            from jobq.client import ClientError
            from jobq.spark.isolation import job_session, spark_conf_of, spark_info
            from jobq.spark.session import holder

            try:
                if parse is not None:
                    args = parse(context.payload)
                else:
                    args = json.loads(context.payload) if context.payload else None
            except ValueError as exc:
                raise SparkJobError(one_line(exc)) from None
            sessions = holder()
            try:
                with job_session(sessions, context, spark_conf_of(args)) as spark:
                    job = PipelineJob(context, spark, sessions.roots, sessions.sandbox)
                    info = spark_info(spark)
                    if info:
                        _announce(context, info)
                    value = fn(spark, args, job)
                    if isinstance(value, dict) and info and "spark" not in value:
                        value = {**value, "spark": info}
                    return _result(value)
            except (ClientError, SparkJobError):
                raise
            except Exception as exc:
                log.debug("job %s failed", context.id, exc_info=True)
                raise SparkJobError(one_line(exc)) from None

        handler.__module__ = getattr(fn, "__module__", __name__)
        handler.__qualname__ = f"{getattr(fn, '__qualname__', 'pipeline')}.<handler>"
        handler.jobq_pipeline = True  # type: ignore[attr-defined]  # the worker warms Spark
        target.handler(name, ttr=ttr, stall_timeout=stall_timeout)(handler)
        return fn

    return register
