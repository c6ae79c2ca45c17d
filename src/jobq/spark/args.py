"""The arguments of the built-in Spark job types: one schema per type, checked when a job is
submitted (no pyspark needed) and again when a worker runs it.

:func:`validate` returns a one-line error or None; :func:`parse` returns the typed arguments.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

import msgspec

from jobq.spark.paths import is_hadoop_setting
from jobq.spark.statements import split_statements

__all__ = [
    "JOB_TYPES",
    "ArgumentError",
    "BackupArgs",
    "ExportArgs",
    "ImportArgs",
    "OutputSpec",
    "PipelineArgs",
    "RestoreArgs",
    "SqlArgs",
    "parse",
    "validate",
]

Format = Literal["csv", "json", "parquet"]
#: a table name: ``name``, ``db.name`` or ``catalog.db.name``, optionally back-quoted parts
_TABLE = re.compile(r"^(`[^`]+`|[A-Za-z_][A-Za-z0-9_]*)(\.(`[^`]+`|[A-Za-z_][A-Za-z0-9_]*)){0,2}$")
#: a back-quoted name part that is a path (``parquet.`/x` `` names files, not a table)
_PATH_LIKE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*:|.*[/\\])")
#: a column name
_COLUMN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ArgumentError(ValueError):
    """The arguments of a job are wrong; the message is one line."""


#: a setting's value in ``spark_conf``
SettingValue = str | int | float | bool


class _Struct(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    def check(self) -> None:
        """Checks a schema cannot express; raise :class:`ArgumentError`."""


class _Args(_Struct, kw_only=True):
    """What every built-in type takes.

    :ivar spark_conf: SQL (session) settings for this job's own session
        (``{"spark.sql.shuffle.partitions": 8}``)
    """

    spark_conf: dict[str, SettingValue] = {}

    def check_common(self) -> None:
        for key in self.spark_conf:
            if not key.startswith("spark.sql."):
                raise ArgumentError(
                    f"spark_conf: {key} is not a SQL (session) setting: set it on the "
                    "worker with --spark-conf"
                )


def _table(value: str, what: str = "table") -> None:
    if not _TABLE.match(value):
        raise ArgumentError(f"{what}: not a table name: {value!r}")
    if any(_PATH_LIKE.match(part) for part in re.findall(r"`([^`]+)`", value)):
        raise ArgumentError(f"{what}: a table name, not a path: {value!r}")


def _columns(values: list[str], what: str) -> None:
    for value in values:
        if not _COLUMN.match(value):
            raise ArgumentError(f"{what}: not a column name: {value!r}")


def _path(value: str, what: str) -> None:
    if not value or "\x00" in value:
        raise ArgumentError(f"{what}: an empty or invalid path")


def _options(options: dict[str, str], what: str, where: str) -> None:
    """Reader and writer options may not carry paths of their own, nor Hadoop settings
    (Spark adds options to the Hadoop configuration the path is opened with)."""
    for key in options:
        if key.lower() in ("path", "paths"):
            raise ArgumentError(f"{what}: give the path in {where}, not in options")
        if is_hadoop_setting(key):
            raise ArgumentError(
                f"{what}: {key} is a Hadoop setting, which can send the {where} to another "
                "file system: set it on the worker with --spark-conf spark.hadoop.KEY=VALUE"
            )


class ImportArgs(_Args):
    """``spark.import``: files into a table.

    :ivar paths: a glob, or a list of paths and globs (under a configured root)
    :ivar format: csv, json or parquet
    :ivar table: the table to write
    :ivar mode: ``create`` (the table must not exist), ``append`` or ``overwrite``
    :ivar schema: a DDL schema (``"id INT, name STRING"``); None: inferred from the files
    :ivar partition_by: partition columns of a created table
    :ivar options: reader options (``{"header": "true"}``)
    :ivar files_per_chunk: input files per unit of work (checkpointed after each)
    """

    paths: str | list[str]
    format: Format
    table: str
    mode: Literal["create", "append", "overwrite"] = "append"
    schema: str | None = None
    partition_by: list[str] = []
    options: dict[str, str] = {}
    files_per_chunk: int = 1

    def check(self) -> None:
        _table(self.table)
        paths = [self.paths] if isinstance(self.paths, str) else self.paths
        if not paths:
            raise ArgumentError("paths: no paths given")
        for p in paths:
            _path(p, "paths")
        _columns(self.partition_by, "partition_by")
        _options(self.options, "options", "paths")
        if self.files_per_chunk < 1:
            raise ArgumentError("files_per_chunk: must be at least 1")

    def path_list(self) -> list[str]:
        return [self.paths] if isinstance(self.paths, str) else list(self.paths)


class ExportArgs(_Args):
    """``spark.export``: a table or a query to files.

    :ivar table: the table to export, or
    :ivar query: a SELECT whose result is exported
    :ivar path: the output directory (under a configured root)
    :ivar format: csv, json or parquet
    :ivar mode: ``overwrite`` or ``error`` (the path must not exist)
    :ivar partition_by: partition the files by these columns
    :ivar options: writer options (``{"header": "true"}``)
    :ivar files: the number of output files; None: as Spark writes them
    """

    path: str
    format: Format
    table: str | None = None
    query: str | None = None
    mode: Literal["overwrite", "error"] = "overwrite"
    partition_by: list[str] = []
    options: dict[str, str] = {}
    files: int | None = None

    def check(self) -> None:
        if (self.table is None) == (self.query is None):
            raise ArgumentError("give table or query, not both or neither")
        if self.table is not None:
            _table(self.table)
        if self.query is not None and not self.query.strip():
            raise ArgumentError("query: empty")
        _path(self.path, "path")
        _columns(self.partition_by, "partition_by")
        _options(self.options, "options", "path")
        if self.files is not None and self.files < 1:
            raise ArgumentError("files: must be at least 1")


class BackupArgs(_Args):
    """``spark.backup``: tables to a backup chain.

    :ivar tables: the tables to back up
    :ivar location: the chain's directory (under a configured root)
    :ivar type: ``full``, ``incremental`` (since the chain's last backup) or ``auto``
        (incremental when the chain has a full backup)
    :ivar files_per_part: table data files per unit of work (checkpointed after each)
    """

    tables: list[str]
    location: str
    type: Literal["full", "incremental", "auto"] = "auto"
    files_per_part: int = 1

    def check(self) -> None:
        if not self.tables:
            raise ArgumentError("tables: no tables given")
        for t in self.tables:
            _table(t, "tables")
        if len(set(self.tables)) != len(self.tables):
            raise ArgumentError("tables: a table is named twice")
        _path(self.location, "location")
        if self.files_per_part < 1:
            raise ArgumentError("files_per_part: must be at least 1")


class RestoreArgs(_Args):
    """``spark.restore``: a backup chain into tables.

    :ivar location: the chain's directory
    :ivar as_of: the backup to restore (its id, e.g. ``0003-incremental``); None: the latest
    :ivar tables: the tables to restore; None: every table of the backup
    :ivar rename: ``{"backed_up_name": "restore_as_name"}``
    :ivar mode: ``overwrite`` the tables, or ``create`` (they must not exist)
    """

    location: str
    as_of: str | None = None
    tables: list[str] | None = None
    rename: dict[str, str] = {}
    mode: Literal["create", "overwrite"] = "overwrite"

    def check(self) -> None:
        _path(self.location, "location")
        for t in self.tables or []:
            _table(t, "tables")
        for src, dst in self.rename.items():
            _table(src, "rename")
            _table(dst, "rename")
        if self.as_of is not None and not re.match(r"^\d{4,}-(full|incremental)$", self.as_of):
            raise ArgumentError(f"as_of: not a backup id: {self.as_of!r}")


class OutputSpec(_Struct):
    """Where a ``spark.sql`` result goes: a table, or files at a path."""

    table: str | None = None
    path: str | None = None
    format: Format = "parquet"
    mode: Literal["overwrite", "append", "error"] = "overwrite"
    options: dict[str, str] = {}

    def check(self) -> None:
        if (self.table is None) == (self.path is None):
            raise ArgumentError("output: give table or path")
        if self.table is not None:
            _table(self.table, "output.table")
        if self.path is not None:
            _path(self.path, "output.path")
        _options(self.options, "output.options", "output.path")


class SqlArgs(_Args):
    """``spark.sql``: statements run in order (one unit each); the last one's result goes to
    ``output`` when given.

    :ivar statements: SQL text, or a list of them; a text holding several statements is
        split at its semicolons (not those in strings, names or comments)
    :ivar output: a table or files for the last statement's result
    """

    statements: str | list[str]
    output: OutputSpec | None = None

    def check(self) -> None:
        if not self.statement_list():
            raise ArgumentError("statements: no statements given")
        if self.output is not None:
            self.output.check()

    def statement_list(self) -> list[str]:
        items = [self.statements] if isinstance(self.statements, str) else self.statements
        return [statement for item in items for statement in split_statements(item)]


class PipelineArgs(_Args):
    """``spark.pipeline``: a Spark Declarative Pipelines project.

    :ivar spec: the project's ``spark-pipeline.yml`` (or its directory)
    :ivar full_refresh: datasets to reset and recompute
    :ivar full_refresh_all: reset and recompute every dataset
    :ivar refresh: only update these datasets (flow selection)
    :ivar dry_run: validate the graph without running it
    """

    spec: str
    full_refresh: list[str] = []
    full_refresh_all: bool = False
    refresh: list[str] = []
    dry_run: bool = False

    def check(self) -> None:
        _path(self.spec, "spec")
        if self.full_refresh_all and (self.full_refresh or self.refresh):
            raise ArgumentError("full_refresh_all excludes full_refresh and refresh")


#: job name -> its argument schema
JOB_TYPES: dict[str, type[_Args]] = {
    "spark.import": ImportArgs,
    "spark.export": ExportArgs,
    "spark.backup": BackupArgs,
    "spark.restore": RestoreArgs,
    "spark.sql": SqlArgs,
    "spark.pipeline": PipelineArgs,
}


def parse(name: str, payload: bytes | str | dict[str, Any] | None) -> Any:
    """The typed arguments of a ``name`` job; :class:`ArgumentError` (one line) if wrong."""
    schema = JOB_TYPES.get(name)
    if schema is None:
        raise ArgumentError(f"not a built-in Spark job type: {name!r}")
    if payload is None or payload in (b"", ""):
        raise ArgumentError(f"{name}: the payload must be a JSON object of arguments")
    try:
        if isinstance(payload, dict):
            args = msgspec.convert(payload, schema)
        else:
            args = msgspec.json.decode(payload, type=schema)
    except msgspec.DecodeError as exc:
        raise ArgumentError(f"{name}: bad payload: {_one_line(str(exc))}") from None
    except msgspec.ValidationError as exc:
        raise ArgumentError(f"{name}: {_one_line(str(exc))}") from None
    try:
        args.check()
        args.check_common()
    except ArgumentError as exc:
        raise ArgumentError(f"{name}: {exc}") from None
    return args


def validate(name: str, payload: bytes | str | dict[str, Any] | None) -> str | None:
    """None when ``payload`` is valid for the built-in job type ``name`` (or ``name`` is not a
    built-in Spark type); else a one-line error."""
    if name not in JOB_TYPES:
        return None
    try:
        parse(name, payload)
    except ArgumentError as exc:
        return str(exc)
    return None


def to_json(args: Any) -> dict[str, Any]:
    """The arguments as plain JSON values."""
    value = json.loads(msgspec.json.encode(args))
    assert isinstance(value, dict)
    return value


def _one_line(text: str) -> str:
    return " ".join(text.split())
