"""SQL stays under ``--spark-root`` (checked on Spark's own plan), and each job runs in a
session of its own: the escapes of issue 23 and more fail the job with one line naming the
path and the roots, the worker runs on; temp views, SET and the current database do not
leak to the next job; a job's Spark work runs under a group naming it; a result stays within
what the server takes."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jobq.client import Client
from tests.spark.conftest import QUICK_CONF, SPARK_NAMES, local_holder, run_job, wait_finished

#: the UI on (a free port): jobs show its URL
UI_CONF = {**QUICK_CONF, "spark.ui.enabled": "true", "spark.ui.port": "0"}


@pytest.fixture(scope="module")
def sessions(spark_dir: Path) -> Iterator[Any]:
    with local_holder(spark_dir, spark_dir / "root", UI_CONF) as holder:
        yield holder


@pytest.fixture(scope="module")
def runtime(address: str, sessions: Any) -> Iterator[Any]:
    """The built-in types and ``test.group``, which reports its job group."""
    import jobq.spark.pipelines  # noqa: F401  (registers the built-ins)
    from jobq.spark.registry import pipeline
    from jobq.worker import REGISTRY, Runtime
    from jobq.worker.registry import Registry

    registry = Registry()
    for name in SPARK_NAMES:
        registry.add(REGISTRY[name])

    @pipeline("test.group", registry=registry)
    def group(spark: Any, args: Any, job: Any) -> dict[str, Any]:
        context = spark.sparkContext
        seen = {"job": context.getLocalProperty("spark.jobGroup.id")}
        with job.units(1) as units:
            with units.unit("count"):
                seen["unit"] = context.getLocalProperty("spark.jobGroup.id")
                seen["description"] = context.getLocalProperty("spark.job.description")
            units.unit_done(1)
        seen["after"] = context.getLocalProperty("spark.jobGroup.id")
        return seen

    with Runtime(address, registry, lease_wait_ms=200, worker_id="in-process") as running:
        yield running


def result_of(job: dict[str, Any]) -> Any:
    return json.loads(base64.b64decode(job["result"]))


def test_sql_cannot_reach_outside_the_roots(
    client: Client, runtime: Any, spark: Any, spark_dir: Path
) -> None:
    root = spark_dir / "root"
    (root / "in").mkdir(parents=True)
    (root / "in" / "a.csv").write_text("id,name\n1,ann\n2,bob\n")
    outside = spark_dir / "outside"
    outside.mkdir()
    (outside / "secret.csv").write_text("id,name\n9,secret\n")
    os.symlink(outside, root / "link")
    escapes = {  # each statement -> the path its refusal names
        "SELECT * FROM text.`/etc/passwd` LIMIT 2": "/etc/passwd",
        f'INSERT OVERWRITE DIRECTORY "{outside / "dir"}" USING csv SELECT 1': str(outside),
        f"SELECT * FROM csv.`{root}/../outside/secret.csv`": "../outside",
        f"SELECT * FROM csv.`{root}/link/secret.csv`": "link/secret.csv",
        "SELECT * FROM csv.`file:///etc/hostname`": "file:///etc/hostname",
        f"CREATE TABLE esc1 (id INT) USING csv LOCATION '{outside}'": str(outside),
        "CREATE TABLE esc2 USING csv OPTIONS (path '/etc/hostname')": "/etc/hostname",
        f"CREATE TABLE esc3 LOCATION '{outside}/t' AS SELECT 1 AS a": str(outside),
        "LOAD DATA LOCAL INPATH '/etc/passwd' INTO TABLE esc4": "/etc/passwd",
        "ADD FILE '/etc/passwd'": "/etc/passwd",
        "WITH c AS (SELECT * FROM text.`/etc/passwd`) SELECT * FROM c": "/etc/passwd",
        "SELECT 1 WHERE 1 IN (SELECT count(*) FROM json.`/etc/x`)": "/etc/x",
        "CREATE TEMP VIEW esc5 AS SELECT * FROM text.`/etc/passwd`": "/etc/passwd",
        "CREATE TEMP VIEW esc6 USING text OPTIONS (path '/etc/passwd')": "/etc/passwd",
    }
    refused = {
        "SET spark.sql.runSQLOnFiles=true": "spark.sql.runSQLOnFiles",
        "SELECT reflect('java.lang.System', 'getenv', 'HOME')": "reflect()",
        "SELECT TRANSFORM(1) USING 'cat /etc/passwd'": "TRANSFORM",
        f"ADD JAR '{root}/in/a.csv'": "ADD JAR",
        "CREATE TABLE esc7 USING jdbc OPTIONS (url 'jdbc:derby:/tmp/x;create=true')": "jdbc",
    }
    jobs = {
        client.submit("spark.sql", json.dumps({"statements": s}), ttr_ms=60_000): (s, needle)
        for s, needle in [*escapes.items(), *refused.items()]
    }
    for job_id, (statement, needle) in jobs.items():
        job = wait_finished(client, job_id)
        assert job["status"] == "failed", (statement, job)
        error = job["error"]
        assert needle in error and "\n" not in error and "org.apache" not in error, error
        if statement in escapes:
            assert f"outside the configured roots ({root})" in error, error
        else:
            assert "--spark-allow-any-path" in error, error
    assert not (outside / "dir").exists() and not (outside / "t").exists()
    # the same things under the root work, in one job of several statements
    out = root / "out"
    inside = (
        f"CREATE TEMP VIEW people USING csv OPTIONS (path '{root}/in/a.csv', header 'true'); "
        f"INSERT OVERWRITE DIRECTORY '{out}' USING json SELECT * FROM people; "
        f"CREATE TABLE people_copy USING parquet LOCATION 'file://{root}/copy' "
        "AS SELECT * FROM people; "
        "SELECT count(*) AS n FROM people_copy"
    )
    job = run_job(client, "spark.sql", {"statements": inside})
    assert job["status"] == "succeeded", job
    assert result_of(job)["rows"] == [{"n": 2}] and result_of(job)["statements"] == 4
    assert len(spark.read.json(str(out)).collect()) == 2


def test_export_queries_are_checked_and_counted(
    client: Client, runtime: Any, spark: Any, spark_dir: Path
) -> None:
    root = spark_dir / "root"
    job = run_job(
        client,
        "spark.export",
        {"query": "SELECT * FROM text.`/etc/hostname`", "path": str(root / "x"), "format": "csv"},
    )
    assert job["status"] == "failed" and "/etc/hostname" in job["error"], job
    job = run_job(
        client,
        "spark.export",
        {"query": "SELECT id FROM range(7)", "path": str(root / "seven"), "format": "json"},
    )
    assert job["status"] == "succeeded", job
    result = result_of(job)
    assert result["rows"] == 7 and spark.read.json(str(root / "seven")).count() == 7
    assert result["spark"]["app_id"] == spark.sparkContext.applicationId
    assert result["spark"]["ui_url"] == spark.sparkContext.uiWebUrl


def test_jobs_do_not_share_session_state(client: Client, runtime: Any, spark: Any) -> None:
    first = (
        "CREATE TEMP VIEW mine AS SELECT 1 AS a; SET spark.sql.shuffle.partitions=7; "
        "CREATE DATABASE IF NOT EXISTS elsewhere; USE elsewhere; SELECT current_database() AS db"
    )
    job = run_job(client, "spark.sql", {"statements": first})
    assert job["status"] == "succeeded" and result_of(job)["rows"] == [{"db": "elsewhere"}], job
    job = run_job(client, "spark.sql", {"statements": "SELECT * FROM mine"})
    assert job["status"] == "failed" and "mine" in job["error"], job
    job = run_job(client, "spark.sql", {"statements": "SELECT current_database() AS db"})
    assert result_of(job)["rows"] == [{"db": "default"}], job
    job = run_job(client, "spark.sql", {"statements": "SET spark.sql.shuffle.partitions"})
    assert result_of(job)["rows"][0]["value"] == "2", job
    # a job's own settings, for it alone
    job = run_job(
        client,
        "spark.sql",
        {"statements": "SET spark.sql.shuffle.partitions", "spark_conf": {
            "spark.sql.shuffle.partitions": 5}},
    )
    assert result_of(job)["rows"][0]["value"] == "5", job
    for key, needle in [
        ("spark.sql.warehouse.dir", "set it on the worker"),
        ("spark.sql.runSQLOnFiles", "--spark-allow-any-path"),
    ]:
        job = run_job(
            client, "spark.sql", {"statements": "SELECT 1", "spark_conf": {key: "true"}}
        )
        assert job["status"] == "failed" and needle in job["error"], job
    assert spark.conf.get("spark.sql.shuffle.partitions") == "2"


def test_spark_work_runs_under_a_group_naming_the_job(client: Client, runtime: Any) -> None:
    job_id = client.submit("test.group", "{}", ttr_ms=60_000)
    job = wait_finished(client, job_id)
    assert job["status"] == "succeeded", job
    seen = result_of(job)
    assert seen["job"] == seen["after"] == f"jobq-{job_id}", seen
    assert seen["unit"].startswith(f"jobq-{job_id}-"), seen
    assert seen["description"] == f"jobq job {job_id}: count", seen
    assert seen["spark"]["ui_url"].startswith("http://"), seen


def test_sql_cannot_escape_through_identifiers_or_glob_escapes(
    client: Client, runtime: Any, spark: Any, spark_dir: Path
) -> None:
    """``IDENTIFIER(expr)`` names what Spark builds only at analysis (the plan the sandbox
    reads holds no LOCATION and no function name), and Hadoop's globs read ``\\..`` and a
    ``{a/b,..}`` group as ``..``, which the roots' own resolution takes as plain names."""
    root = spark_dir / "root"
    outside = spark_dir / "outside2"
    outside.mkdir()
    (outside / "secret.txt").write_text("SECRET\n")
    depth = len(root.parts) - 1
    escaped_up = "/".join(["\\\\.."] * depth)  # SQL '\\..': a backslash and two dots
    brace_up = "/".join(["{x/y,..}"] * depth)
    java = "'java.lang.System', 'getProperty', 'user.name'"
    escapes = {  # each statement -> what its refusal names
        f"SELECT IDENTIFIER('ref' || 'lect')({java}) AS u": "reflect()",
        f"SELECT IDENTIFIER('java_method')({java}) AS u": "java_method()",
        f"SELECT IDENTIFIER(concat('try_', 'reflect'))({java}) AS u": "IDENTIFIER",
        "DECLARE fname STRING DEFAULT 'reflect'; "
        f"SELECT IDENTIFIER(fname)({java}) AS u": "IDENTIFIER",
        f"CREATE TABLE IDENTIFIER('esc' || '20') (id INT) USING csv LOCATION '{outside}/t20'; "
        "INSERT INTO esc20 VALUES (1)": str(outside),
        f"CREATE TABLE IDENTIFIER('esc' || '21') USING text OPTIONS (path '{outside}'); "
        "SELECT * FROM esc21": str(outside),
        f"CREATE TEMP VIEW esc22 USING text OPTIONS (path '{root}/{escaped_up}{outside}'); "
        "SELECT * FROM esc22": "\\",
        f"CREATE TEMP VIEW esc23 USING text OPTIONS (path '{root}/{brace_up}{outside}'); "
        "SELECT * FROM esc23": "{",
    }
    for error in _refused(client, escapes):
        assert "--spark-allow-any-path" in error or "configured roots" in error, error
    assert sorted(os.listdir(outside)) == ["secret.txt"]
    # a name given by IDENTIFIER that passes the check still works
    inside = (
        "CREATE TABLE IDENTIFIER('ident' || '_ok') (id INT) USING parquet; "
        "INSERT INTO ident_ok VALUES (3); "
        "SELECT IDENTIFIER('up' || 'per')('a') AS u, id FROM IDENTIFIER('ident_' || 'ok')"
    )
    job = run_job(client, "spark.sql", {"statements": inside})
    assert job["status"] == "succeeded", job
    assert result_of(job)["rows"] == [{"u": "A", "id": 3}], result_of(job)


