"""The sandbox: SQL that a job brings (``spark.sql`` statements, ``spark.export`` queries)
may read and write files only under a ``--spark-root``, checked on the statement's logical
plan as Spark's own parser builds it (``planwalk.py``), before Spark runs it.

On a classic session the session's parser is used; on Spark Connect, where the worker has
no JVM of its own, a small local JVM with the same Spark parser is started on the first
check, with the session's parser settings mirrored into it. Settings that would get round
the check (``spark.sql.runSQLOnFiles`` ...) are set in every job's session and may not be
changed. ``--spark-allow-any-path`` turns all of it off (``docs/spark.md``, "Sandbox").
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from jobq.spark.errors import SparkJobError, one_line
from jobq.spark.paths import PathError, Roots, is_hadoop_setting
from jobq.spark.planwalk import PlanFacts, UncheckablePlan, plan_facts

__all__ = ["SANDBOX_CONF", "Sandbox", "SandboxError"]

log = logging.getLogger("jobq.spark")

#: set in every job's session: SQL on files (``csv.`/x` ``) and ``${...}`` substitution
#: (which would change the text after it was checked) are off
SANDBOX_CONF = {"spark.sql.runSQLOnFiles": "false", "spark.sql.variable.substitute": "false"}
#: settings a job may not change: they would get round the check
GUARDED = frozenset({*SANDBOX_CONF, "spark.sql.sources.default"})
#: ... nor any setting under these (catalog plugins reach any storage)
GUARDED_PREFIXES = ("spark.sql.catalog.",)
#: settings that change how SQL is parsed: mirrored into the local parser (Spark Connect)
PARSER_CONF = (
    "spark.sql.ansi.enabled",
    "spark.sql.ansi.enforceReservedKeywords",
    "spark.sql.ansi.doubleQuotedIdentifiers",
    "spark.sql.parser.escapedStringLiterals",
    "spark.sql.parser.quotedRegexColumnNames",
    "spark.sql.legacy.setopsPrecedence.enabled",
    "spark.sql.legacy.exponentLiteralAsDecimal.enabled",
    "spark.sql.legacy.createHiveTableByDefault",
    "spark.sql.scripting.enabled",
    "spark.sql.variable.substitute",
)
#: data sources whose data are files at a path (checked); others (jdbc ...) reach elsewhere
FILE_SOURCES = frozenset(
    {"csv", "json", "parquet", "orc", "text", "avro", "xml", "binaryfile", "hive", "delta"}
)
_FILE_FORMAT_CLASSES = (
    "org.apache.spark.sql.execution.datasources.FileFormat",
    "org.apache.spark.sql.execution.datasources.v2.FileDataSourceV2",
)
_OPT_IN = "the operator can allow it with --spark-allow-any-path"


class SandboxError(SparkJobError):
    """A statement the sandbox refuses; the message is one line."""


@dataclass
class Checked:
    """What running a checked statement asks of the caller afterwards."""

    #: it changed settings (SET/RESET): re-apply the sandbox's, re-mirror the parser's
    changes_settings: bool = False


def is_connect(spark: Any) -> bool:
    return type(spark).__module__.startswith("pyspark.sql.connect")


class _LocalParser:
    """Spark's SQL parser in a JVM of this process (for Spark Connect sessions)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._gateway: Any = None
        self._parser: Any = None

    def jvm(self) -> Any:
        with self._lock:
            if self._gateway is None:
                from pyspark import SparkConf
                from pyspark.java_gateway import launch_gateway

                log.info("starting a local JVM to check SQL against the roots")
                conf = SparkConf(loadDefaults=False).set("spark.driver.memory", "256m")
                try:
                    self._gateway = launch_gateway(conf)  # type: ignore[no-untyped-call]
                except Exception:  # a JVM that exited at its start (a loaded machine): once more
                    log.warning("the local JVM exited at its start; starting it again")
                    self._gateway = launch_gateway(conf)  # type: ignore[no-untyped-call]
                jvm = self._gateway.jvm
                self._parser = jvm.org.apache.spark.sql.execution.SparkSqlParser()
            return self._gateway.jvm

    def parser(self) -> Any:
        self.jvm()
        return self._parser


_local = _LocalParser()


