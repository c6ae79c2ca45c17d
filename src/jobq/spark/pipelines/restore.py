"""``spark.restore``: a backup chain into tables as of a chosen backup, one unit per table,
each part file's sha256 and each table's row count and checksum checked against the
manifest. Each table is written under a name of its own and renamed to its target once
checked, so a failed or canceled restore leaves the targets as they were (and drops the
tables it created in mode ``create``).
"""

from __future__ import annotations

import json
import logging
import os
import re
from typing import Any

from jobq.client import LeaseLost
from jobq.spark.args import RestoreArgs, parse
from jobq.spark.errors import SparkJobError
from jobq.spark.pipelines._tables import checksum_of, local_path, sha256_file, table_exists
from jobq.spark.pipelines.backup import backups, manifest
from jobq.spark.registry import PipelineJob, pipeline
from jobq.worker.context import Paused

log = logging.getLogger("jobq.spark")


def _staging_table(target: str, job_id: str) -> str:
    """The name a table is restored under before it is renamed to ``target``."""
    return f"{target}__jobq_restore_{re.sub(r'[^0-9A-Za-z]', '', job_id)[:16].lower()}"


def _verify_files(location: str, table: str, entry: dict[str, Any]) -> list[str]:
    """The part directories of the table's live files, after checking every file."""
    dirs: list[str] = []
    for live in entry["live"]:
        for f in live["files"]:
            path = os.path.join(location, live["backup"], f["path"])
            if not os.path.isfile(path):
                raise SparkJobError(f"backup {live['backup']}: {f['path']} is missing")
            if os.path.getsize(path) != f["bytes"] or sha256_file(path) != f["sha256"]:
                raise SparkJobError(
                    f"backup {live['backup']}: {f['path']} does not match its checksum"
                )
        if live["files"]:
            dirs.append(
                os.path.dirname(os.path.join(location, live["backup"], live["files"][0]["path"]))
            )
    return dirs


def _restore_table(
    spark: Any, location: str, table: str, target: str, entry: dict[str, Any], staging: str
) -> dict[str, Any]:
    from pyspark.sql.types import StructType

    schema = StructType.fromJson(json.loads(entry["schema"]))
    columns = [f.name for f in schema.fields]
    dirs = _verify_files(location, table, entry)
    df = spark.read.schema(schema).parquet(*dirs) if dirs else spark.createDataFrame([], schema)
    df = df.select(*[f"`{c}`" for c in columns])
    provider = entry["provider"] if entry["provider"] in ("parquet", "orc") else "parquet"
    writer = df.write.mode("overwrite").format(provider)
    if entry["partition_by"]:
        writer = writer.partitionBy(*entry["partition_by"])
    if table_exists(spark, staging):  # left by an attempt that died
        spark.sql(f"DROP TABLE {staging}")
    writer.saveAsTable(staging)
    rows, checksum = checksum_of(spark.table(staging), columns)
    if rows != entry["rows"] or checksum != entry["checksum"]:
        raise SparkJobError(
            f"restored {target} does not match the manifest: {rows} rows (expected "
            f"{entry['rows']}), checksum {checksum} (expected {entry['checksum']})"
        )
    if table_exists(spark, target):
        spark.sql(f"DROP TABLE {target}")
    spark.sql(f"ALTER TABLE {staging} RENAME TO {target}")
    return {"rows": rows, "checksum": checksum}


def _clean_up(
    spark: Any, args: RestoreArgs, job: PipelineJob, state: dict[str, Any], staging: str | None
) -> None:
    """A failed or canceled restore: drop the table being written and, in mode create,
    the tables this job created; then a retry starts again."""
    try:
        if staging and table_exists(spark, staging):
            spark.sql(f"DROP TABLE {staging}")
        if args.mode == "create":
            for target in list(state["tables"]):
                if table_exists(spark, target):
                    spark.sql(f"DROP TABLE {target}")
            job.progress(checkpoint=b"null")
    except BaseException:  # the job's own error is the one to report
        log.debug("cleaning up restore %s failed", job.id, exc_info=True)


@pipeline("spark.restore", parse=lambda payload: parse("spark.restore", payload))
def restore(spark: Any, args: RestoreArgs, job: PipelineJob) -> dict[str, Any]:
    location = local_path(job.roots.resolve(args.location, "location"))
    if location is None or not os.path.isdir(location):
        raise SparkJobError(f"location: no backups in {args.location}")
    complete = backups(location)
    if not complete:
        raise SparkJobError(f"location: no complete backup in {args.location}")
    backup_id = args.as_of or complete[-1]
    if backup_id not in complete:
        raise SparkJobError(f"as_of: no complete backup {backup_id} in {args.location}")
    value = manifest(location, backup_id)
    names = args.tables if args.tables is not None else sorted(value["tables"])
    unknown = [n for n in names if n not in value["tables"]]
    if unknown:
        raise SparkJobError(f"tables: not in backup {backup_id}: {', '.join(unknown)}")
    state = job.checkpoint if isinstance(job.checkpoint, dict) else None
    if state is None:
        if args.mode == "create":
            existing = [
                args.rename.get(n, n) for n in names if table_exists(spark, args.rename.get(n, n))
            ]
            if existing:
                raise SparkJobError(f"table already exists: {', '.join(existing)}")
        state = {"done": 0, "tables": {}}
    if args.mode == "create" and any(
        not table_exists(spark, t) for t in state["tables"]
    ):  # a failed attempt dropped what it had restored
        state = {"done": 0, "tables": {}}
    result: dict[str, Any] = {"backup": backup_id, "tables": state["tables"]}
    staging: str | None = None
    try:
        with job.units(len(names), state["done"]) as units:
            for index in range(state["done"], len(names)):
                table = names[index]
                target = args.rename.get(table, table)
                staging = _staging_table(target, job.id)
                job.log_unit(f"restore table {table}")
                with units.unit(f"restore {target} as of {backup_id}"):
                    outcome = _restore_table(
                        spark, location, table, target, value["tables"][table], staging
                    )
                staging = None
                state["tables"][target] = outcome
                state["done"] = index + 1
                units.unit_done(state, f"{index + 1}/{len(names)} tables restored")
    except (Paused, LeaseLost):
        raise  # resumed from the checkpoint later, here or by another worker
    except BaseException:
        _clean_up(spark, args, job, state, staging)
        raise
    return result
