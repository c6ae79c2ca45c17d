"""A failed or canceled import/restore removes what it made and never touches a table it did
not make, so a retry succeeds; imports infer CSV types, ``overwrite`` creates or replaces,
malformed rows are counted, and FAILFAST says why (issue 23). One session for the module."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import pytest

from jobq.client import Client
from tests.spark.conftest import run_job, wait_finished

pytestmark = pytest.mark.slow


def result_of(job: dict[str, Any]) -> Any:
    return json.loads(base64.b64decode(job["result"]))


def warehouse(spark_dir: Path) -> Path:
    return spark_dir / "data" / "spark" / "warehouse"


def staging_left(spark_dir: Path) -> list[Path]:
    """Staging directories of imports (inside tables, or in the data directory)."""
    found = list(warehouse(spark_dir).glob("*/_jobq_staging"))
    staging = spark_dir / "data" / "spark" / "staging"
    if staging.is_dir():
        found += list(staging.iterdir())
    return found


def test_failed_import_cleans_up_and_a_retry_succeeds(
    client: Client, runtime: Any, spark: Any, spark_dir: Path
) -> None:
    src = spark_dir / "fail"
    src.mkdir()
    (src / "a.csv").write_text("id,name\n1,a\n2,b\n")
    (src / "b.csv").write_text("id,name\nx,c\n")
    payload = {
        "paths": str(src / "*.csv"),
        "format": "csv",
        "table": "failing",
        "mode": "create",
        "schema": "id INT, name STRING",
        "options": {"header": "true", "mode": "FAILFAST"},
    }
    job = run_job(client, "spark.import", payload)
    assert job["status"] == "failed", job
    # FAILFAST says what it failed on, not only [FAILED_READ_FILE.NO_HINT]
    assert "FAILED_READ_FILE" in job["error"] and "MALFORMED" in job["error"], job["error"]
    assert "\n" not in job["error"]
    # the table it created (chunk 1 was staged in it) is gone, with its files
    assert not spark.catalog.tableExists("failing")
    assert not (warehouse(spark_dir) / "failing").exists()
    (src / "b.csv").write_text("id,name\n3,c\n")
    job = run_job(client, "spark.import", payload)
    assert job["status"] == "succeeded", job
    assert spark.table("failing").count() == 3

    # a failed append or overwrite leaves the table it did not create as it was
    (src / "b.csv").write_text("id,name\ny,d\n")
    for mode in ("append", "overwrite"):
        job = run_job(client, "spark.import", {**payload, "mode": mode})
        assert job["status"] == "failed", job
        spark.catalog.refreshTable("failing")
        assert sorted(r.id for r in spark.table("failing").collect()) == [1, 2, 3]
        assert staging_left(spark_dir) == []


def test_canceled_import_cleans_up_and_a_retry_succeeds(
    client: Client, runtime: Any, spark: Any, spark_dir: Path
) -> None:
    src = spark_dir / "many"
    src.mkdir()
    for k in range(30):
        rows = "".join(f"{k * 10 + i},n{i}\n" for i in range(10))
        (src / f"part-{k:02d}.csv").write_text("id,name\n" + rows)
    payload = {
        "paths": str(src / "*.csv"),
        "format": "csv",
        "table": "canceled",
        "mode": "create",
        "options": {"header": "true"},
        "files_per_chunk": 1,
    }
    job_id = client.submit("spark.import", json.dumps(payload), ttr_ms=120_000)
    deadline = time.monotonic() + 120
    while "imported" not in (client.job(job_id).get("running_status") or ""):
        assert time.monotonic() < deadline, client.job(job_id)
        time.sleep(0.1)
    client.cancel(job_id)
    job = wait_finished(client, job_id)
    assert job["status"] == "canceled", job
    assert not spark.catalog.tableExists("canceled")
    assert not (warehouse(spark_dir) / "canceled").exists()
    assert staging_left(spark_dir) == []
    job = run_job(client, "spark.import", {**payload, "files_per_chunk": 30})
    assert job["status"] == "succeeded", job
    assert spark.table("canceled").count() == 300


def test_import_defaults_infer_create_replace_and_count_malformed(
    client: Client, runtime: Any, spark: Any, spark_dir: Path
) -> None:
    src = spark_dir / "defaults"
    src.mkdir()
    (src / "a.csv").write_text("id,amount,name\n1,1.5,a\n2,2.5,b\n")
    payload = {
        "paths": str(src / "a.csv"),
        "format": "csv",
        "table": "inferred",
        "mode": "overwrite",  # creates the missing table, as saveAsTable does
        "options": {"header": "true"},
    }
    job = run_job(client, "spark.import", payload)
    assert job["status"] == "succeeded", job
    types = {f.name: f.dataType.simpleString() for f in spark.table("inferred").schema.fields}
    assert types == {"id": "int", "amount": "double", "name": "string"}

    # overwrite replaces the schema with the files'
    (src / "b.json").write_text('{"id": 7, "region": "eu"}\n{"id": 8, "region": "us"}\n')
    job = run_job(
        client,
        "spark.import",
        {**payload, "paths": str(src / "b.json"), "format": "json", "options": {}},
    )
    assert job["status"] == "succeeded", job
    spark.catalog.refreshTable("inferred")
    table = spark.table("inferred")
    assert sorted(table.columns) == ["id", "region"]
    assert sorted((r.id, r.region) for r in table.collect()) == [(7, "eu"), (8, "us")]
    assert staging_left(spark_dir) == []

    # PERMISSIVE (the default) keeps malformed rows, counted in the result and the status
    (src / "c.csv").write_text("id,name\n1,a\nnot-a-number,b\n3,c\n")
    job = run_job(
        client,
        "spark.import",
        {
            "paths": str(src / "c.csv"),
            "format": "csv",
            "table": "lenient",
            "mode": "create",
            "schema": "id INT, name STRING",
            "options": {"header": "true"},
        },
    )
    assert job["status"] == "succeeded", job
    assert result_of(job)["rows"] == 3 and result_of(job)["malformed_rows"] == 1
    assert "1 malformed rows" in (job.get("running_status") or ""), job
    assert spark.table("lenient").count() == 3


def test_failed_restore_leaves_targets_as_they_were_and_a_retry_succeeds(
    client: Client, runtime: Any, spark: Any, spark_dir: Path
) -> None:
    spark.range(5).write.saveAsTable("r_one")
    spark.range(7).write.saveAsTable("r_two")
    chain = spark_dir / "chain"
    job = run_job(client, "spark.backup", {"tables": ["r_one", "r_two"], "location": str(chain)})
    assert job["status"] == "succeeded", job
    manifest_path = chain / "0001-full" / "manifest.json"
    good = manifest_path.read_text()
    bad = json.loads(good)
    bad["tables"]["r_two"]["checksum"] = "1"  # r_two's restored rows will not match
    manifest_path.write_text(json.dumps(bad))
    create = {
        "location": str(chain),
        "rename": {"r_one": "r_one_c", "r_two": "r_two_c"},
        "mode": "create",
    }
    job = run_job(client, "spark.restore", create)
    assert job["status"] == "failed" and "does not match" in job["error"], job
    names = {t.name for t in spark.catalog.listTables()}
    assert not {n for n in names if n.startswith(("r_one_c", "r_two_c"))}, names
    # overwrite: the target that failed keeps its rows
    spark.range(3).write.saveAsTable("r_two_o")
    job = run_job(
        client,
        "spark.restore",
        {**create, "rename": {"r_two": "r_two_o"}, "tables": ["r_two"], "mode": "overwrite"},
    )
    assert job["status"] == "failed", job
    assert spark.table("r_two_o").count() == 3
    names = {t.name for t in spark.catalog.listTables()}
    assert not [n for n in names if "__jobq_restore_" in n], names
    manifest_path.write_text(good)
    job = run_job(client, "spark.restore", create)
    assert job["status"] == "succeeded", job
    assert spark.table("r_one_c").count() == 5 and spark.table("r_two_c").count() == 7
