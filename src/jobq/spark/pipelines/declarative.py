"""``spark.pipeline``: a Spark Declarative Pipelines project (``spark-pipeline.yml``), with
the flows' events as progress; run in the worker on a Spark Connect session, else through
the ``spark-pipelines`` CLI. One unit: an adopted job runs the pipeline again.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from jobq.spark.args import PipelineArgs, parse
from jobq.spark.errors import MAX_ERROR_CHARS, SparkJobError, one_line
from jobq.spark.redact import redact_text
from jobq.spark.registry import PipelineJob, pipeline
from jobq.spark.sandbox import is_connect

#: spec file names, as the pipelines CLI looks for them
SPEC_NAMES = ("spark-pipeline.yml", "spark-pipeline.yaml", "pipeline.yml", "pipeline.yaml")
_FLOW = re.compile(r"Flow [`'\"]?(?P<flow>[^\s`'\"]+?)[`'\"]? (?:is|has) (?P<state>[A-Z_]+)")
_RUN = re.compile(r"Run (?:is|has) (?P<state>[A-Z_]+)")
_UNRESOLVED = re.compile(
    r"[Ff]ailed to (?:resolve|analyze) flow:? [`'\"]?(?P<flow>[^\s`'\"]+?)[`'\"]?\.?(?:\s|$)"
)
_CONDITION = re.compile(r"\[[A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*\]")
_DEFINES_FLOW = re.compile(
    r"\s*CREATE\s+(?:OR\s+REFRESH\s+)?(?P<kind>MATERIALIZED\s+VIEW|STREAMING\s+TABLE|FLOW|"
    r"TEMPORARY\s+VIEW)\s+(?:IF\s+NOT\s+EXISTS\s+)?(?P<name>[\w.`]+)",
    re.IGNORECASE,
)
_AS = re.compile(r"\bAS\b", re.IGNORECASE)
_FLOW_DONE = {"COMPLETED", "FAILED", "SKIPPED", "EXCLUDED", "STOPPED"}


class FlowProgress:
    """Flow events -> (flows done, flows seen, the running flow)."""

    def __init__(self) -> None:
        self.states: dict[str, str] = {}
        self.running: str | None = None
        self.run_state: str | None = None
        self.failure: str | None = None
        #: flow -> its error (Spark's condition and message), in the order they failed
        self.errors: dict[str, str] = {}

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
            cause = _cause(message)
            if cause:
                self.errors.setdefault(name, cause)
        return True

    def feed_error(self, message: str) -> bool:
        """A message naming a flow that failed to resolve (no state event comes for it)."""
        match = _UNRESOLVED.search(message)
        if not match:
            return False
        name = match["flow"]
        self.states[name] = "FAILED"
        cause = _cause(message)
        if cause:
            self.errors.setdefault(name, cause)
        return True

    def error_text(self, failure: BaseException | None) -> str:
        """The job's error: the first failed flow's name and Spark's own error, else the
        run's error."""
        if self.errors:
            name, cause = next(iter(self.errors.items()))
            more = len(self.errors) - 1
            text = f"flow {name}: {cause}"
            return text + (f" (and {more} more failed flows)" if more else "")
        if failure is not None:
            return one_line(failure)
        return self.failure or "run FAILED"

    @property
    def done(self) -> int:
        return sum(1 for s in self.states.values() if s in _FLOW_DONE)

    @property
    def total(self) -> int:
        return len(self.states)

    def status(self) -> str:
        text = f"{self.done}/{self.total} flows"
        return f"{self.running} running ({text})" if self.running else text


def _cause(message: str) -> str | None:
    """Spark's error in a flow's event message: from its error condition (``[UNRESOLVED_...]``)
    to the end of that sentence, on one line, without the query plan."""
    match = _CONDITION.search(message)
    if not match:
        return None
    text = message[match.start() :].split("\n")[0]
    text = re.sub(r"\s*SQLSTATE: \w+.*$", "", text)
    text = re.sub(r";\s*line \d+ pos \d+.*$", "", text).strip()
    return redact_text(" ".join(text.split()))[:MAX_ERROR_CHARS]


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


def _sql_files(spec_path: str, spec: Any) -> list[Path]:
    """The SQL files of the spec's libraries, as the pipelines CLI finds them."""
    root = Path(spec_path).parent.resolve()
    files: list[Path] = []
    for library in spec.libraries:
        for path in sorted(root.glob(library.include)):
            if path.is_file() and path.suffix == ".sql" and path not in files:
                files.append(path)
    return files


def check_spec(job: PipelineJob, spec_path: str, spec: Any) -> None:
    """The spec's ``storage`` (streaming checkpoints) and library files lie under the roots,
    and its ``configuration`` holds only settings a job may set; SparkJobError if not."""
    job.roots.resolve(spec.storage, "spec storage")
    directory = Path(spec_path).parent.resolve()
    for library in spec.libraries:
        for path in directory.glob(library.include):
            job.roots.resolve(str(path), "spec libraries")
    for key, value in spec.configuration.items():
        error = job.sandbox.setting_error(str(key), str(value))
        if error is not None:
            raise SparkJobError(f"spec configuration: {error}")


