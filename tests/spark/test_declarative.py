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
