"""``spark.export``: a table or a query to CSV, JSON or Parquet files at a path, in one unit
written in overwrite mode, so an adopted export replaces what a killed attempt left. A query
is checked by the sandbox; the rows written are counted as they are written.
"""

from __future__ import annotations

import os
from typing import Any

from jobq.spark.args import ExportArgs, parse
from jobq.spark.errors import SparkJobError
from jobq.spark.pipelines._tables import local_path, table_exists
from jobq.spark.registry import PipelineJob, pipeline


def source_frame(job: PipelineJob, table: str | None, query: str | None) -> Any:
    """The DataFrame of a table or a query (a query must be a SELECT or WITH query, and
    pass the sandbox)."""
    spark = job.spark
    if table is not None:
        if not table_exists(spark, table):
            raise SparkJobError(f"table not found: {table}")
        return spark.table(table)
    assert query is not None
    first = query.lstrip().split(None, 1)[0].upper() if query.strip() else ""
    if first not in ("SELECT", "WITH", "FROM", "VALUES", "TABLE", "("):
        raise SparkJobError("query: only a query (SELECT, WITH, ...) can be exported")
    return job.sql(query)


def write_files(
    df: Any,
    path: str,
    fmt: str,
    mode: str,
    partition_by: list[str],
    options: dict[str, str],
    files: int | None = None,
) -> int:
    """Write ``df``; the number of rows written (counted as they are written)."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    observation = Observation("jobq_rows_written")
    df = df.observe(observation, F.count(F.lit(1)).alias("rows"))
    if files is not None:
        df = df.coalesce(files) if files == 1 else df.repartition(files)
    writer = df.write.mode(mode).format(fmt).options(**options)
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    writer.save(path)
    return int(observation.get.get("rows", 0))


@pipeline("spark.export", parse=lambda payload: parse("spark.export", payload))
def export(spark: Any, args: ExportArgs, job: PipelineJob) -> dict[str, Any]:
    path = job.roots.resolve(args.path, "path")
    state = job.checkpoint if isinstance(job.checkpoint, dict) else {}
    if not state.get("started"):
        local = local_path(path) or ""
        if args.mode == "error" and local and os.path.exists(local):
            raise SparkJobError(f"path: {args.path} exists (mode error)")
        state = {"started": True}
        job.progress(0.0, "started", checkpoint=state)
    df = source_frame(job, args.table, args.query)
    missing = [c for c in args.partition_by if c not in df.columns]
    if missing:
        raise SparkJobError(f"partition_by: no column {', '.join(missing)}")
    with job.units(1) as units:
        job.log_unit("export")
        with units.unit(f"export to {args.format}"):
            rows = write_files(
                df, path, args.format, "overwrite", args.partition_by, args.options, args.files
            )
        units.unit_done({"started": True, "done": True, "rows": rows}, f"exported {rows} rows")
    return {"path": path, "format": args.format, "rows": rows}