def test_a_large_sql_result_is_cut_to_what_the_server_takes(client: Client, runtime: Any) -> None:
    """A result is at most 1 MiB (the server's limit): 100 wide rows are more."""
    job = run_job(
        client,
        "spark.sql",
        {"statements": "SELECT id, repeat('x', 20000) AS s FROM range(100)"},
        ttr_ms=20_000,
        timeout_s=90,
    )
    assert job["status"] == "succeeded", job
    result = result_of(job)
    assert result["truncated"] is True and 0 < len(result["rows"]) < 100, len(result["rows"])
    assert [row["id"] for row in result["rows"]] == list(range(len(result["rows"])))


def test_jobs_cannot_remap_file_systems_with_hadoop_settings(
    client: Client, runtime: Any, spark: Any, spark_dir: Path
) -> None:
    """A session's settings and a source's options go into the Hadoop configuration its
    paths are opened with: ``fs.defaultFS`` and a viewfs mount table would send a path under
    the root to a directory outside it."""
    from jobq.spark import validate

    root = spark_dir / "root"
    outside = spark_dir / "outside3"
    outside.mkdir()
    (outside / "secret.txt").write_text("SECRET\n")

    def mount(name: str) -> str:
        return f"fs.viewfs.mounttable.{name}.link.{root}/{name}"

    escapes = {  # each statement -> what its refusal names
        f"SET `{mount('m1')}`=file://{outside}; SET fs.defaultFS=viewfs://m1/; "
        f"CREATE TEMP VIEW esc30 USING text OPTIONS (path '{root}/m1/secret.txt'); "
        "SELECT * FROM esc30": "fs.viewfs",
        "SET spark.hadoop.fs.defaultFS=viewfs://m1/": "spark.hadoop.fs.defaultFS",
        "SET hive.exec.stagingdir=/tmp/elsewhere": "hive.exec.stagingdir",
        f"CREATE TEMP VIEW esc31 USING text OPTIONS (path '{root}/m2/secret.txt', "
        f"'fs.defaultFS' 'viewfs://m2/', '{mount('m2')}' 'file://{outside}'); "
        "SELECT * FROM esc31": "fs.",
        f"CREATE TABLE esc32 (value STRING) USING text LOCATION '{root}/m3' "
        f"OPTIONS ('fs.defaultFS' 'viewfs://m3/', '{mount('m3')}' 'file://{outside}'); "
        "INSERT INTO esc32 VALUES ('x')": "fs.",
    }
    for error in _refused(client, escapes):
        assert "--spark-allow-any-path" in error, error
    # a payload's options: refused when submitted
    export = {
        "query": "SELECT 'x' AS value",
        "path": f"{root}/m4/out",
        "format": "csv",
        "options": {"fs.defaultFS": "viewfs://m4/", mount("m4"): f"file://{outside}"},
    }
    error = validate("spark.export", json.dumps(export))  # the CLI's and schedules' check
    assert error is not None and "fs.defaultFS" in error, error
    job = run_job(client, "spark.export", export)
    assert job["status"] == "failed" and "fs.defaultFS" in job["error"], job
    assert sorted(os.listdir(outside)) == ["secret.txt"]
    # the SQL settings of a job, and a source's own options, still work
    job = run_job(
        client,
        "spark.sql",
        {
            "statements": "SET spark.sql.shuffle.partitions=3; "
            f"CREATE TEMP VIEW ok3 USING csv OPTIONS (path '{root}/in/a.csv', header 'true'); "
            "SELECT count(*) AS n FROM ok3"
        },
    )
    assert job["status"] == "succeeded" and result_of(job)["rows"] == [{"n": 2}], job


