"""The worker's one SparkSession, built from a master URL or a Spark Connect endpoint and
``--spark-conf`` settings, at the worker's start (or on first use with ``--spark-lazy``); by
default with a persistent catalog under the data directory (``docs/spark.md``, "The worker").
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobq.spark.paths import Roots

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["DEFAULT_MASTER", "SessionHolder", "SparkOptions", "build_session", "parse_conf"]

log = logging.getLogger("jobq.spark")

#: the master when none is configured
DEFAULT_MASTER = "local[*]"
#: settings that mean the catalog is configured elsewhere (no embedded Derby metastore)
_EXTERNAL_CATALOG_KEYS = (
    "spark.sql.catalogImplementation",
    "spark.hadoop.hive.metastore.uris",
    "spark.hadoop.javax.jdo.option.ConnectionURL",
    "spark.sql.hive.metastore.jars",
)


def parse_conf(items: list[str] | tuple[str, ...]) -> dict[str, str]:
    """``KEY=VALUE`` texts as a dict; ValueError (one line) for a text without ``=``."""
    conf: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--spark-conf: expected KEY=VALUE, not {item!r}")
        conf[key.strip()] = value
    return conf


@dataclass
class SparkOptions:
    """How a worker's session is built and which paths its jobs may use.

    :ivar master: a master URL; None: ``local[*]`` (ignored with ``remote``)
    :ivar remote: a Spark Connect URL ``sc://HOST:PORT``; None: a classic session
    :ivar conf: Spark settings passed through
    :ivar data_dir: the data directory; the embedded catalog lives in ``<data_dir>/spark``
    :ivar roots: the directories jobs may read and write; empty: the data directory
    :ivar app_name: the Spark application's name
    :ivar allow_any_path: SQL is not checked against the roots (``--spark-allow-any-path``)
    """

    master: str | None = None
    remote: str | None = None
    conf: dict[str, str] = field(default_factory=dict)
    data_dir: Path = Path(".jobq")
    roots: list[str] = field(default_factory=list)
    app_name: str = "jobq-worker"
    allow_any_path: bool = False

    def __post_init__(self) -> None:
        if self.master is not None and self.remote is not None:
            raise ValueError("give --spark-master or --spark-remote, not both")
        if self.remote is not None and not self.remote.startswith("sc://"):
            raise ValueError(
                f"--spark-remote: not a Spark Connect URL (sc://HOST:PORT): {self.remote}"
            )
        if not self.allow_any_path:
            from jobq.spark.sandbox import SANDBOX_CONF

            for key, value in SANDBOX_CONF.items():
                if key in self.conf and self.conf[key].strip().lower() != value:
                    raise ValueError(
                        f"--spark-conf {key}={self.conf[key]} gets round the checks of "
                        "--spark-root: add --spark-allow-any-path to allow any path"
                    )

    @property
    def spark_dir(self) -> Path:
        return Path(os.path.abspath(self.data_dir)) / "spark"

    def path_roots(self) -> Roots:
        return Roots(self.roots or [str(Path(os.path.abspath(self.data_dir)))])


def build_session(options: SparkOptions) -> SparkSession:
    """A new SparkSession from ``options`` (see the module docstring)."""
    from pyspark.sql import SparkSession

    if options.remote is not None:
        builder = SparkSession.builder.remote(options.remote)
        for key, value in options.conf.items():
            builder = builder.config(key, value)
        return builder.getOrCreate()

    builder = SparkSession.builder.master(options.master or DEFAULT_MASTER)
    builder = builder.appName(options.app_name)
    builder = builder.config("spark.ui.showConsoleProgress", "false")
    if not options.allow_any_path:
        from jobq.spark.sandbox import SANDBOX_CONF

        for key, value in SANDBOX_CONF.items():  # RESET comes back to these
            builder = builder.config(key, value)
    external = any(key in options.conf for key in _EXTERNAL_CATALOG_KEYS)
    if not external:
        spark_dir = options.spark_dir
        spark_dir.mkdir(parents=True, exist_ok=True)
        metastore = spark_dir / "metastore_db"
        builder = builder.config("spark.sql.warehouse.dir", str(spark_dir / "warehouse"))
        builder = builder.config(
            "spark.hadoop.javax.jdo.option.ConnectionURL",
            f"jdbc:derby:;databaseName={metastore};create=true",
        )
        java_options = (
            f"-Dderby.system.home={spark_dir} -Dderby.stream.error.file={spark_dir / 'derby.log'}"
        )
        extra = options.conf.get("spark.driver.extraJavaOptions")
        builder = builder.config(
            "spark.driver.extraJavaOptions", f"{extra} {java_options}" if extra else java_options
        )
    for key, value in options.conf.items():
        if key != "spark.driver.extraJavaOptions" or external:
            builder = builder.config(key, value)
    if options.conf.get("spark.sql.catalogImplementation", "hive") == "hive" and _has_hive():
        builder = builder.enableHiveSupport()
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(options.conf.get("spark.log.level", "WARN"))
    return spark


def _one_line(exc: BaseException) -> str:
    from jobq.spark.errors import one_line

    return one_line(exc)


def _has_hive() -> bool:
    """True when Spark's Hive classes can be loaded (the pyspark package ships them)."""
    try:
        import pyspark
    except ImportError:  # pragma: no cover
        return False
    home = os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)
    jars = Path(home) / "jars"
    try:
        return any(p.name.startswith("spark-hive_") for p in jars.iterdir())
    except OSError:
        return False


