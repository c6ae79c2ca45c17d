"""Each Spark job in a session of its own: ``newSession()`` over the worker's shared
SparkContext (classic), or a new Spark Connect session, so that temporary views, SQL
settings (``SET``), the current database and registered functions do not leak from one job
to the next. The job's ``spark_conf`` is set in it; its Spark jobs run under a job group (a
tag on Spark Connect) naming the jobq job (``docs/spark.md``, "Isolation").
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from jobq.spark.errors import SparkJobError, one_line
from jobq.spark.sandbox import is_connect

if TYPE_CHECKING:
    from jobq.spark.session import SessionHolder
    from jobq.worker.context import JobContext

__all__ = ["apply_conf", "job_group", "job_session", "spark_conf_of", "spark_info"]

log = logging.getLogger("jobq.spark")

_current = threading.local()


def job_group(job_id: str) -> str:
    """The Spark job group (or Connect tag) of a jobq job's Spark work."""
    return f"jobq-{job_id}"


def current_group() -> tuple[str, str] | None:
    """(group, description) of the job running in this thread, if any."""
    value: tuple[str, str] | None = getattr(_current, "group", None)
    return value


def spark_conf_of(args: Any) -> dict[str, str]:
    """The ``spark_conf`` of a job's arguments (a built-in type's, or a JSON object's),
    values as Spark's texts; SparkJobError if it is not an object of settings."""
    value = getattr(args, "spark_conf", None)
    if value is None and isinstance(args, Mapping):
        value = args.get("spark_conf")
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SparkJobError("spark_conf: expected an object of settings")
    conf: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str | int | float | bool):
            raise SparkJobError(f"spark_conf: {key}: expected a text, number or boolean")
        conf[key] = str(item).lower() if isinstance(item, bool) else str(item)
    return conf


def spark_info(spark: Any) -> dict[str, str]:
    """The Spark application's id and its UI's URL (when the UI is on), as known here."""
    info: dict[str, str] = {}
    try:
        if is_connect(spark):
            app_id = spark.conf.get("spark.app.id", None)
            if app_id:
                info["app_id"] = str(app_id)
        else:
            context = spark.sparkContext
            info["app_id"] = str(context.applicationId)
            if context.uiWebUrl:
                info["ui_url"] = str(context.uiWebUrl)
    except Exception:  # informative only
        log.debug("cannot read the Spark application's id", exc_info=True)
    return info


def apply_conf(spark: Any, conf: Mapping[str, str], holder: SessionHolder) -> None:
    sandbox = holder.sandbox
    for key, value in conf.items():
        error = sandbox.setting_error(key, value)
        if error is not None:
            raise SparkJobError(f"spark_conf: {error}")
        try:
            modifiable = bool(spark.conf.isModifiable(key))
        except Exception:
            modifiable = False
        if not modifiable:
            raise SparkJobError(
                f"spark_conf: {key} cannot be set for one job (a static, cluster or unknown "
                "setting): set it on the worker with --spark-conf"
            )
        try:
            spark.conf.set(key, value)
        except Exception as exc:
            raise SparkJobError(f"spark_conf: {key}: {one_line(exc)}") from None


def _worker_conf(spark: Any, holder: SessionHolder) -> None:
    """A new Spark Connect session starts from the server's defaults: give it the
    worker's ``--spark-conf`` session settings (others are ignored, as at start)."""
    conf = dict(holder.options.conf)
    if not conf:
        return
    set_all = getattr(spark.conf, "_set_all", None)
    if set_all is not None:
        set_all(configs=conf, silent=True)
        return
    for key, value in conf.items():  # pragma: no cover - older clients
        with contextlib.suppress(Exception):
            spark.conf.set(key, value)


def _set_active(spark: Any) -> None:
    """Make the job's session the active one of this thread's JVM thread: Spark's parser
    reads the active session's settings (the sandbox parses with them)."""
    try:
        from pyspark.sql import SparkSession

        jclass = SparkSession._get_j_spark_session_class(spark._jvm)
        jclass.setActiveSession(spark._jsparkSession)
    except Exception:
        log.debug("cannot make the job's session active", exc_info=True)


def _start_group(spark: Any, group: str, description: str) -> None:
    _current.group = (group, description)
    try:
        if is_connect(spark):
            spark.addTag(group)
        else:
            spark.sparkContext.setJobGroup(group, description, interruptOnCancel=True)
    except Exception:
        log.debug("cannot set the Spark job group", exc_info=True)


def _end_group(spark: Any) -> None:
    _current.group = None
    try:
        if not is_connect(spark):
            spark.sparkContext.clearJobGroup()
    except Exception:
        log.debug("cannot clear the Spark job group", exc_info=True)


@contextlib.contextmanager
def job_session(
    holder: SessionHolder, context: JobContext, spark_conf: Mapping[str, str]
) -> Iterator[Any]:
    """The job's own session, for the time of the ``with``: SparkJobError (one line) if
    it cannot be made or ``spark_conf`` holds a setting a job may not set."""
    try:
        base = holder.get()
    except Exception as exc:
        raise SparkJobError(f"cannot start the Spark session: {one_line(exc)}") from None
    connect = is_connect(base)
    try:
        spark = base.newSession()
    except Exception as exc:
        raise SparkJobError(f"cannot open a Spark session for the job: {one_line(exc)}") from None
    try:
        if connect:
            _worker_conf(spark, holder)
        else:
            _set_active(spark)
        apply_conf(spark, spark_conf, holder)
        holder.sandbox.prepare(spark)
        _start_group(spark, job_group(context.id), f"jobq job {context.id} ({context.name})")
        yield spark
    finally:
        _end_group(spark)
        if connect:
            with contextlib.suppress(Exception):
                spark.stop()
