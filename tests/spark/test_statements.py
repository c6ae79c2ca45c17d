"""A ``statements`` text is split at its top-level semicolons only; ``spark_conf`` and
options that carry paths are checked at submit (no Spark needed)."""

from __future__ import annotations

import json

from jobq.spark import validate
from jobq.spark.args import parse
from jobq.spark.statements import split_statements


def test_semicolons_in_strings_names_and_comments_do_not_split() -> None:
    text = """
        CREATE TEMP VIEW v AS SELECT 'a;b' AS s, "c;d" AS t, `e;f` AS u;  -- one; two
        SELECT 'it\\'s; here' /* a; /* nested; */ comment */ FROM v ;
        SELECT r'\\', ';' AS raw;;
        SELECT 1
    """
    assert split_statements(text) == [
        "CREATE TEMP VIEW v AS SELECT 'a;b' AS s, \"c;d\" AS t, `e;f` AS u",
        "-- one; two\n        SELECT 'it\\'s; here' /* a; /* nested; */ comment */ FROM v",
        "SELECT r'\\', ';' AS raw",
        "SELECT 1",
    ]
    assert split_statements("SELECT 1;") == ["SELECT 1"]
    assert split_statements(" ; -- nothing\n") == ["-- nothing"]
    script = "BEGIN\n  DECLARE x INT; SET x = 1; SELECT x;\nEND;"
    assert split_statements(script) == [script.rstrip(";")]
    assert split_statements("lbl: BEGIN SELECT 1; END") == ["lbl: BEGIN SELECT 1; END"]


def test_a_statements_text_becomes_one_unit_per_statement() -> None:
    args = parse("spark.sql", {"statements": "SELECT 1; SELECT ';'", "spark_conf": {}})
    assert args.statement_list() == ["SELECT 1", "SELECT ';'"]
    listed = parse("spark.sql", {"statements": ["SELECT 1;", "SELECT 2; SELECT 3"]})
    assert listed.statement_list() == ["SELECT 1", "SELECT 2", "SELECT 3"]
    assert "no statements" in (validate("spark.sql", {"statements": " ;; "}) or "")


def test_spark_conf_and_options_are_checked_at_submit() -> None:
    good = {"statements": "SELECT 1", "spark_conf": {"spark.sql.shuffle.partitions": 4}}
    assert validate("spark.sql", json.dumps(good)) is None
    cases = [
        ("spark.sql", {"statements": "x", "spark_conf": {"spark.executor.memory": "1g"}}),
        ("spark.sql", {"statements": "x", "spark_conf": {"spark.sql.x": [1]}}),
        ("spark.sql", {"statements": "x", "output": {"table": "t", "spark_conf": {}}}),
        ("spark.export", {"query": "x", "path": "/a", "format": "csv", "options": {"Path": "/"}}),
        ("spark.import", {"paths": "/a", "format": "csv", "table": "t", "options": {"paths": ""}}),
    ]
    for name, payload in cases:
        error = validate(name, payload)
        assert error is not None and "\n" not in error, (payload, error)
    assert "set it on the worker" in (validate(*cases[0]) or "")
    assert "not in options" in (validate(*cases[3]) or "")


def test_a_worker_refuses_settings_that_get_round_the_sandbox() -> None:
    from click.testing import CliRunner

    from jobq.cli import main

    args = ["worker", "--names", "spark.sql", "--server", "127.0.0.1:1"]
    result = CliRunner().invoke(main, [*args, "--spark-conf", "spark.sql.runSQLOnFiles=true"])
    assert result.exit_code == 2, result.output
    assert "--spark-allow-any-path" in result.output and len(result.output.splitlines()) == 1


def test_a_table_name_that_is_a_path_is_refused_at_submit() -> None:
    for table in ["parquet.`/tmp/x`", "delta.`file:x`", "`a\\b`"]:
        error = validate("spark.export", {"table": table, "path": "/o", "format": "csv"})
        assert error is not None and "not a path" in error, (table, error)
    fine = {"table": "db.`odd name`", "path": "/o", "format": "csv"}
    assert validate("spark.export", fine) is None