def test_xml_validation_schemas_lie_under_the_roots(
    client: Client, runtime: Any, spark_dir: Path
) -> None:
    """XML's ``rowValidationXSDPath`` option names a file Spark reads (as the rows' XSD), in
    a view's OPTIONS and in the options of ``from_xml()``."""
    root = spark_dir / "root"
    (root / "xml").mkdir(parents=True, exist_ok=True)
    (root / "xml" / "a.xml").write_text("<rows><r><a>1</a></r></rows>")
    outside = spark_dir / "outside4"
    outside.mkdir()
    (outside / "s.xsd").write_text("SECRET\n")
    xsd = outside / "s.xsd"
    escapes = {  # each statement -> what its refusal names
        f"CREATE TEMP VIEW x1 USING xml OPTIONS (path '{root}/xml/a.xml', rowTag 'r', "
        f"rowValidationXSDPath '{xsd}')": str(xsd),
        "SELECT from_xml('<r><a>1</a></r>', 'a INT', "
        f"map('rowValidationXSDPath', '{xsd}')) AS x": str(xsd),
        f"SELECT schema_of_xml('<r/>', map('ROWVALIDATIONXSDPATH', '{xsd}')) AS s": str(xsd),
        "SELECT from_xml('<r><a>1</a></r>', 'a INT', "
        f"map(concat('rowValidation', 'XSDPath'), '{xsd}')) AS x": "from_xml()",
    }
    jobs = {
        client.submit("spark.sql", json.dumps({"statements": s}), ttr_ms=60_000): (s, needle)
        for s, needle in escapes.items()
    }
    for job_id, (statement, needle) in jobs.items():
        job = wait_finished(client, job_id)
        assert job["status"] == "failed", (statement, job)
        error = job["error"]
        assert needle in error and "\n" not in error and "SAXParse" not in error, error
        assert "configured roots" in error or "--spark-allow-any-path" in error, error
    ok = (
        f"CREATE TEMP VIEW x2 USING xml OPTIONS (path '{root}/xml/a.xml', rowTag 'r'); "
        "SELECT a, from_xml('<r><a>2</a></r>', 'a INT', map('mode', 'FAILFAST')).a AS b "
        "FROM x2"
    )
    job = run_job(client, "spark.sql", {"statements": ok})
    assert job["status"] == "succeeded" and result_of(job)["rows"] == [{"a": 1, "b": 2}], job


