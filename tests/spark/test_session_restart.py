"""A session holder configured again in the same process (another data directory) reaches its
own catalog from every thread: Hive caches a metastore client per thread."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from jobq.spark.session import SparkOptions, configure

pytestmark = pytest.mark.slow


def tables_made_by_a_job_thread_and_seen_by_this_one(data_dir: Path, table: str) -> list[str]:
    holder = configure(
        SparkOptions(
            master="local[1]",
            data_dir=data_dir,
            roots=[str(data_dir)],
            conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "1"},
        )
    )
    spark = holder.get()
    try:

        def job() -> None:
            spark.newSession().range(3).write.saveAsTable(table)

        thread = threading.Thread(target=job)
        thread.start()
        thread.join()
        return sorted(t.name for t in spark.catalog.listTables())
    finally:
        holder.stop()


def test_a_second_session_in_the_process_sees_its_own_catalog(tmp_path: Path) -> None:
    assert tables_made_by_a_job_thread_and_seen_by_this_one(tmp_path / "a", "first") == ["first"]
    assert tables_made_by_a_job_thread_and_seen_by_this_one(tmp_path / "b", "second") == ["second"]
