"""``spark.import``: CSV, JSON or Parquet files into a table (create, append or overwrite).

A unit is a chunk of files, staged inside the table's location; the last unit moves the
staged files in, so an adopted job writes no file twice. A failed or canceled import
removes what it made (its staging, a table it created) before the commit began, and never
touches a table it did not create (``docs/spark.md``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from typing import Any

from jobq.spark.args import ImportArgs, parse
from jobq.spark.errors import SparkJobError
from jobq.spark.pipelines._tables import (
    TableInfo,
    data_files,
    find_table,
    local_path,
    refresh_table,
    remove_tree,
    table_exists,
    table_info,
)
from jobq.spark.registry import PipelineJob, pipeline

STAGING_DIR = "_jobq_staging"
#: the column malformed CSV/JSON rows land in while read (PERMISSIVE mode)
_CORRUPT = "_jobq_corrupt_record"

log = logging.getLogger("jobq.spark")


def _options(args: ImportArgs) -> dict[str, str]:
    """The reader's options: CSV infers its columns' types unless told otherwise."""
    options = dict(args.options)
    if args.format == "csv" and args.schema is None:
        options.setdefault("inferSchema", "true")
    return options


def _permissive(args: ImportArgs) -> bool:
    """Malformed rows are kept (with nulls) and counted: CSV/JSON in PERMISSIVE mode."""
    mode = args.options.get("mode", "PERMISSIVE").upper()
    return args.format in ("csv", "json") and mode == "PERMISSIVE"


def _reader(spark: Any, args: ImportArgs, schema: Any = None) -> Any:
    reader = spark.read.format(args.format).options(**_options(args))
    if schema is not None:
        reader = reader.schema(schema)
    return reader


def _schema_from(spark: Any, args: ImportArgs, files: list[str]) -> Any:
    from pyspark.sql.types import StructType

    if args.schema is not None:
        try:
            return StructType.fromDDL(args.schema)
        except Exception:
            return spark.createDataFrame([], args.schema).schema
    schema = _reader(spark, args).load(files).schema
    corrupt = args.options.get("columnNameOfCorruptRecord", "_corrupt_record")
    schema = StructType([f for f in schema.fields if f.name != corrupt])  # JSON adds it
    if not schema.fields:
        raise SparkJobError(f"no columns found in the {args.format} files")
    return schema


def _check_columns(columns: list[str], table_schema: Any, table: str) -> dict[str, str]:
    """Each column of the table -> the files' column of that name (any case); SparkJobError
    for one the files lack."""
    by_name = {c.lower(): c for c in columns}
    sources = {}
    for field in table_schema.fields:
        source = by_name.get(field.name.lower())
        if source is None:
            raise SparkJobError(f"column {field.name} of table {table} is not in the files")
        sources[field.name] = source
    return sources


def _aligned(df: Any, table_schema: Any, table: str) -> Any:
    """``df`` with the table's columns, in its order and types (matched by name)."""
    from pyspark.sql import functions as F

    sources = _check_columns(df.columns, table_schema, table)
    types = {f.name: f.dataType for f in df.schema.fields}
    if all(
        sources[f.name] == f.name and types[f.name] == f.dataType for f in table_schema.fields
    ):
        # the columns are the table's already (its schema came from these files): no casts,
        # each of which is a round trip to the JVM
        names = [f.name for f in table_schema.fields]
        return df if df.columns == names else df.select(*[f"`{n}`" for n in names])
    return df.select(
        *[
            F.col(f"`{sources[field.name]}`").cast(field.dataType).alias(field.name)
            for field in table_schema.fields
        ]
    )


def _layout(schema: Any, partition_by: list[str]) -> list[tuple[str, str]]:
    """A table's columns as (lower-case name, type) in the order a table stores them:
    partition columns last."""
    parts = [p.lower() for p in partition_by]
    fields = [(f.name.lower(), f.dataType.simpleString()) for f in schema.fields]
    data = [f for f in fields if f[0] not in parts]
    by_name = dict(fields)
    return data + [(p, by_name.get(p, "")) for p in parts]


def _create_table(spark: Any, table: str, schema: Any, partition_by: list[str]) -> None:
    empty = spark.createDataFrame([], schema)
    missing = [c for c in partition_by if c not in empty.columns]
    if missing:
        raise SparkJobError(f"partition_by: no column {', '.join(missing)} in the files")
    empty.write.format("parquet").partitionBy(*partition_by).saveAsTable(table)


