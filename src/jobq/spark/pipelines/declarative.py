"""``spark.pipeline``: a Spark Declarative Pipelines project (``spark-pipeline.yml``), with
the flows' events as progress; run in the worker on a Spark Connect session, else through
the ``spark-pipelines`` CLI. One unit: an adopted job runs the pipeline again.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterable
from typing import Any

from jobq.spark.args import PipelineArgs, parse
from jobq.spark.errors import SparkJobError
from jobq.spark.registry import PipelineJob, pipeline

#: spec file names, as the pipelines CLI looks for them
SPEC_NAMES = ("spark-pipeline.yml", "spark-pipeline.yaml", "pipeline.yml", "pipeline.yaml")
_FLOW = re.compile(r"Flow [`'\"]?(?P<flow>[^\s`'\"]+?)[`'\"]? (?:is|has) (?P<state>[A-Z_]+)")
_RUN = re.compile(r"Run (?:is|has) (?P<state>[A-Z_]+)")
_FLOW_DONE = {"COMPLETED", "FAILED", "SKIPPED", "EXCLUDED", "STOPPED"}


class FlowProgress:
    """Flow events -> (flows done, flows seen, the running flow)."""

    def __init__(self) -> None:
        self.states: dict[str, str] = {}
        self.running: str | None = None
        self.run_state: str | None = None
        self.failure: str | None = None

    def feed(self, message: str) -> bool:
        """Take one event message; True when it changed the progress."""
        run = _RUN.search(message)
        if run and not message.lstrip().startswith("Flow"):
            self.run_state = run["state"]
            if run["state"] == "COMPLETED":
                for flow_name, flow_state in self.states.items():
                    if flow_state not in _FLOW_DONE:
                        self.states[flow_name] = "COMPLETED"
                self.running = None
            if run["state"] == "FAILED":
                self.failure = self.failure or message.strip()
            return True
        flow = _FLOW.search(message)
        if not flow:
            return False
        name, state = flow["flow"], flow["state"]
        if state in ("PLANNING", "STARTING", "RUNNING") and self.running not in (None, name):
            # the events name no end of a flow that succeeded: the next flow starting means
            # the previous one is done (flows of a graph run one after another here)
            self.states[self.running] = "COMPLETED"
            self.running = None
        self.states[name] = state
        if state == "RUNNING":
            self.running = name
        elif state in _FLOW_DONE and self.running == name:
            self.running = None
        if state == "FAILED":
            self.failure = self.failure or message.strip().splitlines()[0]
        return True

    @property
    def done(self) -> int:
        return sum(1 for s in self.states.values() if s in _FLOW_DONE)

    @property
    def total(self) -> int:
        return len(self.states)

    def status(self) -> str:
        text = f"{self.done}/{self.total} flows"
        return f"{self.running} running ({text})" if self.running else text


def find_spec(path: str) -> str:
    if os.path.isdir(path):
        for name in SPEC_NAMES:
            candidate = os.path.join(path, name)
            if os.path.isfile(candidate):
                return candidate
        raise SparkJobError(f"spec: no spark-pipeline.yml in {path}")
    if not os.path.isfile(path):
        raise SparkJobError(f"spec: no such file: {path}")
    return path


def _report(job: PipelineJob, flows: FlowProgress, sent: list[str]) -> None:
    """Record the flows' progress when its text changed. It goes with a small checkpoint
    (the flow counts) so that it reaches the server at once: a progress without one waits
    for the next heartbeat (ttr/3), longer than many whole pipeline runs. An adopted run
    starts the pipeline again whatever the checkpoint says."""
    status = flows.status()[:255]
    if sent and sent[-1] == status:
        return
    sent.append(status)
    fraction = flows.done / flows.total if flows.total else 0.0
    job.progress(
        min(fraction, 0.99),
        status,
        checkpoint={"flows_done": flows.done, "flows_seen": flows.total},
    )


def _events_in_process(spark: Any, spec_path: str, args: PipelineArgs) -> Iterable[str]:
    from pathlib import Path

    from pyspark.pipelines.cli import load_pipeline_spec, register_definitions
    from pyspark.pipelines.spark_connect_graph_element_registry import (
        SparkConnectGraphElementRegistry,
    )
    from pyspark.pipelines.spark_connect_pipeline import create_dataflow_graph, start_run

    spec = load_pipeline_spec(Path(spec_path))
    graph_id = create_dataflow_graph(
        spark,
        default_catalog=spec.catalog,
        default_database=spec.database,
        sql_conf=spec.configuration,
    )
    registry = SparkConnectGraphElementRegistry(spark, graph_id)
    register_definitions(Path(spec_path), registry, spec, spark, graph_id)
    for result in start_run(
        spark,
        graph_id,
        full_refresh=args.full_refresh,
        full_refresh_all=args.full_refresh_all,
        refresh=args.refresh,
        dry=args.dry_run,
        storage=spec.storage,
    ):
        if "pipeline_event_result" in result:
            yield result["pipeline_event_result"].event.message


def _events_from_cli(spec_path: str, args: PipelineArgs, job: PipelineJob) -> Iterable[str]:
    import pyspark

    home = os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)
    command = [os.path.join(home, "bin", "spark-pipelines")]
    command += ["dry-run", "--spec", spec_path] if args.dry_run else ["run", "--spec", spec_path]
    if not args.dry_run:
        if args.full_refresh_all:
            command.append("--full-refresh-all")
        if args.full_refresh:
            command += ["--full-refresh", ",".join(args.full_refresh)]
        if args.refresh:
            command += ["--refresh", ",".join(args.refresh)]
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_HOME=home)
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    assert proc.stdout is not None
    tail: list[str] = []
    try:
        for line in proc.stdout:
            tail = [*tail[-20:], line.rstrip()]
            yield line
    finally:
        if proc.poll() is None:
            proc.kill()
        status = proc.wait()
    if status != 0:
        errors = [t for t in tail if "Error" in t or "Exception" in t or "FAILED" in t]
        raise SparkJobError(f"spark-pipelines failed: {(errors or tail or ['?'])[-1][:300]}")


@pipeline("spark.pipeline", parse=lambda payload: parse("spark.pipeline", payload))
def run_pipeline(spark: Any, args: PipelineArgs, job: PipelineJob) -> dict[str, Any]:
    spec_path = find_spec(job.roots.resolve(args.spec, "spec"))
    connect = type(spark).__module__.startswith("pyspark.sql.connect")
    flows = FlowProgress()
    job.log_unit("pipeline run")
    job.progress(0.0, "dry run" if args.dry_run else "starting")
    events = (
        _events_in_process(spark, spec_path, args)
        if connect
        else _events_from_cli(spec_path, args, job)
    )
    sent: list[str] = []
    for message in events:
        if flows.feed(message):
            _report(job, flows, sent)
        else:
            job.check()
    if flows.failure or flows.run_state == "FAILED":
        raise SparkJobError(f"pipeline failed: {flows.failure or 'run FAILED'}")
    job.progress(1.0, flows.status())
    return {
        "flows": {name: state for name, state in sorted(flows.states.items())},
        "dry_run": args.dry_run,
        "run": flows.run_state,
    }
