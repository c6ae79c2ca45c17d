"""Flow events of a declarative pipeline as progress."""

from __future__ import annotations

from jobq.spark.pipelines.declarative import FlowProgress

EVENTS = """\
Loading pipeline spec from proj/spark-pipeline.yml...
Flow spark_catalog.default.numbers is QUEUED.
Flow spark_catalog.default.evens is QUEUED.
Flow spark_catalog.default.numbers is PLANNING.
Flow spark_catalog.default.numbers is RUNNING.
Flow spark_catalog.default.evens is PLANNING.
Flow spark_catalog.default.evens is RUNNING.
Run is COMPLETED.
"""


def test_flow_events_count_flows_done_over_flows_total() -> None:
    flows = FlowProgress()
    seen = []
    for line in EVENTS.splitlines():
        flows.feed(line)
        seen.append((flows.done, flows.total, flows.running))
    assert seen[2] == (0, 2, None)
    assert seen[4] == (0, 2, "spark_catalog.default.numbers")
    assert seen[6] == (1, 2, "spark_catalog.default.evens")
    assert flows.status() == "2/2 flows" and flows.run_state == "COMPLETED"
    assert flows.failure is None


def test_a_failed_flow_fails_the_run() -> None:
    flows = FlowProgress()
    flows.feed("Flow spark_catalog.default.x is QUEUED.")
    flows.feed("Flow spark_catalog.default.x has FAILED. Error: division by zero")
    flows.feed("Run is FAILED.")
    assert flows.failure is not None and "x has FAILED" in flows.failure


def test_a_flow_that_fails_to_resolve_gives_its_name_and_sparks_error() -> None:
    flows = FlowProgress()
    flows.feed("Flow spark_catalog.default.fine is QUEUED.")
    assert flows.feed_error(
        "Failed to resolve flow: 'spark_catalog.default.broken'.\n"
        "Error: [UNRESOLVED_COLUMN.WITH_SUGGESTION] A column, variable, or function parameter"
        " with name `no_such_column` cannot be resolved. Did you mean one of the following?"
        " [`id`]. SQLSTATE: 42703; line 2 pos 42;\n'Project ['no_such_column]\n"
    )
    assert flows.error_text(RuntimeError("Failed to resolve flows in the pipeline.")) == (
        "flow spark_catalog.default.broken: [UNRESOLVED_COLUMN.WITH_SUGGESTION] A column,"
        " variable, or function parameter with name `no_such_column` cannot be resolved."
        " Did you mean one of the following? [`id`]."
    )
    assert not flows.feed_error("Flow spark_catalog.default.fine is RUNNING.")


def test_the_flows_a_sql_file_defines() -> None:
    from jobq.spark.pipelines.declarative import sql_flow_names

    sql = """
    CREATE MATERIALIZED VIEW a AS SELECT 1; -- a comment; with a semicolon
    CREATE STREAMING TABLE s;
    create or refresh streaming table `db`.`t` as select * from stream(a);
    CREATE FLOW f AS INSERT INTO s BY NAME SELECT 1;
    CREATE TEMPORARY VIEW v AS SELECT 2;
    """
    assert sql_flow_names(sql) == ["a", "db.t", "f", "v"]