def test_a_refused_statement_stops_the_job_before_any_statement_runs(
    client: Client, runtime: Any, spark: Any
) -> None:
    """The statements are checked before the first one runs: a job whose third statement the
    sandbox refuses writes nothing."""
    statements = (
        "CREATE TABLE before_refusal (a INT) USING parquet; "
        "INSERT INTO before_refusal VALUES (1); "
        "SELECT reflect('java.lang.System', 'getProperty', 'user.name')"
    )
    job = run_job(client, "spark.sql", {"statements": statements})
    assert job["status"] == "failed" and "reflect()" in job["error"], job
    assert "statement 3" in job["error"], job
    assert not spark.catalog.tableExists("before_refusal")
    # a syntax error a later SET would cure is left to the statement's own turn
    statements = (
        "SET spark.sql.ansi.doubleQuotedIdentifiers=true; "
        'SELECT "one" FROM (SELECT 1 AS one)'
    )
    job = run_job(client, "spark.sql", {"statements": statements})
    assert job["status"] == "succeeded" and result_of(job)["rows"] == [{"one": 1}], job


#: a commit protocol whose loading writes a file outside the roots
EVIL_PROTOCOL = """\
package jobqprobe;
public class Planted extends org.apache.spark.internal.io.HadoopMapReduceCommitProtocol {
    static {
        try {
            java.nio.file.Files.writeString(java.nio.file.Path.of("%s"), "planted");
        } catch (java.io.IOException e) { throw new RuntimeException(e); }
    }
    public Planted(String jobId, String path, boolean dynamic) { super(jobId, path, dynamic); }
}
"""


