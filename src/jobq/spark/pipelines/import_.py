"""``spark.import``: CSV, JSON or Parquet files into a table (create, append or overwrite).

A unit is a chunk of files, staged inside the table's location; the last unit moves the
staged files in, so an adopted job writes no file twice (``docs/spark.md``).
"""

from __future__ import annotations

import json
import os
from typing import Any

from jobq.spark.args import ImportArgs, parse
from jobq.spark.errors import SparkJobError
from jobq.spark.pipelines._tables import (
    TableInfo,
    data_files,
    local_path,
    remove_tree,
    table_exists,
    table_info,
)
from jobq.spark.registry import PipelineJob, pipeline

STAGING_DIR = "_jobq_staging"


def _reader(spark: Any, args: ImportArgs, schema: Any = None) -> Any:
    reader = spark.read.format(args.format).options(**args.options)
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
    if not schema.fields:
        raise SparkJobError(f"no columns found in the {args.format} files")
    return schema


def _aligned(df: Any, table_schema: Any, table: str) -> Any:
    """``df`` with the table's columns, in its order and types (matched by name)."""
    from pyspark.sql import functions as F

    by_name = {c.lower(): c for c in df.columns}
    cols = []
    for field in table_schema.fields:
        source = by_name.get(field.name.lower())
        if source is None:
            raise SparkJobError(f"column {field.name} of table {table} is not in the files")
        cols.append(F.col(f"`{source}`").cast(field.dataType).alias(field.name))
    return df.select(*cols)


def _plan(spark: Any, args: ImportArgs, job: PipelineJob) -> dict[str, Any]:
    """The first attempt's plan: the files (a snapshot of the globs), schema, table."""
    files = job.roots.expand(args.path_list(), "paths")
    exists = table_exists(spark, args.table)
    if args.mode == "create" and exists:
        raise SparkJobError(f"table already exists: {args.table}")
    if args.mode != "create" and not exists:
        raise SparkJobError(f"table not found: {args.table} (use mode create)")
    schema = _schema_from(spark, args, files)
    if not exists:
        empty = spark.createDataFrame([], schema)
        missing = [c for c in args.partition_by if c not in empty.columns]
        if missing:
            raise SparkJobError(f"partition_by: no column {', '.join(missing)} in the files")
        empty.write.format("parquet").partitionBy(*args.partition_by).saveAsTable(args.table)
    else:
        info = table_info(spark, args.table)
        _aligned(spark.createDataFrame([], schema), info.schema, args.table)  # columns check
    return {"files": files, "schema": schema.json(), "chunks_done": 0, "rows": 0}


def _chunks(files: list[str], size: int) -> list[list[str]]:
    return [files[i : i + size] for i in range(0, len(files), size)]


@pipeline("spark.import", parse=lambda payload: parse("spark.import", payload))
def import_files(spark: Any, args: ImportArgs, job: PipelineJob) -> dict[str, Any]:
    from pyspark.sql.types import StructType

    state = job.checkpoint if isinstance(job.checkpoint, dict) else None
    if state is None:
        state = _plan(spark, args, job)
        job.progress(0.0, "planned", checkpoint=state)
    files: list[str] = state["files"]
    schema = StructType.fromJson(json.loads(state["schema"]))
    info: TableInfo = table_info(spark, args.table)
    location = local_path(info.location) if info.location else None
    staged = info.provider == "parquet" and location is not None
    chunks = _chunks(files, args.files_per_chunk)
    staging = os.path.join(location, STAGING_DIR, job.id) if location else ""
    with job.units(len(chunks) + 1, state["chunks_done"]) as units:
        for index in range(state["chunks_done"], len(chunks)):
            label = f"chunk {index + 1}/{len(chunks)}"
            job.log_unit(f"import chunk {index}")
            with units.unit(label):
                df = _aligned(
                    _reader(spark, args, schema).load(chunks[index]), info.schema, args.table
                )
                if staged:
                    out = os.path.join(staging, f"chunk-{index:05d}")
                    df.write.mode("overwrite").format("parquet").partitionBy(
                        *info.partition_by
                    ).save(out)
                    rows = spark.read.parquet(out).count() if data_files(out) else 0
                else:
                    rows = df.count()
                    df.write.insertInto(
                        args.table, overwrite=args.mode == "overwrite" and index == 0
                    )
            state["chunks_done"] = index + 1
            state["rows"] += rows
            units.unit_done(state, f"{label} imported")
        job.log_unit("import commit")
        with units.unit("commit"):
            if staged:
                assert location is not None
                _commit(spark, args, info, location, staging, state, job)
        state["committed"] = True
        units.unit_done(state, "committed")
    return {"table": args.table, "rows": state["rows"], "files": len(files)}


def _commit(
    spark: Any,
    args: ImportArgs,
    info: TableInfo,
    location: str,
    staging: str,
    state: dict[str, Any],
    job: PipelineJob,
) -> None:
    """Move the staged files into the table; safe to repeat after a worker died in it."""
    if args.mode == "overwrite" and not state.get("cleared"):
        for entry in os.listdir(location):
            if entry == STAGING_DIR:
                continue
            path = os.path.join(location, entry)
            if os.path.isdir(path):
                remove_tree(path)
            else:
                os.remove(path)
        state["cleared"] = True
        job.progress(None, "commit: old data removed", checkpoint=state)
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
    spark.sql(f"REFRESH TABLE {args.table}")
    remove_tree(staging)
    staging_root = os.path.dirname(staging)
    if os.path.isdir(staging_root) and not os.listdir(staging_root):
        os.rmdir(staging_root)
