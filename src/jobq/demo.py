"""The demo ``jobq up`` sets up on an empty data directory: a sample CSV, an import job, a
report query and a backup schedule, with handlers that report progress as they go.

The handlers are plain Python (no Spark), sized to run for tens of seconds so their
progress bars visibly move in the web UI. Their data lives under ``<data-dir>/demo``.
"""

from __future__ import annotations

import csv
import json
import random
import shutil
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from jobq.worker.context import JobContext
from jobq.worker.registry import Registry

IMPORT = "demo.import"
REPORT = "demo.report"
BACKUP = "demo.backup"
#: seconds each demo handler pauses between units of work, so a person can watch
STEP_S = 0.25
REGIONS = ("north", "south", "east", "west")
PRODUCTS = ("anvil", "rope", "lantern", "compass", "kettle", "tent")


def demo_dir(data_dir: Path) -> Path:
    return data_dir / "demo"


def write_sample_csv(path: Path, rows: int = 5000, seed: int = 7) -> Path:
    """A deterministic sales CSV: id, day, region, product, quantity, price."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["id", "day", "region", "product", "quantity", "price"])
        for i in range(rows):
            writer.writerow([
                i + 1,
                f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
                rng.choice(REGIONS),
                rng.choice(PRODUCTS),
                rng.randint(1, 20),
                f"{rng.uniform(2, 80):.2f}",
            ])
    return path


def _args(job: JobContext) -> dict[str, Any]:
    value = job.json()
    return value if isinstance(value, dict) else {}


def _import(job: JobContext) -> str:
    """Read the CSV in chunks into a JSON-lines table, resuming from the checkpoint."""
    args = _args(job)
    source = Path(args["csv"])
    table = Path(args["table"])
    with source.open(newline="") as f:
        rows = list(csv.DictReader(f))
    chunk = max(1, len(rows) // 60)
    start = int(job.checkpoint or b"0")
    table.parent.mkdir(parents=True, exist_ok=True)
    kept = table.read_text().splitlines(keepends=True)[:start] if table.exists() else []
    table.write_text("".join(kept))  # rows past the checkpoint are written again
    with table.open("a") as out:
        for offset in range(start, len(rows), chunk):
            for row in rows[offset : offset + chunk]:
                record: dict[str, Any] = dict(row)
                record["quantity"] = int(row["quantity"])
                record["price"] = float(row["price"])
                out.write(json.dumps(record) + "\n")
            out.flush()
            done = min(len(rows), offset + chunk)
            time.sleep(STEP_S)
            job.progress(done / len(rows), f"imported {done}/{len(rows)} rows",
                         checkpoint=str(done))
    return json.dumps({"rows": len(rows), "table": str(table)})


def _report(job: JobContext) -> str:
    """Revenue by region and product over the imported table."""
    args = _args(job)
    table = Path(args["table"])
    deadline = time.monotonic() + 120
    while not table.exists():  # the import has not started yet
        if time.monotonic() > deadline:
            raise FileNotFoundError(f"no table at {table}: run the import first")
        job.progress(0.0, "waiting for the import")
        time.sleep(1)
    lines = table.read_text().splitlines()
    totals: dict[str, float] = defaultdict(float)
    step = max(1, len(lines) // 40)
    for i in range(0, len(lines), step):
        for line in lines[i : i + step]:
            row = json.loads(line)
            totals[f"{row['region']}/{row['product']}"] += row["quantity"] * row["price"]
        done = min(len(lines), i + step)
        time.sleep(STEP_S)
        job.progress(done / max(1, len(lines)), f"scanned {done}/{len(lines)} rows")
    top = sorted(totals.items(), key=lambda kv: -kv[1])[:5]
    return json.dumps({"rows": len(lines), "top": [{"key": k, "revenue": round(v, 2)}
                                                   for k, v in top]})


def _backup(job: JobContext) -> str:
    """Copy the table to ``backups/<table>-<time>.jsonl`` in chunks."""
    args = _args(job)
    table = Path(args["table"])
    backups = Path(args["to"])
    backups.mkdir(parents=True, exist_ok=True)
    if not table.exists():
        raise FileNotFoundError(f"no table at {table}: nothing to back up")
    target = backups / f"{table.stem}-{time.strftime('%Y%m%dT%H%M%S')}.jsonl"
    size = table.stat().st_size
    chunk = max(1, size // 30)
    copied = 0
    with table.open("rb") as src, target.open("wb") as dst:
        while block := src.read(chunk):
            dst.write(block)
            copied += len(block)
            time.sleep(STEP_S / 2)
            job.progress(copied / max(1, size), f"copied {copied // 1024} KiB")
    kept = sorted(backups.glob(f"{table.stem}-*.jsonl"))
    for old in kept[:-5]:  # keep the newest five
        old.unlink(missing_ok=True)
    return json.dumps({"backup": str(target), "bytes": copied})


def registry() -> Registry:
    """The demo's handlers."""
    demo = Registry()
    demo.handler(IMPORT, ttr="1m")(_import)
    demo.handler(REPORT, ttr="1m")(_report)
    demo.handler(BACKUP, ttr="1m")(_backup)
    return demo


