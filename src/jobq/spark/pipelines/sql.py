"""``spark.sql``: SQL statements run in order, one unit each, all checked by the sandbox
before the first runs (and each again at its turn); the last one's result goes to a table
or to files when ``output`` is given. An adopted job starts at the first statement not
done, so the one running when a worker died runs again.
"""

from __future__ import annotations

import json
from typing import Any

from jobq.spark.args import SqlArgs, parse
from jobq.spark.errors import SparkJobError
from jobq.spark.pipelines.export import write_files
from jobq.spark.registry import PipelineJob, pipeline
from jobq.spark.sandbox import SandboxError

#: most rows in a result
MAX_ROWS = 100
#: most bytes of the rows' JSON in a result: a result is at most 1 MiB (the server's limit)
MAX_ROWS_BYTES = 512 * 1024


def result_rows(rows: list[Any]) -> tuple[list[dict[str, Any]], bool]:
    """The first rows as dicts, as many as fit :data:`MAX_ROWS` and :data:`MAX_ROWS_BYTES`,
    and whether rows were left out."""
    kept: list[dict[str, Any]] = []
    size = 0
    for row in rows[:MAX_ROWS]:
        item = row.asDict()
        size += len(json.dumps(item, separators=(",", ":"), default=str).encode()) + 1
        if size > MAX_ROWS_BYTES:
            return kept, True
        kept.append(item)
    return kept, len(rows) > MAX_ROWS


def check_all(job: PipelineJob, statements: list[str], first: int) -> None:
    """The sandbox's check of every statement from ``first`` on, before any runs, so that a
    job with a refused statement writes nothing; SandboxError naming the statement. A
    syntax error is left to the statement's turn: a SET before it may change the parser."""
    for index in range(first, len(statements)):
        try:
            job.sandbox.check(job.spark, statements[index])
        except SandboxError as exc:
            raise SandboxError(f"statement {index + 1}: {exc}") from None
        except SparkJobError:
            continue


@pipeline("spark.sql", parse=lambda payload: parse("spark.sql", payload))
def run_sql(spark: Any, args: SqlArgs, job: PipelineJob) -> dict[str, Any]:
    statements = args.statement_list()
    output = args.output
    out_path = job.roots.resolve(output.path, "output.path") if output and output.path else None
    done = int(job.checkpoint or 0) if not isinstance(job.checkpoint, dict) else 0
    check_all(job, statements, done)
    result: dict[str, Any] = {"statements": len(statements)}
    with job.units(len(statements), done) as units:
        for index in range(done, len(statements)):
            last = index == len(statements) - 1
            job.log_unit(f"sql statement {index}")
            with units.unit(f"statement {index + 1}/{len(statements)}"):
                df = job.sql(statements[index])  # commands (DDL, INSERT) run here
                if last and output is not None:
                    if output.table is not None:
                        mode = "errorifexists" if output.mode == "error" else output.mode
                        df.write.mode(mode).saveAsTable(output.table)
                        result["table"] = output.table
                    else:
                        assert out_path is not None
                        mode = "errorifexists" if output.mode == "error" else output.mode
                        result["rows_written"] = write_files(
                            df, out_path, output.format, mode, [], output.options
                        )
                        result["path"] = out_path
                elif last:
                    rows = df.limit(MAX_ROWS + 1).collect() if df.columns else []
                    result["rows"], result["truncated"] = result_rows(rows)
            units.unit_done(index + 1, f"statement {index + 1}/{len(statements)} done")
    return result
