"""``spark.backup``: tables to a backup chain, full or incremental, resumable per file
(``docs/spark.md`` says what a backup holds and why it is consistent).

Layout of a chain (``location``)::

    0001-full/
      plan.json                 the snapshot: each table's schema and data files, the parts
      data/<table>/<part>/      one part per data file of the table: its rows, as Parquet
      data/<table>/<part>.json  the part's rows, checksum and files (sha256), once written
      manifest.json             written last: a backup without one is incomplete
    0002-incremental/ ...
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from typing import Any

from jobq.spark.args import BackupArgs, parse
from jobq.spark.errors import SparkJobError
from jobq.spark.pipelines._tables import (
    add_checksums,
    atomic_write_json,
    checksum_of,
    data_files,
    local_path,
    read_json,
    sha256_file,
    table_info,
)
from jobq.spark.registry import PipelineJob, pipeline

#: the manifest's format version
MANIFEST_FORMAT = 1
_BACKUP_ID = re.compile(r"^(?P<seq>\d{4,})-(?P<type>full|incremental)$")
#: a whole-table part (tables that are not files)
WHOLE = "*"


def backups(location: str) -> list[str]:
    """The backup ids in ``location`` with a manifest (complete backups), oldest first."""
    if not os.path.isdir(location):
        return []
    found = [
        name
        for name in os.listdir(location)
        if _BACKUP_ID.match(name) and os.path.isfile(os.path.join(location, name, "manifest.json"))
    ]
    return sorted(found, key=lambda n: int(n.split("-")[0]))


def manifest(location: str, backup_id: str) -> dict[str, Any]:
    path = os.path.join(location, backup_id, "manifest.json")
    try:
        value = read_json(path)
    except FileNotFoundError:
        raise SparkJobError(f"no complete backup {backup_id} in {location}") from None
    except ValueError:
        raise SparkJobError(f"the manifest of backup {backup_id} is not valid JSON") from None
    if not isinstance(value, dict) or value.get("format") != MANIFEST_FORMAT:
        raise SparkJobError(f"the manifest of backup {backup_id} has an unknown format")
    return value


def _next_id(location: str, kind: str) -> str:
    seqs = [int(m["seq"]) for n in os.listdir(location) if (m := _BACKUP_ID.match(n))]
    return f"{max(seqs, default=0) + 1:04d}-{kind}"


def _own_unfinished(location: str, job_id: str) -> str | None:
    """A backup this job planned before it could checkpoint (its worker died): reuse it."""
    for name in sorted(os.listdir(location)):
        plan = os.path.join(location, name, "plan.json")
        finished = os.path.exists(os.path.join(location, name, "manifest.json"))
        if not _BACKUP_ID.match(name) or finished or not os.path.isfile(plan):
            continue
        try:
            if read_json(plan).get("job_id") == job_id:
                return name
        except ValueError:
            continue
    return None


def _table_files(spark: Any, name: str) -> tuple[Any, list[dict[str, Any]] | None]:
    """The table's storage and its data files (path relative to the location, size), or
    None when it is not stored as local Parquet/ORC files."""
    info = table_info(spark, name)
    location = info.local_location
    if info.provider not in ("parquet", "orc") or location is None:
        return info, None
    files = []
    for uri in spark.table(name).inputFiles():
        path = local_path(uri)
        if path is None:
            return info, None
        path = os.path.realpath(path)
        rel = os.path.relpath(path, os.path.realpath(location))
        files.append({"file": rel, "size": os.path.getsize(path)})
    return info, sorted(files, key=lambda f: f["file"])


def _plan(spark: Any, args: BackupArgs, job: PipelineJob, location: str) -> dict[str, Any]:
    complete = backups(location)
    kind = args.type
    if kind == "auto":
        kind = "incremental" if complete else "full"
    if kind == "incremental" and not complete:
        raise SparkJobError(f"no full backup in {args.location} to base an incremental on")
    parent = complete[-1] if kind == "incremental" else None
    previous = manifest(location, parent)["tables"] if parent else {}
    backup_id = _own_unfinished(location, job.id) or _next_id(location, kind)
    tables: dict[str, Any] = {}
    parts: list[list[Any]] = []
    for name in args.tables:
        info, files = _table_files(spark, name)
        if info.provider == "view":
            raise SparkJobError(f"{name} is a view, not a table")
        entry: dict[str, Any] = {
            "schema": info.schema.json(),
            "partition_by": info.partition_by,
            "provider": info.provider,
            "location": info.location,
            "whole": files is None,
        }
        if files is None:
            entry["new"] = [WHOLE]
            entry["removed"] = []
            entry["kept"] = []
            parts.append([name, WHOLE])
        else:
            before = {f["file"]: f for f in previous.get(name, {}).get("live", [])}
            if previous.get(name, {}).get("whole"):
                before = {}
            now = {f["file"]: f for f in files}
            added = [
                f
                for f in files
                if f["file"] not in before or before[f["file"]]["size"] != f["size"]
            ]
            kept = [
                before[k]
                for k in sorted(before)
                if k in now and before[k]["size"] == now[k]["size"]
            ]
            entry["new"] = [f["file"] for f in added]
            entry["sizes"] = {f["file"]: f["size"] for f in added}
            entry["kept"] = kept
            entry["removed"] = sorted(k for k in before if k not in now)
            entry["location_path"] = info.local_location
            parts.extend([name, f["file"]] for f in added)
        tables[name] = entry
    plan = {
        "id": backup_id,
        "type": kind,
        "parent": parent,
        "job_id": job.id,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "tables": tables,
        "parts": parts,
    }
    os.makedirs(os.path.join(location, backup_id), exist_ok=True)
    atomic_write_json(os.path.join(location, backup_id, "plan.json"), plan)
    return plan


def part_name(index: int) -> str:
    return f"part-{index:06d}"


def _table_dir(table: str) -> str:
    return table.replace("`", "")


def _back_up_part(spark: Any, plan: dict[str, Any], backup_dir: str, index: int) -> None:
    from pyspark.sql.types import StructType

    table, file = plan["parts"][index]
    entry = plan["tables"][table]
    schema = StructType.fromJson(json.loads(entry["schema"]))
    columns = [f.name for f in schema.fields]
    if file == WHOLE:
        df = spark.table(table).select(*[f"`{c}`" for c in columns])
    else:
        root = entry["location_path"]
        source = os.path.join(root, file)
        if not os.path.exists(source) or os.path.getsize(source) != entry["sizes"][file]:
            raise SparkJobError(
                f"table {table} changed during the backup ({file} is gone); back it up again"
            )
        df = (
            spark.read.format(entry["provider"])
            .schema(schema)
            .option("basePath", root)
            .load(source)
            .select(*[f"`{c}`" for c in columns])
        )
    out = os.path.join(backup_dir, "data", _table_dir(table), part_name(index))
    df.write.mode("overwrite").parquet(out)
    written = spark.read.schema(schema).parquet(out) if data_files(out) else None
    rows, checksum = checksum_of(written, columns) if written is not None else (0, "0")
    files = [
        {
            "path": os.path.join("data", _table_dir(table), part_name(index), rel),
            "bytes": os.path.getsize(os.path.join(out, rel)),
            "sha256": sha256_file(os.path.join(out, rel)),
        }
        for rel in data_files(out)
    ]
    atomic_write_json(
        out + ".json",
        {"table": table, "source": file, "rows": rows, "checksum": checksum, "files": files},
    )


def _write_manifest(location: str, plan: dict[str, Any]) -> dict[str, Any]:
    backup_id = plan["id"]
    backup_dir = os.path.join(location, backup_id)
    parts: dict[str, dict[str, Any]] = {}
    for index, (table, file) in enumerate(plan["parts"]):
        value = read_json(
            os.path.join(backup_dir, "data", _table_dir(table), part_name(index) + ".json")
        )
        parts[f"{table}\x00{file}"] = {"part": part_name(index), **value}
    tables: dict[str, Any] = {}
    for table, entry in plan["tables"].items():
        live: list[dict[str, Any]] = []
        for kept in entry["kept"]:
            live.append(kept)
        for file in entry["new"]:
            part = parts[f"{table}\x00{file}"]
            live.append(
                {
                    "file": file,
                    "size": entry.get("sizes", {}).get(file, -1),
                    "backup": backup_id,
                    "part": part["part"],
                    "rows": part["rows"],
                    "checksum": part["checksum"],
                    "files": part["files"],
                }
            )
        live.sort(key=lambda f: f["file"])
        tables[table] = {
            "schema": entry["schema"],
            "partition_by": entry["partition_by"],
            "provider": entry["provider"],
            "whole": entry["whole"],
            "live": live,
            "added": entry["new"],
            "removed": entry["removed"],
            "rows": sum(f["rows"] for f in live),
            "checksum": add_checksums([f["checksum"] for f in live]),
        }
    value = {
        "format": MANIFEST_FORMAT,
        "id": backup_id,
        "type": plan["type"],
        "parent": plan["parent"],
        "job_id": plan["job_id"],
        "created": plan["created"],
        "tables": tables,
    }
    atomic_write_json(os.path.join(backup_dir, "manifest.json"), value)
    return value


@pipeline("spark.backup", parse=lambda payload: parse("spark.backup", payload))
def backup(spark: Any, args: BackupArgs, job: PipelineJob) -> dict[str, Any]:
    location_uri = job.roots.resolve(args.location, "location")
    location = local_path(location_uri)
    if location is None:
        raise SparkJobError("location: backups go to a local (or mounted) directory")
    state = job.checkpoint if isinstance(job.checkpoint, dict) else None
    if state is None:
        os.makedirs(location, exist_ok=True)
        plan = _plan(spark, args, job, location)
        state = {"id": plan["id"], "done": 0}
        job.progress(0.0, f"backup {plan['id']} planned", checkpoint=state)
    else:
        plan = read_json(os.path.join(location, state["id"], "plan.json"))
    backup_dir = os.path.join(location, plan["id"])
    n_parts = len(plan["parts"])
    units_total = (n_parts + args.files_per_part - 1) // args.files_per_part
    with job.units(units_total + 1, state["done"]) as units:
        for unit in range(state["done"], units_total):
            first = unit * args.files_per_part
            indexes = range(first, min(n_parts, first + args.files_per_part))
            job.log_unit(f"backup unit {unit}")
            with units.unit(f"{plan['id']}: file {first + 1}/{n_parts}"):
                for index in indexes:
                    _back_up_part(spark, plan, backup_dir, index)
            state["done"] = unit + 1
            units.unit_done(state, f"{plan['id']}: {indexes[-1] + 1}/{n_parts} files")
        job.log_unit("backup manifest")
        with units.unit("manifest"):
            value = _write_manifest(location, plan)
        units.unit_done({**state, "done": units_total + 1}, f"backup {plan['id']} done")
    return {
        "backup": plan["id"],
        "type": plan["type"],
        "parent": plan["parent"],
        "tables": {
            t: {
                "rows": v["rows"],
                "files_added": len(v["added"]),
                "files_removed": len(v["removed"]),
            }
            for t, v in value["tables"].items()
        },
    }