class Sandbox:
    """The roots and whether SQL is checked against them.

    :param roots: where jobs may read and write
    :param allow_any_path: the operator's opt-out (``--spark-allow-any-path``)
    """

    def __init__(self, roots: Roots, allow_any_path: bool = False) -> None:
        self.roots = roots
        self.allow_any_path = allow_any_path

    @property
    def enforced(self) -> bool:
        return not self.allow_any_path

    def describe_roots(self) -> str:
        return ", ".join([*self.roots.local, *self.roots.uris])

    # -- sessions ---------------------------------------------------------------------------
    def setting_error(self, key: str, value: str | None) -> str | None:
        """Why a job may not set ``key`` (SET, RESET or ``spark_conf``), or None."""
        if not self.enforced:
            return None
        if key in GUARDED or key.startswith(GUARDED_PREFIXES):
            return (
                f"{key} may not be changed by a job on this worker (its paths are checked "
                f"against --spark-root); {_OPT_IN}"
            )
        if value is not None and (not key.startswith("spark.") or is_hadoop_setting(key)):
            return (
                f"{key} is a Hadoop or Hive setting, which can send a path to another file "
                f"system: a job may not set it on this worker (set it with --spark-conf); "
                f"{_OPT_IN}"
            )
        return None

    def prepare(self, spark: Any) -> None:
        """Set the sandbox's settings in a job's session."""
        if not self.enforced:
            return
        for key, value in SANDBOX_CONF.items():
            spark.conf.set(key, value)
        if is_connect(spark):
            spark._jobq_parser_conf = False  # mirrored at the first check

    def _mirror(self, spark: Any) -> None:
        """Spark Connect: the session's parser settings into the local parser (the JVM
        thread of this thread keeps its own)."""
        if getattr(spark, "_jobq_parser_conf", False):
            return
        conf = _local.jvm().org.apache.spark.sql.internal.SQLConf.get()
        current = _all_settings(spark)
        for key in PARSER_CONF:
            value = current.get(key)
            if value is None:
                conf.unsetConf(key)
            else:
                conf.setConfString(key, str(value))
        spark._jobq_parser_conf = True

    # -- statements -------------------------------------------------------------------------
    def sql(self, spark: Any, statement: str) -> Any:
        """``spark.sql(statement)`` once the statement passed the check."""
        checked = self.check(spark, statement)
        try:
            return spark.sql(statement)
        finally:
            if checked.changes_settings:
                self.prepare(spark)

    def check(self, spark: Any, statement: str) -> Checked:
        """Check one statement; :class:`SandboxError` (one line) if it is refused."""
        if not self.enforced:
            return Checked()
        try:
            parser, jvm = self._parser(spark)
        except Exception as exc:
            raise SandboxError(
                f"the sandbox cannot check SQL on this worker ({one_line(exc)}); {_OPT_IN}"
            ) from None
        try:
            plan = parser.parsePlan(statement)
        except Exception as exc:  # the same error Spark gives: a syntax error
            raise SparkJobError(one_line(exc)) from None
        facts = self._facts(plan, parser)
        self._judge(facts, jvm, parser)
        return Checked(changes_settings=bool(facts.settings) or facts.resets_all)

    def _parser(self, spark: Any) -> tuple[Any, Any]:
        if is_connect(spark):
            parser = _local.parser()
            self._mirror(spark)
            return parser, _local.jvm()
        return spark._jsparkSession.sessionState().sqlParser(), spark._jvm

    def _facts(self, plan: Any, parser: Any) -> PlanFacts:
        try:
            return plan_facts(plan, parser)
        except UncheckablePlan as exc:
            raise SandboxError(
                f"the sandbox cannot check this statement: {exc}; {_OPT_IN}"
            ) from None

    def _judge(self, facts: PlanFacts, jvm: Any, parser: Any) -> None:
        roots = self.describe_roots()
        for reason in facts.refused:
            raise SandboxError(f"{reason}: refused by the sandbox; {_OPT_IN}")
        for name, path in facts.path_tables:
            self._check_path(path, name)
            raise SandboxError(
                f"SQL on files ({name}) is off on this worker: define a view over the path "
                f"(CREATE TEMPORARY VIEW v USING csv OPTIONS (path '...')) or a table with a "
                f"LOCATION under the roots ({roots})"
            )
        for path, what in facts.paths:
            self._check_path(path, what)
        for key, what in facts.options:
            if is_hadoop_setting(key):
                raise SandboxError(
                    f"{what} {key}: a Hadoop setting, which can send a path to another file "
                    f"system, may not be given by a job on this worker; {_OPT_IN}"
                )
        for provider, what in facts.providers:
            if not self._is_file_source(provider, jvm):
                raise SandboxError(
                    f"{what} USING {provider}: only file formats whose paths can be checked "
                    f"are allowed on this worker; {_OPT_IN}"
                )
        for key, value in facts.settings:
            error = self.setting_error(key, value)
            if error is not None:
                raise SandboxError(error)
        for text, is_query in facts.sql_bodies:
            try:
                body = parser.parseQuery(text) if is_query else parser.parseExpression(text)
            except Exception as exc:
                raise SparkJobError(one_line(exc)) from None
            self._judge(self._facts(body, parser), jvm, parser)

    def _check_path(self, path: str, what: str) -> None:
        try:
            self.roots.resolve(path, what)
        except PathError as exc:
            raise SandboxError(f"{exc} ({self.describe_roots()})") from None

    def _is_file_source(self, provider: str, jvm: Any) -> bool:
        if provider.lower() in FILE_SOURCES:
            return True
        try:
            source = jvm.org.apache.spark.sql.execution.datasources.DataSource.lookupDataSource(
                provider, jvm.org.apache.spark.sql.internal.SQLConf.get()
            )
            for name in _FILE_FORMAT_CLASSES:
                if jvm.java.lang.Class.forName(name).isAssignableFrom(source):
                    return True
        except Exception:
            return False
        return False


def _all_settings(spark: Any) -> dict[str, str]:
    """The session's settings that are set (one request on Spark Connect)."""
    try:
        return dict(spark.conf.getAll)
    except Exception:
        return {key: v for key in PARSER_CONF if (v := spark.conf.get(key, None)) is not None}