def _plan(spark: Any, args: ImportArgs, job: PipelineJob, run: _Run) -> dict[str, Any]:
    """The first attempt's plan: the files (a snapshot of the globs), schema, table; a
    missing table is created (mode create or overwrite) and marked as this job's."""
    files = job.roots.expand(args.path_list(), "paths")
    found = find_table(spark, args.table)
    exists = found is not None
    if args.mode == "create" and exists:
        raise SparkJobError(f"table already exists: {args.table}")
    if args.mode == "append" and not exists:
        raise SparkJobError(f"table not found: {args.table} (use mode create or overwrite)")
    schema = _schema_from(spark, args, files)
    state: dict[str, Any] = {
        "files": files,
        "schema": schema.json(),
        "chunks_done": 0,
        "rows": 0,
        "malformed": 0,
    }
    if not exists:
        run.created = True
        state["created"] = True
        _create_table(spark, args.table, schema, args.partition_by)
        return state
    assert found is not None
    info = found
    if args.mode == "overwrite":
        partition_by = args.partition_by or [
            p for p in info.partition_by if p.lower() in {f.name.lower() for f in schema.fields}
        ]
        if _layout(schema, partition_by) != _layout(info.schema, info.partition_by):
            # the files' schema replaces the table's (as saveAsTable's overwrite does): the
            # commit drops the table and creates it again; chunks are staged outside it
            state["replace"] = {"partition_by": partition_by}
            return state
    _check_columns([f.name for f in schema.fields], info.schema, args.table)
    run.info = info
    return state


def _chunks(files: list[str], size: int) -> list[list[str]]:
    return [files[i : i + size] for i in range(0, len(files), size)]


class _Run:
    """What this attempt made, for the clean-up of a failed or canceled import."""

    def __init__(self, job: PipelineJob) -> None:
        self.job = job
        self.created = False
        #: the table as the plan found it (None: the plan made it, or did not run)
        self.info: TableInfo | None = None
        self.staging = ""
        self.committing = False


def _staging_dir(job: PipelineJob, location: str | None, replace: bool) -> str:
    """Where the chunks are staged: inside the table's location (hidden from readers), or,
    when the commit replaces the table, in the worker's data directory beside it."""
    if replace:
        from jobq.spark.session import holder

        return str(holder().options.spark_dir / "staging" / job.id)
    return os.path.join(location, STAGING_DIR, job.id) if location else ""


def _resumed(spark: Any, args: ImportArgs, state: dict[str, Any]) -> dict[str, Any] | None:
    """An earlier attempt's state, or None to plan again: a table it created and a
    failed attempt removed is created again, removed staging is written again."""
    if state.get("committing"):
        return state
    if state.get("created") and not table_exists(spark, args.table):
        return None
    return state


@pipeline("spark.import", parse=lambda payload: parse("spark.import", payload))
def import_files(spark: Any, args: ImportArgs, job: PipelineJob) -> dict[str, Any]:
    from jobq.client import LeaseLost
    from jobq.worker.context import Paused

    run = _Run(job)
    try:
        return _import(spark, args, job, run)
    except (Paused, LeaseLost):
        raise  # resumed from the checkpoint later, here or by another worker
    except BaseException:
        if not run.committing:
            _clean_up(spark, args, run)
        raise


def _import(spark: Any, args: ImportArgs, job: PipelineJob, run: _Run) -> dict[str, Any]:
    from pyspark.sql.types import StructType

    from jobq.worker.context import JobInterrupt

    state = job.checkpoint if isinstance(job.checkpoint, dict) else None
    if state is not None:
        state = _resumed(spark, args, state)
    if state is None:
        state = _plan(spark, args, job, run)
        job.progress(0.0, "planned", checkpoint=state)
    run.created = bool(state.get("created"))
    files: list[str] = state["files"]
    schema = StructType.fromJson(json.loads(state["schema"]))
    replace = state.get("replace")
    # the plan's look at an existing table still holds (a resumed attempt looks again)
    info: TableInfo = run.info if run.info is not None else table_info(spark, args.table)
    table_schema = schema if replace else info.schema
    location = local_path(info.location) if info.location else None
    staged = replace is not None or (info.provider == "parquet" and location is not None)
    partition_by = replace["partition_by"] if replace else info.partition_by
    chunks = _chunks(files, args.files_per_chunk)
    staging = _staging_dir(job, location, replace is not None) if staged else ""
    run.staging = staging
    if staged and state["chunks_done"] and not os.path.isdir(staging):
        state.update(chunks_done=0, rows=0, malformed=0)  # a failed attempt removed them
    permissive = _permissive(args)
    with job.units(len(chunks) + 1, state["chunks_done"]) as units:
        for index in range(state["chunks_done"], len(chunks)):
            label = f"chunk {index + 1}/{len(chunks)}"
            job.log_unit(f"import chunk {index}")
            with units.unit(label):
                rows, malformed = _write_chunk(
                    spark,
                    args,
                    chunks[index],
                    schema,
                    table_schema,
                    index,
                    staging if staged else None,
                    partition_by,
                    permissive,
                )
            state["chunks_done"] = index + 1
            state["rows"] += rows
            state["malformed"] = state.get("malformed", 0) + malformed
            units.unit_done(state, f"{label} imported{_malformed(state)}")
        job.log_unit("import commit")
        # a cancel or failure up to here is cleaned up; from here on the commit is finished
        # (outside a unit, so a cancel does not stop its Spark jobs), not undone
        state["committing"] = True
        job.progress(None, "commit", checkpoint=state)
        run.committing = True
        if staged:
            _commit(spark, args, info, location, staging, state, job)
        state["committed"] = True
        with contextlib.suppress(JobInterrupt):  # committed: the import is done
            units.unit_done(state, f"committed{_malformed(state)}")
    result = {"table": args.table, "rows": state["rows"], "files": len(files)}
    if permissive:
        result["malformed_rows"] = state.get("malformed", 0)
    return result