def setup_requests(data_dir: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Write the sample CSV; return the jobs to submit and the backup schedule to create
    (extension command bodies)."""
    base = demo_dir(data_dir).resolve()
    csv_path = write_sample_csv(base / "sales.csv")
    table = base / "warehouse" / "sales.jsonl"
    now = time.time()

    jobs = [
        {
            "name": IMPORT,
            "payload": _b64({"csv": str(csv_path), "table": str(table)}),
            "description": "Import the sample sales CSV into the warehouse",
            "creator": "demo",
            "max_attempts": 3,
        },
        {
            "name": REPORT,
            "payload": _b64({"table": str(table), "query": "revenue by region and product"}),
            "description": "Report: top revenue by region and product",
            "creator": "demo",
            "time": _rfc3339(now + 20),
            "max_attempts": 3,
        },
    ]
    schedule = _schedule("demo-backup", 180_000, now + 45, {
        "name": BACKUP,
        "payload": json.dumps({"table": str(table), "to": str(base / "backups")}),
        "description": "Back up the sales table",
        "max_attempts": 2,
    })
    return jobs, schedule


SALES_SCHEMA = "id INT, day STRING, region STRING, product STRING, quantity INT, price DOUBLE"


def spark_requests(data_dir: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The same story on Spark, with the built-in pipelines: import the sample CSV into table
    ``sales``, a revenue report to CSV files, and a backup schedule of the table. (The
    session starts with the first of them, so they run after the plain demo's first jobs.)
    """
    base = demo_dir(data_dir).resolve()
    now = time.time()

    jobs = [
        {
            "name": "spark.import",
            "payload": _b64({
                "paths": [str(base / "sales.csv")], "format": "csv",
                "options": {"header": "true"}, "schema": SALES_SCHEMA,
                "table": "sales", "mode": "create",
            }),
            "description": "Spark: import the sample sales CSV into table sales",
            "creator": "demo",
            "ttr_ms": 300_000,
            "max_attempts": 3,
        },
        {
            "name": "spark.sql",
            "payload": _b64({
                "statements": "SELECT region, product, ROUND(SUM(quantity * price), 2) AS revenue"
                " FROM sales GROUP BY region, product ORDER BY revenue DESC",
                "output": {"path": str(base / "reports" / "revenue"), "format": "csv",
                           "options": {"header": "true"}},
            }),
            "description": "Spark report: revenue by region and product",
            "creator": "demo",
            "time": _rfc3339(now + 90),
            "ttr_ms": 300_000,
            "max_attempts": 3,
            "max_fails": 3,
        },
    ]
    schedule = _schedule("demo-spark-backup", 300_000, now + 150, {
        "name": "spark.backup",
        "payload": json.dumps({"tables": ["sales"], "location": str(base / "spark-backups")}),
        "description": "Spark: back up table sales",
        "ttr_ms": 300_000,
        "max_attempts": 2,
    })
    return jobs, schedule


def _schedule(name: str, every_ms: int, first: float, args: dict[str, Any]) -> dict[str, Any]:
    """A demo schedule (a ``screate`` body): ``args``' job every ``every_ms``, first at the
    epoch time ``first``, skipped while the last run is unfinished."""
    return {
        "name": name,
        "every_ms": every_ms,
        "at": _rfc3339(first),
        "executor": "job",
        "args": args,
        "wait": "skip",
        "owner": "demo",
        "reason": "jobq up demo",
    }


def _rfc3339(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _b64(value: object) -> str:
    import base64

    return base64.b64encode(json.dumps(value).encode()).decode()


def reset(data_dir: Path) -> None:
    shutil.rmtree(demo_dir(data_dir), ignore_errors=True)