def check_sql_files(job: PipelineJob, spark: Any, spec_path: str, spec: Any) -> int:
    """Every statement of the project's SQL files through the sandbox (the job's own
    session's parser); SparkJobError naming the file if one is refused. The number of
    statements checked."""
    from jobq.spark.statements import split_statements

    checked = 0
    for path in _sql_files(spec_path, spec):
        for statement in split_statements(path.read_text(encoding="utf-8")):
            try:
                job.sandbox.check(spark, statement)
            except SparkJobError as exc:
                raise SparkJobError(f"{path.name}: {exc}") from None
            checked += 1
    return checked


@contextlib.contextmanager
def connect_session_for(spark: Any, args: PipelineArgs, job: PipelineJob) -> Iterator[Any]:
    """A Spark Connect session for the pipeline: the job's own on a Connect worker; on a
    classic one a new session of the worker's loopback endpoint (same context, catalog and
    settings), given the job's ``spark_conf``, the sandbox's settings and the job's tag."""
    if is_connect(spark):
        yield spark
        return
    from jobq.spark.isolation import apply_conf, job_group, spark_conf_of
    from jobq.spark.loopback import connect_session, endpoint, release_soon
    from jobq.spark.session import holder

    url = endpoint(spark)
    session = connect_session(url)
    try:
        apply_conf(session, spark_conf_of(args), holder())
        job.sandbox.prepare(session)
        with contextlib.suppress(Exception):
            session.addTag(job_group(job.id))
        yield session
    except BaseException:
        with contextlib.suppress(Exception):
            session.interruptAll()  # a canceled job's run stops in the worker's Spark
        raise
    finally:
        release_soon(url, session)


def sql_flow_names(sql: str) -> list[str]:
    """The flows a pipeline SQL file defines, as written: a materialized view, a streaming
    table with a query, a ``CREATE FLOW``, a temporary view."""
    from jobq.spark.statements import split_statements

    names = []
    for statement in split_statements(sql):
        match = _DEFINES_FLOW.match(statement)
        if match and (match["kind"].upper() != "STREAMING TABLE" or _AS.search(statement)):
            names.append(match["name"].replace("`", ""))
    return names


def _qualified(name: str, catalog: str, database: str) -> str:
    parts = name.split(".")
    if len(parts) == 1:
        return f"{catalog}.{database}.{name}"
    if len(parts) == 2:
        return f"{catalog}.{name}"
    return name


def run_events(
    spark: Any, spec_path: str, spec: Any, args: PipelineArgs, defined: list[str]
) -> Iterator[str]:
    """Register the project's graph on the Connect session ``spark`` and run it (or dry
    run it): the run's event messages. ``defined`` gets the names of the flows defined
    (qualified with the spec's, else the session's, catalog and database)."""
    from pyspark.pipelines.cli import register_definitions
    from pyspark.pipelines.spark_connect_graph_element_registry import (
        SparkConnectGraphElementRegistry,
    )
    from pyspark.pipelines.spark_connect_pipeline import create_dataflow_graph, start_run

    graph_id = create_dataflow_graph(
        spark,
        default_catalog=spec.catalog,
        default_database=spec.database,
        sql_conf=spec.configuration,
    )
    catalog = spec.catalog or spark.catalog.currentCatalog()
    database = spec.database or spark.catalog.currentDatabase()

    class Recording(SparkConnectGraphElementRegistry):
        def register_flow(self, flow: Any) -> None:
            defined.append(_qualified(flow.name, catalog, database))
            super().register_flow(flow)

        def register_sql(self, sql_text: str, file_path: Path) -> None:
            defined.extend(_qualified(n, catalog, database) for n in sql_flow_names(sql_text))
            super().register_sql(sql_text, file_path)

    registry = Recording(spark, graph_id)
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


@pipeline("spark.pipeline", parse=lambda payload: parse("spark.pipeline", payload))
def run_pipeline(spark: Any, args: PipelineArgs, job: PipelineJob) -> dict[str, Any]:
    from pyspark.pipelines.cli import load_pipeline_spec

    spec_path = find_spec(job.roots.resolve(args.spec, "spec"))
    try:
        spec = load_pipeline_spec(Path(spec_path))
    except Exception as exc:
        raise SparkJobError(f"spec: {one_line(exc)}") from None
    check_spec(job, spec_path, spec)
    check_sql_files(job, spark, spec_path, spec)
    flows = FlowProgress()
    job.log_unit("pipeline run")
    job.progress(0.0, "dry run" if args.dry_run else "starting")
    sent: list[str] = []
    failure: BaseException | None = None
    with connect_session_for(spark, args, job) as session:
        defined: list[str] = []
        events = run_events(session, spec_path, spec, args, defined)
        while True:
            try:
                message = next(events)
            except StopIteration:
                break
            except SparkJobError:
                raise
            except Exception as exc:  # the run's own error: the flows' errors say more
                failure = exc
                break
            if flows.feed(message) or flows.feed_error(message):
                _report(job, flows, sent)
            job.check()
    if failure is not None or flows.failure or flows.run_state == "FAILED":
        raise SparkJobError(f"pipeline failed: {flows.error_text(failure)}")
    if args.dry_run:
        for name in defined:
            flows.states.setdefault(name, "PLANNED")
        job.progress(1.0, f"dry run: {len(flows.states)} flows")
        return {
            "flows": {name: state for name, state in sorted(flows.states.items())},
            "dry_run": True,
            "run": flows.run_state,
        }
    job.progress(1.0, flows.status())
    return {
        "flows": {name: state for name, state in sorted(flows.states.items())},
        "dry_run": args.dry_run,
        "run": flows.run_state,
    }