def _malformed(state: dict[str, Any]) -> str:
    count = state.get("malformed", 0)
    return f" ({count} malformed rows)" if count else ""


def _write_chunk(
    spark: Any,
    args: ImportArgs,
    files: list[str],
    schema: Any,
    table_schema: Any,
    index: int,
    staging: str | None,
    partition_by: list[str],
    permissive: bool,
) -> tuple[int, int]:
    """Write one chunk (staged, or into the table): (rows, malformed rows)."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    read_schema = schema
    options = {}
    if permissive:
        read_schema = StructType([*schema.fields, StructField(_CORRUPT, StringType())])
        options["columnNameOfCorruptRecord"] = _CORRUPT
    df = _reader(spark, args, read_schema).options(**options).load(files)
    observation = Observation(f"jobq_import_{index}")
    metrics = [F.count(F.lit(1)).alias("rows")]
    if permissive:
        metrics.append(F.count(F.col(_CORRUPT)).alias("malformed"))
    df = _aligned(df.observe(observation, *metrics), table_schema, args.table)
    if staging is not None:
        out = os.path.join(staging, f"chunk-{index:05d}")
        df.write.mode("overwrite").format("parquet").partitionBy(*partition_by).save(out)
    else:
        df.write.insertInto(args.table, overwrite=args.mode == "overwrite" and index == 0)
    values = observation.get
    return int(values.get("rows", 0)), int(values.get("malformed", 0) or 0)


def _clean_up(spark: Any, args: ImportArgs, run: _Run) -> None:
    """Remove what this failed or canceled attempt made: its staging, a table it created;
    then a retry starts again from the plan."""
    try:
        if run.staging:
            _remove_staging(run.staging)
        if run.created and table_exists(spark, args.table):
            spark.sql(f"DROP TABLE {args.table}")
        run.job.progress(checkpoint=b"null")
    except BaseException:  # the job's own error is the one to report
        log.debug("cleaning up import %s failed", run.job.id, exc_info=True)


def _remove_staging(staging: str) -> None:
    remove_tree(staging)
    staging_root = os.path.dirname(staging)
    if os.path.isdir(staging_root) and not os.listdir(staging_root):
        os.rmdir(staging_root)


def _save(job: PipelineJob, status: str, state: dict[str, Any]) -> None:
    """A step of the commit in the checkpoint; a pause or cancel does not stop the commit."""
    from jobq.worker.context import JobInterrupt

    with contextlib.suppress(JobInterrupt):
        job.progress(None, status, checkpoint=state)


def _commit(
    spark: Any,
    args: ImportArgs,
    info: TableInfo,
    location: str | None,
    staging: str,
    state: dict[str, Any],
    job: PipelineJob,
) -> None:
    """Move the staged files into the table; safe to repeat after a worker died in it."""
    replace = state.get("replace")
    if replace is not None:
        if not state.get("recreated"):
            from pyspark.sql.types import StructType

            schema = StructType.fromJson(json.loads(state["schema"]))
            if table_exists(spark, args.table):
                spark.sql(f"DROP TABLE {args.table}")
            _create_table(spark, args.table, schema, replace["partition_by"])
            state["recreated"] = True
            _save(job, "commit: table replaced", state)
        info = table_info(spark, args.table)
        location = local_path(info.location) if info.location else None
        if location is None:
            raise SparkJobError(f"table {args.table}: not on a local filesystem")
    assert location is not None
    if args.mode == "overwrite" and not state.get("cleared") and replace is None:
        for entry in os.listdir(location):
            if entry == STAGING_DIR:
                continue
            path = os.path.join(location, entry)
            if os.path.isdir(path):
                remove_tree(path)
            else:
                os.remove(path)
        state["cleared"] = True
        _save(job, "commit: old data removed", state)
    if os.path.isdir(staging):
        for chunk in sorted(os.listdir(staging)):
            source_dir = os.path.join(staging, chunk)
            for rel in data_files(source_dir):
                target = os.path.join(location, rel)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                os.replace(os.path.join(source_dir, rel), target)
    if info.partition_by:
        sync = " SYNC PARTITIONS" if args.mode == "overwrite" else ""
        spark.sql(f"MSCK REPAIR TABLE {args.table}{sync}")
    refresh_table(spark, args.table, info.location or location)
    _remove_staging(staging)
