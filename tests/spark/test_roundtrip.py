"""import → sql → export → backup (full + incrementals) → restore reproduces the rows."""

from __future__ import annotations

import csv
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from jobq.client import Client
from tests.spark.conftest import rows_checksum, run_job

pytestmark = pytest.mark.slow


def write_csv(path: Path, start: int, n: int) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "name", "region", "amount"])
        for i in range(start, start + n):
            w.writerow([i, f"name-{i}", ["eu", "us", "apac"][i % 3], round(i * 1.25, 2)])


def test_import_sql_export_backup_restore_round_trip(
    client: Client, runtime: Any, spark: Any, spark_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the Spark jobs of each unit go to the attempt's log at INFO (pytest's root is WARNING)
    events = logging.getLogger("jobq.spark.events")
    monkeypatch.setattr(events, "level", logging.INFO)
    # setattr bypasses setLevel, which clears the loggers' cached isEnabledFor answers: an
    # earlier module's Spark jobs left "not at INFO" there
    events.manager._clear_cache()
    src = spark_dir / "in"
    src.mkdir()
    for k in range(4):
        write_csv(src / f"sales-{k}.csv", k * 100, 100)
    job = run_job(
        client,
        "spark.import",
        {
            "paths": str(src / "*.csv"),
            "format": "csv",
            "table": "sales",
            "mode": "create",
            "options": {"header": "true", "inferSchema": "true"},
            "partition_by": ["region"],
            "files_per_chunk": 2,
        },
    )
    assert job["status"] == "succeeded", job
    lines = client.logs(job["id"]).text.splitlines()
    started = [line for line in lines if " INFO jobq.spark.events: Spark job " in line]
    assert any("started (chunk " in line for line in started), lines
    assert any(line.endswith(" succeeded") for line in started), lines
    assert any(", stage " in line and " done: " in line for line in started), lines
    imported = spark.read.options(header="true", inferSchema="true").csv(str(src / "*.csv"))
    expected = rows_checksum(imported)
    assert rows_checksum(spark.table("sales")) == expected

    job = run_job(
        client,
        "spark.sql",
        {
            "statements": [
                "CREATE OR REPLACE TEMP VIEW big AS SELECT * FROM sales WHERE amount > 100",
                "SELECT region, count(*) AS n, sum(amount) AS total FROM big GROUP BY region",
            ],
            "output": {"table": "sales_by_region"},
        },
    )
    assert job["status"] == "succeeded", job
    assert spark.table("sales_by_region").count() == 3

    out = spark_dir / "export" / "sales"
    job = run_job(client, "spark.export", {"table": "sales", "path": str(out), "format": "json"})
    assert job["status"] == "succeeded", job
    assert rows_checksum(spark.read.schema(imported.schema).json(str(out))) == expected

    chain = spark_dir / "backups"
    job = run_job(
        client, "spark.backup", {"tables": ["sales", "sales_by_region"], "location": str(chain)}
    )
    assert job["status"] == "succeeded", job
    full = rows_checksum(spark.table("sales"))
    # more rows: an incremental backup holds only the new files
    write_csv(spark_dir / "more.csv", 400, 50)
    job = run_job(
        client,
        "spark.import",
        {
            "paths": str(spark_dir / "more.csv"),
            "format": "csv",
            "table": "sales",
            "mode": "append",
            "options": {"header": "true", "inferSchema": "true"},
        },
    )
    assert job["status"] == "succeeded", job
    job = run_job(
        client, "spark.backup", {"tables": ["sales"], "location": str(chain), "type": "incremental"}
    )
    assert job["status"] == "succeeded", job
    # the job ran in a session of its own: this one still caches the table's old files
    spark.catalog.refreshTable("sales")
    after_append = rows_checksum(spark.table("sales"))
    manifest = json.loads((chain / "0002-incremental" / "manifest.json").read_text())
    assert manifest["parent"] == "0001-full"
    assert len(manifest["tables"]["sales"]["added"]) >= 1
    assert manifest["tables"]["sales"]["removed"] == []

    job = run_job(
        client,
        "spark.restore",
        {"location": str(chain), "rename": {"sales": "sales_restored"}, "tables": ["sales"]},
    )
    assert job["status"] == "succeeded", job
    assert rows_checksum(spark.table("sales_restored")) == after_append
    job = run_job(
        client,
        "spark.restore",
        {
            "location": str(chain),
            "as_of": "0001-full",
            "rename": {"sales": "sales_full"},
            "tables": ["sales"],
        },
    )
    assert job["status"] == "succeeded", job
    assert rows_checksum(spark.table("sales_full")) == full == expected