class SessionHolder:
    """Builds the worker's session on first use and hands out the same one after that.

    :param options: how to build it
    """

    def __init__(self, options: SparkOptions) -> None:
        from jobq.spark.sandbox import Sandbox

        self.options = options
        self.roots = options.path_roots()
        self.sandbox = Sandbox(self.roots, options.allow_any_path)
        self._session: Any = None
        self._lock = threading.Lock()

    @property
    def embedded_catalog(self) -> bool:
        """Whether the catalog is the worker's own (no external metastore configured)."""
        return not any(key in self.options.conf for key in _EXTERNAL_CATALOG_KEYS)

    @property
    def is_remote(self) -> bool:
        return self.options.remote is not None

    def get(self) -> SparkSession:
        with self._lock:
            if self._session is None:
                target = self.options.remote or self.options.master or DEFAULT_MASTER
                log.info("starting the Spark session (%s)", target)
                self._session = build_session(self.options)
            return self._session  # type: ignore[no-any-return]

    def warm(self) -> float:
        """Build the session now, open its catalog and run a first tiny Spark job, so the
        first job does not wait for them (``jobq worker`` does, unless ``--spark-lazy``).
        Returns the seconds it took; raises what building the session raised."""
        started = time.monotonic()
        spark = self.get()
        spark.sql("SHOW DATABASES").collect()  # the catalog (an embedded metastore starts)
        job = spark.newSession()  # what each job makes: a session state, an analyzer
        job.catalog.tableExists("jobq_warm_up")
        job.sql("SELECT 1 AS one").collect()
        master = self.options.master or DEFAULT_MASTER
        if self.is_remote or not master.startswith("local"):
            job.range(1).count()  # the executors and the code paths of a job
        elif self.embedded_catalog:  # a job that makes a table (this worker's own catalog)
            name = f"jobq_warm_up_{os.getpid()}"
            job.range(1).write.mode("overwrite").saveAsTable(name)
            job.sql(f"DROP TABLE IF EXISTS {name}")
        else:  # a job that writes Parquet files (in the data directory, removed)
            out = self.options.spark_dir / "warm-up"
            job.range(1).write.mode("overwrite").parquet(str(out))
            shutil.rmtree(out, ignore_errors=True)
        if self.is_remote:
            job.stop()
        return time.monotonic() - started

    def warm_in_background(self) -> threading.Thread:
        """:meth:`warm` in a thread of its own; a failure is logged (the jobs report it)."""

        def run() -> None:
            try:
                elapsed_s = self.warm()
            except Exception as exc:
                log.warning("the Spark session could not be started: %s", _one_line(exc))
                return
            log.info("Spark session ready in %.1f s", elapsed_s)

        thread = threading.Thread(target=run, name="jobq-spark-warm", daemon=True)
        thread.start()
        return thread

    def started(self) -> bool:
        return self._session is not None

    def stop(self) -> None:
        with self._lock:
            session, self._session = self._session, None
        if session is not None:
            try:
                if not self.is_remote:
                    from jobq.spark.loopback import stop_endpoint

                    stop_endpoint(session)
                    _forget_hive_client(session)
                session.stop()
            except Exception:  # stopping is best effort at exit
                log.debug("stopping the Spark session failed", exc_info=True)


def _forget_hive_client(session: Any) -> None:
    """Drop the Hive client this thread caches: Hive keeps one per thread, and a session built
    later in this process (another data directory) would otherwise reach the old metastore
    from this thread while its jobs' threads reach the new one."""
    if _has_hive():
        session.sparkContext._jvm.org.apache.hadoop.hive.ql.metadata.Hive.closeCurrent()


_holder: SessionHolder | None = None
_holder_lock = threading.Lock()


def configure(options: SparkOptions) -> SessionHolder:
    """Set the options of the process's session (``jobq worker`` does, from its options)."""
    global _holder
    with _holder_lock:
        if _holder is not None and _holder.started():
            _holder.stop()
        _holder = SessionHolder(options)
        return _holder


def holder() -> SessionHolder:
    """The process's session holder; the defaults (``local[*]``, ``$JOBQ_HOME``) if
    :func:`configure` was not called."""
    global _holder
    with _holder_lock:
        if _holder is None:
            from jobq.config import default_data_dir

            _holder = SessionHolder(SparkOptions(data_dir=default_data_dir()))
        return _holder
