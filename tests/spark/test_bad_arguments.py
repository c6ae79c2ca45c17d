"""Bad arguments are refused when submitted, or fail the job with a one-line error: never a
Java stack trace. Credentials in arguments are masked."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from jobq.client import Client
from jobq.spark import describe, validate
from jobq.spark.paths import PathError, Roots
from tests.spark.conftest import run_job


def test_validate_refuses_bad_arguments_in_one_line() -> None:
    cases = {
        ("spark.import", '{"paths": "/x/*.csv", "format": "xml", "table": "t"}'): "format",
        ("spark.import", '{"paths": [], "format": "csv", "table": "t"}'): "no paths",
        ("spark.import", '{"paths": "/x", "format": "csv", "table": "bad name"}'): "table",
        ("spark.export", '{"path": "/o", "format": "csv"}'): "table or query",
        ("spark.backup", '{"tables": ["t"], "location": "/b", "bogus": 1}'): "bogus",
        ("spark.restore", '{"location": "/b", "as_of": "yesterday"}'): "as_of",
        ("spark.sql", "not json"): "bad payload",
        (
            "spark.pipeline",
            '{"spec": "/p", "full_refresh_all": true, "refresh": ["a"]}',
        ): "full_refresh_all",
    }
    for (name, payload), needle in cases.items():
        error = validate(name, payload)
        assert error is not None and needle in error, (name, payload, error)
        assert "\n" not in error
    assert validate("spark.import", '{"paths": "/x/*.csv", "format": "csv", "table": "t"}') is None
    assert validate("thumbnails", "anything") is None  # not a Spark type


def test_paths_cannot_escape_their_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "in").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.csv").write_text("a\n1\n")
    os.symlink(outside, root / "link")
    roots = Roots([str(root)])
    assert roots.resolve(str(root / "in" / "x.csv")) == str(root / "in" / "x.csv")
    for bad in [
        str(root / ".." / "outside" / "secret.csv"),
        str(root / "link" / "secret.csv"),
        "/etc/passwd",
        "relative/path",
        "s3a://bucket/x",
    ]:
        with pytest.raises(PathError):
            roots.resolve(bad)
    with pytest.raises(PathError):
        roots.expand([str(root / "link" / "*.csv")])
    with pytest.raises(PathError, match="no files match"):
        roots.expand([str(root / "in" / "*.csv")])


def test_credentials_are_masked_in_descriptions() -> None:
    text = describe(
        "spark.export",
        {
            "query": "SELECT 1",
            "path": "s3a://AKIA:hunter2@bucket/out",
            "format": "csv",
            "options": {"password": "hunter2", "fs.s3a.secret.key": "hunter2", "user": "ann"},
        },
    )
    assert "hunter2" not in text and "ann" in text and "***" in text


def _fails_in_one_line(client: Client, name: str, payload: Any, needle: str) -> str:
    job = run_job(client, name, payload, timeout_s=120)
    assert job["status"] == "failed", job
    error = job["error"]
    assert needle.lower() in error.lower(), error
    assert "\n" not in error and "\tat " not in error and "org.apache" not in error, error
    assert len(error) < 700
    return str(error)


def test_bad_arguments_fail_the_job_with_a_one_line_error(
    client: Client, runtime: Any, spark: Any, spark_dir: Path
) -> None:
    (spark_dir / "in").mkdir()
    (spark_dir / "in" / "a.csv").write_text("id,name\n1,a\n")
    payloads = [
        (
            "spark.export",
            {"table": "no_such_table", "path": str(spark_dir / "o"), "format": "csv"},
            "table not found: no_such_table",
        ),
        (
            "spark.import",
            {
                "paths": str(spark_dir / "missing" / "*.csv"),
                "format": "csv",
                "table": "t",
                "mode": "create",
            },
            "no files match",
        ),
        (
            "spark.import",
            {"paths": "/etc/passwd", "format": "csv", "table": "t", "mode": "create"},
            "outside the configured roots",
        ),
        (
            "spark.import",
            {
                "paths": str(spark_dir / "in" / ".." / ".." / "x"),
                "format": "csv",
                "table": "t",
                "mode": "create",
            },
            "outside the configured roots",
        ),
        ("spark.sql", {"statements": "SELEC 1 FROM"}, "syntax error"),
        ("spark.sql", {"statements": "SELECT * FROM nowhere"}, "cannot be found"),
        (
            "spark.import",
            {
                "paths": str(spark_dir / "in" / "a.csv"),
                "format": "parquet",
                "table": "t",
                "mode": "create",
            },
            "parquet",
        ),
        (
            "spark.export",
            {"query": "DROP TABLE x", "path": str(spark_dir / "o"), "format": "csv"},
            "only a query",
        ),
        ("spark.backup", {"tables": ["nope"], "location": str(spark_dir / "b")}, "table not found"),
        ("spark.restore", {"location": str(spark_dir / "nothing")}, "no backups"),
        (
            "spark.import",
            {"paths": "/x", "format": "csv", "table": "t", "password": "p"},
            "password",
        ),
    ]
    for name, payload, needle in payloads:
        _fails_in_one_line(client, name, payload, needle)