def test_the_catalog_lookup_agrees_with_describe(
    spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``table_info`` and ``table_exists`` read a classic session's catalog directly (a few
    JVM calls, not DESCRIBE): for every kind of name, the same answer as the public API."""
    from jobq.spark.errors import SparkJobError
    from jobq.spark.pipelines import _tables

    spark.range(6).selectExpr("id", "id % 3 AS r").write.partitionBy("r").format(
        "parquet"
    ).saveAsTable("ti_parted")
    spark.sql(
        "CREATE TABLE ti_hive (a INT, c CHAR(5), v VARCHAR(7)) STORED AS PARQUET "
        "PARTITIONED BY (k STRING)"
    )
    spark.sql("CREATE DATABASE IF NOT EXISTS ti_db")
    spark.sql("CREATE TABLE ti_db.x (a INT) USING json")
    spark.sql("CREATE VIEW ti_view AS SELECT * FROM ti_parted")
    spark.range(3).createOrReplaceTempView("ti_temp")
    names = [
        "ti_parted", "ti_hive", "ti_db.x", "ti_view", "ti_temp", "TI_PARTED",
        "spark_catalog.default.ti_parted", "ti_missing", "no_db.t",
    ]  # fmt: skip

    def answers() -> list[object]:
        found: list[object] = []
        for name in names:
            try:
                found.append((_tables.table_exists(spark, name), _tables.table_info(spark, name)))
            except SparkJobError as e:
                found.append((_tables.table_exists(spark, name), str(e)))
        return found

    fast = answers()
    assert _tables._catalog_table(spark, "ti_parted") is not _tables._UNKNOWN  # the fast path
    monkeypatch.setattr(_tables, "_catalog_table", lambda spark, name: _tables._UNKNOWN)
    assert fast == answers()
    assert [exists for exists, _ in fast] == [True] * 7 + [False] * 2
    parted = fast[0][1]
    assert isinstance(parted, _tables.TableInfo)
    assert (parted.provider, parted.partition_by) == ("parquet", ["r"])


@pytest.mark.parametrize("cached", [False, True])
def test_an_overwrite_import_is_what_a_new_session_reads(
    client: Client, runtime: Any, spark: Any, spark_dir: Path, cached: bool
) -> None:
    """The commit forgets what Spark held of the table: a session that reads it afterwards
    sees the new rows, whether or not the table was cached (``CACHE TABLE``: the commit
    then refreshes the cache through Spark, not only the job session's entry)."""
    src = spark_dir / f"refresh-{cached}"
    src.mkdir()
    table = f"refreshed_{str(cached).lower()}"

    def import_rows(n: int, mode: str) -> None:
        for old in src.iterdir():
            old.unlink()
        write_csv(src / "rows.csv", 0, n)
        payload = {"paths": str(src / "*.csv"), "format": "csv", "table": table, "mode": mode}
        job = run_job(client, "spark.import", {**payload, "options": {"header": "true"}})
        assert job["status"] == "succeeded", job

    import_rows(7, "create")
    if cached:
        spark.sql(f"CACHE TABLE {table}")
    assert spark.newSession().table(table).count() == 7
    import_rows(11, "overwrite")
    try:
        assert spark.newSession().table(table).count() == 11
    finally:
        spark.catalog.clearCache()
