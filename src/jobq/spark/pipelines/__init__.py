"""The built-in Spark job types, one per module; importing this package registers them as
worker handlers (``jobq worker`` does when it serves a ``spark.*`` name)."""

from jobq.spark.pipelines import backup, declarative, export, import_, restore, sql

__all__ = ["backup", "declarative", "export", "import_", "restore", "sql"]