def test_a_jar_under_the_root_cannot_run_java_code(
    client: Client, runtime: Any, spark_dir: Path
) -> None:
    """``ADD JAR`` puts a jar on the session's class path, and Spark instantiates classes
    that settings name (``spark.sql.sources.commitProtocolClass``): a jar under the root
    would run any Java code in the worker, as ``reflect()`` would."""
    javac = shutil.which("javac")
    if javac is None:
        pytest.skip("no javac to build the jar")
    import pyspark

    root = spark_dir / "root"
    build = spark_dir / "jar-build"
    (build / "jobqprobe").mkdir(parents=True)
    marker = spark_dir / "outside5-planted"
    (build / "jobqprobe" / "Planted.java").write_text(EVIL_PROTOCOL % marker)
    jars = Path(pyspark.__file__).parent / "jars"
    subprocess.run(
        [javac, "--release", "17", "-cp", f"{jars}/*", "jobqprobe/Planted.java"],
        cwd=build,
        check=True,
    )
    root.mkdir(parents=True, exist_ok=True)
    shutil.make_archive(str(root / "planted"), "zip", build, "jobqprobe")
    os.replace(root / "planted.zip", root / "planted.jar")
    statements = (
        f"ADD JAR '{root}/planted.jar'; "
        "SET spark.sql.sources.commitProtocolClass=jobqprobe.Planted; "
        f"INSERT OVERWRITE DIRECTORY '{root}/planted-out' USING csv SELECT 1"
    )
    job = run_job(client, "spark.sql", {"statements": statements})
    assert job["status"] == "failed", job
    assert "ADD JAR" in job["error"] and "--spark-allow-any-path" in job["error"], job
    assert not marker.exists()


def _refused(client: Client, escapes: dict[str, str]) -> list[str]:
    """Run each ``spark.sql`` statement list at once; each must fail with one line holding
    its needle and no Java class names. Their errors."""
    jobs = {
        client.submit("spark.sql", json.dumps({"statements": s}), ttr_ms=60_000): (s, needle)
        for s, needle in escapes.items()
    }
    errors = []
    for job_id, (statement, needle) in jobs.items():
        job = wait_finished(client, job_id)
        assert job["status"] == "failed", (statement, job, job.get("result") and result_of(job))
        error = job["error"]
        assert needle in error and "\n" not in error and "org.apache" not in error, error
        errors.append(error)
    return errors
